package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Config configures an Edge.
type Config struct {
	// Topics are the topics served, and the only ones: a browser asking
	// for another is refused.
	Topics []string
	// Feed brings the topics' publications (Follow).
	Feed Feed
	// Logger receives the edge's log [slog.Default()].
	Logger *slog.Logger

	// AllowedOrigins are the origins (scheme://host[:port]) of pages
	// besides the edge's own that may open the WebSocket; "*" admits any.
	// A request without an Origin header is not from a browser's page
	// and is admitted (the token, if any, still applies).
	AllowedOrigins []string
	// LoopbackHosts refuses requests whose Host is not a loopback name
	// or address, or one of AllowedHosts: on an edge listening on
	// loopback, that keeps a DNS-rebinding page from reaching it.
	LoopbackHosts bool
	AllowedHosts  []string
	// Token, when set, must come with every WebSocket: in an
	// "Authorization: Bearer" header or in hello.
	Token string

	// MaxClients bounds the WebSockets open at once, those still before
	// hello included [16].
	MaxClients int
	// WriteTimeout bounds the write of one message to a browser; one that
	// takes longer is disconnected [10s].
	WriteTimeout time.Duration
	// HelloTimeout is how long a new WebSocket has to send hello [5s].
	HelloTimeout time.Duration
	// StatusInterval is the period of the topics notice and the router
	// view [1s].
	StatusInterval time.Duration

	// RouterDetails, when set, reads the router's operator snapshot for
	// the live view (what flybus top shows); RouterAddr names it there.
	RouterDetails func(ctx context.Context) (router.Details, error)
	RouterAddr    string
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxClients <= 0 {
		c.MaxClients = 16
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.HelloTimeout <= 0 {
		c.HelloTimeout = 5 * time.Second
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
}

// Edge serves the topics' publications to browsers over WebSockets, with
// a viewer (Handler), and counts what it does (Stats, Collector).
type Edge struct {
	cfg    Config
	log    *slog.Logger
	topics map[string]*topic
	names  []string

	mu       sync.Mutex
	all      map[*browser]struct{} // every WebSocket open
	browsers map[*browser]struct{} // those past hello
	closed   bool
	status   statusMsg
	statusJS []byte
	topicsJS []byte
	routerJS []byte
	wg       sync.WaitGroup // WebSocket handlers

	c counters

	chMu    sync.Mutex
	changed chan struct{}

	logMu       sync.Mutex
	lastFailLog time.Time
}

// topic is one served topic. Fields without a comment are guarded by
// Edge.mu.
type topic struct {
	name       string
	latest     *publication
	subscribed bool
	state      string
	seq        uint64
	inc        string
	atts       []AttachmentInfo
	rate       float64
	bytesRate  float64

	publications, replaced, bytes, sent, skipped, bytesSent atomic.Uint64
	prevPubs, prevBytes                                     uint64 // the status ticker's own
}

type counters struct {
	busConnected                            atomic.Bool
	busLost, dialFailures, decodeFailures   atomic.Uint64
	clientsTotal, slowDrops, protocolErrors atomic.Uint64
	refusedOrigin, refusedHost, refusedFull atomic.Uint64
	refusedToken                            atomic.Uint64
	held                                    atomic.Int64
}

// New checks cfg and returns an Edge; Run starts its feed.
func New(cfg Config) (*Edge, error) {
	cfg.defaults()
	if len(cfg.Topics) == 0 {
		return nil, errors.New("edge: no topics to serve")
	}
	if cfg.Feed == nil {
		return nil, errors.New("edge: no feed")
	}
	e := &Edge{cfg: cfg, log: cfg.Logger, topics: map[string]*topic{}, all: map[*browser]struct{}{},
		browsers: map[*browser]struct{}{}, changed: make(chan struct{})}
	for _, name := range cfg.Topics {
		if !wire.ValidName(name) {
			return nil, fmt.Errorf("edge: %q is not a topic name", name)
		}
		if e.topics[name] != nil {
			return nil, fmt.Errorf("edge: topic %s named twice", name)
		}
		e.topics[name] = &topic{name: name, state: "waiting for the bus"}
		e.names = append(e.names, name)
	}
	for _, o := range cfg.AllowedOrigins {
		if o != "*" && normalOrigin(o) == "" {
			return nil, fmt.Errorf("edge: %q is not an origin (scheme://host[:port])", o)
		}
	}
	e.status = statusMsg{Type: "status", Bus: "down", Since: unixMs(time.Now()), Reason: "connecting"}
	e.statusJS = mustJSON(e.status)
	e.topicsJS = e.topicsNotice(0)
	return e, nil
}

// Topics lists the topics served, in the configured order.
func (e *Edge) Topics() []string { return slices.Clone(e.names) }

// Run runs the feed and the periodic notices until ctx ends, then lets
// go of every publication the topics hold. Close the browsers with
// Close.
func (e *Edge) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.tick(ctx)
	}()
	if e.cfg.RouterDetails != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.watchRouter(ctx)
		}()
	}
	err := e.cfg.Feed.Run(ctx, e.names, e)
	cancel()
	wg.Wait()
	e.dropLatest("stopped")
	e.c.busConnected.Store(false)
	e.notify()
	return err
}

// Close disconnects every browser (going away) and waits until their
// handlers have returned, or ctx ends; then it cuts those left.
func (e *Edge) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	all := make([]*browser, 0, len(e.all))
	for b := range e.all {
		all = append(all, b)
	}
	e.mu.Unlock()
	for _, b := range all {
		b.closeWith(1001, "the edge is shutting down")
	}
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, b := range all {
			b.cut()
		}
		<-done
		return fmt.Errorf("edge: browsers cut after %w", ctx.Err())
	}
}

// BusUp implements Sink.
func (e *Edge) BusUp(routerID string) {
	e.c.busConnected.Store(true)
	e.setStatus(statusMsg{Type: "status", Bus: "up", Since: unixMs(time.Now()), RouterID: routerID})
	e.log.Info("bus connected", "routerId", routerID)
}

// BusDown implements Sink.
func (e *Edge) BusDown(err error) {
	reason := "the router went away"
	if err != nil {
		reason = err.Error()
	}
	if e.c.busConnected.Swap(false) {
		e.c.busLost.Add(1)
		e.log.Warn("bus lost; reconnecting", "err", err)
		e.dropLatest("bus down")
	} else {
		e.c.dialFailures.Add(1)
	}
	e.mu.Lock()
	same := e.status.Bus == "down" && e.status.Reason == reason
	e.mu.Unlock()
	if !same {
		e.setStatus(statusMsg{Type: "status", Bus: "down", Since: unixMs(time.Now()), Reason: reason})
	}
	e.notify()
}

// TopicState implements Sink.
func (e *Edge) TopicState(name string, subscribed bool, err error) {
	t := e.topics[name]
	e.mu.Lock()
	t.subscribed = subscribed
	switch {
	case subscribed:
		t.state = "subscribed"
	case err != nil:
		t.state = err.Error()
	default:
		t.state = "not subscribed"
	}
	e.mu.Unlock()
	if !subscribed {
		e.log.Warn("topic not subscribed; retrying", "topic", name, "err", err)
	}
	e.notify()
}

// Deliver implements Sink.
func (e *Edge) Deliver(ctx context.Context, name string, m *client.Message) {
	t := e.topics[name]
	if t == nil {
		m.Close()
		return
	}
	p, err := take(ctx, t, m)
	if err != nil {
		// A connection lost under the hold is the feed's business, not a
		// publication the edge failed to serve.
		if ctx.Err() == nil && !errors.Is(err, wire.ErrRouterLost) && !errors.Is(err, client.ErrClosed) {
			e.c.decodeFailures.Add(1)
			e.logFailure("cannot serve a publication", "topic", name, "err", err)
			e.notify()
		}
		return
	}
	e.c.held.Add(1)
	p.released = func() { e.c.held.Add(-1); e.notify() }
	t.publications.Add(1)
	t.replaced.Add(p.replaced)
	t.bytes.Add(p.bytes)

	var drop []*publication
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		p.unref()
		return
	}
	if t.latest != nil {
		drop = append(drop, t.latest)
	}
	t.latest, t.seq, t.inc, t.atts = p, p.seq, p.incarnation, p.atts
	for b := range e.browsers {
		if old := b.offer(t, p); old != nil {
			drop = append(drop, old)
		}
	}
	e.mu.Unlock()
	for _, d := range drop {
		d.unref()
	}
	e.notify()
}

// logFailure logs at most one failure a second: a router refusing every
// hold at 60 Hz must not flood the log.
func (e *Edge) logFailure(msg string, args ...any) {
	e.logMu.Lock()
	now := time.Now()
	ok := now.Sub(e.lastFailLog) >= time.Second
	if ok {
		e.lastFailLog = now
	}
	e.logMu.Unlock()
	if ok {
		e.log.Warn(msg, args...)
	}
}

// dropLatest lets go of every topic's latest publication: they belong to
// a connection that is gone, or to an edge that is stopping.
func (e *Edge) dropLatest(state string) {
	var drop []*publication
	e.mu.Lock()
	for _, t := range e.topics {
		if t.latest != nil {
			drop = append(drop, t.latest)
			t.latest = nil
		}
		t.subscribed, t.state = false, state
	}
	e.mu.Unlock()
	for _, p := range drop {
		p.unref()
	}
}

func (e *Edge) setStatus(s statusMsg) {
	js := mustJSON(s)
	e.mu.Lock()
	e.status, e.statusJS = s, js
	for b := range e.browsers {
		b.setSlot(slotStatus, js)
	}
	e.mu.Unlock()
	e.notify()
}

// tick sends the topics notice every StatusInterval.
func (e *Edge) tick(ctx context.Context) {
	tk := time.NewTicker(e.cfg.StatusInterval)
	defer tk.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			js := e.topicsNotice(now.Sub(last))
			last = now
			e.mu.Lock()
			e.topicsJS = js
			for b := range e.browsers {
				b.setSlot(slotTopics, js)
			}
			e.mu.Unlock()
		}
	}
}

// topicsNotice computes the rates over interval (none when 0) and
// renders the topics notice.
func (e *Edge) topicsNotice(interval time.Duration) []byte {
	msg := topicsMsg{Type: "topics", Interval: interval.Seconds(), Topics: make([]TopicStatus, 0, len(e.names))}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, name := range e.names {
		t := e.topics[name]
		pubs, bytes := t.publications.Load(), t.bytes.Load()
		if interval > 0 {
			t.rate = float64(pubs-t.prevPubs) / interval.Seconds()
			t.bytesRate = float64(bytes-t.prevBytes) / interval.Seconds()
			t.prevPubs, t.prevBytes = pubs, bytes
		}
		atts := t.atts
		if atts == nil {
			atts = []AttachmentInfo{}
		}
		msg.Topics = append(msg.Topics, TopicStatus{Name: name, Subscribed: t.subscribed, State: t.state, Sequence: t.seq,
			Incarnation: t.inc, Publications: pubs, Replaced: t.replaced.Load(), Rate: t.rate, BytesRate: t.bytesRate, Attachments: atts})
	}
	return mustJSON(msg)
}

// notify wakes every Await.
func (e *Edge) notify() {
	e.chMu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.chMu.Unlock()
}

// Stats are the edge's counters at one moment.
type Stats struct {
	BusConnected bool
	BusLost      uint64 // connections lost after being up
	DialFailures uint64
	// Clients are the browsers past hello; Sockets every WebSocket open.
	Clients, Sockets int
	ClientsTotal     uint64
	// Refusals: a foreign Origin or Host, a wrong token, no seat left,
	// a malformed request or protocol breach; browsers dropped for a
	// write that outlasted WriteTimeout.
	RefusedOrigin, RefusedHost, RefusedToken, RefusedFull, ProtocolErrors, SlowDrops uint64
	// DecodeFailures counts publications the edge could not serve.
	DecodeFailures uint64
	// Held is how many publications are held now (latest, waiting or
	// being written).
	Held int64
	// Totals over the topics.
	Publications, FramesSent, FramesSkipped, BytesSent uint64
	Topics                                             []TopicStats
}

// TopicStats are one topic's counters.
type TopicStats struct {
	Name                                                     string
	Subscribed                                               bool
	State                                                    string
	Sequence                                                 uint64
	Publications, Replaced, FramesSent, FramesSkipped, Bytes uint64
}

// Stats returns the edge's counters.
func (e *Edge) Stats() Stats {
	s := Stats{BusConnected: e.c.busConnected.Load(), BusLost: e.c.busLost.Load(), DialFailures: e.c.dialFailures.Load(),
		ClientsTotal: e.c.clientsTotal.Load(), RefusedOrigin: e.c.refusedOrigin.Load(), RefusedHost: e.c.refusedHost.Load(),
		RefusedToken: e.c.refusedToken.Load(), RefusedFull: e.c.refusedFull.Load(), ProtocolErrors: e.c.protocolErrors.Load(),
		SlowDrops: e.c.slowDrops.Load(), DecodeFailures: e.c.decodeFailures.Load(), Held: e.c.held.Load()}
	e.mu.Lock()
	s.Clients, s.Sockets = len(e.browsers), len(e.all)
	for _, name := range e.names {
		t := e.topics[name]
		ts := TopicStats{Name: name, Subscribed: t.subscribed, State: t.state, Sequence: t.seq, Publications: t.publications.Load(),
			Replaced: t.replaced.Load(), FramesSent: t.sent.Load(), FramesSkipped: t.skipped.Load(), Bytes: t.bytesSent.Load()}
		s.Topics = append(s.Topics, ts)
		s.Publications += ts.Publications
		s.FramesSent += ts.FramesSent
		s.FramesSkipped += ts.FramesSkipped
		s.BytesSent += ts.Bytes
	}
	e.mu.Unlock()
	return s
}

// Topic returns one topic's counters (zero for a topic not served).
func (s Stats) Topic(name string) TopicStats {
	for _, t := range s.Topics {
		if t.Name == name {
			return t
		}
	}
	return TopicStats{}
}

// Await returns the Stats once cond holds for them, checking again after
// every change the edge makes; if ctx ends first it returns the last
// Stats and ctx's error.
func (e *Edge) Await(ctx context.Context, cond func(Stats) bool) (Stats, error) {
	for {
		e.chMu.Lock()
		ch := e.changed
		e.chMu.Unlock()
		s := e.Stats()
		if cond(s) {
			return s, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return s, ctx.Err()
		}
	}
}

func unixMs(t time.Time) float64 { return float64(t.UnixMicro()) / 1000 }
