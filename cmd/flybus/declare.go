package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

var declareCmd = &command{
	name:    "declare",
	summary: "declare a topic on a running router",
	run:     runDeclare,
	usage:   declareUsage,
}

type declareOptions struct {
	retained string
	client   string
	timeout  time.Duration
}

func declareFlags(o *declareOptions) *flag.FlagSet {
	set := newFlagSet("declare")
	set.StringVar(&o.retained, "retained", "none", "keep the last message and its artifacts for replays (`latest|none`)")
	set.StringVar(&o.client, "client", "", clientFlagUsage)
	durationVar(set, &o.timeout, "timeout", 10*time.Second, "give up after `D`, connecting included")
	return set
}

func declareUsage() string {
	notes := `Topics must be declared before anyone publishes or subscribes. Declaring a
topic again with the same retention is harmless and prints "TOPIC already
declared"; a different retention is refused with CONFLICT. Prints the topic's
incarnation and exits 0; a refusal prints CODE: message to stderr and exits 1.
`
	return usageText("flybus declare SOCKET TOPIC [--retained latest|none] [--client ID] [--timeout D]",
		"Declare a topic on a running router.", declareFlags(&declareOptions{}), notes,
		walkExample("declare"))
}

// retention maps the --retained flag; false for anything else.
func retention(s string) (wire.Retention, bool) {
	switch s {
	case "none":
		return wire.RetainNone, true
	case "latest":
		return wire.RetainLatest, true
	}
	return 0, false
}

func runDeclare(c *command, args []string, stdout, stderr io.Writer) int {
	o := &declareOptions{}
	pos, code, ok := parse(c, declareFlags(o), args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return usageError(c, stderr, fmt.Sprintf("want SOCKET TOPIC, got %d arguments", len(pos)))
	}
	socket, topic := pos[0], pos[1]
	retained, okRet := retention(o.retained)
	if err := checkName("topic", topic); err != nil {
		return usageError(c, stderr, err.Error())
	}
	switch {
	case !okRet:
		return usageError(c, stderr, fmt.Sprintf("--retained is latest or none, not %q", o.retained))
	}
	if msg := checkClientFlags(o.client, o.timeout); msg != "" {
		return usageError(c, stderr, msg)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	bus, id, err := connectTool(ctx, socket, c.name, o.client, client.Config{})
	if err != nil {
		return connectFailed(stderr, c.name, id, o.timeout, err)
	}
	defer bus.Close()
	info, err := bus.DeclareTopic(ctx, topic, retained)
	if err != nil {
		return toolFailed(stderr, c.name, o.timeout, err)
	}
	if info.Declared {
		fmt.Fprintf(stdout, "declared %s (incarnation %s)\n", topic, info.Incarnation)
	} else {
		fmt.Fprintf(stdout, "%s already declared (incarnation %s)\n", topic, info.Incarnation)
	}
	return exitOK
}
