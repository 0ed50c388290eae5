package router

import (
	"cmp"
	"slices"

	"github.com/flybus/flybus/wire"
)

// The core's boundary. Everything that moves the routing state is one of
// a closed set of inputs, applied by step; what a step leaves for the shell
// comes back as one ready value. The shell, the simulation and the
// scenario scripts all drive the core through it, so what the tests drive
// is what runs.

type inputKind uint8

const (
	inCommand      inputKind = iota + 1 // a decoded command: env, with bodyErr when its body was refused
	inViolation                         // the reader found a frame- or envelope-level error: msg
	inDrop                              // the transport ended, or its writer finished
	inClose                             // the router closes the connection: code, msg
	inStaged                            // the store staged an allocation: eff, loc, err
	inSealed                            // the store sealed an artifact: eff, loc, mismatch, err
	inHelloExpired                      // the hello timer fired
	inAccept                            // a transport arrived: register it (bound: its launcher's client id)
	inPending                           // a connection was accepted: keep those in hello to limit
	inPull                              // the connection's writer takes up to cap(frames) frames
	inShutdown                          // the router shuts down
)

// input is one step's input; which fields matter depends on kind.
type input struct {
	kind     inputKind
	conn     *conn
	env      *wire.Envelope
	bodyErr  *wire.BusError
	msg      string
	code     wire.ErrorCode
	eff      effect
	loc      artLoc
	bound    string // inAccept
	mismatch bool   // inSealed: the bytes disagree with the size or digest
	full     bool   // inStaged: a bound of the store's refused the slot
	err      error
	limit    int
	frames   []frame // inPull: the destination, appended to
	// now is the shell's clock when it read a publish command (Unix
	// nanoseconds), for the queue ages Details reports; the core never
	// reads a clock itself.
	now int64
}

// ready is what a step left for the shell, in an order that depends on
// the inputs only: the connections with new frames by connection id, the
// store I/O to run in the order the step asked for it.
type ready struct {
	wake    []*conn
	effects []effect
	frames  []frame // inPull: the frames taken, in write order
	// violation is the reason of a protocol close the step made, for the
	// shell's log line; closing says the input's connection is closing
	// (its reader stops).
	violation string
	closing   bool
	// inAccept: the new connection, or why there is none
	accepted  *conn
	acceptErr error
}

// step applies one input and returns what it made ready. The value is the
// core's own and valid until the next step: the caller copies what it
// keeps before it lets go of the lock.
func (k *core) step(in input) *ready {
	rd := &k.ready
	clear(rd.wake)
	clear(rd.effects)
	*rd = ready{wake: rd.wake[:0], effects: rd.effects[:0]}
	closes := k.stats.protocolCloses
	if in.now != 0 {
		k.now = in.now
	}
	c := in.conn
	switch in.kind {
	case inCommand:
		k.handle(c, in.env, in.bodyErr)
	case inViolation:
		k.violation(c, in.msg)
	case inDrop:
		k.drop(c)
	case inClose:
		if !c.closing && !c.gone {
			k.closeConn(c, in.code, in.msg)
		}
	case inStaged:
		k.stagedAt(in.eff, in.loc, in.full, in.err)
	case inSealed:
		k.sealedAt(in.eff, in.loc, in.mismatch, in.err)
	case inHelloExpired:
		if !c.helloDone && !c.closing {
			k.closeConn(c, wire.ErrInvalidEnvelope, "no bus.hello before the hello timeout")
		}
	case inAccept:
		rd.accepted, rd.acceptErr = k.accept(in.bound)
	case inPending:
		k.boundPending(in.limit)
	case inPull:
		rd.frames = k.pull(c, in.frames)
	case inShutdown:
		k.shutdown()
	}
	k.settle()
	if k.stats.protocolCloses != closes {
		rd.violation = k.lastViolation
	}
	if c != nil {
		rd.closing = c.closing
	}
	rd.effects = k.takeEffects(rd.effects)
	rd.wake = k.takeDirty(rd.wake)
	slices.SortFunc(rd.wake, func(a, b *conn) int { return cmp.Compare(a.id, b.id) })
	return rd
}
