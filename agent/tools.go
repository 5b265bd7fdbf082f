package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/todo"
)

// Tool is one function offered to the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments; it is marshalled as is.
	Parameters any
	// Idempotent tools are run again after a crash between running and
	// committing them; a non-idempotent one gets an "interrupted" error.
	Idempotent bool
	// Ask: a call waits for a person's approval in the thread (DESIGN.md
	// §12, policy "ask"). A tool whose policy is "deny" is never offered.
	Ask bool
	// Server is the MCP server the tool comes from ("" for built-in
	// tools), for approval cards and logs.
	Server string
	// Run performs the call. ctx is cancelled when the turn is stopped.
	Run func(ctx context.Context, env *ToolEnv, arguments string) (string, error)
}

// ToolSource supplies tools that can change while the bot runs (an MCP
// server's list). The registry asks it at every model request.
type ToolSource interface {
	Tools() []Tool
}

// StartingSource is a ToolSource whose tools may still be coming: MCP
// servers that connect in the background after a start. A turn waits for
// it before its first model request, so the first turn after a start is
// offered the same tools as every other (DESIGN.md §16).
type StartingSource interface {
	ToolSource
	// WaitTools returns once the source's tools are listed, or it gave up
	// waiting for them (its own startup timeout), or ctx ended. It
	// returns the names of what is still missing (servers), for the log.
	WaitTools(ctx context.Context) (missing []string)
}

// ToolEnv is what a tool may touch: the session key and the round's working
// copy of the plan tracker, which is only kept if the round commits.
type ToolEnv struct {
	Session string
	Plan    *todo.Tracker
	// Marks are the people's changes a snapshot must agree with
	// (DESIGN §19; checkMarks).
	Marks []Mark
}

// ToolError is an error result with a code the model can act on.
type ToolError struct {
	Code    string
	Message string
}

func (e *ToolError) Error() string { return e.Code + ": " + e.Message }

// errorResult is the tool result for a failed call:
// {"error":{"code":"...","message":"..."}}.
func errorResult(err error) string {
	code, msg := "tool_failed", err.Error()
	var te *todo.Error
	var tle *ToolError
	switch {
	case errors.As(err, &te):
		code, msg = te.Code, te.Message
	case errors.As(err, &tle):
		code, msg = tle.Code, tle.Message
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	return string(b)
}

// TodoWrite is the todo_write tool of DESIGN.md §3. Its parameters are the
// schema that validates its arguments.
func TodoWrite() Tool {
	return Tool{
		Name:        todo.ToolName,
		Description: todo.ToolDescription,
		Parameters:  todo.ArgumentsSchema(),
		Idempotent:  true,
		Run: func(_ context.Context, env *ToolEnv, arguments string) (string, error) {
			if len(env.Marks) > 0 {
				items, err := todo.Parse(arguments)
				if err != nil {
					return "", err
				}
				if !newTask(env.Plan.Snapshot().Items(), items) {
					if err := checkMarks(items, env.Marks); err != nil {
						return "", err
					}
				}
			}
			snap, err := env.Plan.Write(arguments)
			if err != nil {
				return "", err
			}
			return snap.String(), nil
		},
	}
}

// Registry is a set of tools by name: the built-in ones, fixed at
// startup, and those of its sources, read at each use.
type Registry struct {
	tools   map[string]Tool
	sources []ToolSource
}

// AddSource adds tools that may change over time; a source's tool never
// replaces a built-in one of the same name. Call it before the runner
// starts.
func (r *Registry) AddSource(src ToolSource) { r.sources = append(r.sources, src) }

// all returns every tool by name: built-in ones first, then the sources'.
func (r *Registry) all() map[string]Tool {
	if len(r.sources) == 0 {
		return r.tools
	}
	out := make(map[string]Tool, len(r.tools))
	for _, src := range r.sources {
		for _, t := range src.Tools() {
			if t.Name != "" && t.Run != nil {
				out[t.Name] = t
			}
		}
	}
	maps.Copy(out, r.tools)
	return out
}

// wait waits for the sources still starting and returns what each left
// missing.
func (r *Registry) wait(ctx context.Context) []string {
	var missing []string
	for _, src := range r.sources {
		if s, ok := src.(StartingSource); ok {
			missing = append(missing, s.WaitTools(ctx)...)
		}
	}
	return missing
}

// Lookup returns the tool named name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	if t, ok := r.tools[name]; ok {
		return t, true
	}
	t, ok := r.all()[name]
	return t, ok
}

// NewRegistry returns a registry with todo_write and the given tools.
func NewRegistry(extra ...Tool) (*Registry, error) {
	r := &Registry{tools: map[string]Tool{}}
	for _, t := range append([]Tool{TodoWrite()}, extra...) {
		if t.Name == "" || t.Run == nil {
			return nil, fmt.Errorf("agent: tool %q needs a name and a Run function", t.Name)
		}
		if _, dup := r.tools[t.Name]; dup {
			return nil, fmt.Errorf("agent: tool %q registered twice", t.Name)
		}
		r.tools[t.Name] = t
	}
	return r, nil
}

// Definitions returns the tools as offered to the model, sorted by name.
func (r *Registry) Definitions() []openai.Tool {
	tools := r.all()
	names := make([]string, 0, len(tools))
	for n := range tools {
		names = append(names, n)
	}
	sort.Strings(names)
	defs := make([]openai.Tool, 0, len(names))
	for _, n := range names {
		t := tools[n]
		defs = append(defs, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: t.Name, Description: t.Description, Parameters: t.Parameters,
		}})
	}
	return defs
}

// call runs one tool call and returns its result text (an error result on
// failure). Tools are run one at a time, in the order the model listed them.
func (r *Registry) call(ctx context.Context, env *ToolEnv, tc openai.ToolCall) string {
	t, ok := r.Lookup(tc.Function.Name)
	if !ok {
		return errorResult(&ToolError{Code: "unknown_tool", Message: fmt.Sprintf("no tool is named %q; available tools: %s", tc.Function.Name, r.names())})
	}
	out, err := t.Run(ctx, env, tc.Function.Arguments)
	if err != nil {
		return errorResult(err)
	}
	return out
}

func (r *Registry) idempotent(name string) bool {
	t, ok := r.Lookup(name)
	return !ok || t.Idempotent // an unknown tool runs nothing
}

func (r *Registry) names() string {
	var names []string
	for n := range r.all() {
		names = append(names, n)
	}
	sort.Strings(names)
	b, _ := json.Marshal(names)
	return string(b)
}
