package router

import (
	"errors"
	"net"
	"syscall"
)

// tryWriter writes what fits without blocking: it returns how much of p it
// wrote (possibly nothing, with a nil error, when the peer's buffer is
// full) and an error only when the transport failed.
type tryWriter interface {
	TryWrite(p []byte) (int, error)
}

// tryWriterOf returns nc's non-blocking write, or nil when the transport
// has none (then only the connection's writer goroutine writes).
func tryWriterOf(nc net.Conn) tryWriter {
	if tw, ok := nc.(tryWriter); ok {
		return tw
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return newRawTryWriter(rc)
		}
	}
	return nil
}

// rawTryWriter makes one write(2) on a socket's descriptor. The runtime
// keeps sockets non-blocking, so a full buffer answers EAGAIN at once
// instead of parking the goroutine; RawConn.Write still serializes it
// with the connection's other writes and fails once the socket is closed.
// Only the holder of the connection's write token calls it, so the
// callback and its results live in the struct: a closure per write would
// allocate.
type rawTryWriter struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // w.write, bound once
	p   []byte
	n   int
	err error
}

func newRawTryWriter(rc syscall.RawConn) *rawTryWriter {
	w := &rawTryWriter{rc: rc}
	w.fn = w.write
	return w
}

func (w *rawTryWriter) write(fd uintptr) bool {
	w.n, w.err = syscall.Write(int(fd), w.p)
	return true // one attempt, whatever it did
}

func (w *rawTryWriter) TryWrite(p []byte) (int, error) {
	w.p, w.n, w.err = p, 0, nil
	werr := w.rc.Write(w.fn)
	n, err := w.n, w.err
	w.p = nil
	if werr != nil {
		return 0, werr
	}
	if n < 0 {
		n = 0
	}
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
		err = nil
	}
	return n, err
}
