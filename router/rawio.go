package router

import (
	"errors"
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Why raw system calls: every read(2) or write(2) made through the
// runtime's syscall path wakes the runtime's monitor thread when it is
// asleep, and at tens of frames a second it always is, so each burst of
// router work paid a futex wake and a string of 20 µs sleeps on a second
// thread, a third of the router's CPU on a VM where a context switch is
// dear. A socket the runtime keeps non-blocking never blocks in read or
// write, so the router makes those calls raw, and waits for readiness
// through RawConn as before (deadlines and Close still apply).

// rawReader reads a socket with raw read(2) calls; a read that finds
// nothing parks the goroutine in the runtime's poller.
type rawReader struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // r.read, bound once: a closure per read would allocate
	p   []byte
	n   int
	err syscall.Errno
}

// readerOf returns the reader the router reads nc with.
func readerOf(nc net.Conn) io.Reader {
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			r := &rawReader{rc: rc}
			r.fn = r.read
			return r
		}
	}
	return nc
}

func (r *rawReader) read(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(r.p))), uintptr(len(r.p)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until readable
		}
		r.n, r.err = int(n), e
		return true
	}
}

func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err = p, 0, 0
	err := r.rc.Read(r.fn)
	n, e := r.n, r.err
	r.p = nil
	switch {
	case err != nil:
		return 0, err
	case e != 0:
		return 0, e
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

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
	// Raw, like rawReader's read, and for the same reason.
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(w.p))), uintptr(len(w.p)))
	w.n, w.err = int(n), nil
	if e != 0 {
		w.n, w.err = -1, e
	}
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
