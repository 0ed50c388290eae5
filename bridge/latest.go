package bridge

import (
	"context"
	"sync"
)

// frameSlot hands complete frames from a latest import's NATS handler to
// the goroutine that writes them locally, and keeps only the newest: the
// handler never waits on the local router, so NATS holds no backlog for
// the import, and a slow local side skips frames instead of lagging. At
// most three frames are in memory: one assembling, one waiting here and
// one being written.
type frameSlot struct {
	mu     sync.Mutex
	ready  *heldFrame
	free   [][]byte      // buffers of frames written or dropped, for reuse
	signal chan struct{} // buffered 1: a frame is waiting
	stop   context.CancelFunc
	done   chan struct{} // closed once the writer has returned
}

// keepBuffers bounds the free list: three frames of a few artifacts each.
const keepBuffers = 8

// heldFrame is a complete frame held in memory, its sizes and payload
// checked; the router checks the artifacts' digests as the writer seals
// them.
type heldFrame struct {
	a    *assembly
	bufs [][]byte // the artifacts' bytes, in manifest order
}

// memSink is an artifact's buffer as an assembly's sink; the assembly
// keeps every write inside the part's size.
type memSink []byte

func (m memSink) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }

func newFrameSlot(stop context.CancelFunc) *frameSlot {
	return &frameSlot{signal: make(chan struct{}, 1), stop: stop, done: make(chan struct{})}
}

// buffer returns n bytes for an artifact, reusing a free buffer when one
// is large enough.
func (s *frameSlot) buffer(n int64) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range s.free {
		if int64(cap(b)) >= n {
			last := len(s.free) - 1
			s.free[i], s.free[last] = s.free[last], nil
			s.free = s.free[:last]
			return b[:n]
		}
	}
	return make([]byte, n)
}

// recycle keeps bufs for reuse, up to keepBuffers of them.
func (s *frameSlot) recycle(bufs [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range bufs {
		if len(s.free) == keepBuffers {
			return
		}
		s.free = append(s.free, b)
	}
}

// offer leaves f for the writer and returns the frame it replaced, one the
// writer had not taken yet.
func (s *frameSlot) offer(f *heldFrame) (replaced *heldFrame) {
	s.mu.Lock()
	replaced, s.ready = s.ready, f
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
	return replaced
}

// take returns the waiting frame, if any.
func (s *frameSlot) take() *heldFrame {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.ready
	s.ready = nil
	return f
}

// writeLatest writes the newest complete frame locally, one at a time,
// until ctx ends.
func (im *importer) writeLatest(ctx context.Context) {
	sl := im.slot
	defer close(sl.done)
	for {
		select {
		case <-sl.signal:
		case <-ctx.Done():
			return
		}
		if f := sl.take(); f != nil {
			im.writeHeld(ctx, f)
			sl.recycle(f.bufs)
		}
	}
}

// writeHeld allocates a held frame's artifacts in the local store, writes
// them and publishes the frame, as a bounded import does once the last
// chunk came.
func (im *importer) writeHeld(ctx context.Context, f *heldFrame) {
	im.beforePublish()
	s := im.b.current()
	if s == nil {
		im.cnt.droppedLocal.Add(1)
		return
	}
	ws, err := allocateParts(ctx, s.c, &f.a.man)
	for i := 0; err == nil && i < len(ws); i++ {
		_, err = ws[i].Write(f.bufs[i])
	}
	if err != nil {
		closeWriters(ws)
		im.cnt.droppedLocal.Add(1)
		im.b.log.Warn("import: cannot write locally", "topic", im.cfg.Topic, "err", err)
		return
	}
	im.publish(ctx, s, f.a, ws)
}

// stopLatest ends the writer and waits for it; a frame still waiting is
// dropped with the import.
func (im *importer) stopLatest() {
	im.slot.stop()
	<-im.slot.done
	im.slot.take()
}
