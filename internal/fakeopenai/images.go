package fakeopenai

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// Image parts, as OpenAI's chat completions take them: a user message's
// content as an array of parts, "text" and "image_url" ones; an image URL
// given inline is a data: URL of a PNG, JPEG, GIF or WebP image in
// base64, whose bytes are that format. A model without vision (Server
// without Vision) refuses any image part; so does a message of another
// role than user.

// imageTokens is what the fake counts for one image (OpenAI's low-detail
// cost).
const imageTokens = 85

// invalidImages checks the requests' image parts.
func invalidImages(msgs []openai.ChatCompletionMessage, vision bool) (msg, param string) {
	for i, m := range msgs {
		for j, p := range m.MultiContent {
			at := fmt.Sprintf("messages.[%d].content.[%d]", i, j)
			switch p.Type {
			case openai.ChatMessagePartTypeText:
			case openai.ChatMessagePartTypeImageURL:
				if !vision {
					return "Invalid content type. image_url is only supported by certain models.", at + ".type"
				}
				if m.Role != openai.ChatMessageRoleUser {
					return fmt.Sprintf("Image URLs are only allowed for messages with role 'user', but this message with role '%s' contains an image URL.", m.Role), at
				}
				if p.ImageURL == nil || !validImage(p.ImageURL.URL) {
					return "You uploaded an unsupported image. Please make sure your image is below 20 MB in size and is of one the following formats: ['png', 'jpeg', 'gif', 'webp'].", at + ".image_url"
				}
			default:
				return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', 'audio', and 'file'.", p.Type), at + ".type"
			}
		}
	}
	return "", ""
}

// validImage reports whether u is a data: URL of an image in a format
// OpenAI takes, its bytes that format.
func validImage(u string) bool {
	rest, ok := strings.CutPrefix(u, "data:")
	typ, data, ok2 := strings.Cut(rest, ";base64,")
	if !ok || !ok2 {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return false
	}
	switch sniffed := http.DetectContentType(raw); typ {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return sniffed == typ
	}
	return false
}

// Images returns the image URLs of a request's messages, in order.
func Images(req openai.ChatCompletionRequest) []string {
	var out []string
	for _, m := range req.Messages {
		for _, p := range m.MultiContent {
			if p.Type == openai.ChatMessagePartTypeImageURL && p.ImageURL != nil {
				out = append(out, p.ImageURL.URL)
			}
		}
	}
	return out
}
