package router

import (
	"errors"
	"net"
	"time"

	"github.com/flybus/flybus/wire"
)

// shell runs one connection: a reader that decodes frames and steps the
// core, and a writer that pulls frames off the connection's lanes, encodes
// them outside the lock and writes them. A client that stops reading
// stalls only its own writer.
type shell struct {
	r          *Router
	c          *conn
	nc         net.Conn
	kick       chan struct{}
	helloTimer *time.Timer
}

// closeGrace bounds how long a writer keeps trying to deliver the final
// frames to a peer that stopped reading.
const closeGrace = 2 * time.Second

// writeBatch is how many frames a writer pulls per lock acquisition.
const writeBatch = 32

func (sh *shell) wake() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

func (sh *shell) helloExpired() {
	sh.r.step(func(k *core) {
		if !sh.c.helloDone && !sh.c.closing {
			k.closeConn(sh.c, wire.ErrInvalidEnvelope, "no bus.hello before the hello timeout")
		}
	})
}

func (sh *shell) readLoop() {
	defer sh.r.wg.Done()
	fr := wire.NewFrameReader(sh.nc)
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
			if errors.As(err, &pe) {
				sh.r.step(func(k *core) { k.violation(sh.c, pe.Msg) })
			} else {
				// The peer left (or we closed): nothing more will be read.
				sh.r.step(func(k *core) { k.drop(sh.c) })
				sh.nc.Close()
				sh.wake() // the writer may be parked with nothing to write
			}
			return
		}
		derr := dec.Decode(frame, &env)
		pe, be = nil, nil
		switch {
		case errors.As(derr, &pe):
			sh.r.step(func(k *core) { k.violation(sh.c, pe.Msg) })
			return
		case derr != nil && !errors.As(derr, &be):
			sh.r.step(func(k *core) { k.violation(sh.c, derr.Error()) })
			return
		}
		closing := false
		sh.r.step(func(k *core) {
			k.handle(sh.c, &env, be)
			closing = sh.c.closing
		})
		if closing {
			return
		}
	}
}

func (sh *shell) writeLoop() {
	defer sh.r.wg.Done()
	defer sh.helloTimer.Stop()
	frames := make([]frame, 0, writeBatch)
	var buf []byte
	var atts []wire.Attachment
	for {
		sh.r.mu.Lock()
		frames = sh.r.core.pull(sh.c, frames[:0])
		closing, gone := sh.c.closing, sh.c.gone
		sh.r.mu.Unlock()
		if len(frames) == 0 {
			if gone || closing && sh.c.closeWritten {
				sh.finish()
				return
			}
			<-sh.kick
			continue
		}
		buf = buf[:0]
		last := false
		for i := range frames {
			f := &frames[i]
			var err error
			// Source owner ids are never delegated: on the wire each
			// attachment is owned by the recipient's delivery.
			atts = atts[:0]
			for _, a := range f.atts {
				a.OwnerID = wire.DeliveryOwner(f.deliveryID())
				atts = append(atts, a)
			}
			if buf, err = wire.AppendFrame(buf, f.hdr, f.body(), atts); err != nil {
				// Admission sized every delivery; this is a router bug.
				sh.r.cfg.Logger.Error("dropping oversized frame", "op", f.hdr.Op, "err", err)
			}
			last = last || f.closeAfter
			frames[i] = frame{}
		}
		if last {
			_ = sh.nc.SetWriteDeadline(time.Now().Add(closeGrace))
		}
		if err := wire.WriteFull(sh.nc, buf); err != nil || last {
			sh.finish()
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil // do not pin a burst's buffer
		}
	}
}

// finish closes the transport and removes the connection.
func (sh *shell) finish() {
	sh.nc.Close()
	// Through step: dropping may fail other clients' calls (their writers
	// must wake, an overflow must settle) and collect artifacts (unlinks).
	sh.r.step(func(k *core) {
		k.drop(sh.c)
		delete(sh.r.shells, sh.c)
	})
}
