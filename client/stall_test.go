package client

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/flybus/flybus/wire"
)

// recordHandler hands every log record to a channel, so that a test waits
// for a warning instead of guessing when it is written.
type recordHandler struct{ ch chan slog.Record }

func newRecordHandler() recordHandler { return recordHandler{ch: make(chan slog.Record, 64)} }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recordHandler) WithGroup(string) slog.Handler            { return h }

func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default: // a flood is caught by the tests' counts, not by blocking the client
	}
	return nil
}

// wait returns the next record, failing t when none comes before ctx ends.
func (h recordHandler) wait(t *testing.T, ctx context.Context) slog.Record {
	t.Helper()
	select {
	case r := <-h.ch:
		return r
	case <-ctx.Done():
		t.Fatal("no warning was logged")
		return slog.Record{}
	}
}

// none fails t if a record is waiting.
func (h recordHandler) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-h.ch:
		t.Fatalf("unexpected log record %q", r.Message)
	default:
	}
}

func recordAttrs(r slog.Record) map[string]slog.Value {
	m := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value
		return true
	})
	return m
}

// subscribeFake subscribes c to topic "t" through the fake router, which
// names the subscription sub-1, and from then on discards whatever the
// client writes (the consumes its messages' Closes send).
func subscribeFake(t *testing.T, ctx context.Context, c *Client, f *fakeRouter, opts ...SubscribeOption) *Subscription {
	t.Helper()
	type result struct {
		s   *Subscription
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := c.Subscribe(ctx, "t", opts...)
		ch <- result{s, err}
	}()
	f.replyOK(f.command(wire.OpSubscribe).ID, wire.OpSubscribe, &wire.SubscribeOK{SubscriptionID: 1, TopicIncarnation: wire.Some[wire.TopicInc](1)})
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	go io.Copy(io.Discard, f.nc) // ends when the test closes the pipe
	return r.s
}

// deliverMessage sends message n of sub-1.
func (f *fakeRouter) deliverMessage(n uint64) {
	f.t.Helper()
	f.send(wire.Header{Kind: wire.KindDelivery, Op: wire.OpTopicMessage}, &wire.TopicMessage{DeliveryID: wire.DeliveryID(n),
		SubscriptionID: 1, Topic: "t", TopicIncarnation: 1, TopicSequence: n, Payload: wire.RawJSON(`{}`)}, nil)
}

var stallMessage = regexp.MustCompile(`^flybus: subscription sub-1 on topic t has held all 2 in-flight credits unconsumed for (\S+); 2 handles are open$`)

// A subscription whose credits the program holds for longer than the
// bound is reported once; a credit coming back ends the episode, and
// holding them all again is a new one.
func TestStalledSubscriptionIsReportedOncePerEpisode(t *testing.T) {
	noLeaks(t)
	t.Setenv("FLYBUS_TRACK_HANDLES", "")
	ctx := testCtx(t, 10*time.Second)
	logs := newRecordHandler()
	const bound = 10 * time.Millisecond
	c, f, s := stallSubscriber(t, ctx, Config{ClientID: "sdk-test", HeldCreditsWarnAfter: bound, Logger: slog.New(logs)})
	f.deliverMessage(1)
	f.deliverMessage(2)
	m1, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}

	r := logs.wait(t, ctx)
	if r.Level != slog.LevelWarn {
		t.Errorf("level %v, want WARN", r.Level)
	}
	sub := stallMessage.FindStringSubmatch(r.Message)
	if sub == nil {
		t.Fatalf("warning %q", r.Message)
	}
	if d, err := time.ParseDuration(sub[1]); err != nil || d < bound {
		t.Errorf("held for %q, want at least %v", sub[1], bound)
	}
	a := recordAttrs(r)
	if a["subscription"].String() != "sub-1" || a["topic"].String() != "t" || a["credits"].Int64() != 2 || a["handles"].Int64() != 2 {
		t.Errorf("attributes %v", a)
	}
	if _, ok := a["hint"]; !ok {
		t.Errorf("without tracking the warning says how to find the handles: %v", a)
	}
	if n := c.Stats().StalledSubscriptions; n != 1 {
		t.Fatalf("StalledSubscriptions %d, want 1", n)
	}
	// Later checks within the episode find nothing new to report.
	c.cur.checkStalls()
	c.cur.checkStalls()
	logs.none(t)

	m1.Close()
	f.deliverMessage(3)
	m3, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := logs.wait(t, ctx); !stallMessage.MatchString(r.Message) {
		t.Fatalf("second episode: %q", r.Message)
	}
	if n := c.Stats().StalledSubscriptions; n != 2 {
		t.Fatalf("StalledSubscriptions %d, want 2", n)
	}
	m2.Close()
	m3.Close()
	c.cur.checkStalls()
	logs.none(t)
}

// heldCredits reads s's count of messages the program holds and whether
// it holds them all.
func heldCredits(s *Subscription) (held int, full bool) {
	s.cr.mu.Lock()
	defer s.cr.mu.Unlock()
	return s.cr.held, !s.cr.fullSince.IsZero()
}

// Only messages handed to the program hold its credits, until they are
// consumed; a consumer that closes what it takes never arms the timer;
// a negative bound turns the watch off.
func TestHeldCreditsCountWhatTheProgramHolds(t *testing.T) {
	t.Run("Counted", func(t *testing.T) {
		noLeaks(t)
		ctx := testCtx(t, 10*time.Second)
		c, f, s := stallSubscriber(t, ctx, Config{ClientID: "sdk-test", HeldCreditsWarnAfter: time.Hour})
		// One message at a time, closed at once: never fully held.
		for i := uint64(1); i <= 10; i++ {
			f.deliverMessage(i)
			m, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if held, _ := heldCredits(s); held != 1 {
				t.Fatalf("message %d: %d held, want 1", i, held)
			}
			m.Close()
		}
		if held, full := heldCredits(s); held != 0 || full {
			t.Fatalf("after closing every message: %d held, full %v", held, full)
		}
		c.cur.stall.mu.Lock()
		armed := c.cur.stall.timer != nil
		c.cur.stall.mu.Unlock()
		if armed {
			t.Fatal("the stall timer was armed although no subscription was ever fully held")
		}

		for i := uint64(11); i <= 13; i++ {
			f.deliverMessage(i)
		}
		m1, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m2, ok := s.TryNext()
		if !ok {
			m2, err = s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
		}
		if held, full := heldCredits(s); held != 2 || !full {
			t.Fatalf("two messages taken: %d held, full %v", held, full)
		}
		if !c.cur.stall.armed.Load() {
			t.Fatal("a fully held subscription did not arm the stall check")
		}
		// The third is still queued; closing the subscription closes it
		// without its ever being the program's.
		s.Close()
		if held, _ := heldCredits(s); held != 2 {
			t.Fatalf("after the subscription's Close: %d held, want 2", held)
		}
		m1.Close()
		if held, full := heldCredits(s); held != 1 || full {
			t.Fatalf("one closed: %d held, full %v", held, full)
		}
		m2.Close()
		if held, _ := heldCredits(s); held != 0 {
			t.Fatalf("both closed: %d held", held)
		}
	})
	t.Run("Off", func(t *testing.T) {
		noLeaks(t)
		ctx := testCtx(t, 10*time.Second)
		logs := newRecordHandler()
		c, f, s := stallSubscriber(t, ctx, Config{ClientID: "sdk-test", HeldCreditsWarnAfter: -1, Logger: slog.New(logs)})
		f.deliverMessage(1)
		f.deliverMessage(2)
		for range 2 {
			m, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
		}
		if held, full := heldCredits(s); held != 0 || full {
			t.Fatalf("watch off: %d held, full %v", held, full)
		}
		c.cur.checkStalls()
		logs.none(t)
		if c.cur.stall.armed.Load() || c.Stats().StalledSubscriptions != 0 {
			t.Fatal("the watch ran although HeldCreditsWarnAfter is negative")
		}
	})
}

// FLYBUS_TRACK_HANDLES=1 turns tracking on without a change of Config.
func TestTrackHandlesFromTheEnvironment(t *testing.T) {
	t.Setenv("FLYBUS_TRACK_HANDLES", "1")
	c, _ := connectGood(t)
	if !c.cur.handles.track {
		t.Fatal("FLYBUS_TRACK_HANDLES=1 did not turn handle tracking on")
	}
}

// stallSubscriber connects cfg's client to a fake router and subscribes
// with two credits.
func stallSubscriber(t *testing.T, ctx context.Context, cfg Config) (*Client, *fakeRouter, *Subscription) {
	t.Helper()
	c, f, err := connectFakeWith(t, ctx, cfg, func(f *fakeRouter, msg uint64) {
		ok := goodHello()
		f.replyOK(msg, wire.OpHello, &ok)
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, f, subscribeFake(t, ctx, c, f, Bounded(), InFlight(2))
}
