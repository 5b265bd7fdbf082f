// Package cli is bot's command line: its commands and their flags, the
// usage, and the version the toolchain stamped. Parse reads a command
// line and returns what to run; cmd/bot runs it. It imports nothing of
// pinplan's; only cmd/bot imports it.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// commands are bot's subcommands, in the order the usage lists them. Each
// parses its own flags: -h prints its usage (exit 0), an unknown flag or
// an extra argument is an error (exit 1) that names it.
var commands = []command{
	{name: "serve", args: "[-demo]", short: "serve: Slack and Discord when their tokens are set, and the web console (the default command)"},
	{name: "backup", args: "FILE", short: "write a hot backup of the database (PINPLAN_DB) to FILE; the bot may be running"},
	{name: "compact", args: "OUT", short: "write a compacted copy of the database (PINPLAN_DB) to OUT; stop the bot first"},
	{name: "migrate", args: "-to etcd", short: "copy the database (PINPLAN_DB) into the empty etcd prefix of PINPLAN_ETCD_ENDPOINTS and PINPLAN_ETCD_PREFIX; stop the bot first"},
	{name: "invite", short: "print the Discord OAuth2 invite URL (from DISCORD_BOT_TOKEN or DISCORD_APPLICATION_ID)"},
	{name: "doctor", short: "check every setting without serving (tokens, Slack, Discord, the model, MCP servers, the store); exit 1 when something needed fails"},
	{name: "help", args: "[COMMAND]", short: "print this help, or a command's"},
	{name: "version", short: "print pinplan's version (also: bot -version)"},
}

type command struct{ name, args, short string }

// Command is a parsed command line: the command to run, its positional
// arguments (backup's and compact's file, migrate's -to target) and
// serve's -demo.
type Command struct {
	Name string
	Args []string
	Demo bool
}

// ErrHelp is returned by Parse when it printed what was asked (-h, help):
// there is nothing more to run, and the exit status is 0.
var ErrHelp = errors.New("help printed")

// ErrUsage is a command line that could not be parsed; its usage was
// printed already.
var ErrUsage = errors.New("see the usage above")

// Parse parses bot's command line (os.Args[1:]). help prints to stdout;
// -h and a bad command line print the usage to stderr. With no command
// it is serve; -version is the version command.
func Parse(args []string, stdout, stderr io.Writer) (Command, error) {
	fs := flag.NewFlagSet("bot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { Usage(stderr) }
	demo := fs.Bool("demo", false, "serve with the built-in scripted demo model instead of a real one")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Command{}, ErrHelp
		}
		return Command{}, ErrUsage
	}
	if *showVersion {
		if fs.NArg() > 0 {
			return Command{}, fmt.Errorf("-version takes no command, got %q", fs.Arg(0))
		}
		return Command{Name: "version"}, nil
	}
	cmd := Command{Name: "serve"}
	var rest []string
	if fs.NArg() > 0 {
		cmd.Name, rest = fs.Arg(0), fs.Args()[1:]
	}
	if !known(cmd.Name) {
		Usage(stderr)
		return Command{}, fmt.Errorf("unknown command %q; run `bot help`", cmd.Name)
	}
	if *demo && cmd.Name != "serve" {
		return Command{}, fmt.Errorf("-demo is for serving (bot -demo, or bot serve -demo), not for %s", cmd.Name)
	}
	if cmd.Name == "help" {
		if err := help(rest, stdout); err != nil {
			return Command{}, err
		}
		return Command{}, ErrHelp
	}
	cmd.Demo = *demo
	var err error
	cmd.Args, err = parseCommand(cmd.Name, rest, &cmd.Demo, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return Command{}, ErrHelp
	}
	return cmd, err
}

// Usage prints every command with its arguments.
func Usage(w io.Writer) {
	fmt.Fprint(w, "usage:\n  bot [-demo] [-version]\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  bot %-18s %s\n", strings.TrimSpace(c.name+" "+c.args), c.short)
	}
	fmt.Fprint(w, "\nRun `bot COMMAND -h` for a command's flags. Settings come from the environment\n(see README.md); PINPLAN_CONFIG may name a TOML file.\n")
}

// parseCommand parses a subcommand's flags (demo is serve's -demo) and
// returns its positional arguments: backup's and compact's file,
// migrate's -to.
func parseCommand(cmd string, rest []string, demo *bool, stderr io.Writer) ([]string, error) {
	sub := flagSet(cmd, stderr)
	switch cmd {
	case "serve":
		sub.BoolVar(demo, "demo", *demo, "serve with the built-in scripted demo model instead of a real one")
		return nil, parse(sub, rest, 0)
	case "backup", "compact":
		err := parse(sub, rest, 1)
		return sub.Args(), err
	case "migrate":
		to := sub.String("to", "", "where to copy the bbolt file: etcd (the one target)")
		if err := parse(sub, rest, 0); err != nil {
			return nil, err
		}
		if *to == "" {
			sub.Usage()
			return nil, errors.New("migrate: -to is required: bot migrate -to etcd")
		}
		return []string{*to}, nil
	case "invite", "version", "doctor":
		return nil, parse(sub, rest, 0)
	}
	Usage(stderr)
	return nil, fmt.Errorf("unknown command %q; run `bot help`", cmd)
}

// parse parses a subcommand's flags and checks its positional arguments:
// want of them exactly. It returns flag.ErrHelp for -h.
func parse(fs *flag.FlagSet, args []string, want int) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%s: %w", fs.Name(), ErrUsage) // the flag package printed what was wrong
	}
	switch {
	case fs.NArg() > want:
		fs.Usage()
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(want))
	case fs.NArg() < want:
		fs.Usage()
		return fmt.Errorf("%s: missing argument; usage: bot %s", fs.Name(), fs.Name()+" "+lookup(fs.Name()).args)
	}
	return nil
}

// flagSet is a subcommand's flag set: its usage line, then its flags.
func flagSet(name string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		c := lookup(name)
		fmt.Fprintf(w, "usage: bot %s\n  %s\n", strings.TrimSpace(c.name+" "+c.args), c.short)
		fs.PrintDefaults()
	}
	return fs
}

// help prints the usage, or a command's (bot help COMMAND).
func help(rest []string, stdout io.Writer) error {
	if len(rest) == 1 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
		rest = []string{"help"} // help's own usage
	}
	if len(rest) > 1 {
		return fmt.Errorf("help: unexpected argument %q", rest[1])
	}
	if len(rest) == 0 {
		Usage(stdout)
		return nil
	}
	if !known(rest[0]) {
		return fmt.Errorf("help: unknown command %q", rest[0])
	}
	h := flagSet(rest[0], stdout)
	if rest[0] == "serve" {
		h.Bool("demo", false, "serve with the built-in scripted demo model instead of a real one")
	}
	if rest[0] == "migrate" {
		h.String("to", "", "where to copy the bbolt file: etcd (the one target)")
	}
	h.Usage()
	return nil
}

func lookup(name string) command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return command{}
}

func known(name string) bool { return lookup(name).name != "" }

// Version is pinplan's version as the Go toolchain stamped it: the module
// version (a tag, or a pseudo-version naming the commit) and the VCS
// revision of a build in a checkout (deploy/release.sh builds with
// -buildvcs=true). go run stamps no revision, and says so.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "pinplan (unknown version)"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	v := strings.Trim(bi.Main.Version, "()")
	if v == "" {
		v = "devel"
	}
	commit, modified := "unknown", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				modified = " with local changes"
			}
		}
	}
	return fmt.Sprintf("pinplan %s (commit %s%s, %s)", v, commit, modified, bi.GoVersion)
}
