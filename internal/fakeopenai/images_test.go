package fakeopenai

import (
	"encoding/base64"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// TestImageParts: image parts are checked as OpenAI checks them.
func TestImageParts(t *testing.T) {
	png := "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	user := func(url string) []openai.ChatCompletionMessage {
		return []openai.ChatCompletionMessage{{Role: "user", MultiContent: []openai.ChatMessagePart{
			{Type: openai.ChatMessagePartTypeText, Text: "look"},
			{Type: openai.ChatMessagePartTypeImageURL, ImageURL: &openai.ChatMessageImageURL{URL: url}}}}}
	}
	if msg, _ := invalidImages(user(png), true); msg != "" {
		t.Errorf("a PNG to a vision model: %s", msg)
	}
	if msg, _ := invalidImages(user(png), false); msg == "" {
		t.Error("a PNG to a text-only model was taken")
	}
	for name, url := range map[string]string{
		"not a data URL": "http://127.0.0.1:1/a.png",
		"bad base64":     "data:image/png;base64,%%%",
		"wrong bytes":    "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("GIF89a......")),
		"svg":            "data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString([]byte("<svg/>")),
	} {
		if msg, _ := invalidImages(user(url), true); msg == "" {
			t.Errorf("%s was taken", name)
		}
	}
	sys := user(png)
	sys[0].Role = "system"
	if msg, _ := invalidImages(sys, true); msg == "" {
		t.Error("an image in a system message was taken")
	}
}

// TestUserMessageNeedsContent: a user message with neither content nor
// parts is refused, as OpenAI refuses it.
func TestUserMessageNeedsContent(t *testing.T) {
	if msg, param := invalidMessages([]openai.ChatCompletionMessage{{Role: "system", Content: "s"}, {Role: "user"}}); msg == "" || param != "messages.[1].content" {
		t.Errorf("an empty user message: %q %q, want refused", msg, param)
	}
}
