package store

import (
	"sync"
	"sync/atomic"
)

// pool is the bookkeeping of prepared staging files: for each of the few
// most recently staged sizes it keeps up to depth files created ahead of
// demand. It does no I/O itself. Stage takes from it under its mutex (a
// table lookup); the refill goroutine asks it for the next job, does the
// slow create and fallocate outside the mutex, and reports back.
type pool struct {
	depth, maxSizes int
	maxBytes        int64          // bound on the bytes of prepared files; 0: none
	seq             *atomic.Uint64 // the store's name sequence
	bytes           atomic.Int64   // of files prepared, being prepared or waiting to be dropped

	mu      sync.Mutex
	changed sync.Cond // broadcast when a job finishes or the pool stops
	recent  []int64   // most recently staged size first
	ready   map[int64][]uint64
	pending map[int64]int       // files being created, by size
	owned   map[uint64]struct{} // every file the pool is making, holds or dropping
	drop    []job               // prepared files of sizes no longer recent
	stopped bool
	failed  uint64 // failed jobs, so waiters can stop waiting

	wake chan struct{} // capacity 1: "look again", never blocks the sender
	quit chan struct{}
	done chan struct{}
}

// job is one unit of refill work: create a staging file of size, or unlink
// a prepared one that is no longer wanted.
type job struct {
	seq  uint64
	size int64
	drop bool
}

func newPool(depth, maxSizes int, maxBytes int64, seq *atomic.Uint64) *pool {
	p := &pool{
		depth:    depth,
		maxSizes: maxSizes,
		maxBytes: maxBytes,
		seq:      seq,
		ready:    make(map[int64][]uint64),
		pending:  make(map[int64]int),
		owned:    make(map[uint64]struct{}),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	p.changed.L = &p.mu
	return p
}

// take records size as recently staged and returns a prepared file of that
// size if there is one. Either way the refill goroutine is nudged.
func (p *pool) take(size int64) (seq uint64, ok bool) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return 0, false
	}
	p.use(size)
	if files := p.ready[size]; len(files) > 0 {
		seq, ok = files[len(files)-1], true
		p.ready[size] = files[:len(files)-1]
		delete(p.owned, seq)
		p.bytes.Add(-size) // the producer's now, and the router's to count
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return seq, ok
}

// use moves size to the front of the recent sizes. A size pushed off the end
// has its prepared files queued for unlinking.
func (p *pool) use(size int64) {
	i := 0
	for i < len(p.recent) && p.recent[i] != size {
		i++
	}
	if i == len(p.recent) {
		if len(p.recent) == p.maxSizes {
			i--
			old := p.recent[i]
			for _, seq := range p.ready[old] {
				p.drop = append(p.drop, job{seq: seq, size: old, drop: true})
			}
			delete(p.ready, old)
		} else {
			p.recent = append(p.recent, 0)
		}
	}
	copy(p.recent[1:i+1], p.recent[:i])
	p.recent[0] = size
}

func (p *pool) isRecent(size int64) bool {
	for _, r := range p.recent {
		if r == size {
			return true
		}
	}
	return false
}

// owns reports whether seq names a file the pool has not handed out. Seal
// and Remove refuse such names: they were never given to a producer.
func (p *pool) owns(seq uint64) bool {
	p.mu.Lock()
	_, ok := p.owned[seq]
	p.mu.Unlock()
	return ok
}

// next returns the next job, or false when there is nothing to do: unwanted
// files first, then the most recent size that is short of depth.
func (p *pool) next() (job, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return job{}, false
	}
	if n := len(p.drop); n > 0 {
		j := p.drop[n-1]
		p.drop = p.drop[:n-1]
		return j, true
	}
	for _, size := range p.recent {
		if p.maxBytes > 0 && p.bytes.Load()+size > p.maxBytes {
			continue // prepared files stay within their share of the budget
		}
		if len(p.ready[size])+p.pending[size] < p.depth {
			p.bytes.Add(size)
			p.pending[size]++
			seq := p.seq.Add(1)
			p.owned[seq] = struct{}{}
			return job{seq: seq, size: size}, true
		}
	}
	return job{}, false
}

// finish records the outcome of a job. A created file whose size stopped
// being recent meanwhile is queued for unlinking.
func (p *pool) finish(j job, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.changed.Broadcast()
	if err != nil {
		p.failed++
	}
	if j.drop {
		delete(p.owned, j.seq)
		p.bytes.Add(-j.size)
		return
	}
	if p.pending[j.size]--; p.pending[j.size] == 0 {
		delete(p.pending, j.size)
	}
	switch {
	case err != nil:
		delete(p.owned, j.seq)
		p.bytes.Add(-j.size)
	case p.isRecent(j.size):
		p.ready[j.size] = append(p.ready[j.size], j.seq)
	default:
		p.drop = append(p.drop, job{seq: j.seq, size: j.size, drop: true})
	}
}

// stop makes the pool hand out nothing more and waits for the refill
// goroutine, if one was started, to return. Prepared files stay on disk;
// Close removes them with the directory.
func (p *pool) stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	p.changed.Broadcast()
	p.mu.Unlock()
	close(p.quit)
	if p.depth > 0 {
		<-p.done
	}
}

// waitIdle blocks until the pool has nothing left to do, and reports false
// if instead it stopped or a job failed meanwhile. For tests and
// benchmarks: production code never waits for the pool.
func (p *pool) waitIdle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	failed := p.failed
	for !p.idle() {
		if p.stopped || p.failed != failed {
			return false
		}
		p.changed.Wait()
	}
	return true
}

func (p *pool) idle() bool {
	if len(p.drop) > 0 || len(p.pending) > 0 {
		return false
	}
	for _, size := range p.recent {
		if len(p.ready[size]) < p.depth && (p.maxBytes == 0 || p.bytes.Load()+size <= p.maxBytes) {
			return false
		}
	}
	return true
}

// readyFiles returns how many prepared files of size are waiting.
func (p *pool) readyFiles(size int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready[size])
}
