package router_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

var endsRounds = flag.Int("pool.ends", 300, "consumers the open-views property test starts and ends (by hand: 5000)")

// keptView is a view a consumer left open when its client ended, with the
// digest of the generation it was delivered.
type keptView struct {
	v      *client.ArtifactView
	digest [32]byte
	frame  int
	end    string
}

// check reads every byte the view shows: its own generation's, or (if the
// API ever chose to blank it) zeros, never another frame's.
func (k keptView) check(t *testing.T) {
	t.Helper()
	b := k.v.Bytes()
	if sha256.Sum256(b) == k.digest {
		return
	}
	if len(bytes.Trim(b, "\x00")) == 0 {
		return
	}
	n := -1
	if len(b) >= 4 {
		n = int(binary.LittleEndian.Uint32(b))
	}
	t.Fatalf("a view of frame %d left open by a consumer that ended by %s shows other bytes (they begin with frame number %d)", k.frame, k.end, n)
}

// Consumers come and go while a producer publishes, and each ends with
// views still open: by closing its client, by losing its transport, by a
// protocol violation the router closes it for, or properly. A second,
// long-lived consumer holds some of the same deliveries for a while, so a
// generation a dead client still maps is also released later by a plain
// consume. After every round, every byte every still-open view shows is
// checked against the digest of the generation it was delivered: in pool
// mode, where slots are reused, no view may ever show a later frame.
func TestPoolOpenViewsOutliveEveryEnd(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		rounds := *endsRounds
		if h.unix {
			rounds /= 2
		}
		rng := rand.New(rand.NewPCG(uint64(rounds), 26))
		pub := h.dialWithTopic("ends-pub", "ends.frames", wire.RetainNone)
		keeper := h.dial("ends-keeper")
		ks := mustSubscribe(t, ctx, keeper, "ends.frames", client.Bounded(), client.Queued(16), client.InFlight(12)) // room for the frames it holds and a round's
		var keeperHeld []*client.Message
		sizes := []int{4096, 64 << 10}
		var kept []keptView
		frame := 0
		ends := map[string]int{}
		for round := range rounds {
			cons, nc := dialKept(t, h, fmt.Sprintf("ends-cons-%d", round))
			s := mustSubscribe(t, ctx, cons, "ends.frames", client.Bounded(), client.Queued(8), client.InFlight(4))
			k := 1 + rng.IntN(4)
			digests := make([][32]byte, k)
			first := frame
			for i := range k {
				data := frameBytes(byte(frame), sizes[rng.IntN(len(sizes))])
				binary.LittleEndian.PutUint32(data, uint32(frame))
				digests[i] = sha256.Sum256(data)
				a := produce(t, pub, data)
				if _, err := pub.Publish(ctx, "ends.frames", tick{N: frame}, client.Attach("f", a)); err != nil {
					t.Fatal(err)
				}
				a.Close()
				frame++
			}
			var views []keptView
			var msgs []*client.Message
			var arts []*client.Artifact
			for i := range k {
				m, n := next(t, s)
				if n != first+i {
					t.Fatalf("round %d: frame %d, want %d", round, n, first+i)
				}
				a := mustArtifact(t, m, "f")
				v := mustMap(t, ctx, a)
				views = append(views, keptView{v: v, digest: digests[i], frame: n})
				msgs, arts = append(msgs, m), append(arts, a)
			}
			// The keeper holds a few frames across rounds, and consumes
			// the rest at once.
			for range k {
				m, _ := next(t, ks)
				if rng.IntN(3) == 0 && len(keeperHeld) < 6 {
					keeperHeld = append(keeperHeld, m)
				} else {
					m.Close()
				}
			}
			if len(keeperHeld) > 0 && rng.IntN(2) == 0 {
				keeperHeld[0].Close()
				keeperHeld = keeperHeld[1:]
			}
			end := []string{"close", "cut", "violation", "proper"}[rng.IntN(4)]
			ends[end]++
			switch end {
			case "close":
				cons.Close()
			case "cut":
				cut(cons, nc)
			case "violation":
				if _, err := nc.Write([]byte{0xff, 0xff, 0xff, 0xff}); err != nil {
					t.Fatal(err)
				}
				<-cons.Done()
			case "proper":
				for i, kv := range views {
					kv.v.Close()
					arts[i].Close()
					msgs[i].Close()
				}
				views = nil
				barrier(t, cons) // the consumes reach the router before the end
				cons.Close()
			}
			// The next round's publications must not find the dead
			// consumer's subscription still there (a cut is seen by the
			// client before the router reads it).
			settle(t, h, "the consumer's end", func(s router.Stats) bool { return s.Connections == 2 })
			for _, a := range arts {
				a.Close() // inert on an ended client
			}
			for i := range views {
				views[i].end = end
			}
			kept = append(kept, views...)
			for _, kv := range kept {
				kv.check(t)
			}
			for len(kept) > 24 {
				kept[0].check(t)
				kept[0].v.Close()
				kept = kept[1:]
			}
		}
		// Later frames after the last end, then the last look.
		for range 8 {
			a := produce(t, pub, frameBytes(0xee, sizes[rng.IntN(len(sizes))]))
			if _, err := pub.Publish(ctx, "ends.frames", tick{N: frame}, client.Attach("f", a)); err != nil {
				t.Fatal(err)
			}
			a.Close()
			m, _ := next(t, ks)
			m.Close()
		}
		for _, kv := range kept {
			kv.check(t)
			kv.v.Close()
		}
		for _, m := range keeperHeld {
			m.Close()
		}
		ks.Close()
		st := h.r.Stats()
		t.Logf("%d frames, ends %v: %d slots retired, %d slots now", frame, ends, st.SlotsRetired, st.Slots)
		// What a dead connection owned is retired; what was consumed before
		// its end is reused.
		if h.mode == store.ModePool && (st.SlotsRetired == 0 || st.SlotsRetired >= uint64(frame)) {
			t.Errorf("%d slots retired for %d frames: the ends did not reach both cases", st.SlotsRetired, frame)
		}
		settle(t, h, "every frame to be collected", func(s router.Stats) bool { return s.Artifacts == 0 && s.StoreFiles == 0 })
	})
}
