package client_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/wire"
)

// With AllocateAhead, the second and later allocations of a size are
// served by an allocation prepared in the background; each writer is
// still unique and its bytes are what was written. Close releases the one
// prepared last, and the router is left with nothing.
func TestAllocateAheadServesRepeatedSizes(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod := h.DialWith("producer", client.Config{AllocateAhead: 1})
		sub := bustest.DeclareAndSubscribe(t, prod, h.Dial("consumer"), "frames", wire.RetainNone, client.Bounded())
		const frames = 8
		for i := range frames {
			data := bustest.FrameBytes(byte(i), 32<<10)
			w := fill(t, prod, data)
			a, err := w.Seal(ctx, client.NoWait())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := prod.Publish(ctx, "frames", map[string]int{"i": i}, client.Attach("frame", a)); err != nil {
				t.Fatal(err)
			}
			a.Close()
			if got, _ := readMessage(t, sub); !bytes.Equal(got, data) {
				t.Fatalf("frame %d: other bytes", i)
			}
		}
		st := prod.Stats()
		if st.AllocatedAhead != frames-1 || st.PreparedWriters != 1 {
			t.Fatalf("allocated ahead %d (want %d), prepared %d", st.AllocatedAhead, frames-1, st.PreparedWriters)
		}
		// The prepared allocation is a staging artifact the router counts;
		// the last frame goes once its releases are processed.
		bustest.WaitFor(t, "only the prepared allocation left", func() bool {
			rs := h.Router().Stats()
			return rs.Artifacts == 1 && rs.SealedArtifacts == 0 && rs.Owners == 1
		})
		sub.Close()
		if err := prod.Close(); err != nil {
			t.Fatal(err)
		}
		if st := prod.Stats(); st.PreparedReleased != 1 || st.PreparedWriters != 0 || st.ControlErrors != 0 {
			t.Fatalf("after Close: released %d, prepared %d, control errors %d", st.PreparedReleased, st.PreparedWriters, st.ControlErrors)
		}
		h.Await("everything released", bustest.Drained)
	})
}

// sendFrame allocates n bytes, seals them without waiting and publishes
// them on topic "sink": the frame that makes an AllocateAhead client
// prepare its next allocation. The caller closes the artifact.
func sendFrame(t *testing.T, c *client.Client, n int64) *client.Artifact {
	t.Helper()
	w := bustest.MustAllocate(t, bustest.Ctx(t), c, n, "a/b")
	a, err := w.Seal(bustest.Ctx(t), client.NoWait())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(bustest.Ctx(t), "sink", map[string]int{}, client.Attach("frame", a)); err != nil {
		t.Fatal(err)
	}
	return a
}

// Allocations are prepared once a frame has gone out, not while it is
// made. A size more recent than AllocateAhead allows evicts the oldest
// one's prepared allocation, released at once; a caller that gives up
// while one is on its way leaves nothing behind.
func TestAllocateAheadPreparesAfterTheFrameAndEvicts(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod := h.DialWith("producer", client.Config{AllocateAhead: 1})
		bustest.MustDeclare(t, prod, "sink", wire.RetainNone)
		bustest.MustAllocate(t, ctx, prod, 1<<20, "a/b").Close()
		if st := prod.Stats(); st.PreparedWriters != 0 {
			t.Fatalf("%d allocations prepared before any frame went out", st.PreparedWriters)
		}
		sendFrame(t, prod, 1<<20).Close()
		if st := prod.Stats(); st.PreparedWriters != 1 {
			t.Fatalf("%d allocations prepared after a frame went out, want 1", st.PreparedWriters)
		}
		// A second size: the first one's prepared allocation goes.
		sendFrame(t, prod, 1<<10).Close()
		bustest.WaitFor(t, "the evicted allocation released", func() bool { return prod.Stats().PreparedReleased == 1 })
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := prod.Allocate(cctx, 1<<10, "a/b"); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if err := prod.Close(); err != nil {
			t.Fatal(err)
		}
		h.Await("everything released", bustest.Drained)
	})
}

// With OpenAhead, a consumer's View finds the read location asked for when
// the delivery arrived: one artifact.open per delivery (none for a slot it
// keeps mapped), none on the View's own way. A message closed unviewed
// leaves nothing behind.
func TestOpenAheadServesViews(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod := h.Dial("producer")
		cons := h.DialWith("consumer", client.Config{OpenAhead: true})
		sub := bustest.DeclareAndSubscribe(t, prod, cons, "frames", wire.RetainNone, client.Bounded())
		const frames = 6
		for i := range frames {
			data := bustest.FrameBytes(byte(i), 32<<10)
			bustest.PublishFrame(t, prod, "frames", map[string]int{"i": i}, data)
			m := bustest.NextMessage(t, ctx, sub)
			if i == frames-1 { // never viewed
				m.Close()
				break
			}
			if !bytes.Equal(bustest.ViewFrame(t, ctx, m), data) {
				t.Fatalf("frame %d: other bytes", i)
			}
		}
		st := cons.Stats()
		viewed := uint64(frames - 1)
		if h.Mode().String() == "pool" {
			// Every View after a slot's first is a slice of its mapping.
			// The others were opened ahead, and so perhaps was the unviewed
			// last one.
			if st.OpenedAhead+st.CachedViews != viewed || st.ArtifactOpens < st.OpenedAhead || st.ArtifactOpens > st.OpenedAhead+1 {
				t.Fatalf("pool: %d served ahead, %d cached views (want %d in all), %d artifact.open",
					st.OpenedAhead, st.CachedViews, viewed, st.ArtifactOpens)
			}
		} else if st.OpenedAhead != viewed || st.ArtifactOpens != frames {
			t.Fatalf("files: %d views served ahead (want %d), %d artifact.open (want %d)", st.OpenedAhead, viewed, st.ArtifactOpens, frames)
		}
		sub.Close()
		h.Await("everything released", bustest.Drained)
	})
}
