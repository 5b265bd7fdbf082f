package chat

import (
	"strings"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/todo"
)

// Bidirectional control characters (DESIGN §16): the embeddings and
// overrides U+202A-U+202E and the isolates U+2066-U+2069. In a plan
// item, a tool's name or arguments or a title they reorder what is shown
// (U+202E makes "exe.txt" read "txt.exe"), so every renderer removes
// them, through Plan.Clean, Card.Clean and StripBidi.
func isBidiControl(r rune) bool {
	return (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// StripBidi returns s without bidirectional control characters.
func StripBidi(s string) string {
	if !strings.ContainsFunc(s, isBidiControl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isBidiControl(r) {
			return -1
		}
		return r
	}, s)
}

// Clean returns p as it may be shown: without bidirectional control
// characters in its items, its activity, who stopped it and its
// evidence (keyed by the cleaned item texts, so each item keeps its
// line). p is not changed.
func (p Plan) Clean() Plan {
	if len(p.Items) > 0 {
		items := make([]todo.Item, len(p.Items))
		for i, it := range p.Items {
			items[i] = todo.Item{Content: StripBidi(it.Content), Status: it.Status}
		}
		p.Items = items
	}
	p.Activity = StripBidi(p.Activity)
	p.StoppedBy = StripBidi(p.StoppedBy)
	if len(p.Marks) > 0 {
		marks := make([]agent.Mark, len(p.Marks))
		for i, m := range p.Marks {
			m.Item, m.After, m.By = StripBidi(m.Item), StripBidi(m.After), StripBidi(m.By)
			marks[i] = m
		}
		p.Marks = marks
	}
	p.Evidence = cleanEvidence(p.Evidence)
	return p
}

// cleanEvidence is e without bidirectional control characters, in a new
// map; two keys that differ only by them are merged.
func cleanEvidence(e agent.Evidence) agent.Evidence {
	if e == nil {
		return nil
	}
	out := make(agent.Evidence, len(e))
	for k, ie := range e {
		calls := make([]agent.Call, len(ie.Calls))
		for i, c := range ie.Calls {
			c.Tool, c.Server, c.Outcome = StripBidi(c.Tool), StripBidi(c.Server), StripBidi(c.Outcome)
			c.Approver, c.Args = StripBidi(c.Approver), StripBidi(c.Args)
			calls[i] = c
		}
		k = StripBidi(k)
		prev := out[k]
		out[k] = agent.ItemEvidence{Calls: append(prev.Calls, calls...), More: prev.More + ie.More}
	}
	return out
}

// Clean returns c as it may be shown: without bidirectional control
// characters in its tool, server, arguments, outcome or decider.
func (c Card) Clean() Card {
	c.Tool, c.Server, c.Arguments = StripBidi(c.Tool), StripBidi(c.Server), StripBidi(c.Arguments)
	c.Outcome, c.By, c.Requester = StripBidi(c.Outcome), StripBidi(c.By), StripBidi(c.Requester)
	return c
}
