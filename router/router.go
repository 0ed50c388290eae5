package router

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/fastpath"
	"github.com/flybus/flybus/internal/rawio"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// Config configures a Router. The zero Limits means wire.DefaultLimits().
type Config struct {
	// StoreRoot is the directory under which the router keeps its artifact
	// store, <StoreRoot>/<storeId>/ (a tmpfs such as /dev/shm/flybus is the
	// point). Empty gives the router a private root of its own on the
	// runtime tmpfs (see StoreRoot), removed at Shutdown; clients connected
	// in memory learn it without being told.
	StoreRoot string
	// StoreMode chooses the artifact store's backend: store.ModePool (the
	// default: slot files reused across generations) or store.ModeFiles (one
	// file per artifact); see the store package for when to choose which.
	StoreMode    store.Mode
	Limits       wire.Limits
	Policy       Policy
	HelloTimeout time.Duration // default 5 s
	Logger       *slog.Logger  // default: discard
	// MaxPendingHello bounds the connections still in hello; a new one
	// over it closes the oldest. Default: maxClients/4, at least 4, at
	// most maxClients.
	MaxPendingHello int
	// FrameTimeout bounds how long a frame may take to arrive once its
	// first byte has; an idle connection between frames is never closed.
	// Default 10 s.
	FrameTimeout time.Duration
	// RememberedClients bounds how many client ids without a live
	// connection the router remembers the last incarnation of (a hello
	// offering it again is refused). Past it, the ids idle the longest are
	// forgotten. Default DefaultRememberedClients.
	RememberedClients int
}

// Router is an embeddable flybus router. All of its methods are safe for
// concurrent use.
type Router struct {
	cfg      Config
	routerID wire.RouterID
	storeID  wire.StoreID
	store    *store.Store
	private  bool // the store root was made for this router: removed at Shutdown

	mu        sync.Mutex // serializes the core
	core      *core
	shells    map[*conn]*shell
	listeners map[*Listener]struct{}
	shutdown  bool
	wg        sync.WaitGroup // every connection and listener goroutine

	// What the shell times of itself (Latencies); lock-free.
	admission, laneWait histogram
	// What the shell counts of itself: accept retries (listeners), batches
	// a step wrote itself, a writer goroutine wrote, or a step left to the
	// writer because the socket was full.
	acceptRetries, directWrites, writerWrites, writerHandoffs atomic.Uint64
	changes                                                   changes // for Await
}

// ErrClosed is returned by entry points after Shutdown.
var ErrClosed = errors.New("flybus: router is shut down")

// errNoPolicy explains the zero Policy, which would admit nobody.
var errNoPolicy = errors.New("flybus: router.Config.Policy admits no client: use router.OpenPolicy() " +
	"(any client id, every grant: tests and trusted deployments) or router.ClosedPolicy().Client(id, grants) " +
	"for each participant")

// New validates cfg and returns a running router with no transports yet.
func New(cfg Config) (*Router, error) {
	if cfg.Limits == (wire.Limits{}) {
		cfg.Limits = wire.DefaultLimits()
	}
	if cfg.RememberedClients < 0 {
		return nil, fmt.Errorf("flybus: router.Config.RememberedClients is %d; give 0 for the default or a positive bound", cfg.RememberedClients)
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	if cfg.Policy.admitsNobody() {
		return nil, errNoPolicy
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var tag [8]byte
	if _, err := rand.Read(tag[:]); err != nil {
		return nil, err
	}
	t := binary.LittleEndian.Uint64(tag[:])
	r := &Router{cfg: cfg, routerID: wire.RouterID(t), storeID: wire.StoreID(t),
		shells: map[*conn]*shell{}, listeners: map[*Listener]struct{}{}}
	if cfg.StoreRoot == "" {
		root, err := privateStoreRoot()
		if err != nil {
			return nil, err
		}
		r.cfg.StoreRoot, r.private = root, true
	}
	// Opening the store also removes orphaned stores of dead routers.
	st, err := store.Open(store.Config{Root: r.cfg.StoreRoot, ID: r.storeID.String(), Mode: cfg.StoreMode,
		MaxBytes: int64(min(cfg.Limits.MaxStoreBytes, 1<<62))})
	if err != nil {
		if r.private {
			os.RemoveAll(r.cfg.StoreRoot)
		}
		return nil, err
	}
	for _, o := range st.Orphans() {
		cfg.Logger.Info("removed orphaned store", "dir", o.Dir, "err", o.Err)
	}
	r.store = st
	r.core = newCore(r.coreConfig())
	return r, nil
}

// coreConfig is the core's configuration for this router. In pool mode a
// connection may hold a quarter of the store's slot bound, so one client
// cannot take every descriptor the store may keep.
func (r *Router) coreConfig() coreConfig {
	cfg := coreConfig{limits: r.cfg.Limits, policy: r.cfg.Policy, routerID: r.routerID, storeID: r.storeID,
		remember: r.cfg.RememberedClients, hasStore: r.store != nil}
	if r.store != nil && r.store.Mode() == store.ModePool {
		cfg.pool, cfg.slotShare = true, max(4, r.store.MaxSlots()/4)
	}
	return cfg
}

// privateStoreRoot makes a fresh 0700 directory for a router given no
// store root: on /dev/shm, the runtime tmpfs Linux always has, else under
// $XDG_RUNTIME_DIR or the temporary directory.
func privateStoreRoot() (string, error) {
	var bases []string
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		bases = append(bases, "/dev/shm")
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		bases = append(bases, d)
	}
	bases = append(bases, os.TempDir())
	var errs []error
	for _, b := range bases {
		// The store refuses a root with a symlink in its path, and some
		// systems link /dev/shm to /run/shm: make it under the real path.
		if real, err := filepath.EvalSymlinks(b); err == nil {
			b = real
		}
		dir, err := os.MkdirTemp(b, "flybus-router-")
		if err == nil {
			return dir, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("flybus: no store root given and none could be made: %w", errors.Join(errs...))
}

// StoreRoot is the directory the router keeps its store under: what
// clients connected over a Unix socket need as client.Config.StoreRoot.
func (r *Router) StoreRoot() string { return r.cfg.StoreRoot }

// StoreDir is this incarnation's store directory, <StoreRoot>/<storeId>.
func (r *Router) StoreDir() string { return r.store.Dir() }

// RouterID is this incarnation's router id.
func (r *Router) RouterID() wire.RouterID { return r.routerID }

// StoreID is this incarnation's store id (same tag as the router id).
func (r *Router) StoreID() wire.StoreID { return r.storeID }

// Stats returns a snapshot of the registries and counters.
func (r *Router) Stats() Stats {
	r.mu.Lock()
	s := r.core.snapshot()
	r.mu.Unlock()
	s.AcceptRetries, s.DirectWrites = r.acceptRetries.Load(), r.directWrites.Load()
	s.WriterWrites, s.WriterHandoffs = r.writerWrites.Load(), r.writerHandoffs.Load()
	st := r.store.Stats()
	s.LeaseSeals, s.CopySeals = st.LeaseSeals, st.CopySeals
	s.StoreFiles = st.StagingFiles + st.SealedFiles
	if r.store.Mode() == store.ModePool {
		s.StoreFiles = int64(st.Slots - st.FreeSlots - st.QuarantinedSlots) // slots holding an artifact
	}
	s.PoolHits, s.PoolMisses, s.PreparedBytes = st.PoolHits, st.PoolMisses, st.PooledBytes
	s.Slots, s.FreeSlots, s.QuarantinedSlots, s.SlotBytes = int64(st.Slots), int64(st.FreeSlots), int64(st.QuarantinedSlots), st.SlotBytes
	s.SlotsRetired = st.SlotsRetired
	s.StoreOpens, s.StoreFallocates, s.StoreUnlinks = st.Opens, st.Fallocates, st.Unlinks
	return s
}

// Serve runs the protocol on an unbound transport: the client asserts its
// own identity, which only an open policy accepts. Serve returns at once;
// the connection runs until either side closes it.
func (r *Router) Serve(nc net.Conn) error { return r.serve(nc, "") }

// ServeAs runs the protocol on a transport the launcher bound to clientID;
// a Hello naming anyone else is refused before any registration.
func (r *Router) ServeAs(nc net.Conn, clientID string) error {
	if !wire.ValidID(clientID) {
		return errors.New("flybus: invalid client id " + clientID)
	}
	return r.serve(nc, clientID)
}

// ConnectInMemory returns the client end of an in-memory transport served
// unbound.
func (r *Router) ConnectInMemory() (net.Conn, error) { return r.connectInMemory("") }

// ConnectInMemoryAs returns the client end of an in-memory transport bound
// to clientID.
func (r *Router) ConnectInMemoryAs(clientID string) (net.Conn, error) {
	if !wire.ValidID(clientID) {
		return nil, errors.New("flybus: invalid client id " + clientID)
	}
	return r.connectInMemory(clientID)
}

func (r *Router) connectInMemory(bound string) (net.Conn, error) {
	if bound == "" && !r.cfg.Policy.IsOpen() {
		return nil, errors.New("flybus: ConnectInMemory makes an unbound connection, which only router.OpenPolicy() " +
			"admits; under a closed policy use ConnectInMemoryAs(clientID)")
	}
	a, b := memPipe(0)
	if err := r.serve(a, bound); err != nil {
		a.Close()
		b.Close()
		return nil, err
	}
	// The client end knows where the store is, so an in-memory client
	// needs no StoreRoot of its own.
	b.(*memConn).storeRoot = r.cfg.StoreRoot
	return b, nil
}

func (r *Router) serve(nc net.Conn, bound string) error {
	r.mu.Lock()
	if r.shutdown {
		r.mu.Unlock()
		nc.Close()
		return ErrClosed
	}
	rd := r.core.step(input{kind: inAccept, bound: bound})
	c, err := rd.accepted, rd.acceptErr
	if err != nil {
		r.mu.Unlock()
		nc.Close()
		return err
	}
	sh := &shell{r: r, c: c, nc: nc, tw: rawio.NewTryWriter(nc), w: rawio.NewWriter(nc), kick: make(chan struct{}, 1), frames: make([]frame, 0, fastpath.WriteBatch)}
	r.shells[c] = sh
	// The reader, the writer and the hello timer's callback: Shutdown
	// waits for each. The timer counts until it fires or is stopped.
	r.wg.Add(3)
	r.mu.Unlock()
	// This connection is one more waiting for hello; past the bound, the
	// oldest of them goes now, before the next accept: in a burst, the
	// evicted would otherwise fill maxClients before their readers ran.
	r.step(input{kind: inPending, limit: r.maxPendingHello()})
	sh.helloTimer = time.AfterFunc(r.cfg.HelloTimeout, sh.helloExpired)
	go sh.readLoop()
	go sh.writeLoop()
	return nil
}

// step applies one input to the core under the lock, then, outside it,
// writes the frames it made ready to every idle connection (see
// writeDirect), wakes the writers of the others, and runs the I/O the step
// asked for. It returns what the step reported about the input's
// connection.
func (r *Router) step(in input) (violation string, closing bool) { return r.stepBy(nil, in) }

// stepBy is step run by the reader of by (nil: any other goroutine).
// Frames it readies for by itself wait while by holds a batch (setHold);
// frames for a holding connection readied by anyone else are written at
// once, with whatever waited, so no one waits on another's batch.
func (r *Router) stepBy(by *shell, in input) (violation string, closing bool) {
	var wakeArr, directArr, closingArr [8]*shell
	var effs [4]effect
	wake, direct, closingShells := wakeArr[:0], directArr[:0], closingArr[:0]
	// One clock read before the lock: it dates a publication's arrival
	// (queue ages), starts the admission time and stamps the frames this
	// step readies (lane wait). The core itself reads no clock.
	t0 := time.Now()
	if in.kind == inCommand && in.env.Op == wire.OpPublish {
		in.now = t0.UnixNano()
	}
	r.mu.Lock()
	rd := r.core.step(in)
	effects := append(effs[:0], rd.effects...)
	violation, closing = rd.violation, rd.closing
	for _, c := range rd.wake {
		sh := r.shells[c]
		if sh != nil && sh.readySince.IsZero() {
			sh.readySince = t0
		}
		switch {
		case sh == nil:
		case c.closing:
			closingShells = append(closingShells, sh)
		case sh.writing:
			// Its holder pulls again before letting go.
		case sh.hold && sh == by:
			sh.held = true // its reader writes once it has stepped its batch
		case sh.tw == nil:
			wake = append(wake, sh)
		default:
			sh.writing = true
			direct = append(direct, sh)
		}
	}
	r.mu.Unlock()
	if in.kind == inCommand {
		r.admission.observe(time.Since(t0))
	}
	if len(closingShells) > 0 {
		// A peer that stopped reading must not hold the writer past the
		// final notice. (Clocks and deadlines stay out of the lock.)
		dl := time.Now().Add(closeGrace)
		for _, sh := range closingShells {
			_ = sh.nc.SetWriteDeadline(dl)
			sh.wake()
		}
	}
	for _, sh := range wake {
		sh.wake()
	}
	for _, sh := range direct {
		sh.writeDirect()
	}
	for _, e := range effects {
		r.runEffect(by, e)
	}
	r.changes.announce()
	return violation, closing
}

// runEffect performs one piece of store I/O on the goroutine that stepped:
// staging is a table lookup or a file creation; a seal may hash or copy a
// whole frame. Only a connection's own reader steps its seal, so the seal
// finishes before that connection's next command is read (a publish that
// follows a seal on the same connection sees the artifact sealed), while
// every other connection goes on.
func (r *Router) runEffect(by *shell, e effect) {
	switch e.kind {
	case effStage:
		st, err := r.store.Stage(e.size)
		loc := artLoc{relPath: st.RelPath, slot: st.Slot, gen: st.Generation}
		r.stepBy(by, input{kind: inStaged, eff: e, loc: loc, full: errors.Is(err, store.ErrFull), err: err})
	case effSeal:
		if by != nil && by.holding {
			// A seal may hash or copy for milliseconds: what the batch
			// readied so far goes now rather than after it.
			by.setHold(false)
			by.setHold(true)
		}
		sealed, err := r.store.Seal(e.relPath, e.size, e.digest)
		loc := artLoc{relPath: sealed.RelPath, slot: sealed.Slot, gen: sealed.Generation}
		r.stepBy(by, input{kind: inSealed, eff: e, loc: loc, mismatch: errors.Is(err, store.ErrMismatch), err: err})
	case effUnlink:
		collect := r.store.Collect
		if e.retire {
			collect = r.store.Retire
		}
		if err := collect(e.relPath, e.gen); err != nil {
			r.cfg.Logger.Warn("collecting an artifact file failed", "path", e.relPath, "err", err)
		}
	}
}

// Shutdown sends connection.closing to every client, stops the listeners,
// and waits until every connection has ended or ctx expires, after which
// the remaining transports are closed forcibly.
func (r *Router) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if r.shutdown {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.shutdown = true
	ls := make([]*Listener, 0, len(r.listeners))
	for l := range r.listeners {
		ls = append(ls, l)
	}
	r.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	r.step(input{kind: inShutdown})
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		r.mu.Lock()
		for _, sh := range r.shells {
			sh.nc.Close()
		}
		r.mu.Unlock()
		<-done
		err = ctx.Err()
	}
	// Every connection is gone: nothing can still name these files.
	err = errors.Join(err, r.store.Close())
	if r.private {
		err = errors.Join(err, os.RemoveAll(r.cfg.StoreRoot))
	}
	return err
}
