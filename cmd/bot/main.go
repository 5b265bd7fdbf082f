// Command bot runs pinplan: the agent sessions, the plan boards, the chat
// platforms whose tokens are set and the local web console.
//
//	bot [-demo]            serve (Slack and Discord when their tokens are set; the console always)
//	bot serve [-demo]      the same
//	bot backup FILE        write a hot backup of the database to FILE
//	bot compact OUT        write a compacted copy of the database to OUT (offline)
//	bot migrate -to etcd   copy the bbolt file into an empty etcd prefix (offline)
//	bot invite             print the Discord invite URL
//	bot doctor             check every setting without serving; exit 1 when something needed fails
//	bot help [COMMAND]     the usage, or a command's
//	bot version, bot -version
//
// Every command takes -h and refuses unknown flags and extra arguments.
// main only sets up signals; run does the work and is what tests call.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pinplan:", err)
		os.Exit(1)
	}
}
