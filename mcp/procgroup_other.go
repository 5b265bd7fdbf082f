//go:build !unix

package mcp

import "os/exec"

// setProcessGroup does nothing where there are no process groups.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup kills the server's process itself.
func killProcessGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
