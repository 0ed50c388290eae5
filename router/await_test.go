package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Await wakes on the router's own announcement of the change it waits for
// (here a subscription made by another goroutine), returns the Stats that
// satisfied it, and gives up with ctx.
func TestAwait(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		c := h.dial("await")
		mustDeclare(t, c, "await.t", wire.RetainNone)
		got := make(chan router.Stats, 1)
		go func() {
			s, err := h.r.Await(context.Background(), func(s router.Stats) bool { return s.Subscriptions == 1 })
			if err == nil {
				got <- s
			}
			close(got)
		}()
		sub := mustSubscribe(t, ctxT(t), c, "await.t")
		if s, ok := <-got; !ok || s.Subscriptions != 1 {
			t.Fatalf("Await returned %+v, %v", s, ok)
		}
		sub.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		if _, err := h.r.Await(ctx, func(router.Stats) bool { return false }); err != context.DeadlineExceeded {
			t.Fatalf("Await past its context: %v", err)
		}
	})
}
