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
	client  string
	timeout time.Duration
}

func callFlags(o *callOptions) *flag.FlagSet {
	set := newFlagSet("call")
	set.StringVar(&o.client, "client", "flybus-cli", "connect as client `ID` (a bound socket admits only its own id)")
	set.DurationVar(&o.timeout, "timeout", 10*time.Second, "give up after `D`, connecting included; the call is then abandoned")
	return set
}

func callUsage() string {
	notes := `Connects to SOCKET, calls METHOD on SERVICE with the JSON object as payload,
prints the outcome JSON to stdout and exits 0. A refusal or failure prints
CODE: message (dispatch) to stderr and exits 1.
`
	return usageText("flybus call SOCKET SERVICE METHOD JSON [--client ID] [--timeout D]",
		"Call a service through a running router and print its outcome.", callFlags(&callOptions{}), notes,
		"  flybus call /tmp/coord.sock agent.fly-a Agent.Prepare '{\"frames\":3}' --client coordinator\n")
}

func runCall(c *command, args []string, stdout, stderr io.Writer) int {
	o := &callOptions{}
	pos, code, ok := parse(c, callFlags(o), args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 4 {
		return usageError(c, stderr, fmt.Sprintf("want SOCKET SERVICE METHOD JSON, got %d arguments", len(pos)))
	}
	socket, service, method, payload := pos[0], pos[1], pos[2], []byte(pos[3])
	// Arguments the router would refuse are caught here, as usage errors.
	switch {
	case !wire.ValidName(service):
		return usageError(c, stderr, fmt.Sprintf("%q is not a service name", service))
	case !wire.ValidMethod(method):
		return usageError(c, stderr, fmt.Sprintf("%q is not a method name (1-128 printable ASCII characters)", method))
	case wire.Valid(payload) != nil || payload[0] != '{':
		return usageError(c, stderr, fmt.Sprintf("the payload must be a JSON object, not %s", payload))
	case !wire.ValidID(o.client):
		return usageError(c, stderr, fmt.Sprintf("%q is not a valid client id", o.client))
	case o.timeout <= 0:
		return usageError(c, stderr, "--timeout must be positive")
	}

	// Ctrl-C abandons the call properly (a cancel) instead of vanishing.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	bus, err := client.ConnectUnix(ctx, socket, client.Config{ClientID: o.client})
	if err != nil {
		return callFailed(stderr, o, err)
	}
	defer bus.Close()
	res, err := bus.CallAndWait(ctx, service, 0, method, wire.RawJSON(payload))
	if err != nil {
		return callFailed(stderr, o, err)
	}
	defer res.Close()
	fmt.Fprintf(stdout, "%s\n", res.Outcome)
	return exitOK
}

// callFailed prints a bus error in its own words (CODE: message (dispatch))
// and anything else prefixed with the command.
func callFailed(stderr io.Writer, o *callOptions, err error) int {
	var be *wire.BusError
	switch {
	case errors.As(err, &be):
		fmt.Fprintln(stderr, be.Error())
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "flybus call: no outcome within %v\n", o.timeout)
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "flybus call: interrupted")
	default:
		fmt.Fprintf(stderr, "flybus call: %v\n", err)
	}
	return exitFailure
}
