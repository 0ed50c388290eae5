package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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

// declarePlan is a checked declare command line.
type declarePlan struct {
	socket, topic string
	retained      wire.Retention
}

// plan checks the command line; the error is a usage error's message.
func (o *declareOptions) plan(pos []string) (*declarePlan, error) {
	if len(pos) != 2 {
		return nil, fmt.Errorf("want SOCKET TOPIC, got %d arguments", len(pos))
	}
	p := &declarePlan{socket: pos[0], topic: pos[1]}
	if err := checkName("topic", p.topic); err != nil {
		return nil, err
	}
	var ok bool
	if p.retained, ok = wire.ParseRetention(o.retained); !ok {
		return nil, fmt.Errorf("--retained is latest or none, not %q", o.retained)
	}
	if msg := checkClientFlags(o.client, o.timeout); msg != "" {
		return nil, errors.New(msg)
	}
	return p, nil
}

func runDeclare(c *command, args []string, stdout, stderr io.Writer) int {
	o := &declareOptions{}
	p, code, ok := parsePlan(c, declareFlags(o), o.plan, args, stdout, stderr)
	if !ok {
		return code
	}

	ctx, cancel := toolContext(o.timeout, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	bus, id, err := connectTool(ctx, p.socket, c.name, o.client, client.Config{})
	if err != nil {
		return connectFailed(stderr, c.name, id, o.timeout, err)
	}
	defer bus.Close()
	info, err := bus.DeclareTopic(ctx, p.topic, p.retained)
	if err != nil {
		return toolFailed(stderr, c.name, o.timeout, err)
	}
	if info.Declared {
		fmt.Fprintf(stdout, "declared %s (incarnation %s)\n", p.topic, info.Incarnation)
	} else {
		fmt.Fprintf(stdout, "%s already declared (incarnation %s)\n", p.topic, info.Incarnation)
	}
	return exitOK
}
