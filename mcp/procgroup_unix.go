//go:build unix

package mcp

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts a stdio server in its own process group, so that
// what it spawns (npx starts node) can be stopped with it, and so that a
// terminal's Ctrl-C reaches the bot, which then stops its servers in order.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup kills every process left in cmd's group.
func killProcessGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
