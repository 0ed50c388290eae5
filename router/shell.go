package router

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/fastpath"
	"github.com/flybus/flybus/internal/rawio"
	"github.com/flybus/flybus/wire"
)

// shell runs one connection: a reader that decodes frames and steps the
// core, and a writer that pulls frames off the connection's lanes, encodes
// them outside the lock and writes them. A client that stops reading
// stalls only its own writer.
//
// Who owns what: the first block is set before the goroutines start and
// never changes (nc and kick are safe for concurrent use); writing,
// handoff and rest are guarded by r.mu; frames, buf, atts and spent belong
// to whoever holds the write token (a stepping goroutine or the writer).
type shell struct {
	r          *Router
	c          *conn // core state: read and written only under r.mu
	nc         net.Conn
	tw         rawio.TryWriter // nil: this transport cannot write without blocking
	w          io.Writer       // nc's blocking writes (rawio.NewWriter)
	kick       chan struct{}
	helloTimer *time.Timer

	// The write token and what its holder owns (see writeDirect).
	writing bool   // guarded by r.mu: the token is held
	hold    bool   // guarded by r.mu: the reader has more frames buffered; write when it has stepped them
	held    bool   // guarded by r.mu: frames became ready while hold was set
	holding bool   // the reader's copy of hold
	handoff bool   // guarded by r.mu: passed to the writer goroutine with rest
	rest    []byte // guarded by r.mu: bytes a step could not write without blocking
	frames  []frame
	buf     []byte
	atts    []wire.Attachment
	spent   [][]byte // control bodies encoded since the last pull, handed back at the next

	// Lane wait: readySince (guarded by r.mu) is when the oldest step whose
	// frames are not yet pulled began; a pull copies it to pulledSince,
	// which the token's holder reads when the batch's write begins.
	readySince, pulledSince time.Time

	io ioCounters // what crossed the transport, for Details
}

// ioCounters count a connection's traffic; atomics, because the reader,
// the writer and stepping goroutines add to them and Details reads them.
type ioCounters struct {
	read, framesIn, written, framesOut, writes atomic.Uint64
}

// closeGrace bounds how long a writer keeps trying to deliver the final
// frames to a peer that stopped reading.
const closeGrace = 2 * time.Second

// defaultFrameTimeout is Config.FrameTimeout's default.
const defaultFrameTimeout = 10 * time.Second

func (r *Router) frameTimeout() time.Duration {
	if r.cfg.FrameTimeout > 0 {
		return r.cfg.FrameTimeout
	}
	return defaultFrameTimeout
}

func (r *Router) maxPendingHello() int {
	if r.cfg.MaxPendingHello > 0 {
		return r.cfg.MaxPendingHello
	}
	return defaultMaxPending(r.cfg.Limits.MaxClients)
}

func (sh *shell) wake() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

func (sh *shell) helloExpired() {
	defer sh.r.wg.Done()
	sh.r.step(input{kind: inHelloExpired, conn: sh.c})
}

func (sh *shell) readLoop() {
	defer sh.r.wg.Done()
	fc := &frameClock{nc: sh.nc, rd: rawio.NewReader(sh.nc), limit: sh.r.frameTimeout()}
	fr := wire.NewFrameReader(fc)
	var dec wire.Decoder
	var env wire.Envelope
	// Declared once: errors.As takes their addresses, which would otherwise
	// move two fresh variables to the heap for every frame.
	var pe *wire.ProtocolError
	var be *wire.BusError
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			var pe *wire.ProtocolError
			switch {
			case errors.As(err, &pe):
				sh.violation(pe.Msg)
			case errors.Is(err, os.ErrDeadlineExceeded):
				sh.violation("a frame was not completed within " + fc.limit.String() + " of its first byte")
			default:
				// The peer left (or we closed): nothing more will be read.
				sh.r.step(input{kind: inDrop, conn: sh.c})
				sh.nc.Close()
				sh.wake() // the writer may be parked with nothing to write
			}
			return
		}
		fc.frameDone(fr.Buffered())
		more := fr.HasFrame()
		if more && !sh.holding {
			sh.setHold(true)
		}
		derr := dec.Decode(frame, &env)
		pe, be = nil, nil
		switch {
		case errors.As(derr, &pe):
			sh.violation(pe.Msg)
			return
		case derr != nil && !errors.As(derr, &be):
			sh.violation(derr.Error())
			return
		}
		sh.io.read.Add(uint64(len(frame)) + 4)
		sh.io.framesIn.Add(1)
		why, closing := sh.r.stepBy(sh, input{kind: inCommand, conn: sh.c, env: &env, bodyErr: be})
		if !more && sh.holding {
			sh.setHold(false)
		}
		dec.Trim() // an idle connection must not pin a large frame's tape
		if why != "" {
			sh.logViolation(why)
		}
		if closing {
			return
		}
	}
}

// setHold starts or ends a batch: while the reader has more whole frames
// buffered, what becomes ready for this connection waits, so that the
// replies to a batch of commands leave in one write instead of one each.
// Ending it writes what waited, as a step would have.
func (sh *shell) setHold(on bool) {
	r := sh.r
	sh.holding = on
	r.mu.Lock()
	sh.hold = on
	held := sh.held
	sh.held = false
	if on || !held || sh.writing || sh.c.closing || sh.c.gone {
		r.mu.Unlock()
		return
	}
	direct := sh.tw != nil
	sh.writing = direct
	r.mu.Unlock()
	if direct {
		sh.writeDirect()
	} else {
		sh.wake()
	}
}

// violation closes the connection for a frame- or envelope-level error
// the reader found, and logs it.
func (sh *shell) violation(msg string) {
	if why, _ := sh.r.step(input{kind: inViolation, conn: sh.c, msg: msg}); why != "" {
		sh.logViolation(why)
	}
}

// logViolation says which client was closed and why: the client only
// sees connection.closing, and an operator needs the reason too. The
// identity is read under the lock; hello may have set it.
func (sh *shell) logViolation(why string) {
	sh.r.mu.Lock()
	id, client := sh.c.id, sh.c.ident.ClientID
	sh.r.mu.Unlock()
	sh.r.cfg.Logger.Info("closing a client for a protocol violation",
		"connectionId", id.String(), "clientId", client, "reason", why)
}

// frameClock is the reader's transport. It bounds how long a frame may
// take once its first byte has arrived, as HTTP servers bound a request
// header, so a peer cannot hold its reader (and its slot) with a frame it
// never finishes; between frames a connection may sit idle for ever.
//
// The deadline is armed only when a frame is left incomplete by a read,
// and left armed after the frame ends, which costs nothing: a stale
// deadline that expires while the connection is idle is cleared and the
// read retried. A frame that arrives whole in one read touches no
// deadline at all.
type frameClock struct {
	nc      net.Conn
	rd      io.Reader // nc's bytes (rawio.NewReader)
	limit   time.Duration
	inFrame bool      // bytes of an unfinished frame are buffered
	due     time.Time // that frame's deadline, zero until its reader first waits
	armed   time.Time // the read deadline set on nc, zero for none
}

func (fc *frameClock) Read(p []byte) (int, error) {
	if fc.inFrame {
		if fc.due.IsZero() {
			fc.due = time.Now().Add(fc.limit)
		}
		if !fc.armed.Equal(fc.due) {
			if err := fc.nc.SetReadDeadline(fc.due); err != nil {
				return 0, err
			}
			fc.armed = fc.due
		}
	}
	for {
		n, err := fc.rd.Read(p)
		if n > 0 {
			fc.inFrame = true
		}
		if n == 0 && !fc.inFrame && !fc.armed.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) {
			if err := fc.nc.SetReadDeadline(time.Time{}); err != nil {
				return 0, err
			}
			fc.armed = time.Time{}
			continue
		}
		return n, err
	}
}

// frameDone is told that a whole frame was read, with buffered bytes read
// past it: the start of the next frame, whose clock starts when the reader
// first waits for the rest of it.
func (fc *frameClock) frameDone(buffered int) {
	fc.inFrame = buffered > 0
	fc.due = time.Time{}
}

// The write token. One goroutine at a time writes a connection's frames:
// whoever holds sh.writing (guarded by the router lock). A step that leaves
// frames for an idle connection takes the token and writes them itself,
// without blocking (tryWriter), so a routed frame costs no wake of another
// goroutine. Whatever does not fit in the socket's buffer is handed, with
// the token, to the connection's writer goroutine, which may block: a peer
// that stops reading stalls only its own writer. Every holder pulls again
// under the lock before it lets go, so a frame queued while it wrote is
// never left behind.

// directRounds bounds how many batches a step writes for one connection
// before it leaves the rest to that connection's writer, so a reader that
// steps does not spend its turn feeding another client indefinitely.
const directRounds = 4

// writeDirect writes what is ready for sh on the stepping goroutine. The
// caller took the token.
func (sh *shell) writeDirect() {
	r := sh.r
	for i := range directRounds {
		if i > 0 {
			r.directWrites.Add(1)
		}
		r.mu.Lock()
		if sh.c.closing || sh.c.gone {
			// Closing is the writer goroutine's job (deadline, final
			// notice, finish).
			sh.writing = false
			r.mu.Unlock()
			sh.wake()
			return
		}
		sh.giveBack()
		sh.pull()
		if len(sh.frames) == 0 {
			sh.writing = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		if sh.encode() {
			sh.handOff(sh.buf) // a final notice: only the writer ends connections
			return
		}
		sh.writeStarts()
		sh.io.writes.Add(1) // before the write: a peer that reads it may look
		n, err := sh.tw.TryWrite(sh.buf)
		sh.io.written.Add(uint64(n))
		if err != nil || n < len(sh.buf) {
			sh.handOff(sh.buf[n:])
			return
		}
		sh.trimBuf()
	}
	r.directWrites.Add(1)
	r.mu.Lock()
	sh.writing = false
	r.mu.Unlock()
	sh.wake()
}

// trimBuf lets a burst's buffer go once it is written, so that a
// connection does not pin it for the rest of its life.
func (sh *shell) trimBuf() {
	if cap(sh.buf) > fastpath.KeepWriteBytes {
		sh.buf = nil
	}
}

// handOff passes the token and the unwritten bytes to the writer goroutine.
func (sh *shell) handOff(rest []byte) {
	sh.r.writerHandoffs.Add(1)
	sh.r.mu.Lock()
	sh.rest, sh.handoff = rest, true
	sh.r.mu.Unlock()
	sh.wake()
}

// encode turns the pulled frames into one buffer, sh.buf, and reports
// whether it ends with the connection's final notice.
func (sh *shell) encode() (last bool) {
	sh.buf = sh.buf[:0]
	sh.io.framesOut.Add(uint64(len(sh.frames)))
	for i := range sh.frames {
		f := &sh.frames[i]
		var err error
		// Source owner ids are never delegated: on the wire each
		// attachment is owned by the recipient's delivery.
		sh.atts = sh.atts[:0]
		for _, a := range f.atts {
			a.OwnerID = wire.DeliveryOwner(f.deliveryID())
			sh.atts = append(sh.atts, a)
		}
		if sh.buf, err = wire.AppendFrame(sh.buf, f.hdr, f.body(), sh.atts); err != nil {
			// Admission sized every delivery; this is a router bug.
			sh.r.cfg.Logger.Error("dropping oversized frame", "op", f.hdr.Op, "err", err)
		}
		last = last || f.closeAfter
		if f.raw != nil {
			sh.spent = append(sh.spent, f.raw)
		}
		sh.frames[i] = frame{}
	}
	return last
}

// pull takes the connection's next frames through the core's step. Called
// with the router lock and the write token held. A pull readies nothing
// else, no wake and no I/O (the simulation checks it), so the rest of
// what the step returns is empty.
func (sh *shell) pull() {
	sh.frames = sh.r.core.step(input{kind: inPull, conn: sh.c, frames: sh.frames[:0]}).frames
	sh.r.changes.announce() // what waited in the lanes is on its way
	sh.pulledSince = sh.readySince
	if len(sh.frames) < cap(sh.frames) {
		// The lanes are empty: the next frames carry the stamp of the step
		// that readies them. (A full batch may leave frames behind; they
		// keep the stamp, the oldest they can have.)
		sh.readySince = time.Time{}
	}
	if len(sh.frames) == 0 {
		// A wake that readied nothing for this connection.
		sh.pulledSince = time.Time{}
	}
}

// writeStarts records the lane wait of the batch just pulled. Called by
// the token's holder outside the lock, as the batch's write begins.
func (sh *shell) writeStarts() {
	if !sh.pulledSince.IsZero() {
		sh.r.laneWait.observe(time.Since(sh.pulledSince))
		sh.pulledSince = time.Time{}
	}
}

// giveBack returns the encoded control bodies to the connection. Called
// with the router lock and the write token held.
func (sh *shell) giveBack() {
	sh.c.recycle(sh.spent)
	clear(sh.spent)
	sh.spent = sh.spent[:0]
}

// writeLoop is the connection's blocking writer: it takes the token when it
// is free or handed over, writes until nothing is ready, and ends the
// connection after its final notice or when the peer is gone.
func (sh *shell) writeLoop() {
	defer sh.r.wg.Done()
	defer func() {
		if sh.helloTimer.Stop() {
			sh.r.wg.Done() // it will never fire
		}
	}()
	r := sh.r
	for {
		r.mu.Lock()
		if sh.writing && !sh.handoff {
			// A step is writing; it wakes this goroutine if anything is
			// left for it when it lets go.
			r.mu.Unlock()
			<-sh.kick
			continue
		}
		sh.writing, sh.handoff = true, false
		rest := sh.rest
		sh.rest = nil
		r.mu.Unlock()
		if len(rest) > 0 {
			sh.io.writes.Add(1)
			if err := wire.WriteFull(sh.w, rest); err != nil {
				sh.finish()
				return
			}
			sh.io.written.Add(uint64(len(rest)))
		}
		for wrote := false; ; wrote = true {
			if wrote {
				r.writerWrites.Add(1)
			}
			r.mu.Lock()
			sh.giveBack()
			sh.pull()
			closing, gone := sh.c.closing, sh.c.gone
			if len(sh.frames) == 0 {
				sh.writing = false
				r.mu.Unlock()
				if gone || closing && sh.c.closeWritten {
					sh.finish()
					return
				}
				break
			}
			r.mu.Unlock()
			last := sh.encode()
			if last {
				_ = sh.nc.SetWriteDeadline(time.Now().Add(closeGrace))
			}
			sh.writeStarts()
			sh.io.writes.Add(1)
			err := wire.WriteFull(sh.w, sh.buf)
			if err == nil {
				sh.io.written.Add(uint64(len(sh.buf)))
			}
			if err != nil || last {
				sh.finish()
				return
			}
			sh.trimBuf()
		}
		<-sh.kick
	}
}

// finish closes the transport and removes the connection.
func (sh *shell) finish() {
	sh.nc.Close()
	// Through step: dropping may fail other clients' calls (their writers
	// must wake, an overflow must settle) and collect artifacts (unlinks).
	sh.r.step(input{kind: inDrop, conn: sh.c})
	sh.r.mu.Lock()
	delete(sh.r.shells, sh.c)
	sh.r.mu.Unlock()
}
