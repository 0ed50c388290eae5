package client

import (
	"io"
	"sync/atomic"
	"testing"

	"github.com/flybus/flybus/wire"
)

// An outcome is settled (recorded under the lock) a moment before the
// reader acts on it (closes done for a prepared allocation, consumes an
// abandoned result). The program's Close decides under that same lock, so
// whichever moment it lands on (before the outcome, between the two,
// after), the result or the prepared allocation is given back exactly
// once: by the reader if Close came first, else by Close.
func TestCloseRacingAnOutcomeGivesItBackOnce(t *testing.T) {
	c, f := connectGood(t)
	go io.Copy(io.Discard, f.nc) // the cancels and releases sent, dropped

	// The three moments, as steps of the reader around the program's Close.
	moments := []struct {
		name           string
		before, behind func(settle, done func())
	}{
		{"CloseFirst", func(settle, done func()) {}, func(settle, done func()) { settle(); done() }},
		{"CloseBetween", func(settle, done func()) { settle() }, func(settle, done func()) { done() }},
		{"CloseAfter", func(settle, done func()) { settle(); done() }, func(settle, done func()) {}},
	}
	for _, m := range moments {
		t.Run("PendingCall/"+m.name, func(t *testing.T) {
			var released atomic.Int32
			g := &guard{refCount: refCount{refs: 1}, release: func() { released.Add(1) }}
			res := &Result{delivery: delivery{c: c.cur, d: delivered{what: "result", g: g}}}
			p := &PendingCall{c: c.cur, id: 1, out: oneShot[*Result]{done: make(chan struct{})}}
			keep := true
			settle := func() { keep = p.settle(res, nil) }
			done := func() { // what finish does after settling
				if !keep {
					res.Close()
				}
			}
			m.before(settle, done)
			p.Close()
			m.behind(settle, done)
			if n := released.Load(); n != 1 {
				t.Fatalf("the result was released %d times, want once", n)
			}
		})
		t.Run("Prepared/"+m.name, func(t *testing.T) {
			a := &c.cur.ahead
			before := a.released.Load()
			p := &prepared{out: oneShot[wire.AllocateOK]{done: make(chan struct{})},
				ok: wire.AllocateOK{Allocation: wire.Allocation{ArtifactID: 1, Generation: 1, OwnerID: wire.HoldOwner(9)}}}
			abandoned := false
			settle := func() { abandoned = a.settle(p, nil) }
			done := func() { // what the reader does after settling
				if abandoned {
					c.cur.releasePrepared(p)
				}
			}
			m.before(settle, done)
			c.cur.abandonPrepared(p)
			m.behind(settle, done)
			if n := a.released.Load() - before; n != 1 {
				t.Fatalf("the allocation was released %d times, want once", n)
			}
		})
	}
}
