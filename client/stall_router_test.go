package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// stallLog is a log handler that hands the SDK's stall warnings to a
// channel, so that a test waits for the warning rather than for a guess of
// its time. Other records (none are expected) are kept apart.
type stallLog struct {
	warnings chan slog.Record
	other    chan slog.Record
}

func newStallLog() *stallLog {
	return &stallLog{warnings: make(chan slog.Record, 64), other: make(chan slog.Record, 64)}
}

func (l *stallLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *stallLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *stallLog) WithGroup(string) slog.Handler            { return l }

func (l *stallLog) Handle(_ context.Context, r slog.Record) error {
	ch := l.other
	if strings.HasPrefix(r.Message, "flybus: subscription ") {
		ch = l.warnings
	}
	select {
	case ch <- r.Clone():
	default: // a flood shows in the counts
	}
	return nil
}

// next waits for the next stall warning.
func (l *stallLog) next(t *testing.T) slog.Record {
	t.Helper()
	select {
	case r := <-l.warnings:
		return r
	case <-bustest.Ctx(t).Done():
		t.Fatal("no stall warning was logged")
		return slog.Record{}
	}
}

// pending drains the stall warnings logged and not yet taken.
func (l *stallLog) pending() []slog.Record {
	var out []slog.Record
	for {
		select {
		case r := <-l.warnings:
			out = append(out, r)
		default:
			return out
		}
	}
}

// stallWarning is one stall warning, read back.
type stallWarning struct {
	sub, topic      string
	credits, handle int64
	lasted          time.Duration
	sites, hint     string
}

var stallText = regexp.MustCompile(`^flybus: subscription (\S+) on topic (\S+) has held all (\d+) in-flight credits unconsumed for (\S+); (\d+) handles are open$`)

// readStall checks that r is a warning whose sentence and attributes
// agree, and returns what it says.
func readStall(t *testing.T, r slog.Record) stallWarning {
	t.Helper()
	if r.Level != slog.LevelWarn {
		t.Errorf("stall warning at level %v", r.Level)
	}
	m := stallText.FindStringSubmatch(r.Message)
	if m == nil {
		t.Fatalf("stall warning %q is not of the documented form", r.Message)
	}
	var w stallWarning
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "subscription":
			w.sub = a.Value.String()
		case "topic":
			w.topic = a.Value.String()
		case "credits":
			w.credits = a.Value.Int64()
		case "handles":
			w.handle = a.Value.Int64()
		case "sites":
			w.sites = a.Value.String()
		case "hint":
			w.hint = a.Value.String()
		}
		return true
	})
	d, err := time.ParseDuration(m[4])
	if err != nil {
		t.Fatalf("held for %q: %v", m[4], err)
	}
	w.lasted = d
	if m[1] != w.sub || m[2] != w.topic || m[3] != fmt.Sprint(w.credits) || m[5] != fmt.Sprint(w.handle) {
		t.Fatalf("stall warning %q disagrees with its attributes %+v", r.Message, w)
	}
	return w
}

// next1 takes one message straight from the subscription, so that the
// place handle tracking records is this file.
func next1(t *testing.T, s *client.Subscription) *client.Message {
	t.Helper()
	m, err := s.Next(bustest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A subscriber that keeps all its in-flight credits (a message and a view
// of another message's artifact, left open) is told so once the bound
// passes, once per episode: closing the view ends it, taking the next
// message starts another. With TrackHandles the warning says where the
// handles holding the credits were taken.
func TestStalledSubscriptionIsReported(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		const bound = 50 * time.Millisecond
		logs := newStallLog()
		prod := h.Dial("producer")
		cons := h.DialWith("consumer", client.Config{HeldCreditsWarnAfter: bound, TrackHandles: true, Logger: slog.New(logs)})
		bustest.MustDeclare(t, prod, "stall.a", wire.RetainNone)
		bustest.MustDeclare(t, prod, "stall.b", wire.RetainNone)
		sa := bustest.MustSubscribe(t, ctx, cons, "stall.a", client.Bounded(), client.InFlight(2))
		img := bustest.Produce(t, prod, bustest.FrameBytes(1, 4096))
		for i := range 3 {
			if _, err := prod.Publish(ctx, "stall.a", map[string]int{"n": i}, client.Attach("img", img)); err != nil {
				t.Fatal(err)
			}
		}
		img.Close()

		// Episode 1: the first message's view and the second message hold
		// both credits; the third waits at the router.
		m1 := next1(t, sa)
		a1 := bustest.MustArtifact(t, m1, "img")
		v1, err := a1.View(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer v1.Close() // Close is idempotent: these only tidy up after a failure
		m1.Close()
		a1.Close()
		m2 := next1(t, sa)
		defer m2.Close()
		w := readStall(t, logs.next(t))
		if w.sub != sa.ID().String() || w.topic != "stall.a" || w.credits != 2 || w.handle != 2 || w.lasted < bound {
			t.Fatalf("first warning %+v", w)
		}
		if !strings.Contains(w.sites, "ArtifactView at ") || !strings.Contains(w.sites, "Message at ") ||
			strings.Count(w.sites, "stall_router_test.go:") != 2 || w.hint != "" {
			t.Fatalf("the first warning's sites %q do not name the view and the message taken in this file", w.sites)
		}
		if n := cons.Stats().StalledSubscriptions; n != 1 {
			t.Fatalf("StalledSubscriptions %d, want 1", n)
		}

		// Another subscription stalls while the first still does: only the
		// new one is reported.
		sb := bustest.MustSubscribe(t, ctx, cons, "stall.b", client.Bounded(), client.InFlight(1))
		if _, err := prod.Publish(ctx, "stall.b", nil); err != nil {
			t.Fatal(err)
		}
		mb := next1(t, sb)
		defer mb.Close()
		w = readStall(t, logs.next(t))
		if w.sub != sb.ID().String() || w.topic != "stall.b" || w.credits != 1 || w.handle != 3 {
			t.Fatalf("second subscription's warning %+v", w)
		}

		// Episode 2 of the first subscription.
		v1.Close()
		m3 := next1(t, sa)
		defer m3.Close()
		w = readStall(t, logs.next(t))
		if w.sub != sa.ID().String() || w.credits != 2 || w.handle != 3 || strings.Count(w.sites, "Message at ") != 1 ||
			!strings.Contains(w.sites, "(2 handles)") {
			t.Fatalf("second episode's warning %+v", w)
		}
		m2.Close()
		m3.Close()
		mb.Close()
		if err := cons.Close(); err != nil {
			t.Fatal(err)
		}
		if extra := logs.pending(); len(extra) != 0 {
			t.Fatalf("%d warnings more than one per episode, the first %q", len(extra), extra[0].Message)
		}
		if n := cons.Stats().StalledSubscriptions; n != 3 {
			t.Fatalf("StalledSubscriptions %d, want 3", n)
		}
		select {
		case r := <-logs.other:
			t.Fatalf("unexpected log record %q", r.Message)
		default:
		}
		h.Await("everything released", bustest.Drained)
	})
}

// A subscriber that closes each message (and the view taken from it) as it
// goes never holds all its credits, however short the bound.
func TestConsumingSubscriberIsNeverReported(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		logs := newStallLog()
		prod := h.Dial("producer")
		cons := h.DialWith("consumer", client.Config{HeldCreditsWarnAfter: time.Millisecond, Logger: slog.New(logs)})
		s := bustest.DeclareAndSubscribe(t, prod, cons, "steady", wire.RetainNone, client.Bounded(), client.InFlight(2))
		img := bustest.Produce(t, prod, bustest.FrameBytes(2, 4096))
		const n = 20
		for i := range n {
			if _, err := prod.Publish(ctx, "steady", map[string]int{"n": i}, client.Attach("img", img)); err != nil {
				t.Fatal(err)
			}
		}
		img.Close()
		for range n {
			m := bustest.NextMessage(t, ctx, s)
			a := bustest.MustArtifact(t, m, "img")
			v := bustest.MustMap(t, ctx, a)
			// The message goes first: the view alone keeps the credit until
			// it closes.
			m.Close()
			a.Close()
			v.Close()
		}
		if got := cons.Stats().StalledSubscriptions; got != 0 {
			t.Fatalf("StalledSubscriptions %d after %d messages consumed one at a time", got, n)
		}
		if extra := logs.pending(); len(extra) != 0 {
			t.Fatalf("stall warning %q for a subscriber that closes everything", extra[0].Message)
		}
		h.Await("everything released", bustest.Drained)
	})
}

// With TrackHandles, a handle collected without Close is logged with the
// place it was taken.
func TestLeakLogNamesTheSiteWhenTracking(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		var log syncBuffer
		prod := h.Dial("producer")
		cons := h.DialWith("consumer", client.Config{TrackHandles: true, HeldCreditsWarnAfter: -1,
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		s := bustest.DeclareAndSubscribe(t, prod, cons, "ticks", wire.RetainNone, client.Bounded(), client.InFlight(1))
		for range 2 {
			if _, err := prod.Publish(ctx, "ticks", nil); err != nil {
				t.Fatal(err)
			}
		}
		forgetMessage(t, s)
		collectLeaks(t, cons, 1)
		if !strings.Contains(log.String(), "handle=Message") || !strings.Contains(log.String(), "stall_router_test.go:") ||
			!strings.Contains(log.String(), "forgetMessage") {
			t.Fatalf("the leak log does not name where the message was taken: %q", log.String())
		}
		m := bustest.NextMessage(t, ctx, s) // the credit came back
		m.Close()
		h.Await("nothing in flight", func(s router.Stats) bool { return s.Owners == 0 })
	})
}

// forgetMessage takes a message and drops it without Close; in its own
// function so that nothing on the test's stack keeps it reachable.
//
//go:noinline
func forgetMessage(t *testing.T, s *client.Subscription) {
	if _, err := s.Next(bustest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
}
