package router

import (
	"errors"
	"net"
	"os"
	"sync"

	"github.com/flybus/flybus/wire"
)

// Listener accepts Unix-socket connections for a router.
type Listener struct {
	r     *Router
	ln    *net.UnixListener
	path  string
	bound string
	once  sync.Once
}

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
	l := &Listener{r: r, ln: ln, path: path, bound: bound}
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
		err = l.ln.Close()
		l.r.mu.Lock()
		delete(l.r.listeners, l)
		l.r.mu.Unlock()
	})
	return err
}

func (l *Listener) acceptLoop() {
	defer l.r.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.r.cfg.Logger.Warn("accept failed", "socket", l.path, "err", err)
			}
			return
		}
		if err := l.r.serve(nc, l.bound); err != nil {
			l.r.cfg.Logger.Info("connection refused", "socket", l.path, "err", err)
		}
	}
}
