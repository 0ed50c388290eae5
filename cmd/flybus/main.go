// Command flybus is the router executable and the operator's tools: serve
// runs a router on Unix sockets; declare, pub, sub, call and stats talk to a
// running one; contract and version print what a build speaks. Each
// subcommand lives in its own file.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one subcommand. run receives the arguments after the
// subcommand's name and returns the process exit status.
type command struct {
	name    string
	summary string
	run     func(c *command, args []string, stdout, stderr io.Writer) int
	usage   func() string
}

// Exit statuses shared by every subcommand.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // bad arguments or configuration: nothing was done
)

// commands is filled in init because the help command refers back to it.
var commands []*command

func init() {
	// In the walk-through's order, so the list reads as a session does.
	commands = []*command{demoCmd, serveCmd, declareCmd, subCmd, pubCmd, recordCmd, playCmd, callCmd, statsCmd, topCmd, edgeCmd, contractCmd, versionCmd, helpCmd, perfCmd}
}

func topUsage() string {
	var b strings.Builder
	b.WriteString("flybus: a local RPC and pub/sub bus with file-backed artifacts\n\n")
	b.WriteString("Usage:\n  flybus COMMAND [ARGUMENTS] [FLAGS]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\n`flybus help COMMAND` or `flybus COMMAND --help` describes one command;\n`flybus --version` prints the build and the wire version.\n")
	b.WriteString("\nWalk-through (paste the lines in order; each command's --help shows its step):\n")
	b.WriteString(walkThrough())
	return b.String()
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage())
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, topUsage())
		return exitOK
	case "-version", "--version":
		return versionCmd.run(versionCmd, args[1:], stdout, stderr)
	}
	if c := lookup(args[0]); c != nil {
		return c.run(c, args[1:], stdout, stderr)
	}
	return unknownCommand(stderr, args[0])
}

// unknownCommand reports a command flybus does not have.
func unknownCommand(stderr io.Writer, name string) int {
	fmt.Fprintf(stderr, "flybus: unknown command %q\nsee flybus --help\n", name)
	return exitUsage
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

var helpCmd = &command{
	name:    "help",
	summary: "describe flybus or one of its commands",
	usage: func() string {
		return usageText("flybus help [COMMAND]", "Describe flybus, or one command with its flags.", nil, "",
			walkExample("help"))
	},
	run: func(self *command, args []string, stdout, stderr io.Writer) int {
		pos, code, ok := parse(self, newFlagSet("help"), args, stdout, stderr)
		switch {
		case !ok:
			return code
		case len(pos) == 0:
			fmt.Fprint(stdout, topUsage())
			return exitOK
		case len(pos) > 1:
			return usageError(self, stderr, "one command at a time")
		}
		c := lookup(pos[0])
		if c == nil {
			return unknownCommand(stderr, pos[0])
		}
		fmt.Fprint(stdout, c.usage())
		return exitOK
	},
}
