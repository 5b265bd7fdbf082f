package mcp

import "github.com/pinplan/pinplan/config"

// FromConfig turns the [mcp.<name>] tables of the settings into the
// servers a Manager runs, their secrets revealed for the one place that
// sends them (and kept in Secrets, out of logs and results).
func FromConfig(list []config.MCPServer) []Server {
	var out []Server
	for _, c := range list {
		s := Server{Name: c.Name, Command: c.Command, URL: c.URL, Policy: c.Policy, Tools: c.Tools}
		if c.Env != nil {
			s.Env = map[string]string{}
			for k, v := range c.Env {
				s.Env[k] = v.Reveal()
			}
		}
		if c.Headers != nil {
			s.Headers = map[string]string{}
			for k, v := range c.Headers {
				s.Headers[k] = v.Reveal()
			}
		}
		for _, v := range c.Secrets {
			s.Secrets = append(s.Secrets, v.Reveal())
		}
		out = append(out, s)
	}
	return out
}
