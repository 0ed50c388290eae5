package router

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/flybus/flybus/wire"
)

// Listener accepts Unix-socket connections for a router. A failed accept
// (out of descriptors, say) is logged, counted in Stats.AcceptRetries and
// retried after a backoff; only Close ends the listener. A connection the
// router refuses is sent connection.closing with the reason first.
type Listener struct {
	r     *Router
	ln    *net.UnixListener
	path  string
	bound string
	once  sync.Once
	done  chan struct{} // closed by Close, to end a wait between retries
}

// A failed accept is retried after a delay that doubles from
// acceptMinDelay to acceptMaxDelay and resets on success, as net/http's
// server does: running out of descriptors or memory is temporary, and
// neither ending the loop nor spinning on the error is right. Only a closed
// listener ends it.
const (
	acceptMinDelay = 5 * time.Millisecond
	acceptMaxDelay = time.Second
	// acceptLogEvery bounds the log lines of one storm of failures.
	acceptLogEvery = 10 * time.Second
	// refusalWriteGrace bounds writing the refusal notice; a fresh socket
	// has room for it, so this only matters for a peer that is gone.
	refusalWriteGrace = 100 * time.Millisecond
)

// ListenUnix listens on path for unbound (self-asserted) clients; the
// router's policy must be open.
func (r *Router) ListenUnix(path string) (*Listener, error) { return r.listenUnix(path, "") }

// ListenUnixAs listens on path for one launcher-bound client id.
func (r *Router) ListenUnixAs(path, clientID string) (*Listener, error) {
	if !wire.ValidID(clientID) {
		return nil, errors.New("flybus: invalid client id " + clientID)
	}
	return r.listenUnix(path, clientID)
}

func (r *Router) listenUnix(path, bound string) (*Listener, error) {
	if bound == "" && !r.cfg.Policy.IsOpen() {
		return nil, errors.New("flybus: an unbound listener needs an open policy")
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	l := &Listener{r: r, ln: ln, path: path, bound: bound, done: make(chan struct{})}
	r.mu.Lock()
	if r.shutdown {
		r.mu.Unlock()
		ln.Close()
		return nil, ErrClosed
	}
	r.listeners[l] = struct{}{}
	r.wg.Add(1)
	r.mu.Unlock()
	go l.acceptLoop()
	return l, nil
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Close stops accepting and removes the socket file.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
		l.r.mu.Lock()
		delete(l.r.listeners, l)
		l.r.mu.Unlock()
	})
	return err
}

func (l *Listener) acceptLoop() {
	defer l.r.wg.Done()
	var delay time.Duration
	var storm acceptStorm
	for {
		nc, err := l.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, acceptMinDelay), acceptMaxDelay)
			l.r.acceptRetries.Add(1)
			storm.failed(l, err, delay)
			t := time.NewTimer(delay)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		storm.over(l)
		l.serve(nc)
	}
}

// serve hands an accepted socket to the router. The router closes a
// transport it refuses at once; a client closed without a word cannot
// tell a full router from a crashed one, so the socket's Close is held
// back while serve decides, and a refusal is written as connection.closing
// before the socket is closed.
func (l *Listener) serve(nc *net.UnixConn) {
	hc := &heldConn{UnixConn: nc, held: true}
	if err := l.r.serve(hc, l.bound); err != nil {
		writeRefusal(nc, err)
		nc.Close()
		l.r.cfg.Logger.Info("connection refused", "socket", l.path, "err", err)
		return
	}
	hc.release()
}

// heldConn is an accepted socket whose Close, while held, only records
// that it was asked for; release performs it then.
type heldConn struct {
	*net.UnixConn
	mu     sync.Mutex
	held   bool
	closed bool // Close was called while held
}

func (c *heldConn) Close() error {
	c.mu.Lock()
	if c.held {
		c.closed = true
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	return c.UnixConn.Close()
}

func (c *heldConn) release() {
	c.mu.Lock()
	c.held = false
	closed := c.closed
	c.mu.Unlock()
	if closed {
		c.UnixConn.Close()
	}
}

// writeRefusal sends the connection.closing notice that explains a refusal:
// the refusal's own code (QUOTA_EXCEEDED when the router is full), or
// ROUTER_LOST when it is shutting down.
func writeRefusal(nc net.Conn, err error) {
	cc := wire.ConnectionClosing{Code: wire.ErrRouterLost, Message: "router shutting down"}
	var be *wire.BusError
	if errors.As(err, &be) {
		cc.Code, cc.Message = be.Code, be.Message
	}
	// Before hello the client's minor is unknown: the oldest is one every
	// client of this major reads.
	b, err := wire.AppendFrame(nil, wire.Header{ID: 1, Kind: wire.KindNotice, Op: wire.OpConnectionClosing,
		Minor: wire.Some[uint32](wire.OldestMinor)}, &cc, nil)
	if err != nil {
		return
	}
	_ = nc.SetWriteDeadline(time.Now().Add(refusalWriteGrace))
	_ = wire.WriteFull(nc, b)
}

// acceptStorm keeps one run of accept failures to a few log lines: the
// first, then at most one per acceptLogEvery with the count in between,
// and one when accepting works again.
type acceptStorm struct {
	failures   int // in this storm
	unlogged   int // since the last line
	start, log time.Time
}

func (s *acceptStorm) failed(l *Listener, err error, delay time.Duration) {
	now := time.Now()
	if s.failures == 0 {
		s.start = now
	}
	s.failures++
	if s.failures > 1 && now.Sub(s.log) < acceptLogEvery {
		s.unlogged++
		return
	}
	l.r.cfg.Logger.Warn("accept failed; retrying", "socket", l.path, "err", err,
		"retryIn", delay, "failures", s.failures, "unlogged", s.unlogged)
	s.log, s.unlogged = now, 0
}

func (s *acceptStorm) over(l *Listener) {
	if s.failures == 0 {
		return
	}
	l.r.cfg.Logger.Info("accepting again", "socket", l.path, "failures", s.failures,
		"after", time.Since(s.start).Round(time.Millisecond))
	*s = acceptStorm{}
}
