package client_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/wire"
)

// fill allocates and writes data through c, for a seal sent without
// waiting.
func fill(t *testing.T, c *client.Client, data []byte) *client.ArtifactWriter {
	t.Helper()
	w, err := c.Allocate(bustest.Ctx(t), int64(len(data)), "image/x-rgba")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	return w
}

// readMessage takes the next message of sub and returns its artifact's
// bytes and reference.
func readMessage(t *testing.T, sub *client.Subscription) ([]byte, wire.ArtifactRef) {
	t.Helper()
	m := bustest.NextMessage(t, bustest.Ctx(t), sub)
	defer m.Close()
	a := bustest.MustArtifact(t, m, "frame")
	defer a.Close()
	b, err := a.ReadAll(bustest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return b, a.Ref()
}

// frameTopic declares topic "frames" through a producer and subscribes a
// consumer to it.
func frameTopic(t *testing.T, h *bustest.Harness) (*client.Client, *client.Subscription) {
	t.Helper()
	prod, cons := h.Dial("producer"), h.Dial("consumer")
	bustest.MustDeclare(t, prod, "frames", wire.RetainNone)
	sub := bustest.MustSubscribe(t, bustest.Ctx(t), cons, "frames", client.Bounded())
	return prod, sub
}

// A NoWait seal and a Publish attaching the artifact: published sealed, the
// bytes arrive, and a seal that fails (a digest that cannot match) takes
// the publish with it.
func TestSealNoWaitThenPublish(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod, sub := frameTopic(t, h)
		for i := range 6 {
			data := bustest.FrameBytes(byte(i), 64<<10)
			w := fill(t, prod, data)
			var a *client.Artifact
			var err error
			if i%3 == 2 {
				a, err = w.Seal(ctx, client.Digest(strings.Repeat("0", 64)), client.NoWait())
			} else {
				sum := sha256.Sum256(data)
				a, err = w.Seal(ctx, client.Digest(hex.EncodeToString(sum[:])), client.NoWait())
			}
			if err != nil {
				t.Fatal(err)
			}
			before := h.Router().Stats().Publications
			_, perr := prod.Publish(ctx, "frames", map[string]int{"i": i}, client.Attach("frame", a))
			if i%3 == 2 {
				if _, serr := a.Sealed(ctx); !errors.Is(perr, wire.ErrArtifactMismatch) || !errors.Is(serr, wire.ErrArtifactMismatch) {
					t.Fatalf("frame %d: publish %v, seal %v", i, perr, serr)
				}
				if n := h.Router().Stats().Publications; n != before {
					t.Fatalf("frame %d was published behind a failed seal", i)
				}
				a.Close()
				continue
			}
			if perr != nil {
				t.Fatalf("frame %d: %v", i, perr)
			}
			got, ref := readMessage(t, sub)
			if !bytes.Equal(got, data) || ref != a.Ref() {
				t.Fatalf("frame %d: %d bytes as %+v, sealed as %+v", i, len(got), ref, a.Ref())
			}
			a.Close()
		}
		sub.Close()
		h.Await("everything released", bustest.Drained)
	})
}

// writableDescriptor opens, through this process's descriptor table, a
// second writable description of the one staging file a writer of this
// process holds open: the router's lease is then refused and it seals by
// copying. In a pooled store the copy lands in another slot, so the
// reference the NoWait seal expected is not the sealed one.
func writableDescriptor(t *testing.T, h *bustest.Harness) *os.File {
	t.Helper()
	dir := h.Router().StoreDir()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var found *os.File
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		base := filepath.Base(target)
		if err != nil || filepath.Dir(target) != dir || !strings.HasPrefix(base, "stage-") && !strings.HasPrefix(base, "slot-") {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, _ := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
				if flags&3 != 2 { // the SDK's writer is O_RDWR; the store's descriptors are not
					break
				}
				if found != nil {
					t.Fatal("more than one writable staging descriptor")
				}
				f, err := os.OpenFile("/proc/self/fd/"+e.Name(), os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				found = f
			}
		}
	}
	if found == nil {
		t.Fatal("no writable staging descriptor")
	}
	t.Cleanup(func() { found.Close() })
	return found
}

// A copy seal behind a NoWait seal: in files mode the artifact keeps its id;
// in pool mode it moves to another slot, the publish that named the
// expected one is refused, and the SDK sends it again with the sealed
// reference. Either way the frame is published once, with its bytes.
func TestSealNoWaitAfterACopySeal(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod, sub := frameTopic(t, h)
		data := bustest.FrameBytes(9, 64<<10)
		w := fill(t, prod, data)
		kept := writableDescriptor(t, h)
		before := h.Router().Stats()
		a, err := w.Seal(ctx, client.NoWait())
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		rec, err := prod.Publish(ctx, "frames", map[string]int{"i": 0}, client.Attach("frame", a))
		if err != nil {
			t.Fatal(err)
		}
		after := h.Router().Stats()
		if after.CopySeals != before.CopySeals+1 || after.Publications != before.Publications+1 || rec.TopicSequence != 1 {
			t.Fatalf("copy seals %d->%d, publications %d->%d, sequence %d", before.CopySeals, after.CopySeals,
				before.Publications, after.Publications, rec.TopicSequence)
		}
		kept.WriteAt(bytes.Repeat([]byte{0xff}, 16), 0) // too late: the sealed copy is another inode
		got, ref := readMessage(t, sub)
		if !bytes.Equal(got, data) || ref != a.Ref() {
			t.Fatalf("%d bytes as %+v, sealed as %+v", len(got), ref, a.Ref())
		}
	})
}

// A NoWait seal behind a Call and behind a Reply: the service reads the
// caller's frame and answers with a frame of its own, each sealed on the
// way.
func TestSealNoWaitThenCallAndReply(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		caller, agent := h.Dial("caller"), h.Dial("agent")
		svc := bustest.MustRegister(t, ctx, agent, "agent.echo")
		in, out := bustest.FrameBytes(1, 32<<10), bustest.FrameBytes(2, 32<<10)
		done := make(chan error, 1)
		go func() {
			req, err := svc.Next(ctx)
			if err != nil {
				done <- err
				return
			}
			defer req.Close()
			a, err := req.Artifact("frame")
			if err != nil {
				done <- err
				return
			}
			b, err := a.ReadAll(ctx)
			a.Close()
			if err == nil && !bytes.Equal(b, in) {
				err = errors.New("the service read other bytes")
			}
			if err != nil {
				done <- err
				return
			}
			ra, err := fill(t, agent, out).Seal(ctx, client.NoWait())
			if err != nil {
				done <- err
				return
			}
			defer ra.Close()
			_, err = req.Reply(ctx, map[string]bool{"ok": true}, client.Attach("frame", ra))
			done <- err
		}()
		a, err := fill(t, caller, in).Seal(ctx, client.NoWait())
		if err != nil {
			t.Fatal(err)
		}
		res, err := caller.CallAndWait(ctx, "agent.echo", "Echo", map[string]int{}, client.Attach("frame", a))
		a.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ra := bustest.MustArtifact(t, res, "frame")
		b, err := ra.ReadAll(ctx)
		if err != nil || !bytes.Equal(b, out) {
			t.Fatalf("result frame: %d bytes, %v", len(b), err)
		}
		ra.Close()
		res.Close()
		h.Await("everything released", bustest.Drained)
	})
}
