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
			return rawTryWriter{rc}
		}
	}
	return nil
}

// rawTryWriter makes one write(2) on a socket's descriptor. The runtime
// keeps sockets non-blocking, so a full buffer answers EAGAIN at once
// instead of parking the goroutine; RawConn.Write still serializes it
// with the connection's other writes and fails once the socket is closed.
type rawTryWriter struct{ rc syscall.RawConn }

func (w rawTryWriter) TryWrite(p []byte) (int, error) {
	var n int
	var err error
	if werr := w.rc.Write(func(fd uintptr) bool {
		n, err = syscall.Write(int(fd), p)
		return true // one attempt, whatever it did
	}); werr != nil {
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
