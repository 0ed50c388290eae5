package client_test

import (
	"errors"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/wire"
)

// The SDK asks for quiet-consume: its consumes then wait for nothing, so
// after many messages consumed no command awaits a reply, and every
// credit came back (the subscription, one in flight, received them all).
func TestConsumesWaitForNothing(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		pub, cons := h.Dial("pub"), h.Dial("cons")
		bustest.MustDeclare(t, pub, "q", wire.RetainNone)
		ctx := bustest.Ctx(t)
		s := bustest.MustSubscribe(t, ctx, cons, "q", client.Bounded(), client.InFlight(1))
		const n = 200
		published := make(chan struct{})
		go func() {
			defer close(published)
			for i := 0; i < n; {
				_, err := pub.Publish(ctx, "q", map[string]int{"i": i})
				switch {
				case err == nil:
					i++
				case errors.Is(err, wire.ErrBackpressure):
					// The bounded queue is full: the consumer frees it.
				default:
					if ctx.Err() == nil { // not the end of a test that failed already
						t.Error(err)
					}
					return
				}
			}
		}()
		for i := range n {
			m, err := s.Next(ctx)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			m.Close()
		}
		<-published // its last publish may be answered after the message arrived
		// A command after the consumes: its reply comes after the router
		// processed them all, and nothing else is left waiting.
		if _, err := cons.DeclareTopic(ctx, "q", wire.RetainNone); err != nil {
			t.Fatal(err)
		}
		if waiting, quiet := client.Waiting(cons); !quiet || waiting != 0 || cons.Info().SelectedMinor != wire.Minor {
			t.Fatalf("quiet %v, %d commands awaiting a reply, minor %d", quiet, waiting, cons.Info().SelectedMinor)
		}
	})
}
