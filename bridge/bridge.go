package bridge

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flybus/flybus/client"
)

// Options are what a program embedding a Bridge may add to its Config.
type Options struct {
	Logger *slog.Logger // [slog.Default()]
	// OnLocalSession runs each time the bridge is connected to its local
	// router with its exports subscribed and its history service
	// registered (tests wait on it).
	OnLocalSession func(client.Info)
	// BeforeImportPublish runs in an import before it writes a complete
	// frame locally (tests slow an importer with it).
	BeforeImportPublish func(topic string)
}

// Bridge runs one configuration: see the package documentation.
type Bridge struct {
	cfg  *Config
	opts Options
	log  *slog.Logger
	run  string // this run's id, which makes frame ids unique
	next atomic.Uint64

	nc      *nats.Conn
	connErr atomic.Pointer[error] // the last failed connect's reason, for the closing error
	js      jetstream.JetStream
	streams map[string]jetstream.Stream // by exported topic

	exports map[string]*exportCounters
	imports map[string]*importCounters
	history struct{ requests, frames, errors atomic.Uint64 }

	sessions, reconnects, disconnects atomic.Uint64
	connected                         chan struct{} // replaced on every disconnect; closed while connected
	connMu                            sync.Mutex

	mu        sync.Mutex
	local     *session    // the current local session, nil between them
	importers []*importer // Run's, once every one is subscribed (tests look at their NATS queues)

	// own remembers the topic sequences this bridge's imports published,
	// so that an export of the same topic does not send them back; only
	// topics both imported and exported have one. Fixed after New.
	own map[string]*seqRing

	acks sync.WaitGroup // goroutines waiting for JetStream acknowledgments
}

// session is one connection to the local router: the client outlives it,
// the artifacts an import allocated on it do not.
type session struct {
	c  *client.Client
	id uint64
}

// New checks the configuration; Run does the work.
func New(cfg *Config, opts Options) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	b := &Bridge{cfg: cfg, opts: opts, log: opts.Logger, run: hex.EncodeToString(id[:]),
		streams: map[string]jetstream.Stream{}, exports: map[string]*exportCounters{},
		imports: map[string]*importCounters{}, own: map[string]*seqRing{}, connected: make(chan struct{})}
	for _, e := range cfg.Exports {
		b.exports[e.Topic] = &exportCounters{}
	}
	for _, im := range cfg.Imports {
		b.imports[im.Topic] = &importCounters{}
		if b.exports[im.Topic] != nil {
			b.own[im.Topic] = &seqRing{}
		}
	}
	return b, nil
}

// Stats returns the counters.
func (b *Bridge) Stats() Stats {
	s := Stats{LocalSessions: b.sessions.Load(), NATSReconnects: b.reconnects.Load(),
		NATSDisconnects: b.disconnects.Load(), Exports: map[string]ExportStats{}, Imports: map[string]ImportStats{},
		History: HistoryStats{Requests: b.history.requests.Load(), Frames: b.history.frames.Load(), Errors: b.history.errors.Load()}}
	for t, c := range b.exports {
		s.Exports[t] = c.snapshot()
	}
	for t, c := range b.imports {
		s.Imports[t] = c.snapshot()
	}
	return s
}

// natsOptions turns the config into nats.go options.
func (b *Bridge) natsOptions() ([]nats.Option, error) {
	n := b.cfg.NATS
	name := n.Name
	if name == "" {
		name = "flybus-bridge " + b.cfg.Origin
	}
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(*n.MaxReconnects),
		nats.ReconnectWait(time.Duration(n.ReconnectWait)), nats.Timeout(time.Duration(n.Timeout)),
		// A first connect that fails is retried like a reconnect: the
		// bridge starts before or after its server alike.
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { b.disconnects.Add(1); b.setConnected(false) }),
		nats.ReconnectHandler(func(*nats.Conn) { b.reconnects.Add(1); b.setConnected(true) }),
		nats.ConnectHandler(func(*nats.Conn) { b.setConnected(true) }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			b.connErr.Store(&err)
			b.log.Warn("nats: connecting failed", "err", err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				return // counted per import from the subscription's Dropped
			}
			b.log.Warn("nats", "err", err)
		}),
	}
	if n.ReconnectBufSize != 0 {
		opts = append(opts, nats.ReconnectBufSize(n.ReconnectBufSize))
	}
	if n.Credentials != "" {
		if _, err := os.Stat(n.Credentials); err != nil {
			return nil, configErr("nats.credentials: %v", err)
		}
		opts = append(opts, nats.UserCredentials(n.Credentials))
	}
	if t := n.TLS; t != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if t.CA != "" {
			pem, err := os.ReadFile(t.CA)
			if err != nil {
				return nil, configErr("nats.tls.ca: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, configErr("nats.tls.ca %s holds no PEM certificate", t.CA)
			}
			tc.RootCAs = pool
		}
		if t.Cert != "" {
			cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
			if err != nil {
				return nil, configErr("nats.tls: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

func (b *Bridge) setConnected(up bool) {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	select {
	case <-b.connected:
		if !up {
			b.connected = make(chan struct{})
		}
	default:
		if up {
			close(b.connected)
		}
	}
}

// waitConnected returns once NATS is connected, or ctx's error.
func (b *Bridge) waitConnected(ctx context.Context) error {
	b.connMu.Lock()
	ch := b.connected
	b.connMu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run connects to NATS and to the local router and bridges until ctx ends;
// then it closes everything it opened. It returns nil after ctx ends, or
// the error that stopped it: one that kept it from starting, the NATS
// connection closing for good (nats.maxReconnects exhausted; a first
// connect that fails is retried like a reconnect, each failure logged), or
// the local router refusing the bridge for good (its client id, its
// grants, or a store root without the router's store). A local router
// that is down is waited for.
func (b *Bridge) Run(parent context.Context) (err error) {
	opts, err := b.natsOptions()
	if err != nil {
		return err
	}
	// A NATS connection that closes for good (its reconnects exhausted)
	// ends the bridge with the reason; ctx is the bridge's life.
	ctx, end := context.WithCancelCause(parent)
	defer func() {
		if parent.Err() == nil && err == nil {
			err = context.Cause(ctx)
		}
		end(nil)
	}()
	opts = append(opts, nats.ClosedHandler(func(nc *nats.Conn) {
		why := nc.LastError()
		if e := b.connErr.Load(); e != nil {
			why = *e // the TLS or authorization failure, where LastError only says no server was reached
		}
		end(fmt.Errorf("nats: the connection closed and will not be retried (last error: %v)", why))
	}))
	nc, err := nats.Connect(joinURLs(b.cfg.NATS.URLs), opts...)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	b.nc = nc
	defer func() {
		b.acks.Wait()
		nc.Close()
	}()
	if nc.IsConnected() {
		b.setConnected(true)
	}
	if err := b.setupStreams(ctx); err != nil {
		return err
	}
	var imps []*importer
	for i := range b.cfg.Imports {
		im, err := b.startImport(ctx, &b.cfg.Imports[i])
		if err != nil {
			for _, im := range imps {
				im.stop()
			}
			return err
		}
		imps = append(imps, im)
	}
	b.mu.Lock()
	b.importers = imps
	b.mu.Unlock()
	defer func() {
		for _, im := range imps {
			im.stop()
		}
	}()
	return b.runLocal(ctx)
}

func joinURLs(urls []string) string {
	s := ""
	for i, u := range urls {
		if i > 0 {
			s += ","
		}
		s += u
	}
	return s
}

// setupStreams creates or updates each export's stream, waiting for the
// server if it is not up yet.
func (b *Bridge) setupStreams(ctx context.Context) error {
	var need bool
	for _, e := range b.cfg.Exports {
		need = need || e.Stream != nil
	}
	if !need {
		return nil
	}
	js, err := jetstream.New(b.nc)
	if err != nil {
		return err
	}
	b.js = js
	for _, e := range b.cfg.Exports {
		s := e.Stream
		if s == nil {
			continue
		}
		sc := jetstream.StreamConfig{Name: s.Name, Subjects: []string{e.Subject + ".*"},
			MaxAge: time.Duration(s.MaxAge), MaxBytes: s.MaxBytes, Replicas: max(s.Replicas, 1),
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, AllowDirect: true,
			Description: "flybus topic " + e.Topic + " exported by " + b.cfg.Origin}
		if s.MaxBytes == 0 {
			sc.MaxBytes = -1
		}
		if s.Storage == "memory" {
			sc.Storage = jetstream.MemoryStorage
		}
		for {
			if err := b.waitConnected(ctx); err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(ctx, time.Duration(b.cfg.NATS.Timeout))
			st, err := js.CreateOrUpdateStream(rctx, sc)
			cancel()
			if err == nil {
				b.streams[e.Topic] = st
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				return fmt.Errorf("stream %s: %w", s.Name, err)
			}
			b.log.Warn("stream not ready, retrying", "stream", s.Name, "err", err)
			select {
			case <-time.After(time.Duration(b.cfg.NATS.ReconnectWait)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// runLocal keeps the bridge's one client of the local router until ctx
// ends. It is a Dial client: after the router goes away it dials again
// with backoff, with a new incarnation, and declares the imported topics,
// subscribes the exports and registers the history service again by
// itself. Each connection is a local session. It returns an error only
// when the router refuses the bridge for good (its identity, its grants or
// its store root).
func (b *Bridge) runLocal(ctx context.Context) error {
	cc := b.clientConfig()
	cc.OnConnect = func(client.Info) {
		// A new router numbers its topics' sequences anew: the sequences
		// the imports published on the last one say nothing here. Nothing
		// is delivered on the new connection before this returns.
		for _, r := range b.own {
			r.reset()
		}
	}
	b.log.Info("connecting to the local router", "socket", b.cfg.Local.Socket)
	c, err := client.DialUnix(ctx, b.cfg.Local.Socket, cc)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("local router %s: %w", b.cfg.Local.Socket, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		b.setLocal(nil)
		wg.Wait()
		c.Close()
	}()
	if err := b.declareImports(sctx, c); err != nil {
		return err
	}
	ready := make(chan error, len(b.cfg.Exports))
	for i := range b.cfg.Exports {
		e := &b.cfg.Exports[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.export(sctx, c, e, ready)
		}()
	}
	if h := b.cfg.History; h != nil {
		svc, err := c.Register(sctx, h.Service, client.Queued(16), client.InFlight(4))
		if err != nil {
			return fmt.Errorf("registering the history service %s: %w", h.Service, err)
		}
		defer svc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.serveHistory(sctx, c, svc)
		}()
	}
	for range b.cfg.Exports {
		select {
		case err := <-ready:
			if err != nil {
				return err
			}
		case <-sctx.Done():
			return nil
		}
	}
	b.watchLocal(sctx, c)
	return nil
}

// watchLocal follows the client's state until ctx ends: a session starts
// each time it is connected on a new connection (everything restored) and
// ends when that connection is lost.
func (b *Bridge) watchLocal(ctx context.Context, c *client.Client) {
	seen := ^uint64(0) // the reconnect count of the current session
	for {
		st, changed := c.State()
		switch st {
		case client.Connected:
			if n := c.Stats().Reconnects; n != seen {
				seen = n
				info := c.Info()
				b.setLocal(&session{c: c, id: b.sessions.Add(1)})
				b.log.Info("local session up", "router", info.RouterID, "incarnation", info.Identity.ClientIncarnation)
				if b.opts.OnLocalSession != nil {
					b.opts.OnLocalSession(info)
				}
			}
		case client.Reconnecting:
			if b.current() != nil {
				b.setLocal(nil)
				b.log.Warn("local router lost; reconnecting", "err", c.Err())
			}
		case client.Closed:
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func (b *Bridge) setLocal(s *session) {
	b.mu.Lock()
	b.local = s
	b.mu.Unlock()
}

// clientConfig is the local connection's: an export views every
// attachment it receives, so their read locations are asked for on
// arrival; an import allocates frames of one size over and over, so the
// next allocation is prepared while the current frame is written.
func (b *Bridge) clientConfig() client.Config {
	cc := client.Config{ClientID: b.cfg.Local.ClientID, StoreRoot: b.cfg.Local.StoreRoot, Logger: b.log,
		OpenAhead: len(b.cfg.Exports) > 0}
	if len(b.cfg.Imports) > 0 {
		cc.AllocateAhead = 2 // a frame's large artifact and its small one
	}
	return cc
}

func (b *Bridge) declareImports(ctx context.Context, c *client.Client) error {
	for _, im := range b.cfg.Imports {
		r, _ := parseRetention(im.Retained)
		if _, err := c.DeclareTopic(ctx, im.Topic, r); err != nil {
			return fmt.Errorf("topic %s: %w", im.Topic, err)
		}
	}
	return nil
}

// current returns the local session, or nil between sessions.
func (b *Bridge) current() *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.local
}

// seqRing remembers the last topic sequences an import published. The
// import holds mu from before its publish until it has recorded the
// sequence, and the export takes mu before it checks one: a delivery of
// the import's own publication therefore always finds it recorded.
type seqRing struct {
	mu   sync.Mutex
	seqs [1024]uint64
	n    int
}

func (r *seqRing) add(s uint64) { r.seqs[r.n%len(r.seqs)] = s; r.n++ }

func (r *seqRing) has(s uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; i < min(r.n, len(r.seqs)); i++ {
		if r.seqs[i] == s {
			return true
		}
	}
	return false
}

func (r *seqRing) reset() {
	r.mu.Lock()
	r.n = 0
	r.mu.Unlock()
}
