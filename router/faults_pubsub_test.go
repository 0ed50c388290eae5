package router_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// A latest subscriber holds its only credit while four artifact-bearing
// publications arrive: the first is delivered, the second and third are
// replaced in the queue and collected in the publishing step, the fourth
// waits. The topic retains its latest value too, which holds its own root.
func TestFaultQueuedFrameReplaced(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		pub, viewer, s := h.pubSub("qr-pub", "qr-viewer", "fault.latest", wire.RetainLatest, client.InFlight(1))
		var datas [5][]byte
		publish := func(n int) client.PublishReceipt {
			t.Helper()
			datas[n] = frameBytes(byte(50+n), 40_000+n)
			a := produce(t, pub, datas[n])
			rc, err := pub.Publish(ctx, "fault.latest", tick{N: n}, client.Attach("frame", a))
			if err != nil {
				t.Fatal(err)
			}
			a.Close()
			barrier(t, pub) // the producer's own hold is gone before the next step
			return rc
		}
		publish(1)
		first, n := next(t, s) // the only credit is now in use
		if n != 1 {
			t.Fatalf("first delivery %d", n)
		}
		collected := h.r.Stats().Collected
		for n := 2; n <= 4; n++ {
			rc := publish(n)
			wantReplaced := uint64(0)
			if n > 2 {
				wantReplaced = 1
			}
			if rc.Replaced != wantReplaced || rc.Subscribers != 1 {
				t.Fatalf("publication %d: %+v", n, rc)
			}
			// The replaced entry's roots went in the publishing step.
			st := h.r.Stats()
			if st.Artifacts != 2 || st.Collected != collected+uint64(n-2) {
				t.Fatalf("after publication %d: %d artifacts, %d collected (was %d)", n, st.Artifacts, st.Collected, collected)
			}
		}
		// Delivered 1 (its delivery), queued 4 (queue entry and retained).
		if st := h.r.Stats(); st.ArtifactRoots != 3 || st.Owners != 1 || st.Queued != 1 {
			t.Fatalf("roots after replacement: %+v", st)
		}
		waitFor(t, "the replaced files to go", func() bool { return sealedFiles(t, h) == 2 })
		img1 := mustArtifact(t, first, "frame")
		mustRead(t, img1, datas[1])
		img1.Close()
		first.Close()
		last, n := next(t, s)
		if n != 4 || last.Replaced != 2 || last.TopicSequence != 4 {
			t.Fatalf("after the credit returned: n=%d replaced=%d seq=%d", n, last.Replaced, last.TopicSequence)
		}
		img4 := mustArtifact(t, last, "frame")
		mustRead(t, img4, datas[4])
		img4.Close()
		last.Close()
		barrier(t, viewer)
		if st := h.r.Stats(); st.Artifacts != 1 || st.ArtifactRoots != 1 || st.Owners != 0 {
			t.Fatalf("only the retained value should remain: %+v", st)
		}
		if cleared, err := pub.ClearTopic(ctx, "fault.latest"); err != nil || !cleared {
			t.Fatalf("clear: %v %v", cleared, err)
		}
		requireDrained(t, h, maps0)
	})
}

// A subscription ends while one of its messages and an artifact taken from
// it are in use: by unsubscribing (its queued message is discarded and
// collected) and by router shutdown. What is in use stays readable and
// releases cleanly.
func TestFaultSubscriptionClosedWithDeliveriesInUse(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		pub, cons, s := h.pubSub("sc-pub", "sc-cons", "fault.sub", wire.RetainNone, client.Bounded(), client.InFlight(1))
		d1, d2 := frameBytes(60, 80_000), frameBytes(61, 80_000)
		for i, d := range [][]byte{d1, d2} {
			a := produce(t, pub, d)
			if _, err := pub.Publish(ctx, "fault.sub", tick{N: i + 1}, client.Attach("frame", a)); err != nil {
				t.Fatal(err)
			}
			a.Close()
		}
		barrier(t, pub)
		m, _ := next(t, s)
		img := mustArtifact(t, m, "frame")
		v := mustView(t, img, d1)
		settle(t, h, "the second message to wait for a credit", func(s router.Stats) bool { return s.Queued == 1 })
		s.Close()
		barrier(t, cons)
		// The queue went with the subscription; the delivery did not.
		if st := h.r.Stats(); st.Subscriptions != 0 || st.Queued != 0 || st.Artifacts != 1 || st.ArtifactRoots != 1 || st.Owners != 1 {
			t.Fatalf("after unsubscribe: %+v", st)
		}
		if _, err := s.Next(ctx); !errors.Is(err, client.ErrHandleClosed) {
			t.Fatalf("Next after Close: %v", err)
		}
		var got tick
		if err := m.Decode(&got); err != nil || got.N != 1 {
			t.Fatalf("message after unsubscribe: %v %+v", err, got)
		}
		mustRead(t, img, d1)
		churn(t, pub, len(d1), 2)
		if !bytes.Equal(v.Bytes(), d1) {
			t.Fatal("mapped bytes changed after unsubscribe")
		}
		v.Close()
		img.Close()
		m.Close() // a consume for a subscription that no longer exists
		barrier(t, cons)
		if n := cons.Stats().ControlErrors; n != 0 {
			t.Fatalf("%d consumes or releases refused", n)
		}
		requireDrained(t, h, maps0)

		// Router shutdown with a message and a mapped artifact open.
		s2 := mustSubscribe(t, ctx, cons, "fault.sub")
		a := produce(t, pub, d2)
		if _, err := pub.Publish(ctx, "fault.sub", tick{N: 3}, client.Attach("frame", a)); err != nil {
			t.Fatal(err)
		}
		a.Close()
		m2, _ := next(t, s2)
		img2 := mustArtifact(t, m2, "frame")
		v2 := mustView(t, img2, d2)
		storeDir := h.r.StoreDir()
		if err := h.r.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s2.Next(ctx); !errors.Is(err, client.ErrSubscriptionClosed) || !strings.Contains(err.Error(), "router-shutdown") {
			t.Fatalf("subscription after shutdown: %v", err)
		}
		<-cons.Done()
		if st := h.r.Stats(); st.Connections != 0 || st.Artifacts != 0 || st.ArtifactRoots != 0 || st.Owners != 0 {
			t.Fatalf("after shutdown: %+v", st)
		}
		if _, err := os.Stat(storeDir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("shutdown left its store directory: %v", err)
		}
		if err := m2.Decode(&got); err != nil || got.N != 3 {
			t.Fatalf("message after shutdown: %v %+v", err, got)
		}
		if !bytes.Equal(v2.Bytes(), d2) {
			t.Fatal("mapped bytes changed after shutdown")
		}
		if _, err := img2.ReadAll(ctx); code(t, err) != wire.ErrRouterLost {
			t.Fatalf("opening after shutdown: %v", err)
		}
		v2.Close()
		img2.Close()
		m2.Close()
		wantStoreMaps(t, h, "after shutdown", maps0)
	})
}
