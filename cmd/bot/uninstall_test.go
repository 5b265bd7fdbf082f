package main

import (
	"slices"
	"testing"

	"github.com/pinplan/pinplan/adapters/web"
	"github.com/pinplan/pinplan/agent"
)

// TestUninstallStopsOnlyTurns: an uninstalled workspace's sessions whose
// turn runs or waits are stopped; its idle ones, and other workspaces'
// (T30 is not T3), are not: with replicas a stop of a session held
// elsewhere is kept until that session is taken, and would stop its
// next turn after a reinstall.
func TestUninstallStopsOnlyTurns(t *testing.T) {
	s := func(key string, st agent.RunState) web.Session {
		return web.Session{Checkpoint: agent.Checkpoint{Key: key, State: st}}
	}
	infos := []web.Session{
		s("slack/T3/C1/1.1", agent.Running), s("slack/T3/C1/2.2", agent.Idle), s("slack/T3/C2/3.3", agent.Waiting),
		s("slack/T30/C1/4.4", agent.Running), s("slack/T2/C1/5.5", agent.Running), s("discord/T3", agent.Running),
	}
	got := turnsOf(infos, []string{"T3"})
	if want := []string{"slack/T3/C1/1.1", "slack/T3/C2/3.3"}; !slices.Equal(got, want) {
		t.Errorf("stopped %v, want %v", got, want)
	}
}
