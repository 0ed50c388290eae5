package client_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/wire"
)

// Dialling a socket nobody listens on says the router may not be running
// and names the path, for a missing socket file and for one left behind.
func TestConnectUnixSaysNoRouterListens(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.sock")
	stale := filepath.Join(dir, "stale.sock")
	// A socket file whose listener is gone: connect is refused.
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	for _, path := range []string{missing, stale} {
		_, err := client.ConnectUnix(bustest.Ctx(t), path, client.Config{ClientID: "c"})
		if err == nil || !strings.Contains(err.Error(), "no router is listening on "+path) ||
			!strings.Contains(err.Error(), "flybus serve") {
			t.Fatalf("connect to %s: %v", path, err)
		}
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatal("the client touched the stale socket")
	}
}

// A command made after the connection was lost was never sent: it fails
// ROUTER_LOST, not dispatched, and does not say it may have reached its
// target. A command in flight at the loss keeps "dispatch unknown".
func TestCommandsAfterALossWereNotSent(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		nc := h.Conn("")
		c := h.DialOn(nc, "lost", client.Config{})
		bustest.MustDeclare(t, c, "t", wire.RetainNone)
		nc.Close()
		<-c.Done()
		_, err := c.Publish(ctx, "t", nil)
		var be *wire.BusError
		if !errors.As(err, &be) || be.Code != wire.ErrRouterLost || be.Dispatch != wire.NotDispatched ||
			strings.Contains(err.Error(), "may have reached") {
			t.Fatalf("publish after the loss: %v", err)
		}
		if _, err := c.Call(ctx, "svc", "M", nil); bustest.DispatchOf(t, err) != wire.NotDispatched {
			t.Fatalf("call after the loss: %v", err)
		}
	})
}
