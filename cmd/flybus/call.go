package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

var callCmd = &command{
	name:    "call",
	summary: "call a service through a running router and print its outcome",
	run:     runCall,
	usage:   callUsage,
}

type callOptions struct {
	artifactOptions
	client  string
	timeout time.Duration
}

func callFlags(o *callOptions) *flag.FlagSet {
	set := newFlagSet("call")
	o.define(set)
	set.StringVar(&o.client, "client", "", clientFlagUsage)
	durationVar(set, &o.timeout, "timeout", 10*time.Second, "give up after `D`, connecting included; the call is then abandoned")
	return set
}

func callUsage() string {
	notes := `Connects to SOCKET, calls METHOD on SERVICE with the JSON object as payload
(and the --artifact files attached), prints the outcome JSON to stdout and
exits 0. A refusal or failure prints CODE: message to stderr and exits 1.

` + payloadNotes
	return usageText("flybus call SOCKET SERVICE METHOD JSON|@FILE|- [--artifact NAME=FILE]... [--store DIR] [--client ID] [--timeout D]",
		"Call a service through a running router and print its outcome.", callFlags(&callOptions{}), notes,
		walkExample("call"))
}

// callPlan is a checked call command line.
type callPlan struct {
	socket, service, method string
	payload                 []byte
	files                   []pubFile
}

// plan checks the command line before anything is opened or connected
// (a payload from @FILE or stdin is read); the error is a usage error's
// message. Arguments the router would refuse are caught here.
func (o *callOptions) plan(pos []string) (*callPlan, error) {
	if len(pos) != 4 {
		return nil, fmt.Errorf("want SOCKET SERVICE METHOD JSON, got %d arguments", len(pos))
	}
	p := &callPlan{socket: pos[0], service: pos[1], method: pos[2]}
	if err := checkName("service", p.service); err != nil {
		return nil, err
	}
	if !wire.ValidMethod(p.method) {
		return nil, fmt.Errorf("%q is not a method name (1-128 printable ASCII characters)", p.method)
	}
	var err error
	if p.payload, p.files, err = o.message(pos[3], o.client, o.timeout); err != nil {
		return nil, err
	}
	return p, nil
}

func runCall(c *command, args []string, stdout, stderr io.Writer) int {
	o := &callOptions{}
	pos, code, ok := parse(c, callFlags(o), args, stdout, stderr)
	if !ok {
		return code
	}
	p, err := o.plan(pos)
	if err != nil {
		return usageError(c, stderr, err.Error())
	}
	srcs, err := openSources(p.files)
	if err != nil {
		fmt.Fprintf(stderr, "flybus call: %v\n", err)
		return exitUsage
	}
	defer closeSources(srcs)

	// Ctrl-C abandons the call properly (a cancel) instead of vanishing.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	bus, id, err := connectTool(ctx, p.socket, c.name, o.client, client.Config{StoreRoot: o.store})
	if err != nil {
		callFailed(stderr, o, err)
		connectHints(stderr, c.name, id, err)
		return exitFailure
	}
	defer bus.Close()
	atts, err := uploadAll(ctx, bus, srcs, o.store)
	defer closeAttachments(atts)
	if err != nil {
		return callFailed(stderr, o, err)
	}
	res, err := bus.CallAndWait(ctx, p.service, 0, p.method, wire.RawJSON(p.payload), atts...)
	if err != nil {
		return callFailed(stderr, o, err)
	}
	defer res.Close()
	fmt.Fprintf(stdout, "%s\n", res.Outcome)
	return exitOK
}

// callFailed prints a bus error in its own words (CODE: message) and
// anything else prefixed with the command.
func callFailed(stderr io.Writer, o *callOptions, err error) int {
	var be *wire.BusError
	switch {
	case errors.As(err, &be):
		fmt.Fprintln(stderr, err.Error())
		if tooLarge(err) {
			fmt.Fprintf(stderr, "flybus call: %s\n", oversizeHint("the call is too large"))
		}
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "flybus call: no outcome within %v\n", o.timeout)
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "flybus call: interrupted")
	default:
		fmt.Fprintf(stderr, "flybus call: %v\n", err)
	}
	return exitFailure
}
