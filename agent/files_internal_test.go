package agent

import (
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// TestNewestUserIsWhatAPersonWrote: after a summary the request keeps
// the newest user message; that is what the person wrote, not the files
// or the quote that came with it (which would bring a whole file back
// into a compacted request, and leave the task out).
func TestNewestUserIsWhatAPersonWrote(t *testing.T) {
	hist := []Entry{
		{Message: openai.ChatCompletionMessage{Role: "user", Content: "ann: summarise the log"}, Author: "ann"},
		{Message: openai.ChatCompletionMessage{Role: "user", Content: "The message handed to you..."}, Quote: true},
		{Message: openai.ChatCompletionMessage{Role: "user", Content: "Files attached to..." + strings.Repeat("x", 1000)}, Material: true},
	}
	if got := newestUser(hist); got != 0 {
		t.Errorf("newestUser = %d, want 0, the message itself", got)
	}
}

// TestFitFiles: files whose text passes the budget together are cut,
// the first ones first, and one with no room left is described; the
// note for the thread names the cut.
func TestFitFiles(t *testing.T) {
	files := []FileText{
		{File: File{Name: "a.txt"}, Text: strings.Repeat("a", 400)},  // 101 tokens
		{File: File{Name: "b.txt"}, Text: strings.Repeat("b", 4000)}, // 1001
		{File: File{Name: "c.txt"}, Text: "cc"},
	}
	fitFiles(files, 300)
	if files[0].Cut != 0 || len(files[0].Text) != 400 {
		t.Errorf("a.txt: cut %d, %d bytes; want it whole", files[0].Cut, len(files[0].Text))
	}
	if files[1].Cut == 0 || files[1].Whole != 4000 || len(files[1].Text) != files[1].Cut || estimateText(files[0].Text)+estimateText(files[1].Text) > 300+1 {
		t.Errorf("b.txt: cut %d of %d, %d bytes; want cut to the budget", files[1].Cut, files[1].Whole, len(files[1].Text))
	}
	if files[2].Text != "" || files[2].Left == "" {
		t.Errorf("c.txt: %+v, want described: no room left", files[2])
	}
	q := quoteFiles("ann", files)
	if !strings.Contains(q, `name="b.txt"`) || !strings.Contains(q, "cut=") || !strings.Contains(q, `name="c.txt"`) || !strings.Contains(q, "left_out=") {
		t.Errorf("quoted as %q", q)
	}
	note := leftOutNote(files)
	if !strings.Contains(note, "`b.txt` after its first") || !strings.Contains(note, "`c.txt`") || strings.Contains(note, "a.txt") {
		t.Errorf("note %q", note)
	}
}
