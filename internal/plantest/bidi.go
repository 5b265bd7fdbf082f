package plantest

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/todo"
)

// BidiControls are the bidirectional control characters no renderer may
// let through (DESIGN §16): U+202A-U+202E and U+2066-U+2069.
const BidiControls = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

// bidi wraps s in every bidirectional control character.
func bidi(s string) string { return "\u202e" + s + "\u2066x\u2069" + BidiControls }

// BidiPlan is a stopped plan with every bidirectional control character
// in each text it shows: items, evidence (tools, servers, arguments,
// who decided), activity and who stopped it. Its second item's evidence
// must still show under it once they are removed.
func BidiPlan(at time.Time) chat.Plan {
	call := agent.Call{Tool: bidi("fs__read"), Server: bidi("fs"), Outcome: agent.OutcomeDenied, Approver: bidi("ann"), Start: at, Duration: time.Second, Args: bidi(`{"path":"gpj.exe"}`)}
	return chat.Plan{Revision: 3, State: chat.StateStopped, Updated: at, Stoppable: true, Activity: bidi("running fs__read"), StoppedBy: bidi("bob"), Calls: 1,
		Items: []todo.Item{
			{Content: bidi("Read the notes"), Status: todo.Completed},
			{Content: bidi("Rename invoice") + "\u202efdp.exe", Status: todo.InProgress},
			{Content: bidi("Report"), Status: todo.Pending},
		},
		Evidence: agent.Evidence{bidi("Rename invoice") + "\u202efdp.exe": {Calls: []agent.Call{call}}},
	}
}

// BidiCard is an open approval card with every bidirectional control
// character in each text it shows.
func BidiCard(at time.Time) chat.Card {
	return chat.Card{ID: "c1", Tool: bidi("fs__write_file"), Server: bidi("fs"), Arguments: bidi(`{"path":"txt.exe"}`), Deadline: at.Add(time.Hour)}
}

// BidiDecidedCard is BidiCard decided by someone whose name has them.
func BidiDecidedCard(at time.Time) chat.Card {
	c := BidiCard(at)
	c.Outcome, c.By, c.At = bidi("Denied"), bidi("bob"), at
	return c
}

// BidiIn returns the bidirectional control characters in s, "" if none.
func BidiIn(s string) string {
	var found strings.Builder
	for _, r := range s {
		if strings.ContainsRune(BidiControls, r) {
			found.WriteRune(r)
		}
	}
	return found.String()
}

// BidiInJSON returns the bidirectional control characters in v's JSON
// (encoding/json writes them as they are), "" if none.
func BidiInJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "unmarshalable: " + err.Error()
	}
	return BidiIn(string(b))
}
