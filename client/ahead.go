package client

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/flybus/flybus/wire"
)

// Allocation ahead (Config.AllocateAhead). A producer allocates frames of
// one size over and over, and each Allocate is a round trip on its
// critical path. For each of the last few (size, content type) pairs it
// allocated, the client keeps one allocation made before it is asked for:
// Allocate takes it at once. The next one is asked for once the command
// carrying the frame (a Publish, Call or Reply with attachments) has been
// answered, between frames: asked for at Allocate, its round trip landed
// inside the frame's fill, seal and publish and made them slower than the
// allocation it saved (measured with flybus perf). Its answer is settled
// by the reader. A prepared allocation holds one owner and its bytes of
// the router's store budget, like any unsealed writer.

type aheadKey struct {
	n  int64
	ct string
}

// prepared is one allocation asked for ahead: the reply is decoded into
// ok, then out is set under ahead.mu.
type prepared struct {
	ok        wire.AllocateOK
	out       oneShot[wire.AllocateOK]
	settled   bool // guarded by ahead.mu: out is set
	abandoned bool // guarded by ahead.mu: released once answered
}

type ahead struct {
	mu       sync.Mutex
	recent   []aheadKey // most recently used last; at most AllocateAhead
	ready    map[aheadKey]*prepared
	wanted   []aheadKey // allocated since the last frame went out: prepare these next
	closed   bool
	served   atomic.Uint64 // Allocates answered by a prepared allocation
	released atomic.Uint64 // prepared allocations released unused
}

// take removes and returns the prepared allocation for k, if any.
func (a *ahead) take(k aheadKey) *prepared {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.ready[k]
	delete(a.ready, k)
	return p
}

// want notes that k was allocated: the next frame sent prepares it.
func (a *ahead) want(k aheadKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.wanted, k) {
		a.wanted = append(a.wanted, k)
	}
}

// prepareWanted asks for an allocation of every size allocated since the
// last frame went out.
func (c *conn) prepareWanted() {
	a := &c.ahead
	a.mu.Lock()
	ks := a.wanted
	a.wanted = nil
	a.mu.Unlock()
	for _, k := range ks {
		c.prepare(k)
	}
}

// prepare asks for the next allocation for k unless one is prepared or the
// client is closing; the least recent key past limit gives its back.
func (c *conn) prepare(k aheadKey) {
	a := &c.ahead
	a.mu.Lock()
	if a.closed || a.ready[k] != nil {
		a.mu.Unlock()
		return
	}
	if a.ready == nil {
		a.ready = map[aheadKey]*prepared{}
	}
	for i, x := range a.recent {
		if x == k {
			a.recent = append(a.recent[:i], a.recent[i+1:]...)
			break
		}
	}
	a.recent = append(a.recent, k)
	var evicted *prepared
	if len(a.recent) > c.cfg.AllocateAhead {
		old := a.recent[0]
		a.recent = a.recent[1:]
		evicted = a.ready[old]
		delete(a.ready, old)
	}
	p := &prepared{out: oneShot[wire.AllocateOK]{done: make(chan struct{})}}
	a.ready[k] = p
	a.mu.Unlock()
	if evicted != nil {
		c.abandonPrepared(evicted)
	}
	err := c.post(request{op: wire.OpArtifactAllocate, body: &wire.Allocate{ByteLength: uint64(k.n), ContentType: k.ct},
		reply: &p.ok, complete: func(err error) {
			if abandoned := a.settle(p, err); abandoned && err == nil {
				c.releasePrepared(p)
			}
		}}, false)
	if err != nil {
		a.mu.Lock()
		if a.ready[k] == p {
			delete(a.ready, k)
		}
		a.mu.Unlock()
		return
	}
	c.wakeWriter() // off the caller's critical path
}

// settle records p's answer; it reports whether p was abandoned before,
// and then a granted allocation is the settler's to release.
func (a *ahead) settle(p *prepared, err error) (abandoned bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p.out.set(p.ok, err)
	p.settled = true
	return p.abandoned
}

// abandonPrepared gives back a prepared allocation nobody will take: now
// if it was answered, else when its answer arrives. Answered is decided
// under the lock the answer is recorded under, so exactly one side
// releases it.
func (c *conn) abandonPrepared(p *prepared) {
	c.ahead.mu.Lock()
	if !p.settled {
		p.abandoned = true
		c.ahead.mu.Unlock()
		return
	}
	err := p.out.err
	c.ahead.mu.Unlock()
	if err == nil {
		c.releasePrepared(p)
	}
}

func (c *conn) releasePrepared(p *prepared) {
	c.ahead.released.Add(1)
	c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{p.ok.OwnerID}})
}

// closeAhead releases every prepared allocation; called as Close begins,
// so the releases go out before the write side shuts.
func (c *conn) closeAhead() {
	a := &c.ahead
	a.mu.Lock()
	a.closed = true
	ps := make([]*prepared, 0, len(a.ready))
	for _, p := range a.ready {
		ps = append(ps, p)
	}
	a.ready = nil
	a.mu.Unlock()
	for _, p := range ps {
		c.abandonPrepared(p)
	}
}

// preparedWriters counts allocations prepared and not yet taken.
func (a *ahead) preparedWriters() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ready)
}

// allocateAhead answers an Allocate from a prepared allocation for k, if
// one is prepared (waiting for it if its answer is still on the way). It
// reports false when the caller must allocate itself.
func (c *conn) allocateAhead(ctx context.Context, k aheadKey) (wire.AllocateOK, bool, error) {
	p := c.ahead.take(k)
	if p == nil {
		return wire.AllocateOK{}, false, nil
	}
	ok, err := p.out.wait(ctx)
	if _, _, answered := p.out.get(); !answered {
		c.abandonPrepared(p)
		return wire.AllocateOK{}, false, err // ctx ended first
	}
	if err != nil {
		// Refused ahead (the store was full, say): the caller's own
		// round trip reports what holds now.
		return wire.AllocateOK{}, false, nil
	}
	c.ahead.served.Add(1)
	return ok, true, nil
}
