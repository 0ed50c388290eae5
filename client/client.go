package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flybus/flybus/internal/rawio"
	"github.com/flybus/flybus/wire"
)

// Config identifies the participant and tunes the connection.
type Config struct {
	ClientID string
	// ClientIncarnation is generated when empty (for a Dial client, anew
	// for each connection); a reconnect needs a new one.
	ClientIncarnation string
	// StoreRoot is the router's store root (flybus serve --store DIR), under
	// which artifact locations are opened. A connection made by a router's
	// ConnectInMemory supplies it when this is empty; over a Unix socket it
	// must be set for artifact work. When set, connecting checks that it
	// holds the router's store (an error matching ErrNoStoreRoot if not).
	StoreRoot string
	// Logger receives the client's warnings, such as a handle collected
	// without Close [slog.Default()].
	Logger *slog.Logger
	// AllocateAhead is how many recent (size, content type) pairs keep one
	// allocation prepared, so that Allocate of such a size returns at once
	// while the next one is asked for in the background [0: off]. Each
	// prepared allocation holds an owner and its bytes of the store budget
	// until it is taken, or released at Close; a producer of frames of one
	// size wants 1.
	AllocateAhead int
	// OpenAhead asks for the read location of every artifact a delivery
	// carries as soon as the delivery arrives, so that View (files mode)
	// finds it answered instead of making that round trip itself. It costs
	// the round trip for artifacts that are never viewed; a slot the
	// connection keeps mapped (pool mode) needs none [false].
	OpenAhead bool
	// HeldCreditsWarnAfter is how long the program may hold all of a
	// subscription's in-flight credits (messages taken and not closed, with
	// any artifact, view or reader taken from them) before the client logs
	// a warning and counts it in Stats().StalledSubscriptions: such a
	// subscription receives nothing more, and a forgotten Close is the
	// usual cause. One warning per episode, which ends when a message is
	// closed [5s; negative: never].
	HeldCreditsWarnAfter time.Duration
	// TrackHandles records where the program got each handle that must be
	// closed (the first caller outside this package), and names those
	// places in the stalled-subscription and collected-without-Close
	// warnings. In pool mode it also maps every view of its own instead of
	// slicing the slot's cached mapping, so a slice read after its view's
	// Close faults rather than showing a later frame. It costs a stack walk
	// per handle and a mapping per view; for finding a missing Close or a
	// use after it. Also set by the environment variable
	// FLYBUS_TRACK_HANDLES=1.
	TrackHandles bool
	// VerifyReads makes Artifact.View and Artifact.ReadAll check the bytes
	// against the digest the artifact was sealed with, as
	// ArtifactView.Verify does, and fail with its error instead of
	// returning them: a changed artifact (ErrDigestMismatch) or one sealed
	// without a digest (ErrNoDigest). It costs a SHA-256 of every byte
	// per read; see docs/integrity.md [false].
	VerifyReads bool
	// OnConnect runs on each new connection once the router has accepted
	// it and before anything is delivered on it: for a Dial client after
	// every reconnect, before the topics, services and subscriptions are
	// restored. A new router numbers topic sequences anew, so a program
	// that remembers sequences forgets them here. It must return promptly
	// and must not use the Client, which is not connected until it returns.
	OnConnect func(Info)

	// controlLane bounds queued consumes, releases and cancels [4096];
	// overflowing it closes the connection rather than drop one. Tests
	// set it (export_test.go).
	controlLane int
}

// Info describes the negotiated session.
type Info struct {
	RouterID       wire.RouterID
	ConnectionID   wire.ConnID
	StoreID        wire.StoreID // the router's store: a directory of that name under the store root
	Identity       wire.Identity
	SelectedMajor  uint32
	SelectedMinor  uint32
	ContractDigest wire.Digest
	Limits         wire.Limits
}

// conn is one connection to a router: a Client's, for its whole life, or
// for one stretch between losses when it reconnects (dial.go). Handles
// made on it (messages, artifacts, calls) belong to it; subscriptions and
// services move to the next connection.
type conn struct {
	// Who owns what: cfg, nc, info, kick, done and closed are set by
	// Connect and never change (the channels are safe for concurrent use);
	// wbuf belongs to the holder of wmu, the write token; the fields from
	// nextMsg to anyBus are guarded by mu; discards belongs to the reader
	// goroutine; the atomics, the slot cache and ahead guard themselves.

	cfg        Config
	nc         net.Conn
	info       Info
	reconnects bool // its Client replaces it after a loss (Dial)
	// The extensions the router granted at hello. With quietConsume the
	// router answers no accepted consume, so none waits for an answer.
	awaitTopic, presence, quietConsume bool
	// minor is the version of the router's hello reply: every later
	// envelope, both ways, is in it. Guarded by mu.
	minor wire.Opt[uint32]

	wmu  sync.Mutex // the write token: its holder encodes and writes
	wbuf []byte     // the token holder's frame buffer
	w    io.Writer  // nc's writes (rawio.NewWriter), the token holder's

	mu       sync.Mutex // guards nextMsg through anyBus
	nextMsg  uint64
	nextCall uint64
	waiters  map[uint64]*waiter // by command serial
	ordinary []*sendItem
	control  []*sendItem
	consumes []wire.DeliveryID
	// the writer's reusable delivery.consumed command
	consumed    wire.Consumed
	consumeItem sendItem
	services    map[string]*Service
	calls       map[wire.CallID]*PendingCall
	subs        map[wire.SubID]*Subscription
	closing     bool           // Close called: drain, then close
	wclosed     bool           // the write side is shut: nothing more is sent
	lost        error          // set once the connection is gone
	writeErr    error          // a failed write: the reader drains, then fails with it
	closedWith  wire.ErrorCode // the code of the router's connection.closing, if it sent one
	lastBus     uint64         // strictly increasing router envelope ids
	anyBus      bool
	kick        chan struct{}
	done        chan struct{} // closed when the reader and writer have stopped

	discards      map[wire.Op]wire.Body // the reader's own: targets for unawaited replies
	controlErrors atomic.Uint64
	leaks         atomic.Uint64
	slots         slotCache     // pool mode: one mapping per viewed slot
	ahead         ahead         // allocations prepared ahead (Config.AllocateAhead)
	handles       openHandles   // owning handles open (and where made, when tracking)
	stall         stallWatch    // Config.HeldCreditsWarnAfter
	artifactOpens atomic.Uint64 // artifact.open round trips
	openedAhead   atomic.Uint64 // views served by an open sent ahead
	maps, unmaps  atomic.Uint64 // per-view mappings
	wg            sync.WaitGroup
	closed        chan struct{} // closed once lost is set
}

// sendItem is one command waiting for the writer.
type sendItem struct {
	op   wire.Op
	body wire.Body // encoded by the writer; its data lives until the reply
	atts []wire.Attachment
	w    *waiter
}

// waiter receives the reply to one command. The reader decodes the reply
// value into v before signalling, because the frame is reused afterwards.
type waiter struct {
	op       wire.Op
	v        wire.Body
	ch       chan error // buffered 1
	orphaned bool       // the caller gave up; orphan runs instead
	orphan   func(err error)
	// then runs in the reader right after a successful reply is decoded,
	// before any later frame is dispatched: a subscription must be known
	// before its first delivery arrives.
	then func()
	// complete, when set, takes the result instead of a waiting caller:
	// the reader (or the connection's failure) runs it once, before any
	// later frame is dispatched.
	complete func(err error)
}

// connect performs bus.hello over nc and starts the connection's reader
// and writer. It refuses a router whose contract digest differs.
// reconnects is set for a Client that will replace it after a loss.
func connect(ctx context.Context, nc net.Conn, cfg Config, reconnects bool) (*conn, error) {
	if nc == nil {
		return nil, errors.New("flybus: Connect was given a nil connection: check the error of the call that made it " +
			"(router.ConnectInMemory needs an open policy; use ConnectInMemoryAs under a closed one)")
	}
	if cfg.StoreRoot == "" {
		// An in-memory connection from a router says where its store is.
		if sr, ok := nc.(interface{ StoreRoot() string }); ok {
			cfg.StoreRoot = sr.StoreRoot()
		}
	}
	if !wire.ValidID(cfg.ClientID) {
		nc.Close()
		return nil, fmt.Errorf("flybus: invalid client id %q", cfg.ClientID)
	}
	if cfg.ClientIncarnation == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ClientIncarnation = "inc-" + hex.EncodeToString(b[:])
	}
	if !wire.ValidID(cfg.ClientIncarnation) {
		nc.Close()
		return nil, fmt.Errorf("flybus: invalid client incarnation %q", cfg.ClientIncarnation)
	}
	if cfg.controlLane <= 0 {
		cfg.controlLane = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if os.Getenv("FLYBUS_TRACK_HANDLES") == "1" {
		cfg.TrackHandles = true
	}
	c := &conn{cfg: cfg, nc: nc, w: rawio.NewWriter(nc), reconnects: reconnects, waiters: map[uint64]*waiter{}, services: map[string]*Service{},
		calls: map[wire.CallID]*PendingCall{}, subs: map[wire.SubID]*Subscription{}, kick: make(chan struct{}, 1),
		done: make(chan struct{}), closed: make(chan struct{})}
	switch {
	case cfg.HeldCreditsWarnAfter == 0:
		c.stall.after = defaultHeldCreditsWarnAfter
	case cfg.HeldCreditsWarnAfter > 0:
		c.stall.after = cfg.HeldCreditsWarnAfter
	}
	if cfg.TrackHandles {
		c.handles.track, c.handles.recs = true, map[*handleRec]struct{}{}
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	go func() { c.wg.Wait(); close(c.done) }()

	var ok wire.HelloOK
	err := c.do(ctx, request{op: wire.OpHello, body: &wire.Hello{ClientID: cfg.ClientID,
		ClientIncarnation: cfg.ClientIncarnation, SupportedMajors: []uint32{wire.Major},
		Extensions: []string{wire.ExtAwaitTopic, wire.ExtPresence, wire.ExtQuietConsume}}, reply: &ok})
	// A router of an older minor (1.1) answers in it: the client then
	// speaks that minor, without what later minors add.
	digest, known := wire.ContractDigestFor(ok.SelectedMinor)
	if err == nil && (ok.SelectedMajor != wire.Major || !known) {
		err = wire.NewError(wire.ErrVersionMismatch, 0, "router selected %d.%d; this client speaks %d.%d to %d.%d",
			ok.SelectedMajor, ok.SelectedMinor, wire.Major, wire.OldestMinor, wire.Major, wire.Minor)
	}
	c.mu.Lock()
	envMinor := c.minor // the hello reply's envelope's (dispatch)
	c.mu.Unlock()
	if err == nil && envMinor.V != ok.SelectedMinor {
		err = wire.NewError(wire.ErrVersionMismatch, 0, "router selected %d.%d in a %d.%d envelope",
			ok.SelectedMajor, ok.SelectedMinor, wire.Major, envMinor.V)
	}
	if err == nil && ok.ContractDigest != digest {
		err = wire.NewError(wire.ErrVersionMismatch, 0, "router contract digest %s differs from ours %s for %d.%d",
			ok.ContractDigest, digest, ok.SelectedMajor, ok.SelectedMinor)
	}
	if err == nil {
		err = checkStoreRoot(cfg.StoreRoot, ok.StoreID)
	}
	if err != nil {
		c.fail(err)
		<-c.done
		c.mu.Lock()
		code := c.closedWith
		c.mu.Unlock()
		if code != 0 && code != wire.ErrRouterLost {
			// Refused before hello (a full router): say why in its code.
			var be *wire.BusError
			if errors.As(err, &be) {
				err = &wire.BusError{Code: code, Dispatch: wire.NotDispatched, Message: be.Message}
			}
		}
		return nil, err
	}
	for _, e := range ok.Extensions {
		switch e {
		case wire.ExtAwaitTopic:
			c.awaitTopic = true
		case wire.ExtPresence:
			c.presence = true
		case wire.ExtQuietConsume:
			c.quietConsume = true
		}
	}
	c.info = Info{RouterID: ok.RouterID, ConnectionID: ok.ConnectionID, StoreID: ok.StoreID,
		Identity:      wire.Identity{ClientID: cfg.ClientID, ClientIncarnation: cfg.ClientIncarnation},
		SelectedMajor: ok.SelectedMajor, SelectedMinor: ok.SelectedMinor,
		ContractDigest: ok.ContractDigest, Limits: ok.Limits}
	if cfg.OnConnect != nil {
		cfg.OnConnect(c.info) // nothing is subscribed on c yet: nothing can be delivered before it returns
	}
	return c, nil
}

// checkStoreRoot refuses a StoreRoot that does not hold the router's
// store, at connect rather than at the first artifact.
func checkStoreRoot(root string, id wire.StoreID) error {
	if root == "" {
		return nil
	}
	fi, err := os.Stat(filepath.Join(root, id.String()))
	if err == nil && fi.IsDir() {
		return nil
	}
	return &storeRootError{root: root, id: id}
}

// storeRootError is a StoreRoot without the router's store; it matches
// ErrNoStoreRoot.
type storeRootError struct {
	root string
	id   wire.StoreID
}

func (e *storeRootError) Error() string {
	return fmt.Sprintf("flybus: StoreRoot %s does not hold the router's store %s: give the directory the router keeps its stores under (flybus serve --store DIR)", e.root, e.id)
}

func (e *storeRootError) Is(target error) bool { return target == ErrNoStoreRoot }

// dialUnix dials a router's socket, saying what is wrong when nobody
// listens there.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("flybus: no router is listening on %s (is flybus serve running, with --listen %s?): %w", path, path, err)
	}
	return nc, err
}

func (c *conn) Info() Info { return c.info }

// routerShutdown is the reason of the subscription.closed notices a router
// sends as it shuts down.
const routerShutdown = "router-shutdown"

// Err returns why the connection ended, or nil while it is up.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// Done is closed when the connection has ended.
func (c *conn) Done() <-chan struct{} { return c.closed }

func (c *conn) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return c.CloseContext(ctx)
}

// CloseContext is Client.CloseContext for this connection.
func (c *conn) CloseContext(ctx context.Context) error {
	c.closeAhead()
	c.mu.Lock()
	if c.lost == nil {
		c.closing = true
	}
	c.mu.Unlock()
	c.wakeWriter()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.fail(ErrClosed)
		<-c.done
		return fmt.Errorf("flybus: closed without waiting for the router to let go: %w", ctx.Err())
	}
}

// shutWrite ends the orderly close: the write side is shut, and the reader
// ends when the router, having dropped this connection, closes its side.
// A transport without half-close is closed outright.
func (c *conn) shutWrite() {
	c.wmu.Lock() // no write may be in progress
	defer c.wmu.Unlock()
	c.mu.Lock()
	c.wclosed = true
	c.mu.Unlock()
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	c.fail(ErrClosed)
}

// fail ends the connection with err: pending commands and calls fail with
// ErrClosed when the program closed the client, otherwise with ROUTER_LOST
// (dispatch unknown) unless err is already one.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.lost != nil {
		c.mu.Unlock()
		return
	}
	if c.closing {
		err = ErrClosed // whatever ended the connection, the program asked for it
	}
	c.lost = err
	keep := c.reconnects && !c.closing // the Client moves subscriptions and services on
	waiters := c.waiters
	c.waiters = map[uint64]*waiter{}
	queued := append(c.ordinary, c.control...)
	c.ordinary, c.control = nil, nil
	calls := c.calls
	c.calls = map[wire.CallID]*PendingCall{}
	services := c.services
	c.services = map[string]*Service{}
	subs := c.subs
	c.subs = map[wire.SubID]*Subscription{}
	// Unmapped before Done fires (views still open keep their slot mapped
	// until they close), so that a program that waited for Done and closed
	// its views holds no mapping of the store.
	c.slots.close()
	close(c.closed)
	c.mu.Unlock()
	c.nc.Close()
	c.wakeWriter()
	c.stopStallChecks()
	lostErr := lostError(err)
	for _, w := range waiters {
		w.settle(lostErr)
	}
	for _, it := range queued {
		if it.w != nil {
			it.w.settle(lostErr)
		}
	}
	for _, p := range calls {
		p.finish(nil, lostErr)
	}
	if keep {
		// What they queued from this connection is stale: consumed here
		// (a no-op now) instead of handed out.
		for _, s := range services {
			s.in.drain()
		}
		for _, s := range subs {
			s.in.drain()
		}
		return
	}
	for _, s := range services {
		s.closeQueue(lostErr)
	}
	subErr := &handleError{msg: "flybus: subscription closed: " + lostErr.Error(),
		kinds: []error{ErrSubscriptionClosed}, cause: lostErr}
	for _, s := range subs {
		s.closeQueue(subErr)
	}
}

// stale is the error of a handle of this connection once a Dial client
// lost it, else nil: handles that work without a round trip check it.
func (c *conn) stale() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reconnects && c.lost != nil && !c.closing {
		return staleHandle(notSent(c.lost))
	}
	return nil
}

// errControlOverflow ends a connection whose control lane is full: a
// consume or release is never dropped, so the connection goes instead.
var errControlOverflow = errors.New("the client's control lane overflowed (more consumes and releases queued than it holds)")

func (c *conn) wakeWriter() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// request is one command to the router: what to send, where the reply's
// value goes, and the hooks around it. Every command goes through it.
type request struct {
	op    wire.Op
	body  wire.Body // encoded by the writer; its data lives until the reply
	atts  []wire.Attachment
	reply wire.Body // the reply's value is decoded into it
	// orphan runs with the reply when the caller gave up waiting, so that
	// nothing the router granted is leaked.
	orphan func(err error)
	// then runs in the reader right after a successful reply is decoded,
	// before any later frame is dispatched: a subscription must be known
	// before its first delivery arrives.
	then func()
	// prepare runs under the client lock as the command is queued:
	// commands are written in queue order, so an id assigned there (a call
	// id) increases in write order even when goroutines race.
	prepare func()
	// complete, for a command nobody waits for (an allocation or open made
	// ahead, a NoWait seal), takes the outcome: the reader, or the
	// connection's failure, runs it once, before any later frame is
	// dispatched. Without it and without a waiting caller (a control
	// command) only a refusal is counted.
	complete func(err error)
}

// do sends r and waits for its reply. If ctx ends first, r.orphan (when
// set) runs with the reply once it arrives.
func (c *conn) do(ctx context.Context, r request) error {
	w := &waiter{op: r.op, v: r.reply, ch: make(chan error, 1), orphan: r.orphan, then: r.then}
	if err := c.queue(r, w, false); err != nil {
		return err
	}
	c.flush() // write on this goroutine: no handoff to the writer
	select {
	case err := <-w.ch:
		return err
	case <-ctx.Done():
		// Under the lock the reader delivers with: either the reply is
		// already here, or from now on the orphan handler gets it.
		c.mu.Lock()
		defer c.mu.Unlock()
		select {
		case err := <-w.ch:
			return err
		default:
		}
		w.orphaned = true
		return ctx.Err()
	}
}

// post queues r without waiting for it: r.complete takes the outcome. A
// control command (consumes, releases, cancels) goes ahead of ordinary
// ones and is never refused for a closing client.
func (c *conn) post(r request, control bool) error {
	var w *waiter
	if r.complete != nil {
		w = &waiter{op: r.op, v: r.reply, complete: r.complete}
	}
	return c.queue(r, w, control)
}

func (c *conn) queue(r request, w *waiter, control bool) error {
	it := &sendItem{op: r.op, body: r.body, atts: r.atts, w: w}
	c.mu.Lock()
	if c.lost != nil || c.wclosed || c.closing && !control {
		err, stale := c.lost, c.reconnects && c.lost != nil && !c.closing
		c.mu.Unlock()
		if err == nil {
			err = ErrClosed
		}
		if stale {
			return staleHandle(notSent(err))
		}
		return notSent(err)
	}
	if control {
		if len(c.control)+len(c.consumes) >= c.cfg.controlLane {
			c.mu.Unlock()
			c.fail(errControlOverflow)
			return notSent(errControlOverflow)
		}
		c.control = append(c.control, it)
		c.mu.Unlock()
		c.wakeWriter() // never block a Close on the socket
		return nil
	}
	if r.prepare != nil {
		r.prepare()
	}
	c.ordinary = append(c.ordinary, it)
	c.mu.Unlock()
	return nil
}

// consume queues delivery.consumed for d, batched by the writer.
func (c *conn) consume(d wire.DeliveryID) {
	c.mu.Lock()
	if c.lost != nil || c.wclosed {
		c.mu.Unlock()
		return // the router releases the delivery with the connection
	}
	overflow := len(c.control)+len(c.consumes) >= c.cfg.controlLane
	if !overflow {
		c.consumes = append(c.consumes, d)
	}
	c.mu.Unlock()
	if overflow {
		c.fail(errControlOverflow)
		return
	}
	c.wakeWriter()
}

// fireAndForget queues a control command whose reply only matters when it
// is a refusal; refusals are counted in ControlErrors.
func (c *conn) fireAndForget(op wire.Op, body wire.Body) {
	_ = c.post(request{op: op, body: body}, true)
}

// writeLoop flushes on behalf of goroutines that must not block on the
// socket (Close methods queueing consumes and releases, the reader's orphan
// handling), and performs the orderly close.
func (c *conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.kick:
		case <-c.closed:
			return
		}
		if c.flush() != nil {
			return
		}
		c.mu.Lock()
		closing := c.lost == nil && c.closing && !c.pendingLocked() && len(c.waiters) == 0
		c.mu.Unlock()
		if closing {
			c.shutWrite()
			return
		}
	}
}

// flush writes everything queued on the calling goroutine, unless another
// goroutine is writing already: that one rechecks the queues after its
// write, so nothing queued before this call is left behind. Command ids are
// assigned by the writer, so they increase in write order.
func (c *conn) flush() error {
	for {
		if !c.wmu.TryLock() {
			return nil
		}
		buf, err := c.takeFrames(c.wbuf[:0])
		if cap(buf) <= 1<<20 {
			c.wbuf = buf // keep a modest buffer; drop a burst's
		}
		if err == nil && len(buf) > 0 {
			err = wire.WriteFull(c.w, buf)
		}
		c.wmu.Unlock()
		if err != nil {
			c.writeFailed(err)
			return err
		}
		if len(buf) == 0 {
			c.mu.Lock()
			more := c.pendingLocked()
			c.mu.Unlock()
			if !more {
				return nil
			}
		}
	}
}

// drainGrace bounds how long the reader may drain after a failed write.
const drainGrace = time.Second

// writeFailed ends the connection after a failed write, but lets the
// reader drain first: a router that closed (a full router refusing a new
// connection) may have said why in a connection.closing still waiting in
// the receive buffer, and that reason beats "broken pipe".
func (c *conn) writeFailed(err error) {
	c.mu.Lock()
	if c.lost != nil || c.writeErr != nil {
		c.mu.Unlock()
		return
	}
	c.writeErr = err
	c.mu.Unlock()
	if c.nc.SetReadDeadline(time.Now().Add(drainGrace)) != nil {
		c.fail(err)
	}
}

func (c *conn) pendingLocked() bool {
	return len(c.consumes)+len(c.control)+len(c.ordinary) > 0
}

// takeFrames encodes the queued commands, control first: consumes in
// batches of MaxBatch, then releases and cancels, then ordinary commands.
func (c *conn) takeFrames(buf []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost != nil {
		return buf, c.lost
	}
	if c.writeErr != nil {
		return buf, c.writeErr
	}
	if c.wclosed {
		return buf, nil
	}
	for i := 0; i < len(c.consumes); i += wire.MaxBatch {
		c.consumed.DeliveryIDs = c.consumes[i:min(i+wire.MaxBatch, len(c.consumes))]
		c.consumeItem.op, c.consumeItem.body = wire.OpDeliveryConsumed, &c.consumed
		if c.quietConsume {
			buf = c.appendQuiet(buf, &c.consumeItem)
		} else {
			buf = c.appendCommand(buf, &c.consumeItem)
		}
	}
	c.consumes = c.consumes[:0]
	for i, it := range c.control {
		buf = c.appendCommand(buf, it)
		c.control[i] = nil
	}
	c.control = c.control[:0]
	for i, it := range c.ordinary {
		buf = c.appendCommand(buf, it)
		c.ordinary[i] = nil
	}
	c.ordinary = c.ordinary[:0]
	return buf, nil
}

// appendCommand assigns the next command id, registers the waiter and
// encodes the frame. Called with c.mu held.
func (c *conn) appendCommand(buf []byte, it *sendItem) []byte {
	c.nextMsg++
	w := it.w
	if w == nil {
		w = &waiter{op: it.op, orphaned: true} // fire-and-forget: nobody waits
	}
	c.waiters[c.nextMsg] = w
	buf, err := wire.AppendFrame(buf, wire.Header{ID: c.nextMsg, Kind: wire.KindCommand, Op: it.op, Minor: c.minor}, it.body, it.atts)
	if err != nil {
		delete(c.waiters, c.nextMsg)
		w.settle(err)
	}
	return buf
}

// appendQuiet encodes a command the router answers only when it refuses
// it (a consume under quiet-consume): no waiter is registered, and a
// refusal ends the connection (onReply). Called with c.mu held.
func (c *conn) appendQuiet(buf []byte, it *sendItem) []byte {
	c.nextMsg++
	out, err := wire.AppendFrame(buf, wire.Header{ID: c.nextMsg, Kind: wire.KindCommand, Op: it.op, Minor: c.minor}, it.body, it.atts)
	if err != nil {
		return buf // a consume batch always encodes; nothing to settle
	}
	return out
}

// settle hands a waiter a result that is not the router's reply: the
// connection failed, or the command could not be encoded.
func (w *waiter) settle(err error) {
	switch {
	case w.complete != nil:
		w.complete(err)
	case w.ch != nil:
		w.ch <- err
	}
}

// takeEntry removes and returns (*m)[k] under mu. The map is passed by
// pointer because a Client swaps its maps for fresh ones, under mu, when
// its connection ends.
func takeEntry[K comparable, V any](mu *sync.Mutex, m *map[K]V, k K) V {
	mu.Lock()
	defer mu.Unlock()
	v := (*m)[k]
	delete(*m, k)
	return v
}

// dropEntry removes (*m)[k] under mu if it is still v: a handle that closes
// removes itself, never what was registered under its key after it.
func dropEntry[K, V comparable](mu *sync.Mutex, m *map[K]V, k K, v V) {
	mu.Lock()
	defer mu.Unlock()
	if (*m)[k] == v {
		delete(*m, k)
	}
}
