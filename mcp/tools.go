package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pinplan/pinplan/agent"
)

// Tool policies (DESIGN.md §12).
const (
	PolicyAllow = "allow"
	PolicyAsk   = "ask"
	PolicyDeny  = "deny"
)

// offeredName is what OpenAI-compatible APIs accept as a function name.
var offeredName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// list fetches every page of the server's tools and turns them into the
// agent.Tools to offer.
func (s *server) list(ctx context.Context, cs *sdk.ClientSession) ([]agent.Tool, error) {
	var listed []*sdk.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		listed = append(listed, t)
	}
	tools := s.offer(listed)
	if s.m.opts.Hooks.Tools != nil {
		s.m.opts.Hooks.Tools(s.cfg.Name, len(tools))
	}
	return tools, nil
}

// offer converts the listed tools: named <server>__<tool>, with the
// server's description and input schema and the policy that applies. A
// denied tool is left out; so is one that cannot be offered to a model (its
// name or input schema), which is logged once.
func (s *server) offer(listed []*sdk.Tool) []agent.Tool {
	var out []agent.Tool
	for _, t := range listed {
		name := s.cfg.Name + "__" + t.Name
		if !offeredName.MatchString(name) {
			s.warnOnce(t.Name, "mcp tool skipped: its name is not a valid function name ([a-zA-Z0-9_-], at most 64 with the server's)", nil)
			continue
		}
		if err := checkSchema(t.InputSchema); err != nil {
			s.warnOnce(t.Name, "mcp tool skipped: its input schema is not a valid JSON object schema", err)
			continue
		}
		policy := s.policy(t)
		if policy == PolicyDeny {
			continue
		}
		desc := t.Description
		if desc == "" {
			desc = t.Title
		}
		ann := t.Annotations
		out = append(out, agent.Tool{
			Name:        name,
			Description: desc,
			Parameters:  t.InputSchema,
			Idempotent:  ann != nil && (ann.ReadOnlyHint || ann.IdempotentHint),
			Ask:         policy == PolicyAsk,
			Server:      s.cfg.Name,
			Run:         s.runner(t.Name),
		})
	}
	slices.SortFunc(out, func(a, b agent.Tool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// policy is the tool's own setting, else the server's, else what its
// annotations say: read-only tools are allowed, every other asks.
func (s *server) policy(t *sdk.Tool) string {
	p := s.cfg.Tools[t.Name]
	if p == "" {
		p = s.cfg.Policy
	}
	if p == "" {
		if t.Annotations != nil && t.Annotations.ReadOnlyHint {
			return PolicyAllow
		}
		return PolicyAsk
	}
	if p != PolicyAllow && p != PolicyDeny {
		return PolicyAsk // an unknown word asks, the safe side
	}
	return p
}

func (s *server) warnOnce(tool, msg string, err error) {
	if s.warned[tool] {
		return
	}
	s.warned[tool] = true
	args := []any{"tool", tool}
	if err != nil {
		args = append(args, "error", s.redact.Log(err.Error()))
	}
	s.log.Warn(msg, args...)
}

// checkSchema reports whether schema can be a function's parameters: a JSON
// object with "type": "object", whose keywords have the types JSON Schema
// gives them (properties an object of schemas, required a list of names,
// and so on). A model API rejects a whole request over one bad schema, so
// such a tool is not offered at all.
func checkSchema(schema any) error {
	m, ok := schema.(map[string]any)
	if !ok {
		return fmt.Errorf("it is %T, not a JSON object", schema)
	}
	if m["type"] != "object" {
		return fmt.Errorf(`its type is %v, not "object"`, m["type"])
	}
	if p, ok := m["properties"]; ok {
		props, ok := p.(map[string]any)
		if !ok {
			return errors.New("properties is not an object")
		}
		for k, v := range props {
			switch v.(type) {
			case map[string]any, bool:
			default:
				return fmt.Errorf("properties.%s is not a schema", k)
			}
		}
	}
	if r, ok := m["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return errors.New("required is not a list")
		}
		for _, v := range list {
			if _, ok := v.(string); !ok {
				return errors.New("required is not a list of names")
			}
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var js jsonschema.Schema
	if err := json.Unmarshal(b, &js); err != nil {
		return err
	}
	return nil
}
