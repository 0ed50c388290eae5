package router

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// FuzzConnection drives one whole connection of a real router (open
// policy, a store under /dev/shm) with arbitrary client bytes over the
// in-memory transport, and reads everything the router writes back. Each
// input is two values:
//
//   - stream: every byte the client sends, length prefixes included;
//   - plan: plan[0] bit 0 chooses the end of the session (0: the router
//     closes the connection, as at its hello timeout or at shutdown, so
//     every frame it queued is read and checked; 1: the client vanishes
//     mid-session), bit 1 the store (0: files, 1: the slot pool); the rest
//     is a sequence of uvarints, the sizes of the chunks the stream is
//     written in. What is left when the plan runs out is one chunk.
//
// After each chunk the harness waits until the router has read all of it,
// no seal is in flight and its writer has nothing ready, so an input takes
// the same path run after run (only the frames of one chunk can still race
// the writer) and a recorded session replays as it was recorded
// (TestRecordFuzzSeeds writes the seeds and checks that they do).
//
// Checked: nothing panics; every frame the router sends passes the strict
// decoder, is a reply, delivery or notice of a matching op, carries bus ids
// consecutive from bus-1, answers only commands the client sent (each at
// most once, with the command's op) and follows a successful hello unless it
// is the hello's refusal or connection.closing; delivery ids increase and
// attachments are owned by their delivery; nothing follows
// connection.closing; the router logs no warning. After the connection has
// gone and the topics it declared are deleted, every count of the router
// and its store is zero.
//
// In files mode one router serves every execution: between executions the
// harness gives it a fresh core with pinned ids (the store stays, and holds
// nothing by then), so ids in an input (artifact-1, svc-1, the store id of
// a reference) mean the same thing in every execution. A pooled store
// keeps its slots and their generations, which the ids of artifacts name,
// so in pool mode every execution gets a new router (with the same pinned
// ids), at some cost in speed.
func FuzzConnection(f *testing.F) {
	cf := newConnFuzzer(f)
	f.Fuzz(func(t *testing.T, stream, plan []byte) {
		if _, err := cf.run(stream, plan); err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzTag is the router and store id of every execution. Seeds are
// recorded against routers with random ids and rewritten to this one.
const fuzzTag = 0x5eedf0cc5eedf0cc

// fuzzLimits keep a hostile input from staging large files on tmpfs.
func fuzzLimits() wire.Limits {
	l := wire.DefaultLimits()
	l.MaxArtifactBytes = 1 << 20
	l.MaxStoreBytes = 4 << 20
	l.MaxRetainedBytes = 2 << 20
	return l
}

// connFuzzer holds what the executions share.
type connFuzzer struct {
	root   string  // the store root on tmpfs
	files  *Router // the files-mode router every files-mode execution uses
	warns  *warnLog
	shapes map[wire.Op]wire.Shape
	dec    wire.Decoder // for scanning inputs
	stuck  bool         // a connection never ended: its router cannot be reused
	pooled bool         // a pool-mode router was checked against pristineCore
}

func newConnFuzzer(tb testing.TB) *connFuzzer {
	tb.Helper()
	root := shmtest.Dir(tb, "flybus-fuzz-") // removed after the cleanup below
	cf := &connFuzzer{root: root, warns: &warnLog{}, shapes: map[wire.Op]wire.Shape{}}
	for _, s := range wire.Shapes() {
		cf.shapes[s.Op] = s
	}
	tb.Cleanup(func() {
		if cf.files != nil {
			if err := cf.shutdown(cf.files); err != nil {
				tb.Errorf("shutdown: %v", err)
			}
		}
	})
	var err error
	if cf.files, err = cf.newRouter(store.ModeFiles); err != nil {
		tb.Fatal(err)
	}
	return cf
}

// newRouter starts a router with pinned ids on the shared store root.
func (cf *connFuzzer) newRouter(mode store.Mode) (*Router, error) {
	r, err := New(Config{StoreRoot: cf.root, StoreMode: mode, Policy: OpenPolicy(), Limits: fuzzLimits(),
		HelloTimeout: time.Hour, Logger: slog.New(cf.warns.handler())})
	if err != nil {
		return nil, err
	}
	if mode == store.ModeFiles || !cf.pooled {
		cf.pooled = cf.pooled || mode == store.ModePool
		if k := pristineCore(r, r.routerID, r.storeID); !reflect.DeepEqual(k, r.core) {
			cf.shutdown(r)
			return nil, errors.New("router.New sets up its core beyond what pristineCore does: make pristineCore do the same")
		}
	}
	freshCore(r)
	return r, nil
}

func (cf *connFuzzer) shutdown(r *Router) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.Shutdown(ctx)
}

// run feeds one input to a new connection, on the shared router or on a
// new pool-mode one.
func (cf *connFuzzer) run(stream, plan []byte) (*fuzzTranscript, error) {
	if cf.stuck {
		return nil, errors.New("an earlier execution left the router stuck")
	}
	if len(plan) == 0 || plan[0]&2 == 0 {
		return cf.runOn(cf.files, stream, plan)
	}
	r, err := cf.newRouter(store.ModePool)
	if err != nil {
		return nil, err
	}
	tr, err := cf.runOn(r, stream, plan)
	if cf.stuck {
		return tr, err // shutting down would wait for what is stuck
	}
	if serr := cf.shutdown(r); err == nil && serr != nil {
		err = fmt.Errorf("shutdown: %v", serr)
	}
	return tr, err
}

// freshCore replaces r's core with a new one with pinned ids.
func freshCore(r *Router) {
	k := pristineCore(r, wire.RouterID(fuzzTag), wire.StoreID(fuzzTag))
	r.mu.Lock()
	r.core = k
	r.mu.Unlock()
}

// pristineCore is the core New gives r, with other ids. newRouter checks
// that it is, so a change to New cannot make the harness test a core set
// up differently from a real router's.
func pristineCore(r *Router, rid wire.RouterID, sid wire.StoreID) *core {
	cfg := r.coreConfig()
	cfg.routerID, cfg.storeID = rid, sid
	return newCore(cfg)
}

// fuzzOutcome is how the router answered one command: "ok" or the code.
type fuzzOutcome struct {
	op   wire.Op
	code string
}

// fuzzTranscript is what one execution observed, for comparing a replay
// with its recording.
type fuzzTranscript struct {
	outcomes map[uint64]fuzzOutcome // by command id
	frames   int
	closing  bool // connection.closing arrived
}

// runTimeout bounds every wait of one execution: a router that does not
// read, settle or let go within it is stuck, which is a finding.
const runTimeout = 10 * time.Second

// runOn feeds one input to a new connection of r and checks everything;
// the error describes the first thing found wrong.
func (cf *connFuzzer) runOn(r *Router, stream, plan []byte) (*fuzzTranscript, error) {
	mode := byte(0)
	if len(plan) > 0 {
		mode, plan = plan[0], plan[1:]
	}
	chk := &frameChecker{cmds: scanCommands(&cf.dec, stream), replied: map[uint64]bool{}, shapes: cf.shapes,
		tr: &fuzzTranscript{outcomes: map[uint64]fuzzOutcome{}}, progress: make(chan struct{}, 1)}
	a, b := memPipe(0)
	tap := &readTap{Conn: a, idle: make(chan struct{}, 1), closed: make(chan struct{})}
	if err := r.Serve(tap); err != nil {
		b.Close()
		return nil, fmt.Errorf("serve: %v", err)
	}
	defer b.Close()
	var c *conn
	r.mu.Lock()
	for k := range r.shells {
		c = k
	}
	r.mu.Unlock()
	if c == nil {
		return nil, errors.New("the connection is not registered")
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		chk.readAll(b)
	}()
	fail := func(err error) (*fuzzTranscript, error) {
		cf.stuck = true
		b.Close()
		<-readDone
		return nil, err
	}

	written := 0
	for len(stream) > 0 {
		n := len(stream)
		if len(plan) > 0 {
			v, k := binary.Uvarint(plan)
			if k <= 0 {
				plan = nil
			} else {
				plan = plan[k:]
				n = int(min(max(v, 1), uint64(n)))
			}
		}
		written += n
		tap.expect(written)
		if _, err := b.Write(stream[:n]); err != nil {
			break // the router closed the connection: the rest is never read
		}
		stream = stream[n:]
		select {
		case <-tap.idle:
		case <-tap.closed:
		case <-time.After(runTimeout):
			return fail(fmt.Errorf("the router did not read %d written bytes within %v:\n%s", written, runTimeout, stacks()))
		}
		if err := settle(r, c, chk); err != nil {
			return fail(err)
		}
	}

	if mode&1 == 0 {
		r.step(input{kind: inClose, conn: c, code: wire.ErrRouterLost, msg: "fuzz: end of input"})
	} else {
		b.Close()
	}
	select {
	case <-readDone:
	case <-time.After(runTimeout):
		return fail(fmt.Errorf("the router's side of the stream did not end within %v:\n%s", runTimeout, stacks()))
	}
	gone := make(chan struct{})
	go func() { r.wg.Wait(); close(gone) }()
	select {
	case <-gone:
	case <-time.After(runTimeout):
		cf.stuck = true
		return nil, fmt.Errorf("the connection's goroutines did not end within %v:\n%s", runTimeout, stacks())
	}
	tr, err := cf.check(r, chk, mode)
	freshCore(r) // whatever was found, the next execution starts afresh
	return tr, err
}

// check runs the end-of-session checks once the connection is gone.
func (cf *connFuzzer) check(r *Router, chk *frameChecker, mode byte) (*fuzzTranscript, error) {
	if chk.err != nil {
		return nil, chk.err
	}
	if mode&1 == 0 && !chk.tr.closing {
		return nil, errors.New("the router ended the connection without connection.closing")
	}
	if w := cf.warns.take(); w != "" {
		return nil, fmt.Errorf("the router logged warnings:\n%s", w)
	}

	// Retained values stay with the router by design: delete the topics
	// (none has a subscriber left), then everything must be gone.
	r.mu.Lock()
	for name, t := range r.core.topics {
		if len(t.subs) == 0 {
			r.core.setRetained(t, nil)
			delete(r.core.topics, name)
		}
	}
	r.mu.Unlock()
	// The unlinks those collections asked for are handed out by the next
	// step: a pending bound no count reaches changes nothing else.
	r.step(input{kind: inPending, limit: math.MaxInt})
	st := r.Stats()
	if st.Connections != 0 || st.PendingHello != 0 || st.Services != 0 || st.Topics != 0 || st.Subscriptions != 0 ||
		st.Calls != 0 || st.ActiveCalls != 0 || st.Artifacts != 0 || st.SealedArtifacts != 0 || st.ArtifactRoots != 0 ||
		st.Owners != 0 || st.ReplyCapabilities != 0 || st.Queued != 0 || st.StoreBytes != 0 || st.RetainedBytes != 0 ||
		st.QueuedBytes != 0 || st.StoreFiles != 0 {
		return nil, fmt.Errorf("the router still holds state after the connection ended: %+v", st)
	}
	if ss := r.store.Stats(); ss.StagingFiles != 0 || ss.SealedFiles != 0 {
		return nil, fmt.Errorf("the store still counts %d staging and %d sealed files", ss.StagingFiles, ss.SealedFiles)
	}
	return chk.tr, nil
}

// settle waits until no seal is in flight and the connection's writer has
// written every frame it pulled and has nothing more ready.
func settle(r *Router, c *conn, chk *frameChecker) error {
	deadline := time.Now().Add(runTimeout)
	for spin := 0; ; spin++ {
		r.mu.Lock()
		sealing := false
		for _, a := range r.core.artifacts {
			if a.state == artSealing {
				sealing = true
				break
			}
		}
		ready, last := false, uint64(0)
		if !c.gone {
			ready, last = fuzzPullable(r.core, c), c.busNext-1
		}
		r.mu.Unlock()
		if !sealing && !ready && chk.last.Load() >= last {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the router did not settle within %v (seal in flight %v, frames ready %v, "+
				"bus-%d pulled, bus-%d read; if lanes.go changed, update fuzzPullable):\n%s",
				runTimeout, sealing, ready, last, chk.last.Load(), stacks())
		}
		if !sealing && !ready {
			select {
			case <-chk.progress:
			case <-time.After(time.Millisecond):
			}
			continue
		}
		if spin < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// fuzzPullable reports whether core.pull would return a frame for c now.
// It mirrors core.next without changing anything.
func fuzzPullable(k *core, c *conn) bool {
	if c.closeWritten {
		return false
	}
	if c.ctrlHead < len(c.control) {
		return true
	}
	if c.closing {
		return false
	}
	if len(c.results) > 0 {
		return true
	}
	if len(c.services) > 0 && c.hasRoom(2, k.limits.MaxOwnersPerClient) {
		for _, s := range c.services {
			if len(s.queue) > 0 && s.inflight < s.maxInFlight {
				return true
			}
		}
	}
	if len(c.subs) > 0 && c.hasRoom(1, k.limits.MaxOwnersPerClient-k.limits.ReservedOwnersPerClient) {
		for _, s := range c.subs {
			if len(s.queue) > 0 && s.inflight < s.maxInFlight {
				return true
			}
		}
	}
	return false
}

// scanCommands lists the commands the router can answer: those it reads
// before the first frame that makes it close the connection (bad framing,
// an envelope-level error, a kind other than command, an id that does not
// increase). Ops are by command id.
func scanCommands(dec *wire.Decoder, stream []byte) map[uint64]wire.Op {
	cmds := map[uint64]wire.Op{}
	fr := wire.NewFrameReader(bytes.NewReader(stream))
	var env wire.Envelope
	var last uint64
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			return cmds
		}
		var be *wire.BusError
		if err := dec.Decode(frame, &env); err != nil && !errors.As(err, &be) {
			return cmds
		}
		if env.Kind != wire.KindCommand || len(cmds) > 0 && env.ID <= last {
			return cmds
		}
		last = env.ID
		cmds[env.ID] = env.Op
	}
}

// readTap is the router's end of the pipe. It tells the harness when the
// router's reader asks for more bytes with everything written so far
// consumed: by then every complete frame has been handled, because the
// shell reads the next frame only after stepping the previous one.
type readTap struct {
	net.Conn
	mu       sync.Mutex
	consumed int
	target   int
	idle     chan struct{} // capacity 1
	once     sync.Once
	closed   chan struct{}
}

// expect sets how many bytes the router will have been written once the
// next chunk is, and forgets an earlier idle signal.
func (t *readTap) expect(n int) {
	t.mu.Lock()
	t.target = n
	select {
	case <-t.idle:
	default:
	}
	t.mu.Unlock()
}

func (t *readTap) Read(p []byte) (int, error) {
	t.mu.Lock()
	if t.consumed >= t.target {
		select {
		case t.idle <- struct{}{}:
		default:
		}
	}
	t.mu.Unlock()
	n, err := t.Conn.Read(p)
	t.mu.Lock()
	t.consumed += n
	t.mu.Unlock()
	return n, err
}

func (t *readTap) Close() error {
	t.once.Do(func() { close(t.closed) })
	return t.Conn.Close()
}

// frameChecker reads and checks everything the router sends.
type frameChecker struct {
	cmds     map[uint64]wire.Op
	replied  map[uint64]bool
	shapes   map[wire.Op]wire.Shape
	tr       *fuzzTranscript
	last     atomic.Uint64 // the last bus id read
	progress chan struct{} // capacity 1: a frame was read
	helloOK  bool
	minor    wire.Opt[uint32] // the minor the hello selected
	envMinor uint32           // the minor of the frame being checked
	lastDlv  uint64
	err      error // the first violation; read after readAll returned
}

// readAll reads to the end of the stream, checking every frame. After a
// violation it keeps reading, so that the router's writer is never stuck.
func (k *frameChecker) readAll(nc net.Conn) {
	fr := wire.NewFrameReader(nc)
	var dec wire.Decoder
	var env wire.Envelope
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && k.err == nil {
				k.err = fmt.Errorf("the router's stream ended badly after %d frames: %v", k.tr.frames, err)
			}
			return
		}
		if k.err == nil {
			if err := k.check(frame, &dec, &env); err != nil {
				k.err = fmt.Errorf("frame %d from the router: %v\n%s", k.tr.frames+1, err, frame)
			}
		}
		k.tr.frames++
		k.last.Store(env.ID)
		select {
		case k.progress <- struct{}{}:
		default:
		}
	}
}

func (k *frameChecker) check(frame []byte, dec *wire.Decoder, env *wire.Envelope) error {
	if k.tr.closing {
		return errors.New("a frame after connection.closing")
	}
	if err := dec.Decode(frame, env); err != nil {
		// The one body-level error a router may cause: the reply to a
		// command of unknown op carries op "unknown".
		var be *wire.BusError
		if !errors.As(err, &be) || env.Kind != wire.KindReply || env.Op != wire.OpUnknown {
			return fmt.Errorf("refused by the strict decoder: %v", err)
		}
	}
	// Every envelope is written in the minor the hello selected; before
	// it, in one this major's clients read.
	if env.Major != wire.Major || env.Minor < wire.OldestMinor || env.Minor > wire.Minor ||
		k.minor.Valid && env.Minor != k.minor.V {
		return fmt.Errorf("version %d.%d (the hello selected %v)", env.Major, env.Minor, k.minor)
	}
	k.envMinor = env.Minor
	if want := k.last.Load() + 1; env.ID != want {
		return fmt.Errorf("bus-%d where bus-%d was due", env.ID, want)
	}
	switch env.Kind {
	case wire.KindReply:
		return k.reply(env)
	case wire.KindDelivery:
		return k.delivery(env)
	case wire.KindNotice:
		if !env.Op.IsNotice() || len(env.Attachments) > 0 {
			return fmt.Errorf("notice %s with %d attachments", env.Op, len(env.Attachments))
		}
		if env.Op == wire.OpConnectionClosing {
			k.tr.closing = true
		} else if !k.helloOK {
			return fmt.Errorf("notice %s before hello completed", env.Op)
		}
		if err := env.DecodeBody(k.shapes[env.Op].Body); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("kind %s", env.Kind)
}

func (k *frameChecker) reply(env *wire.Envelope) error {
	id := uint64(env.ReplyTo.V)
	op, ok := k.cmds[id]
	switch {
	case len(env.Attachments) > 0:
		return errors.New("a reply with attachments")
	case !ok:
		return fmt.Errorf("reply to msg-%d, which the router never read as a command", id)
	case op != env.Op:
		return fmt.Errorf("reply op %s answers a %s", env.Op, op)
	case k.replied[id]:
		return fmt.Errorf("a second reply to msg-%d", id)
	case !k.helloOK && op != wire.OpHello:
		return fmt.Errorf("reply to %s msg-%d before hello completed", op, id)
	}
	k.replied[id] = true
	v := replyValue(op)
	be, err := env.DecodeReply(v)
	if err != nil {
		return fmt.Errorf("malformed reply: %v", err)
	}
	out := fuzzOutcome{op: op, code: "ok"}
	if be != nil {
		out.code = be.Code.String()
	}
	k.tr.outcomes[id] = out
	switch {
	case op == wire.OpUnknown && be == nil:
		return errors.New("a command of unknown op was accepted")
	case op == wire.OpHello && be == nil:
		h := v.(*wire.HelloOK)
		digest, known := wire.ContractDigestFor(h.SelectedMinor)
		if h.RouterID != fuzzTag || h.SelectedMajor != wire.Major || !known || h.SelectedMinor != k.envMinor ||
			h.ContractDigest != digest || h.Limits != fuzzLimits() {
			return fmt.Errorf("hello reply %+v", h)
		}
		k.helloOK, k.minor = true, wire.Some(h.SelectedMinor)
	}
	return nil
}

func (k *frameChecker) delivery(env *wire.Envelope) error {
	s, ok := k.shapes[env.Op]
	if !ok || !env.Op.IsDelivery() {
		return fmt.Errorf("delivery with op %s", env.Op)
	}
	if !k.helloOK {
		return fmt.Errorf("delivery %s before hello completed", env.Op)
	}
	if err := env.DecodeBody(s.Body); err != nil {
		return fmt.Errorf("malformed %s: %v", env.Op, err)
	}
	var d wire.DeliveryID
	switch b := s.Body.(type) {
	case *wire.Request:
		d = b.DeliveryID
	case *wire.Result:
		d = b.DeliveryID
	case *wire.TopicMessage:
		d = b.DeliveryID
	}
	if uint64(d) <= k.lastDlv {
		return fmt.Errorf("%s after dlv-%d", d, k.lastDlv)
	}
	k.lastDlv = uint64(d)
	for _, a := range env.Attachments {
		if a.OwnerID != wire.DeliveryOwner(d) || a.Ref.StoreID != wire.StoreID(fuzzTag) {
			return fmt.Errorf("attachment %s of %s owned by %s, store %s", a.Name, d, a.OwnerID, a.Ref.StoreID)
		}
	}
	return nil
}

// warnLog keeps, as text, the warnings and errors the router logs through
// its handler: the router logs one only for its own bugs and for store I/O
// that failed.
type warnLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *warnLog) handler() slog.Handler {
	return slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})
}

func (w *warnLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// take returns what was logged since the last take.
func (w *warnLog) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.buf.String()
	w.buf.Reset()
	return s
}

// stacks is every goroutine's stack, for a report of something stuck.
func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
