package todo

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// The names and texts of the todo_write contract (DESIGN.md §3 and §4).
const (
	ToolName        = "todo_write"
	ToolDescription = "Replace the current TODO list with a complete task snapshot."
	PromptAddendum  = "For complex tasks, call todo_write with the complete task snapshot and update it when the plan changes."
	ReminderText    = "Keep the TODO list current. Call todo_write with the complete task snapshot when the plan changes."
	// MaxItems is the most items one snapshot may hold.
	MaxItems = 50
	// MaxContentLength is the most characters (code points) an item's
	// content may have after trimming.
	MaxContentLength = 1000
)

// Error codes of a rejected todo_write call.
const (
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidArguments = "invalid_arguments"
)

// Error is a rejected todo_write call. Its Message names the path of the
// offending value and what was expected, so a model can correct itself.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Schema is the subset of JSON Schema that todo_write uses. The same value
// both validates arguments (Validate) and is offered to the model (its JSON
// encoding), so the two cannot drift apart.
type Schema struct {
	Type                 string             `json:"type"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *bool              `json:"additionalProperties,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	MaxItems             *int               `json:"maxItems,omitempty"`
	MinLength            *int               `json:"minLength,omitempty"`
	MaxLength            *int               `json:"maxLength,omitempty"`
	Enum                 []string           `json:"enum,omitempty"`

	// Trim applies ECMAScript trim to a string before MinLength and
	// MaxLength are checked and in the value Validate returns. It is not
	// part of the JSON form.
	Trim bool `json:"-"`
}

// ArgumentsSchema returns the parameters schema of todo_write.
func ArgumentsSchema() *Schema {
	no := false
	maxItems, minLen, maxLen := MaxItems, 1, MaxContentLength
	var enum []string
	for _, s := range Statuses() {
		enum = append(enum, string(s))
	}
	item := &Schema{
		Type: "object",
		Properties: map[string]*Schema{
			"content": {Type: "string", MinLength: &minLen, MaxLength: &maxLen, Trim: true},
			"status":  {Type: "string", Enum: enum},
		},
		Required:             []string{"content", "status"},
		AdditionalProperties: &no,
	}
	return &Schema{
		Type: "object",
		Properties: map[string]*Schema{
			"todos": {Type: "array", MaxItems: &maxItems, Items: item},
		},
		Required:             []string{"todos"},
		AdditionalProperties: &no,
	}
}

// Validate checks a decoded JSON value (as encoding/json decodes into any,
// numbers as float64 or json.Number) against s and returns it normalized
// (strings trimmed where s says so). path names the value in errors, such
// as "todos[3].status".
func (s *Schema) Validate(v any, path string) (any, error) {
	at := where(path)
	switch s.Type {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, invalidf("%s: expected an object, got %s", at, kind(v))
		}
		return s.validateObject(obj, path)
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return nil, invalidf("%s: expected an array, got %s", at, kind(v))
		}
		return s.validateArray(arr, path)
	case "string":
		str, ok := v.(string)
		if !ok {
			return nil, invalidf("%s: expected a string, got %s", at, kind(v))
		}
		return s.validateString(str, path)
	}
	return nil, invalidf("%s: schema type %q is not supported", at, s.Type)
}

// validateObject checks an object's required and unexpected fields, then
// each known field in the schema's order; the copy it returns holds only
// those fields.
func (s *Schema) validateObject(obj map[string]any, path string) (any, error) {
	at := where(path)
	for _, name := range s.Required {
		if _, ok := obj[name]; !ok {
			return nil, invalidf("%s: missing required field %q", at, join(path, name))
		}
	}
	if s.AdditionalProperties != nil && !*s.AdditionalProperties {
		var extra []string
		for name := range obj {
			if _, ok := s.Properties[name]; !ok {
				extra = append(extra, name)
			}
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			return nil, invalidf("%s: unexpected field %q; allowed fields are %s", at, extra[0], s.fieldList())
		}
	}
	out := make(map[string]any, len(obj))
	for _, name := range s.fieldOrder() {
		fv, ok := obj[name]
		if !ok {
			continue
		}
		nv, err := s.Properties[name].Validate(fv, join(path, name))
		if err != nil {
			return nil, err
		}
		out[name] = nv
	}
	return out, nil
}

// validateArray checks an array's length, then each item.
func (s *Schema) validateArray(arr []any, path string) (any, error) {
	if s.MaxItems != nil && len(arr) > *s.MaxItems {
		return nil, invalidf("%s: expected at most %d items, got %d", where(path), *s.MaxItems, len(arr))
	}
	out := make([]any, len(arr))
	for i, ev := range arr {
		nv, err := s.Items.Validate(ev, path+"["+itoa(i)+"]")
		if err != nil {
			return nil, err
		}
		out[i] = nv
	}
	return out, nil
}

// validateString trims a string if the schema says so, then checks its
// length in characters and its enum.
func (s *Schema) validateString(str, path string) (any, error) {
	at := where(path)
	if s.Trim {
		str = TrimSpace(str)
	}
	n := utf8.RuneCountInString(str)
	if s.MinLength != nil && n < *s.MinLength {
		if s.Trim {
			return nil, invalidf("%s: expected a non-empty string after trimming white space", at)
		}
		return nil, invalidf("%s: expected at least %d characters", at, *s.MinLength)
	}
	if s.MaxLength != nil && n > *s.MaxLength {
		if s.Trim {
			return nil, invalidf("%s: expected at most %d characters after trimming white space, got %d", at, *s.MaxLength, n)
		}
		return nil, invalidf("%s: expected at most %d characters, got %d", at, *s.MaxLength, n)
	}
	if len(s.Enum) > 0 && !contains(s.Enum, str) {
		return nil, invalidf("%s: expected one of %s, got %q", at, quoteList(s.Enum), str)
	}
	return str, nil
}

// fieldOrder is Required first, then any optional properties sorted.
func (s *Schema) fieldOrder() []string {
	order := append([]string(nil), s.Required...)
	var rest []string
	for name := range s.Properties {
		if !contains(order, name) {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	return append(order, rest...)
}

func (s *Schema) fieldList() string { return quoteList(s.fieldOrder()) }

func invalidf(format string, args ...any) error {
	return &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf(format, args...)}
}

// where names the value at path in a message; the empty path is the
// arguments themselves.
func where(path string) string {
	if path == "" {
		return "arguments"
	}
	return path
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func quoteList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// Parse validates todo_write arguments and returns the items they submit,
// contents trimmed. It changes nothing; a rejected call returns an *Error
// with code CodeInvalidJSON or CodeInvalidArguments.
func Parse(arguments string) ([]Item, error) {
	// json.Valid accepts exactly one JSON value with optional surrounding
	// white space, so trailing data is rejected here.
	if !json.Valid([]byte(arguments)) {
		return nil, &Error{Code: CodeInvalidJSON, Message: "arguments must be exactly one JSON object, such as {\"todos\":[]}"}
	}
	v, err := decodeArguments(arguments)
	if err != nil {
		return nil, err
	}
	nv, err := ArgumentsSchema().Validate(v, "")
	if err != nil {
		return nil, err
	}
	raw := nv.(map[string]any)["todos"].([]any)
	items := make([]Item, len(raw))
	for i, r := range raw {
		m := r.(map[string]any)
		items[i] = Item{Content: m["content"].(string), Status: Status(m["status"].(string))}
	}
	return items, nil
}
