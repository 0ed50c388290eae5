package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// Helpers shared by the tools that talk to a running router as a client
// (declare, pub, sub): checking the connection flags and reporting failures
// the same way call does.

// checkClientFlags validates the flags every client tool has; it returns
// the usage error's message, or "" when they are fine.
func checkClientFlags(id string, timeout time.Duration) string {
	switch {
	case !wire.ValidID(id):
		return fmt.Sprintf("%q is not a valid client id (a-z, 0-9, '.', '_', '-'; at most 64)", id)
	case timeout <= 0:
		return "--timeout must be positive"
	}
	return ""
}

// checkPayload validates a JSON payload argument; it returns the usage
// error's message, or "".
func checkPayload(payload []byte) string {
	if wire.Valid(payload) != nil || payload[0] != '{' {
		return fmt.Sprintf("the payload must be a JSON object, not %s", payload)
	}
	return ""
}

// toolFailed prints why a client tool failed and returns the failure
// status. A bus error reads CODE: message (dispatch), after any context the
// tool wrapped around it (which artifact, say); anything else is prefixed
// with the command's name.
func toolFailed(stderr io.Writer, name string, timeout time.Duration, err error) int {
	var be *wire.BusError
	switch {
	case errors.As(err, &be):
		fmt.Fprintln(stderr, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "flybus %s: gave up after %v\n", name, timeout)
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "flybus %s: interrupted\n", name)
	default:
		fmt.Fprintf(stderr, "flybus %s: %v\n", name, err)
	}
	return exitFailure
}

// storeHint explains a store location the client could not open: the
// router granted it, so almost always --store is not the router's root.
func storeHint(err error, root string) error {
	var se *store.Error
	if errors.As(err, &se) {
		return fmt.Errorf("%w (is --store %s the router's store root?)", err, root)
	}
	return err
}

// connectFailed is toolFailed for bus.hello, with a hint for the refusal
// an operator meets most: a second live connection under one client id.
func connectFailed(stderr io.Writer, name, id string, timeout time.Duration, err error) int {
	toolFailed(stderr, name, timeout, err)
	if errors.Is(err, wire.ErrConflict) {
		fmt.Fprintf(stderr, "flybus %s: another live connection uses client id %q; pick another with --client\n", name, id)
	}
	return exitFailure
}
