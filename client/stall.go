package client

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Stalled subscriptions (Config.HeldCreditsWarnAfter). Each message the
// program takes holds one of its subscription's MaxInFlight credits until
// the message and everything taken from it are closed. A program that
// forgets those Closes silences its subscription, and the safety net of
// leak.go helps only after a collection, which an idle consumer never
// triggers. So a subscription notes when the program came to hold all its
// credits, and one timer per client, armed only while some subscription is
// so held, warns about those held past the bound: once per episode, which
// ends when a credit returns. Per message this costs a counter under the
// subscription's lock, and a clock read when the last credit is taken.

// defaultHeldCreditsWarnAfter is Config.HeldCreditsWarnAfter's default.
const defaultHeldCreditsWarnAfter = 5 * time.Second

// credits counts the deliveries of one subscription the program holds.
type credits struct {
	limit int // MaxInFlight; 0 when not watched. Set before s is shared.

	mu        sync.Mutex
	held      int       // messages handed to the program, not yet consumed
	fullSince time.Time // when held reached limit; zero while below it
	warned    bool      // this episode was reported
}

// take counts a message handed to the program; it returns the time the
// subscription became fully held when this message made it so.
func (cr *credits) take() time.Time {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.held++
	if cr.held < cr.limit || !cr.fullSince.IsZero() {
		return time.Time{}
	}
	cr.fullSince = time.Now()
	return cr.fullSince
}

// give counts a held message consumed; a fully held episode ends.
func (cr *credits) give() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.held--
	if cr.held < cr.limit {
		cr.fullSince, cr.warned = time.Time{}, false
	}
}

// due reports whether a fully held, unreported episode has lasted bound by
// now, marking it reported; otherwise, for such an episode, when it will.
func (cr *credits) due(now time.Time, bound time.Duration) (report bool, held int, lasted time.Duration, at time.Time) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.fullSince.IsZero() || cr.warned {
		return false, 0, 0, time.Time{}
	}
	if lasted = now.Sub(cr.fullSince); lasted < bound {
		return false, 0, 0, cr.fullSince.Add(bound)
	}
	cr.warned = true
	return true, cr.held, lasted, time.Time{}
}

// stallWatch is the client's one timer for stalled subscriptions.
type stallWatch struct {
	after    time.Duration // the bound; 0: off. Set before the client is shared.
	reported atomic.Uint64 // warnings logged
	armed    atomic.Bool   // a check is scheduled, at or before any new episode's deadline

	mu      sync.Mutex // guards the rest
	timer   *time.Timer
	due     time.Time
	stopped bool
}

// armStallCheck schedules a check at at, unless one is scheduled already: deadlines
// only grow (now plus the bound), so that one comes no later.
func (c *conn) armStallCheck(at time.Time) {
	w := &c.stall
	if w.armed.Load() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	c.armStallCheckLocked(at)
}

// armStallCheckLocked schedules a check at at, or keeps an earlier one.
func (c *conn) armStallCheckLocked(at time.Time) {
	w := &c.stall
	if w.stopped || w.armed.Load() && !at.Before(w.due) {
		return
	}
	w.due = at
	w.armed.Store(true)
	if w.timer == nil {
		w.timer = time.AfterFunc(time.Until(at), c.checkStalls)
	} else {
		w.timer.Reset(time.Until(at))
	}
}

// stopStallChecks stops the timer for good: the connection has ended.
func (c *conn) stopStallChecks() {
	w := &c.stall
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// checkStalls runs on the timer: it warns about every subscription fully
// held for the bound and schedules the next check for the earliest episode
// still short of it. Without such an episode nothing is scheduled: a new
// one arms the timer itself.
func (c *conn) checkStalls() {
	w := &c.stall
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	// Cleared before the scan: an episode that begins during it arms again.
	w.armed.Store(false)
	w.mu.Unlock()
	c.mu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	now := time.Now()
	var next time.Time
	for _, s := range subs {
		report, held, lasted, at := s.cr.due(now, w.after)
		if report {
			c.reportStall(s, held, lasted)
		} else if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	if !next.IsZero() {
		w.mu.Lock()
		c.armStallCheckLocked(next)
		w.mu.Unlock()
	}
}

func (c *conn) reportStall(s *Subscription, held int, lasted time.Duration) {
	if c.Err() != nil {
		return
	}
	// Counted before the log line, so a handler that sees the record finds
	// it counted.
	c.stall.reported.Add(1)
	lasted = lasted.Round(time.Millisecond)
	open := c.handles.open.Load()
	attrs := []any{slog.String("subscription", s.id.String()), slog.String("topic", s.topic),
		slog.Int("credits", held), slog.Int64("handles", open), slog.String("client", c.cfg.ClientID)}
	if c.handles.track {
		attrs = append(attrs, slog.String("sites", c.handles.sitesHolding(s)))
	} else {
		attrs = append(attrs, slog.String("hint", "set FLYBUS_TRACK_HANDLES=1 (or Config.TrackHandles) to log where the handles holding them were made"))
	}
	c.cfg.Logger.Warn(fmt.Sprintf("flybus: subscription %s on topic %s has held all %d in-flight credits unconsumed for %s; %d handles are open",
		s.id, s.topic, held, lasted, open), attrs...)
}

// handOut marks m as the program's: it holds one of s's credits until its
// delivery is consumed.
func (s *Subscription) handOut(m *Message) {
	c := s.conn()
	c.handles.handedOut(m.d.cleanup.rec)
	if s.cr.limit == 0 || !m.d.g.holdOn(s) {
		return
	}
	if full := s.cr.take(); !full.IsZero() {
		c.armStallCheck(full.Add(c.stall.after))
	}
}
