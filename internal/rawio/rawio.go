// Package rawio reads and writes a socket with raw read(2) and write(2)
// calls, waiting for readiness through the runtime's poller as net.Conn
// does, so deadlines and Close still apply.
//
// Why: every call made through the runtime's ordinary syscall path wakes
// the runtime's monitor thread when it sleeps, and a bus at tens of frames
// a second idles between bursts, so it always sleeps. Each burst then paid
// a futex wake and a run of 20 µs sleeps on that thread: on a VM, where a
// context switch is dear, a third of the router's CPU. A socket the runtime
// keeps non-blocking never blocks in read or write, so nothing is lost by
// making the calls raw.
package rawio

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawConn is the descriptor of nc, if it has one.
func rawConn(nc net.Conn) syscall.RawConn {
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return rc
		}
	}
	return nil
}

// Reader reads one socket. A read that finds nothing parks the goroutine
// in the poller until the socket is readable. Not safe for concurrent use.
type Reader struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // r.read, bound once: a closure per read would allocate
	p   []byte
	n   int
	err syscall.Errno
}

// NewReader returns a raw reader of nc, or nc itself when it has no
// descriptor (an in-memory pipe).
func NewReader(nc net.Conn) io.Reader {
	rc := rawConn(nc)
	if rc == nil {
		return nc
	}
	r := &Reader{rc: rc}
	r.fn = r.read
	return r
}

func (r *Reader) read(fd uintptr) bool {
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

// Read reads what is there, up to len(p) bytes, waiting until something
// is; end of stream is io.EOF.
func (r *Reader) Read(p []byte) (int, error) {
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

// Writer writes one socket. Not safe for concurrent use.
type Writer struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool // w.write, bound once
	p     []byte
	n     int
	err   syscall.Errno
	whole bool // write all of p, waiting for room; else one attempt
}

// NewWriter returns a raw writer of nc whose Write writes all of p,
// waiting for room as net.Conn's does, or nc itself when it has no
// descriptor.
func NewWriter(nc net.Conn) io.Writer {
	rc := rawConn(nc)
	if rc == nil {
		return nc
	}
	return newWriter(rc, true)
}

func newWriter(rc syscall.RawConn, whole bool) *Writer {
	w := &Writer{rc: rc, whole: whole}
	w.fn = w.write
	return w
}

func (w *Writer) write(fd uintptr) bool {
	for w.n < len(w.p) {
		rest := w.p[w.n:]
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
		switch e {
		case 0:
			w.n += int(n)
			if !w.whole {
				return true
			}
		case unix.EINTR:
		case unix.EAGAIN:
			return !w.whole // full: wait for room, or report what fit
		default:
			w.err = e
			return true
		}
	}
	return true
}

// Write writes p: all of it, or with a TryWriter what fits now.
func (w *Writer) Write(p []byte) (int, error) {
	w.p, w.n, w.err = p, 0, 0
	err := w.rc.Write(w.fn)
	n, e := w.n, w.err
	w.p = nil
	if err == nil && e != 0 {
		err = e
	}
	return n, err
}

// TryWriter writes what fits without blocking: it returns how much of p
// it wrote (possibly nothing, with a nil error, when the peer's buffer is
// full) and an error only when the transport failed.
type TryWriter interface {
	TryWrite(p []byte) (int, error)
}

// NewTryWriter returns nc's non-blocking write: nc's own TryWrite if it
// has one, a raw one if it has a descriptor, else nil.
func NewTryWriter(nc net.Conn) TryWriter {
	if tw, ok := nc.(TryWriter); ok {
		return tw
	}
	if rc := rawConn(nc); rc != nil {
		return tryWriter{newWriter(rc, false)}
	}
	return nil
}

type tryWriter struct{ w *Writer }

func (t tryWriter) TryWrite(p []byte) (int, error) { return t.w.Write(p) }
