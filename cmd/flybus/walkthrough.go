package main

import "strings"

// The help's examples are one walk-through: `flybus --help` lists every
// step, each command's --help shows its own. Pasted in order into a shell,
// they work on any Linux machine: the paths are under /tmp and /dev/shm,
// never /run/user (absent without a login session). A test runs them.

// walkStep is one step: the command whose help shows it, and its lines
// as typed (two spaces in, continuation lines further).
type walkStep struct {
	cmd  string
	text string
}

var walkSteps = []walkStep{
	{"demo", "  flybus demo        # an embedded router in one process, nothing to set up\n"},
	{"serve", "  flybus serve --store /dev/shm/flybus --open --listen /tmp/flybus.sock \\\n" +
		"      --listen /tmp/flybus-agent.sock=agent-a --metrics 9100 &\n"},
	{"declare", "  flybus declare /tmp/flybus.sock cam.frames --retained latest\n"},
	{"sub", "  flybus sub /tmp/flybus.sock cam.frames --replay --count 1 \\\n" +
		"      --save-artifacts /tmp/flybus-frames --store /dev/shm/flybus &\n"},
	{"pub", "  flybus pub /tmp/flybus.sock cam.frames '{\"frame\":1}' \\\n" +
		"      --artifact note=/etc/os-release --store /dev/shm/flybus\n"},
	{"record", "  flybus record /tmp/flybus.sock cam.frames --replay --count 1 -o /tmp/flybus-run.mcap --store /dev/shm/flybus\n"},
	{"record", "  flybus record info /tmp/flybus-run.mcap\n"},
	{"play", "  flybus play /tmp/flybus-run.mcap /tmp/flybus.sock --store /dev/shm/flybus\n"},
	{"call", "  flybus call /tmp/flybus-agent.sock agent.echo Echo '{\"n\":1}'\n" +
		"      # connects as agent-a, the socket's id; NO_SERVICE until a program registers agent.echo\n"},
	{"stats", "  flybus stats --metrics http://127.0.0.1:9100\n"},
	{"top", "  flybus top --metrics http://127.0.0.1:9100 --once   # without --once: live, q quits\n"},
	{"edge", "  flybus edge /tmp/flybus.sock --store /dev/shm/flybus --topic cam.frames --check\n"},
	{"contract", "  flybus contract | tail -1\n"},
	{"version", "  flybus version\n"},
	{"help", "  flybus help pub\n"},
	{"serve", "  kill %1            # stops serve: it removes its sockets and store directory\n"},
}

// walkThrough is every step, in order.
func walkThrough() string {
	var b strings.Builder
	for _, s := range walkSteps {
		b.WriteString(s.text)
	}
	return b.String()
}

// walkExample is the Example of one command's help: its steps, with "..."
// where other commands' steps come between them.
func walkExample(cmd string) string {
	var b strings.Builder
	last := -1
	for i, s := range walkSteps {
		if s.cmd != cmd {
			continue
		}
		if last >= 0 && last != i-1 {
			b.WriteString("  ...\n")
		}
		b.WriteString(s.text)
		last = i
	}
	return b.String()
}
