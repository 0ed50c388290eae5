package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// The Node tests compare the names code and dispatch give with the Node
// client's error codes, so they must be the wire's spellings.
func TestCodeAndDispatch(t *testing.T) {
	for _, c := range []struct {
		err            error
		code, dispatch string
	}{
		{&wire.BusError{Code: wire.ErrNotAuthorized, Dispatch: wire.NotDispatched}, "NOT_AUTHORIZED", "not-dispatched"},
		{fmt.Errorf("call: %w", &wire.BusError{Code: wire.ErrRouterLost, Dispatch: wire.DispatchUnknown}), "ROUTER_LOST", "unknown"},
		{fmt.Errorf("topic t: %w", client.ErrSubscriptionClosed), "SUBSCRIPTION_CLOSED", ""},
		{errors.New("other"), "other", ""},
	} {
		if got := code(c.err); got != c.code {
			t.Errorf("code(%v) = %q, want %q", c.err, got, c.code)
		}
		if got := dispatch(c.err); got != c.dispatch {
			t.Errorf("dispatch(%v) = %q, want %q", c.err, got, c.dispatch)
		}
	}
}
