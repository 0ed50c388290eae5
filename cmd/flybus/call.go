package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

var callCmd = &command{
	name:    "call",
	summary: "call a service through a running router and print its outcome",
	run:     runCall,
	usage:   callUsage,
}

func callFlags(o *callOptions) *flag.FlagSet {
	return (*messageOptions)(o).flags("call", "give up after `D`, connecting included; the call is then abandoned")
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
	messagePlan
	service, method string
}

// plan checks the command line before anything is opened or connected
// (a payload from @FILE or stdin is read); the error is a usage error's
// message. Arguments the router would refuse are caught here.
func (o *callOptions) plan(pos []string) (*callPlan, error) {
	if len(pos) != 4 {
		return nil, fmt.Errorf("want SOCKET SERVICE METHOD JSON, got %d arguments", len(pos))
	}
	p := &callPlan{service: pos[1], method: pos[2]}
	if err := checkName("service", p.service); err != nil {
		return nil, err
	}
	if !wire.ValidMethod(p.method) {
		return nil, fmt.Errorf("%q is not a method name (1-128 printable ASCII characters)", p.method)
	}
	var err error
	if p.messagePlan, err = (*messageOptions)(o).message(pos[0], pos[3]); err != nil {
		return nil, err
	}
	return p, nil
}

func runCall(c *command, args []string, stdout, stderr io.Writer) int {
	o := &callOptions{}
	p, code, ok := parsePlan(c, callFlags(o), o.plan, args, stdout, stderr)
	if !ok {
		return code
	}
	failed := func(err error) int { return callFailed(stderr, o, err) }
	// Ctrl-C abandons the call properly (a cancel) instead of vanishing.
	signals := []os.Signal{os.Interrupt}
	return sendMessage(c, (*messageOptions)(o), &p.messagePlan, stderr, signals, failed,
		func(ctx context.Context, bus *client.Client, atts []client.Attachment) error {
			opts := make([]client.CallOption, len(atts))
			for i, a := range atts {
				opts[i] = a
			}
			res, err := bus.CallAndWait(ctx, p.service, p.method, wire.RawJSON(p.payload), opts...)
			if err != nil {
				return err
			}
			defer res.Close()
			fmt.Fprintf(stdout, "%s\n", res.Outcome)
			return nil
		})
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
