package router

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// changes tells Await's callers that the router's state may have changed.
// A step announces itself only while someone awaits, so routing pays one
// atomic load for it.
type changes struct {
	waiting atomic.Int32
	mu      sync.Mutex
	ch      chan struct{} // closed and replaced on every announced change
}

func (c *changes) current() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

func (c *changes) announce() {
	if c.waiting.Load() == 0 {
		return
	}
	c.mu.Lock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
	c.mu.Unlock()
}

// awaitRecheck bounds how long Await goes without looking: a few figures
// (the store's idle unlinks, the shell's counters) change outside a step.
const awaitRecheck = 25 * time.Millisecond

// Await returns the router's Stats once cond holds for them, checking
// again after every routing step, every store operation and every batch a
// writer takes; if ctx ends first it returns the last Stats and ctx's
// error. For waiting on the router instead of polling it: "until the
// frame is collected", "until every client has gone".
func (r *Router) Await(ctx context.Context, cond func(Stats) bool) (Stats, error) {
	r.changes.waiting.Add(1)
	defer r.changes.waiting.Add(-1)
	tick := time.NewTicker(awaitRecheck)
	defer tick.Stop()
	for {
		changed := r.changes.current() // taken before the look: a change after it wakes us
		s := r.Stats()
		if cond(s) {
			return s, nil
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return s, ctx.Err()
		}
	}
}
