package client

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/flybus/flybus/wire"
)

// Client is a program's connection to a router, serving RPC, pub/sub and
// artifacts. It is safe for concurrent use. Close it when done: that
// releases everything it still holds on the router.
//
// A Client made by Connect or ConnectUnix lives as long as its one
// connection. A Client made by Dial or DialUnix outlives connection loss
// and router restarts: it dials again, with backoff, declares the topics it
// declared, registers its services and subscribes its subscriptions again,
// and its Subscription and Service handles go on delivering. Everything
// else made on a lost connection (messages, requests, results, artifacts,
// writers, views, pending calls) belongs to it and fails with
// ErrStaleHandle; a command that was in flight at the loss ends with
// ROUTER_LOST, its outcome unknown. Nothing is sent again on its own.
type Client struct {
	dial func(context.Context) (net.Conn, error) // nil: one connection only
	cfg  Config

	mu      sync.Mutex
	cur     *conn
	state   State
	lastErr error         // the last loss, while reconnecting
	changed chan struct{} // closed at the next change of state
	stop    chan struct{} // closed by Close: the reconnect loop ends
	done    chan struct{} // closed once Close has finished (Dial clients)

	// What a Dial client restores on each new connection.
	topics   map[string]declared
	subs     map[*Subscription]struct{}
	services map[*Service]struct{}
	past     []*conn // lost connections whose handles are still open, for Stats
	folded   Stats   // the counters of lost connections with no handle left
	redials  uint64
}

// declared is a topic a Dial client declared, and the connection it was
// last declared on.
type declared struct {
	retained wire.Retention
	on       *conn
}

// State is where a Client's connection stands.
type State int

const (
	Connected    State = iota // commands go to the router
	Reconnecting              // a Dial client lost its connection and is dialling again
	Closed                    // the program closed the client, or its one connection ended
)

func (s State) String() string {
	switch s {
	case Connected:
		return "connected"
	case Reconnecting:
		return "reconnecting"
	default:
		return "closed"
	}
}

// Connect performs bus.hello over nc. The client refuses a router whose
// contract digest differs. It lives as long as nc: once the connection
// ends, operations fail with ROUTER_LOST (or ErrClosed after Close).
func Connect(ctx context.Context, nc net.Conn, cfg Config) (*Client, error) {
	cn, err := connect(ctx, nc, cfg, false)
	if err != nil {
		return nil, err
	}
	return newClient(cn, nil), nil
}

// ConnectUnix dials a router's socket and connects, as Connect.
func ConnectUnix(ctx context.Context, path string, cfg Config) (*Client, error) {
	nc, err := dialUnix(ctx, path)
	if err != nil {
		return nil, err
	}
	return Connect(ctx, nc, cfg)
}

// Dial connects through dial, waiting (until ctx ends) for a router to
// answer, and returns a Client that dials again whenever its connection
// is lost, for as long as the program keeps it open: see Client. A hello
// the router refuses for good (NOT_AUTHORIZED, VERSION_MISMATCH), or a
// StoreRoot that does not hold its store, fails at once. Each connection has a new client incarnation unless Config sets
// one.
func Dial(ctx context.Context, dial func(context.Context) (net.Conn, error), cfg Config) (*Client, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{dial: dial, cfg: cfg, state: Reconnecting, changed: make(chan struct{}), stop: make(chan struct{}),
		done: make(chan struct{}), topics: map[string]declared{}, subs: map[*Subscription]struct{}{}, services: map[*Service]struct{}{}}
	cn, err := c.redial(ctx, true)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.cur = cn
	c.setStateLocked(Connected, nil)
	c.mu.Unlock()
	go c.supervise()
	return c, nil
}

// DialUnix is Dial to a router's socket.
func DialUnix(ctx context.Context, path string, cfg Config) (*Client, error) {
	return Dial(ctx, func(ctx context.Context) (net.Conn, error) { return dialUnix(ctx, path) }, cfg)
}

func newClient(cn *conn, dial func(context.Context) (net.Conn, error)) *Client {
	return &Client{dial: dial, cfg: cn.cfg, cur: cn, state: Connected, changed: make(chan struct{})}
}

// Backoff between dials after a loss: doubling from the first to the cap,
// with jitter so that many clients of one router do not dial in step.
const (
	firstRedial = 50 * time.Millisecond
	maxRedial   = 2 * time.Second
)

// redial dials and connects until it succeeds, ctx ends or the client is
// closed. first is the Dial call itself, which returns the last error
// when ctx ends.
func (c *Client) redial(ctx context.Context, first bool) (*conn, error) {
	wait := firstRedial
	var last error
	for attempt := 0; ; attempt++ {
		if attempt > 0 || !first {
			t := time.NewTimer(wait/2 + rand.N(wait/2+1))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, dialGaveUp(ctx, last)
			case <-c.stop:
				t.Stop()
				return nil, ErrClosed
			}
			wait = min(2*wait, maxRedial)
		}
		nc, err := c.dial(ctx)
		if err == nil {
			var cn *conn
			if cn, err = connect(ctx, nc, c.cfg, true); err == nil {
				return cn, nil
			}
		}
		last = err
		if ctx.Err() != nil {
			return nil, dialGaveUp(ctx, last)
		}
		if first && refusedForGood(err) {
			return nil, err // the program has to change something first
		}
		if !first {
			c.cfg.Logger.Debug("flybus: reconnecting failed; trying again", "client", c.cfg.ClientID, "in", wait, "err", err)
		}
	}
}

// refusedForGood reports a refusal at connect that waiting does not cure:
// the identity, the version, the envelope or a StoreRoot without the
// router's store. A full router, or a client id still connected from
// before, may clear.
func refusedForGood(err error) bool {
	if errors.Is(err, ErrNoStoreRoot) {
		return true
	}
	var be *wire.BusError
	if !errors.As(err, &be) {
		return false
	}
	switch be.Code {
	case wire.ErrNotAuthorized, wire.ErrVersionMismatch, wire.ErrInvalidEnvelope:
		return true
	}
	return false
}

func dialGaveUp(ctx context.Context, last error) error {
	if last == nil {
		return ctx.Err()
	}
	return errors.Join(ctx.Err(), last)
}

// supervise waits for each connection's loss and replaces it, until Close.
func (c *Client) supervise() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-c.stop
		cancel()
	}()
	defer cancel()
	for {
		c.mu.Lock()
		cn := c.cur
		c.mu.Unlock()
		select {
		case <-cn.closed:
		case <-c.stop:
			return
		}
		c.mu.Lock()
		if c.state == Closed {
			c.mu.Unlock()
			return
		}
		c.past = append(c.past, cn)
		c.setStateLocked(Reconnecting, cn.Err())
		c.mu.Unlock()
		c.cfg.Logger.Warn("flybus: lost the router; reconnecting", "client", c.cfg.ClientID, "err", cn.Err())
		for {
			next, err := c.redial(ctx, false)
			if err != nil {
				return // closed
			}
			if c.restore(ctx, next) {
				break
			}
			next.fail(errors.New("lost while restoring"))
		}
	}
}

// restore declares, registers and subscribes again on cn what the program
// still has, then makes cn the client's connection. A handle made while it
// runs (on the lost connection, just before the loss) is restored too: it
// loops until everything is on cn. It reports false when cn was lost
// meanwhile.
func (c *Client) restore(ctx context.Context, cn *conn) bool {
	for {
		c.mu.Lock()
		var topics []string
		for name, d := range c.topics {
			if d.on != cn {
				topics = append(topics, name)
			}
		}
		var subs []*Subscription
		for s := range c.subs {
			if s.conn() != cn {
				subs = append(subs, s)
			}
		}
		var services []*Service
		for s := range c.services {
			if s.conn() != cn {
				services = append(services, s)
			}
		}
		if len(topics)+len(subs)+len(services) == 0 {
			c.cur = cn
			c.redials++
			c.setStateLocked(Connected, nil)
			c.mu.Unlock()
			c.cfg.Logger.Info("flybus: reconnected", "client", c.cfg.ClientID, "connection", cn.info.ConnectionID)
			return true
		}
		c.mu.Unlock()
		// Topics first, so that subscriptions find them.
		for _, name := range topics {
			c.mu.Lock()
			d, ok := c.topics[name]
			c.mu.Unlock()
			if !ok {
				continue
			}
			if _, err := cn.DeclareTopic(ctx, name, d.retained); err != nil && !c.refused(cn, err, "declare topic "+name) {
				return false
			}
			c.mu.Lock()
			if d2, ok := c.topics[name]; ok {
				c.topics[name] = declared{retained: d2.retained, on: cn}
			}
			c.mu.Unlock()
		}
		for _, s := range services {
			err := cn.register(ctx, s)
			if err != nil && !c.refused(cn, err, "register "+s.name) {
				return false
			}
			if err != nil {
				c.forget(s)
				// Next returns the router's refusal (errors.As finds it).
				s.closeQueue(&handleError{msg: "flybus: the service could not be registered again after a reconnect: " + err.Error(), cause: err})
			} else if s.closed.Load() { // closed while registering
				cn.fireAndForget(wire.OpServiceUnregister, &wire.Unregister{Name: s.name, ServiceIncarnation: s.Incarnation()})
			}
		}
		for _, s := range subs {
			err := c.resubscribe(ctx, cn, s)
			if err != nil && !c.refused(cn, err, "subscribe to "+s.topic) {
				return false
			}
			if err != nil {
				c.forget(s)
				s.closeQueue(&handleError{msg: "flybus: the subscription to " + s.topic + " could not be made again after a reconnect: " + err.Error(),
					kinds: []error{ErrSubscriptionClosed}, cause: err})
			}
		}
	}
}

// resubscribe subscribes s on cn, awaiting its topic: its producer may
// not have reconnected yet.
func (c *Client) resubscribe(ctx context.Context, cn *conn, s *Subscription) error {
	if err := cn.subscribe(ctx, s, true); err != nil {
		return err
	}
	if s.closed.Load() { // closed while subscribing
		id := s.ID()
		dropEntry(&cn.mu, &cn.subs, id, s)
		cn.fireAndForget(wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: id})
	}
	return nil
}

// refused reports whether err is the router's answer (so the connection
// lives and restoring goes on without that handle), logging it; false
// when the connection was lost.
func (c *Client) refused(cn *conn, err error, what string) bool {
	var be *wire.BusError
	if !errors.As(err, &be) || be.Code == wire.ErrRouterLost || cn.Err() != nil {
		return false
	}
	c.cfg.Logger.Warn("flybus: after reconnecting, the router refused to "+what, "client", c.cfg.ClientID, "err", err)
	return true
}

// forget drops a handle the program closed from what is restored.
func (c *Client) forget(h any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch h := h.(type) {
	case *Subscription:
		delete(c.subs, h)
	case *Service:
		delete(c.services, h)
	}
}

func (c *Client) setStateLocked(s State, err error) {
	c.state, c.lastErr = s, err
	close(c.changed)
	c.changed = make(chan struct{})
}

// State reports where the connection stands, and a channel closed at its
// next change: a program watches it without polling.
func (c *Client) State() (State, <-chan struct{}) {
	if c.dial == nil {
		// One connection: its end is the one change there is.
		if c.cur.Err() != nil {
			return Closed, closedChan
		}
		return Connected, c.cur.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.changed
}

var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// conn is the connection for a command: the current one, or for a Dial
// client that is reconnecting, the next one, waited for until ctx ends.
func (c *Client) conn(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		cn, st, changed, last := c.cur, c.state, c.changed, c.lastErr
		c.mu.Unlock()
		switch st {
		case Connected:
			return cn, nil
		case Closed:
			return nil, ErrClosed
		}
		select {
		case <-changed:
		case <-ctx.Done():
			msg := "reconnecting to the router: " + ctx.Err().Error()
			if last != nil {
				msg += " (lost: " + last.Error() + ")"
			}
			return nil, &wire.BusError{Code: wire.ErrRouterLost, Dispatch: wire.NotDispatched, Message: msg + "; not sent"}
		}
	}
}

// Info returns the negotiated session of the current connection.
func (c *Client) Info() Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur.info
}

// Err returns nil while the client is connected; the loss while a Dial
// client reconnects; and why it ended once it has (ErrClosed after Close,
// ROUTER_LOST for a Connect client whose connection ended).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.dial == nil:
		return c.cur.Err()
	case c.state == Closed:
		return ErrClosed
	}
	return c.lastErr
}

// Done is closed when the client has ended: for a Connect client when its
// connection ends, for a Dial client when Close is done.
func (c *Client) Done() <-chan struct{} {
	if c.dial == nil {
		return c.cur.Done()
	}
	return c.done
}

// closeTimeout bounds Close's wait for the router to let go.
const closeTimeout = 5 * time.Second

// Close flushes queued consumes and releases, waits for the replies to
// every command already sent, shuts the connection's write side and waits
// until the router has closed its side too: by then it has released
// everything this connection owned and the client id can be used again at
// once. Operations afterwards fail with ErrClosed. It gives up after 5 s
// (see CloseContext). Idempotent.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return c.CloseContext(ctx)
}

// CloseContext is Close with a bound: when ctx ends first, the connection
// is closed at once and an error says the router may not have let go yet.
func (c *Client) CloseContext(ctx context.Context) error {
	if c.dial == nil {
		return c.cur.CloseContext(ctx)
	}
	c.mu.Lock()
	if c.state == Closed {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	close(c.stop)
	c.setStateLocked(Closed, nil)
	cn := c.cur
	subs, services := c.subs, c.services
	c.subs, c.services = map[*Subscription]struct{}{}, map[*Service]struct{}{}
	c.mu.Unlock()
	err := cn.CloseContext(ctx)
	// Handles between connections are in no connection's tables.
	for s := range subs {
		s.closeQueue(&handleError{msg: "flybus: subscription closed: " + ErrClosed.Error(), kinds: []error{ErrSubscriptionClosed}, cause: ErrClosed})
	}
	for s := range services {
		s.closeQueue(ErrClosed)
	}
	close(c.done)
	return err
}

// Stats returns the client's counters, over every connection of a Dial
// client.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.cur.Stats()
	if c.dial == nil {
		return st
	}
	// Lost connections count until their last handle is closed; then
	// their counters fold into one sum.
	kept := c.past[:0]
	for _, p := range c.past {
		ps := p.Stats()
		if p.handles.open.Load() == 0 {
			c.folded = addStats(c.folded, ps)
			continue
		}
		kept = append(kept, p)
		st = addStats(st, ps)
	}
	clear(c.past[len(kept):])
	c.past = kept
	st = addStats(st, c.folded)
	st.Reconnects = c.redials
	return st
}

// addStats adds b's cumulative counters to a; gauges stay a's (the current
// connection's).
func addStats(a, b Stats) Stats {
	a.Leaked += b.Leaked
	a.StalledSubscriptions += b.StalledSubscriptions
	a.ControlErrors += b.ControlErrors
	a.ArtifactOpens += b.ArtifactOpens
	a.Maps += b.Maps
	a.Unmaps += b.Unmaps
	a.CachedViews += b.CachedViews
	a.AllocatedAhead += b.AllocatedAhead
	a.PreparedReleased += b.PreparedReleased
	a.OpenedAhead += b.OpenedAhead
	return a
}

// DeclareTopic declares name with its retention. Redeclaring with the same
// retention is allowed; a different one fails with CONFLICT. A Dial client
// declares it again on each new connection.
func (c *Client) DeclareTopic(ctx context.Context, name string, retained wire.Retention) (TopicInfo, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return TopicInfo{}, err
	}
	info, err := cn.DeclareTopic(ctx, name, retained)
	if err == nil && c.dial != nil {
		c.mu.Lock()
		c.topics[name] = declared{retained: retained, on: cn}
		c.mu.Unlock()
	}
	return info, err
}

// ClearTopic releases the topic's retained value; it reports whether there
// was one. Deliveries already made stay valid.
func (c *Client) ClearTopic(ctx context.Context, name string) (bool, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return false, err
	}
	return cn.ClearTopic(ctx, name)
}

// DeleteTopic deletes a topic without subscribers (CONFLICT otherwise); it
// reports false for a topic that did not exist. A Dial client no longer
// declares it after a reconnect.
func (c *Client) DeleteTopic(ctx context.Context, name string) (bool, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return false, err
	}
	if c.dial != nil {
		c.mu.Lock()
		delete(c.topics, name)
		c.mu.Unlock()
	}
	return cn.DeleteTopic(ctx, name)
}

// Publish admits one message to topic; payload is any JSON-object value or
// RawJSON, atts the artifacts it carries (fan-out adds owners, never bytes).
func (c *Client) Publish(ctx context.Context, topic string, payload any, atts ...Attachment) (PublishReceipt, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return PublishReceipt{}, err
	}
	return cn.Publish(ctx, topic, payload, atts...)
}

// Subscribe subscribes to a declared topic (NO_TOPIC otherwise). A Dial
// client's subscription is made again on each new connection, and goes on
// delivering through the same handle.
func (c *Client) Subscribe(ctx context.Context, topic string, opts ...SubscribeOption) (*Subscription, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	s, err := cn.Subscribe(ctx, topic, opts...)
	if err != nil || c.dial == nil {
		return s, err
	}
	if late := c.adopt(cn, func() { s.owner = c; c.subs[s] = struct{}{} }); late != nil {
		// Lost after the router said yes, and restored without it.
		if err := c.resubscribe(ctx, late, s); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Register claims an exclusive service name. Queued and InFlight bound its
// calls waiting for dispatch and its requests not yet replied to (16
// each by default). A Dial client's service is registered again, under a
// new incarnation, on each new connection.
func (c *Client) Register(ctx context.Context, name string, opts ...ServiceOption) (*Service, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	s, err := cn.Register(ctx, name, opts...)
	if err != nil || c.dial == nil {
		return s, err
	}
	if late := c.adopt(cn, func() { s.owner = c; c.services[s] = struct{}{} }); late != nil {
		if err := late.register(ctx, s); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// adopt records a new subscription or service, made on cn, for restoring.
// A restore still running finds it; when cn was lost and its successor is
// already restored, adopt returns that successor, where the caller makes
// the handle again.
func (c *Client) adopt(cn *conn, add func()) (late *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	add()
	if c.state == Connected && c.cur != cn {
		return c.cur
	}
	return nil
}

// Call admits a call of method to target. payload is any JSON-object
// value, or RawJSON; opts are the call's attachments (Attach) and, to reach
// only one incarnation of the service, Pin.
func (c *Client) Call(ctx context.Context, target, method string, payload any, opts ...CallOption) (*PendingCall, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	return cn.Call(ctx, target, method, payload, opts...)
}

// CallAndWait calls and waits for the result. If ctx ends first the call is
// abandoned (best-effort cancel) and ctx's error returned.
func (c *Client) CallAndWait(ctx context.Context, target, method string, payload any, opts ...CallOption) (*Result, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	return cn.CallAndWait(ctx, target, method, payload, opts...)
}

// Allocate reserves a staging file of exactly n bytes (unwritten bytes
// read as zeros) and returns its unique writer.
func (c *Client) Allocate(ctx context.Context, n int64, contentType string) (*ArtifactWriter, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	return cn.Allocate(ctx, n, contentType)
}
