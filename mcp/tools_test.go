package mcp

import (
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestCheckSchema(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		ok     bool
	}{
		{"empty object", `{"type":"object"}`, true},
		{"properties", `{"type":"object","properties":{"path":{"type":"string"},"any":true},"required":["path"],"additionalProperties":false}`, true},
		{"draft-07 from zod", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"number","default":10}}}`, true},
		{"not an object type", `{"type":"string"}`, false},
		{"no type", `{"properties":{}}`, false},
		{"array", `[1]`, false},
		{"properties list", `{"type":"object","properties":["path"]}`, false},
		{"property not a schema", `{"type":"object","properties":{"path":"string"}}`, false},
		{"required not a list", `{"type":"object","required":"path"}`, false},
		{"required numbers", `{"type":"object","required":[1]}`, false},
		{"keyword of the wrong type", `{"type":"object","properties":{"s":{"type":"string","minLength":"three"}}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(tt.schema), &v); err != nil {
				t.Fatal(err)
			}
			if err := checkSchema(v); (err == nil) != tt.ok {
				t.Errorf("got %v, want ok=%t", err, tt.ok)
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	ro := &sdk.ToolAnnotations{ReadOnlyHint: true}
	tests := []struct {
		name   string
		server Server
		ann    *sdk.ToolAnnotations
		want   string
	}{
		{"read-only allows", Server{}, ro, PolicyAllow},
		{"no annotations ask", Server{}, nil, PolicyAsk},
		{"writes ask", Server{}, &sdk.ToolAnnotations{IdempotentHint: true}, PolicyAsk},
		{"server policy over annotations", Server{Policy: "ask"}, ro, PolicyAsk},
		{"server deny", Server{Policy: "deny"}, ro, PolicyDeny},
		{"tool over server", Server{Policy: "deny", Tools: map[string]string{"t": "allow"}}, nil, PolicyAllow},
		{"tool deny", Server{Tools: map[string]string{"t": "deny"}}, ro, PolicyDeny},
		{"unknown word asks", Server{Policy: "yes"}, ro, PolicyAsk},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &server{cfg: tt.server}
			if got := s.policy(&sdk.Tool{Name: "t", Annotations: tt.ann}); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
