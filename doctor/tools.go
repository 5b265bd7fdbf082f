package doctor

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/pinplan/pinplan/mcp"
)

// mcp starts each configured MCP server, as the bot would, and lists its
// tools; then stops them.
func (d *doctor) mcp(ctx context.Context) {
	servers := mcp.FromConfig(d.cfg.MCP)
	if len(servers) == 0 {
		d.r.add("mcp", "servers", Skipped, "PINPLAN_CONFIG", "no [mcp.<name>] servers configured: the model has only pinplan's own tools")
		return
	}
	m := mcp.New(mcp.Options{Servers: servers, Env: d.opts.Env, ConnectTimeout: d.opts.Timeout, Timeout: d.opts.Timeout})
	defer m.Close()
	if err := m.Start(); err != nil {
		d.r.add("mcp", "servers", Failed, "PINPLAN_CONFIG", err.Error())
		return
	}
	wctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	m.WaitStarted(wctx)
	status := m.Status()
	tools := map[string][]string{}
	for _, t := range m.Tools() {
		tools[t.Server] = append(tools[t.Server], strings.TrimPrefix(t.Name, t.Server+"__"))
	}
	for _, s := range servers {
		setting := fmt.Sprintf("[mcp.%s] in PINPLAN_CONFIG", s.Name)
		st := status[s.Name]
		switch {
		case st == mcp.StateReady:
			names := tools[s.Name]
			sort.Strings(names)
			d.r.add("mcp", s.Name, OK, setting, fmt.Sprintf("started; %s: %s", count(len(names), "tool"), list(names, 8)))
		case st == mcp.StateConnecting:
			d.r.add("mcp", s.Name, Failed, setting, fmt.Sprintf("still starting after %s: a turn waits for it at most PINPLAN_MCP_STARTUP_TIMEOUT (%s)", d.opts.Timeout, d.cfg.MCPStartup))
		default:
			d.r.add("mcp", s.Name, Failed, setting, st)
		}
	}
}

// list joins names, the first max of them.
func list(names []string, max int) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > max {
		return strings.Join(names[:max], ", ") + fmt.Sprintf(" and %d more", len(names)-max)
	}
	return strings.Join(names, ", ")
}
