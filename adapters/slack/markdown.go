package slack

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Answers in Markdown (Options.Stream): a live answer streams as
// markdown_text, and the other replies are posted in a markdown block,
// so that both read alike. The model's Markdown is made safe first
// (markdownText), and cut into parts that each read alone
// (splitMarkdown): a code block cut between two is closed and opened
// again.

// maxMarkdownRunes is the most text the markdown blocks of one message
// hold.
const maxMarkdownRunes = 12000

// markdownText makes the model's Markdown safe for markdown_text: outside
// code, every < is escaped (\<), so no <@U…>, <!channel> or <url|text>
// can mention anyone or hide a link. Code spans and fenced blocks are
// literal in Markdown and stay as they are.
func markdownText(md string) string {
	lines := strings.SplitAfter(md, "\n")
	fence := ""
	for i, line := range lines {
		var marker bool
		if fence, marker = fenceLine(fence, line); marker || fence != "" {
			continue
		}
		var spans []string
		line = reCode.ReplaceAllStringFunc(line, func(s string) string {
			spans = append(spans, s)
			return fmt.Sprintf("\x00%d\x00", len(spans)-1)
		})
		line = strings.ReplaceAll(line, "<", `\<`)
		for j, s := range spans {
			line = strings.Replace(line, fmt.Sprintf("\x00%d\x00", j), s, 1)
		}
		lines[i] = line
	}
	return strings.Join(lines, "")
}

// fenceLine reads one line against the code fence open before it ("" for
// none): it returns the fence open after it and whether the line is a
// fence (an opening ``` or ~~~ run, after at most three spaces, or the
// closing run, at least as long, of the same character and nothing else).
func fenceLine(fence, line string) (string, bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || t == "" || (t[0] != '`' && t[0] != '~') {
		return fence, false
	}
	run := t[:len(t)-len(strings.TrimLeft(t, t[:1]))]
	switch {
	case len(run) < 3:
		return fence, false
	case fence == "":
		return run, true
	case run[0] == fence[0] && len(run) >= len(fence) && strings.TrimSpace(t[len(run):]) == "":
		return "", true
	}
	return fence, false
}

// fenceOpen returns for each rune the line that opens the code block
// open there ("" for none): from the line after an opening fence to the
// end of the closing one; and, at len(r), for what would follow.
func fenceOpen(r []rune) []string {
	open := make([]string, len(r)+1)
	fence, opening := "", ""
	for i := 0; i < len(r); {
		j := i
		for j < len(r) && r[j] != '\n' {
			j++
		}
		if j < len(r) {
			j++ // the line end
		}
		inside := ""
		if fence != "" {
			inside = opening
		}
		line := string(r[i:j])
		next, _ := fenceLine(fence, line)
		if fence == "" && next != "" {
			opening = reopenLine(line, next)
		}
		fence = next
		for k := i; k < j; k++ {
			open[k] = inside
		}
		i = j
	}
	if fence != "" {
		open[len(r)] = opening // past the end: a message that starts there is inside the block
	}
	return open
}

// maxReopenRunes bounds the opening line repeated to open a code block
// again; a longer one (a very long info string) is repeated as its fence
// alone.
const maxReopenRunes = 200

// reopenLine is the line that opens again the code block that line (an
// opening fence of run) opened: the same line, its info string (the
// language) included.
func reopenLine(line, run string) string {
	line = strings.TrimRight(line, "\r\n") + "\n"
	if utf8.RuneCountInString(line) > maxReopenRunes {
		return run + "\n"
	}
	return line
}

// splitMarkdown cuts Markdown into parts of at most limit characters at
// line ends, as Split does, but keeps every part's code blocks whole: a
// part that ends inside a block closes it, and the next opens it again
// with the same opening line (fence and info string), so that each part
// reads alone (and is escaped by markdownText) as the whole answer reads
// there. A line longer than a part is cut, inside a block too.
func splitMarkdown(text string, limit int) []string {
	var parts []string
	var cur strings.Builder
	n := 0                   // characters in cur
	prefix := ""             // what cur started with: the line opening again the block the part starts in
	fence, opening := "", "" // the code block open at the end of cur: its fence and the line that opens it again
	// openAt is where in cur the line that opened that block starts,
	// when this part opened it (-1 when not), and openLen its length: a
	// part that would end right after it leaves the block to the next.
	openAt, openLen := -1, 0
	closing := func(fence string) int { // what closing fence takes at the end of a part
		if fence == "" {
			return 0
		}
		return utf8.RuneCountInString(fence) + 1
	}
	push := func() {
		part, close := cur.String(), fence
		if close != "" && openAt >= 0 && strings.TrimSpace(part[openAt+openLen:]) == "" {
			part, close = part[:openAt], "" // an empty block: it opens in the next part
		}
		if strings.TrimSpace(part[len(prefix):]) != "" {
			part = strings.TrimRight(part, "\n")
			if close != "" {
				part += "\n" + close
			}
			parts = append(parts, part)
		}
		cur.Reset()
		prefix = ""
		if fence != "" {
			prefix = opening
		}
		cur.WriteString(prefix)
		n, openAt = utf8.RuneCountInString(prefix), -1
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		next, _ := fenceLine(fence, line)
		r := []rune(line)
		for len(r) > 0 {
			switch {
			case n+len(r)+closing(next) <= limit:
				if fence == "" && next != "" {
					openAt, openLen = cur.Len(), len(line)
				}
				cur.WriteString(string(r))
				n += len(r)
				r = nil
			case cur.Len() > len(prefix):
				push()
			default: // the line alone is longer than a part
				take := min(len(r), max(limit-n-closing(fence), 1))
				cur.WriteString(string(r[:take]))
				n += take
				if r = r[take:]; len(r) > 0 {
					push()
				}
			}
		}
		if fence == "" && next != "" {
			opening = reopenLine(line, next)
		}
		fence = next
	}
	push()
	return parts
}
