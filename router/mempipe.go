package router

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// The in-memory transport behaves like a connected Unix stream socket, so
// the shell cannot tell the two apart. Each direction is a bounded byte
// buffer: a Write returns once its bytes are buffered and blocks only when
// the reader is a whole buffer behind, and a Read returns whatever is
// buffered. net.Pipe instead hands every Write to a waiting Read and waits
// for it to finish, which costs two goroutine switches per frame.
//
// Errors follow the socket's: after a local Close, Read and Write fail with
// net.ErrClosed; after the peer's Close, Read drains what was buffered and
// then returns io.EOF, and Write fails with io.ErrClosedPipe (a socket's
// EPIPE). An expired deadline fails with os.ErrDeadlineExceeded. All but
// io.EOF come wrapped in a *net.OpError, as from a socket.

// defaultMemPipeCapacity bounds each direction when memPipe is given no
// capacity: about a Unix socket's default buffer.
const defaultMemPipeCapacity = 256 << 10

// memPipeMinAlloc is the first allocation of a direction's buffer. Storage
// grows by doubling up to the capacity when the reader falls behind, and is
// kept at that high-water mark until the connection closes, so a connection
// in a steady state allocates nothing per Write or Read.
const memPipeMinAlloc = 4 << 10

// memPipe returns the two ends of an in-memory duplex connection whose
// directions each buffer up to capacity bytes (the default when capacity is
// not positive).
func memPipe(capacity int) (a, b net.Conn) {
	if capacity <= 0 {
		capacity = defaultMemPipeCapacity
	}
	ab, ba := newMemBuffer(capacity), newMemBuffer(capacity)
	return &memConn{rx: ba, tx: ab}, &memConn{rx: ab, tx: ba}
}

// memConn is one end of a memPipe.
type memConn struct {
	rx *memBuffer // what the peer wrote, for Read
	tx *memBuffer // what Write buffers for the peer
	// storeRoot is the router's store root, on a client end made by
	// ConnectInMemory.
	storeRoot string
}

// StoreRoot is the serving router's store root ("" on the router's end),
// which client.Connect uses when its Config names none.
func (c *memConn) StoreRoot() string { return c.storeRoot }

var _ net.Conn = (*memConn)(nil)

// Read reads what is buffered, up to len(p) bytes, blocking while nothing
// is.
func (c *memConn) Read(p []byte) (int, error) { return c.rx.read(p) }

// Write buffers all of p, blocking while the buffer is full. On error it
// returns how many bytes were buffered. Concurrent Writes do not interleave.
func (c *memConn) Write(p []byte) (int, error) { return c.tx.write(p) }

// Close ends both directions and unblocks every Read and Write. It always
// returns nil; closing again does nothing.
func (c *memConn) Close() error {
	c.rx.closeReader()
	c.tx.closeWriter()
	return nil
}

// CloseWrite shuts the sending direction, as a socket's shutdown(SHUT_WR):
// the peer drains what was buffered and then reads io.EOF, while this end
// can still read. A client's orderly close relies on it.
func (c *memConn) CloseWrite() error {
	c.tx.closeWriter()
	return nil
}

func (c *memConn) LocalAddr() net.Addr  { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr { return memAddr{} }

func (c *memConn) SetDeadline(t time.Time) error {
	if err := c.rx.setReadDeadline(t); err != nil {
		return err
	}
	return c.tx.setWriteDeadline(t)
}

func (c *memConn) SetReadDeadline(t time.Time) error  { return c.rx.setReadDeadline(t) }
func (c *memConn) SetWriteDeadline(t time.Time) error { return c.tx.setWriteDeadline(t) }

// memAddr is the address of both ends of a memPipe.
type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "memory" }

func memOpError(op string, err error) error {
	return &net.OpError{Op: op, Net: "memory", Source: memAddr{}, Addr: memAddr{}, Err: err}
}

// memBuffer is one direction of a memPipe: a ring buffer written by one end
// and read by the other. Everything below wmu is guarded by mu.
type memBuffer struct {
	wmu sync.Mutex // held for a whole Write, so that it is contiguous

	mu       sync.Mutex
	readable sync.Cond // data, end of stream, close or read deadline
	writable sync.Cond // space, close or write deadline
	buf      []byte    // ring storage, grown on demand up to capacity
	start    int       // index of the first unread byte
	n        int       // unread bytes
	capacity int
	readers  int // Reads waiting on readable
	writers  int // Writes waiting on writable
	need     int // bytes the waiting Write has left to buffer
	rclosed  bool
	wclosed  bool
	rdl      memDeadline // the reading end's read deadline
	wdl      memDeadline // the writing end's write deadline
}

// memDeadline is one deadline and the timer that expires it.
type memDeadline struct {
	when    time.Time // zero: none
	expired bool
	timer   *time.Timer // created on first use, reused after
}

func newMemBuffer(capacity int) *memBuffer {
	b := &memBuffer{capacity: capacity}
	b.readable.L = &b.mu
	b.writable.L = &b.mu
	return b
}

func (b *memBuffer) read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		switch {
		case b.rclosed:
			return 0, memOpError("read", net.ErrClosed)
		case len(p) == 0:
			return 0, nil
		case b.rdl.expired:
			return 0, memOpError("read", os.ErrDeadlineExceeded)
		case b.n > 0:
			m := b.get(p)
			// Wake a Write waiting for space once its remainder fits or
			// half the buffer is free, not at every small Read; it is
			// always woken before the buffer runs dry.
			if b.writers > 0 && b.capacity-b.n >= min(b.need, b.capacity/2) {
				b.writable.Broadcast()
			}
			if b.n == 0 && b.wclosed {
				b.buf = nil // nothing more will arrive
			}
			return m, nil
		case b.wclosed:
			return 0, io.EOF
		}
		b.readers++
		b.readable.Wait()
		b.readers--
	}
}

func (b *memBuffer) write(p []byte) (int, error) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for {
		switch {
		case b.wclosed:
			return n, memOpError("write", net.ErrClosed)
		case b.wdl.expired:
			return n, memOpError("write", os.ErrDeadlineExceeded)
		case b.rclosed:
			return n, memOpError("write", io.ErrClosedPipe)
		case n == len(p):
			return n, nil
		}
		if b.n < b.capacity {
			n += b.put(p[n:])
			if b.readers > 0 {
				b.readable.Broadcast()
			}
			continue
		}
		b.need = len(p) - n
		b.writers++
		b.writable.Wait()
		b.writers--
	}
}

// get moves up to len(p) buffered bytes into p.
func (b *memBuffer) get(p []byte) int {
	m := min(len(p), b.n)
	c := copy(p[:m], b.buf[b.start:])
	copy(p[c:m], b.buf)
	b.start += m
	if b.start >= len(b.buf) {
		b.start -= len(b.buf)
	}
	b.n -= m
	if b.n == 0 {
		b.start = 0 // keep the next bytes contiguous
	}
	return m
}

// put buffers as much of p as the capacity allows and reports how much.
func (b *memBuffer) put(p []byte) int {
	m := min(len(p), b.capacity-b.n)
	if b.n+m > len(b.buf) {
		b.grow(b.n + m)
	}
	end := b.start + b.n
	if end >= len(b.buf) {
		end -= len(b.buf)
	}
	// The free space is buf[end:] then buf[:start], or buf[end:start] when
	// the data wraps; m bytes fit either way.
	c := copy(b.buf[end:], p[:m])
	copy(b.buf, p[c:m])
	b.n += m
	return m
}

// grow reallocates the storage to hold at least need <= capacity bytes,
// moving the unread bytes to its start.
func (b *memBuffer) grow(need int) {
	size := max(2*len(b.buf), memPipeMinAlloc)
	for size < need {
		size *= 2
	}
	nb := make([]byte, min(size, b.capacity))
	c := copy(nb[:b.n], b.buf[b.start:])
	copy(nb[c:b.n], b.buf)
	b.buf, b.start = nb, 0
}

// closeReader is the reading end's Close: buffered bytes are dropped and
// the writer sees a broken pipe.
func (b *memBuffer) closeReader() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closeEnd(&b.rclosed, &b.rdl) {
		b.buf, b.start, b.n = nil, 0, 0
	}
}

// closeWriter is the writing end's Close: the reader drains what is
// buffered, then sees io.EOF.
func (b *memBuffer) closeWriter() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closeEnd(&b.wclosed, &b.wdl) && b.n == 0 {
		b.buf = nil
	}
}

// closeEnd closes one end, unless it is closed already (then it reports
// false): it stops the end's deadline and wakes every waiting Read and
// Write. The caller holds b.mu.
func (b *memBuffer) closeEnd(closed *bool, dl *memDeadline) bool {
	if *closed {
		return false
	}
	*closed = true
	dl.stop()
	b.readable.Broadcast()
	b.writable.Broadcast()
	return true
}

func (b *memBuffer) setReadDeadline(t time.Time) error {
	return b.setEndDeadline(&b.rclosed, &b.rdl, &b.readable, t)
}

func (b *memBuffer) setWriteDeadline(t time.Time) error {
	return b.setEndDeadline(&b.wclosed, &b.wdl, &b.writable, t)
}

// setEndDeadline sets one end's deadline unless that end is closed.
func (b *memBuffer) setEndDeadline(closed *bool, dl *memDeadline, c *sync.Cond, t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if *closed {
		return memOpError("set", net.ErrClosed)
	}
	b.setDeadline(dl, c, t)
	return nil
}

// setDeadline moves dl to t, waking the calls waiting on c at once when t
// has passed. The caller holds b.mu.
func (b *memBuffer) setDeadline(dl *memDeadline, c *sync.Cond, t time.Time) {
	dl.when, dl.expired = t, false
	if t.IsZero() {
		dl.disarm()
		return
	}
	d := time.Until(t)
	switch {
	case d <= 0:
		dl.disarm()
		dl.expired = true
		c.Broadcast()
	case dl.timer == nil:
		dl.timer = time.AfterFunc(d, func() { b.expire(dl, c) })
	default:
		dl.timer.Reset(d)
	}
}

// expire runs on dl's timer. A timer that fires for a deadline since
// cleared does nothing; one whose deadline has moved later re-arms for it.
func (b *memBuffer) expire(dl *memDeadline, c *sync.Cond) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dl.when.IsZero() || dl.expired {
		return
	}
	if d := time.Until(dl.when); d > 0 {
		dl.timer.Reset(d)
		return
	}
	dl.expired = true
	c.Broadcast()
}

// stop clears the deadline and disarms its timer, for Close. The caller
// holds the buffer's mu, so a timer already firing sees no deadline and
// does nothing.
func (dl *memDeadline) stop() {
	dl.when, dl.expired = time.Time{}, false
	dl.disarm()
}

func (dl *memDeadline) disarm() {
	if dl.timer != nil {
		dl.timer.Stop()
	}
}

// TryWrite buffers what fits of p without blocking; it writes nothing
// while another Write is under way or the buffer is full.
func (c *memConn) TryWrite(p []byte) (int, error) { return c.tx.tryWrite(p) }

func (b *memBuffer) tryWrite(p []byte) (int, error) {
	if !b.wmu.TryLock() {
		return 0, nil
	}
	defer b.wmu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.wclosed:
		return 0, memOpError("write", net.ErrClosed)
	case b.wdl.expired:
		return 0, memOpError("write", os.ErrDeadlineExceeded)
	case b.rclosed:
		return 0, memOpError("write", io.ErrClosedPipe)
	case len(p) == 0 || b.n >= b.capacity:
		return 0, nil
	}
	n := b.put(p)
	if b.readers > 0 {
		b.readable.Broadcast()
	}
	return n, nil
}
