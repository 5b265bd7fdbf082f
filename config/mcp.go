package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// MCPServer is one [mcp.<name>] table of the PINPLAN_CONFIG file
// (DESIGN.md §12): an MCP server whose tools are offered to the agent.
// Exactly one of Command (stdio) and URL (streamable HTTP) is set.
type MCPServer struct {
	Name    string            // [a-z0-9_-]{1,20}; the tools are offered as <Name>__<tool>
	Command []string          // stdio: the program and its arguments
	Env     map[string]Secret // stdio only: added to the child's environment
	URL     string            // streamable HTTP endpoint
	Headers map[string]Secret // HTTP only: sent with every request
	Policy  string            // allow, ask or deny; "" lets each tool's annotations decide
	Tools   map[string]string // tool name -> allow, ask or deny; wins over Policy

	// Secrets holds the values that ${VAR} references in Env and Headers
	// resolved to, for redaction; Config.Secrets includes them and every
	// header value.
	Secrets []Secret
}

// secretValues returns what must never be printed: every header value and
// every value a ${VAR} resolved to.
func (s MCPServer) secretValues() []Secret {
	out := slices.Clone(s.Secrets)
	for _, k := range sortedKeys(s.Headers) {
		out = append(out, s.Headers[k])
	}
	return out
}

var (
	serverNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,20}$`)
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	varRefRE     = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

var policies = []string{"allow", "ask", "deny"}

// parseMCP validates the raw [mcp] table of the file. Errors name the key
// as a dotted path: "config: PINPLAN_CONFIG: mcp.fs.comand: unknown key".
func parseMCP(raw any, getenv func(string) string) ([]MCPServer, error) {
	if raw == nil {
		return nil, nil
	}
	table, ok := raw.(map[string]any)
	if !ok {
		return nil, mcpErr("mcp", "must be a table of servers ([mcp.<name>])")
	}
	var out []MCPServer
	for _, name := range sortedKeys(table) {
		path := "mcp." + name
		if !serverNameRE.MatchString(name) {
			return nil, mcpErr(path, "a server name must match [a-z0-9_-]{1,20}")
		}
		t, ok := table[name].(map[string]any)
		if !ok {
			return nil, mcpErr(path, "must be a table (command or url, env, headers, policy, tools)")
		}
		s, err := parseServer(name, t, getenv)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func parseServer(name string, t map[string]any, getenv func(string) string) (MCPServer, error) {
	s := MCPServer{Name: name}
	path := "mcp." + name
	for _, k := range sortedKeys(t) {
		key := path + "." + k
		v := t[k]
		switch k {
		case "command":
			list, ok := v.([]any)
			if ok {
				s.Command, ok = stringList(list)
			}
			if !ok || len(s.Command) == 0 || strings.TrimSpace(s.Command[0]) == "" {
				return s, mcpErr(key, `must be a non-empty array of strings (["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"])`)
			}
		case "url":
			str, ok := v.(string)
			u, err := url.Parse(str)
			if !ok || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return s, mcpErr(key, fmt.Sprintf("must be an http or https URL, got %q", RedactURL(fmt.Sprint(v))))
			}
			s.URL = str
		case "env", "headers":
			m, err := secretTable(key, v, getenv, &s.Secrets)
			if err != nil {
				return s, err
			}
			if k == "env" {
				s.Env = m
			} else {
				s.Headers = m
			}
		case "policy":
			p, ok := v.(string)
			if !ok || !slices.Contains(policies, p) {
				return s, mcpErr(key, fmt.Sprintf("must be one of allow, ask, deny, got %v", quoted(v)))
			}
			s.Policy = p
		case "tools":
			m, ok := v.(map[string]any)
			if !ok {
				return s, mcpErr(key, `must be a table of tool name = "allow" | "ask" | "deny"`)
			}
			s.Tools = map[string]string{}
			for _, tool := range sortedKeys(m) {
				p, ok := m[tool].(string)
				if !ok || !slices.Contains(policies, p) {
					return s, mcpErr(key+"."+tool, fmt.Sprintf("must be one of allow, ask, deny, got %v", quoted(m[tool])))
				}
				s.Tools[tool] = p
			}
		default:
			return s, mcpErr(key, "unknown key")
		}
	}
	switch {
	case s.Command == nil && s.URL == "":
		return s, mcpErr(path, "needs command (a local server over stdio) or url (streamable HTTP)")
	case s.Command != nil && s.URL != "":
		return s, mcpErr(path+".url", "cannot be set with command; a server has one or the other")
	case s.Env != nil && s.URL != "":
		return s, mcpErr(path+".env", "is for command servers; an HTTP server takes headers")
	case s.Headers != nil && s.Command != nil:
		return s, mcpErr(path+".headers", "is for url servers; a command server takes env")
	}
	return s, nil
}

// secretTable reads a table of strings (env or headers), replacing each
// ${VAR} with getenv(VAR) and recording the values it resolved to.
func secretTable(key string, v any, getenv func(string) string, resolved *[]Secret) (map[string]Secret, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, mcpErr(key, "must be a table of strings")
	}
	headers := strings.HasSuffix(key, ".headers")
	out := make(map[string]Secret, len(m))
	for _, name := range sortedKeys(m) {
		k := key + "." + name
		if headers && !headerNameRE.MatchString(name) {
			return nil, mcpErr(k, "is not a valid HTTP header name")
		}
		if !headers && !envNameRE.MatchString(name) {
			return nil, mcpErr(k, "is not a valid environment variable name")
		}
		str, ok := m[name].(string)
		if !ok {
			return nil, mcpErr(k, "must be a string") // the value is not echoed: it may be a secret
		}
		val, err := expand(k, str, getenv, resolved)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(val, "\x00\r\n") {
			return nil, mcpErr(k, "must not contain a line break or NUL")
		}
		out[name] = Secret(val)
	}
	return out, nil
}

// expand replaces each ${VAR} in s with getenv(VAR); a VAR that is unset or
// empty is an error naming the key.
func expand(key, s string, getenv func(string) string, resolved *[]Secret) (string, error) {
	var err error
	out := varRefRE.ReplaceAllStringFunc(s, func(ref string) string {
		name := ref[2 : len(ref)-1]
		v := getenv(name)
		if v == "" && err == nil {
			err = mcpErr(key, fmt.Sprintf("refers to ${%s}, which is not set in the environment", name))
		}
		*resolved = append(*resolved, Secret(v))
		return v
	})
	if err != nil {
		return "", err
	}
	if strings.Contains(varRefRE.ReplaceAllString(s, ""), "${") {
		return "", mcpErr(key, "has a malformed ${VAR} reference (a name is letters, digits and _)")
	}
	return out, nil
}

func mcpErr(key, msg string) error {
	return fmt.Errorf("config: PINPLAN_CONFIG: %s: %s", key, msg)
}

// quoted prints a wrong policy value for the error; policies are not secret.
func quoted(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%v", v)
}

// stringList converts a TOML array to strings; ok is false if any item is
// not a string.
func stringList(list []any) ([]string, bool) {
	out := make([]string, 0, len(list))
	for _, item := range list {
		s, ok := item.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
