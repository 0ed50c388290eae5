package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// A router that can be stopped and started again on the same store root
// (and socket): what a Dial client sees when its router restarts.
type restartable interface {
	start(t *testing.T)
	stop(t *testing.T) // shuts the router down, or kills its process
	dial(ctx context.Context) (net.Conn, error)
	root() string
}

// inProcess restarts an embedded router, dialled in memory or over Unix.
type inProcess struct {
	mode   store.Mode
	unix   bool
	dir    string
	sroot  string
	socket string

	mu sync.Mutex
	r  *router.Router
}

func (p *inProcess) root() string { return p.sroot }

func (p *inProcess) start(t *testing.T) {
	t.Helper()
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: p.sroot, StoreMode: p.mode})
	if err != nil {
		t.Fatal(err)
	}
	if p.unix {
		if _, err := r.ListenUnix(p.socket); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	p.r = r
	p.mu.Unlock()
}

func (p *inProcess) stop(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	r := p.r
	p.r = nil
	p.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func (p *inProcess) dial(ctx context.Context) (net.Conn, error) {
	if p.unix {
		var d net.Dialer
		return d.DialContext(ctx, "unix", p.socket)
	}
	p.mu.Lock()
	r := p.r
	p.mu.Unlock()
	if r == nil {
		return nil, errors.New("no router running")
	}
	return r.ConnectInMemory()
}

var quiet = slog.New(slog.DiscardHandler)

// waitState waits for c to reach want, on the client's own announcements.
func waitState(t *testing.T, c *client.Client, want client.State) {
	t.Helper()
	awaitChange(t, "client state", c.State, want)
}

// awaitChange waits until get says want, woken by the channel get returns
// with each value: a value the SDK announces changes of.
func awaitChange[T comparable](t *testing.T, what string, get func() (T, <-chan struct{}), want T) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		v, changed := get()
		if v == want {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s %v, want %v", what, v, want)
		}
	}
}

const restartFrame = 64 * 1024

// frameOf is frame n's bytes.
func frameOf(n int) []byte { return bustest.FrameBytes(byte(n), restartFrame) }

func publishFrame(t *testing.T, ctx context.Context, c *client.Client, n int) {
	t.Helper()
	a := bustest.Produce(t, c, frameOf(n))
	defer a.Close()
	if _, err := c.Publish(ctx, "frames", map[string]int{"n": n}, client.Attach("frame", a)); err != nil {
		t.Fatalf("publish %d: %v", n, err)
	}
}

// receiveFrames takes frames from..to from s, in order, with their bytes.
func receiveFrames(t *testing.T, ctx context.Context, s *client.Subscription, from, to int) {
	t.Helper()
	for n := from; n <= to; n++ {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		var p struct{ N int }
		if err := m.Decode(&p); err != nil || p.N != n {
			t.Fatalf("got frame %d (%v), want %d", p.N, err, n)
		}
		a := bustest.MustArtifact(t, m, "frame")
		v := bustest.MustMap(t, ctx, a)
		if !bytes.Equal(v.Bytes(), frameOf(n)) {
			t.Fatalf("frame %d: bytes differ", n)
		}
		v.Close()
		a.Close()
		m.Close()
	}
}

// A producer, two consumers, a service and its caller, all Dial clients,
// through a router restart: every frame published once they are back
// reaches both consumers, the service answers under a new incarnation, a
// call in flight at the loss ends with its outcome unknown, handles of the
// lost connection fail with ErrStaleHandle, and nothing leaks.
func restartScenario(t *testing.T, bus restartable) {
	base, fdBase := leakcheck.Goroutines(), shmtest.FDs(t)
	t.Cleanup(func() {
		bus.stop(t)
		leakcheck.WaitGoroutines(t, base)
		bustest.WaitFor(t, "descriptors to close", func() bool { return shmtest.FDs(t) <= fdBase })
	})
	ctx := bustest.Ctx(t)
	bus.start(t)
	dial := func(id string) *client.Client {
		c, err := client.Dial(ctx, bus.dial, client.Config{ClientID: id, StoreRoot: bus.root(), Logger: quiet})
		if err != nil {
			t.Fatalf("dial %s: %v", id, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	prod, cons1, cons2, svcC, caller := dial("prod"), dial("cons1"), dial("cons2"), dial("svc"), dial("caller")
	bustest.MustDeclare(t, prod, "frames", wire.RetainNone)
	s1 := bustest.MustSubscribe(t, ctx, cons1, "frames", client.Bounded())
	s2 := bustest.MustSubscribe(t, ctx, cons2, "frames", client.Bounded())
	svc := bustest.MustRegister(t, ctx, svcC, "echo")
	blocked := make(chan *client.Responder, 1)
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- svc.Serve(serveCtx, func(ctx context.Context, req *client.Request) {
			if req.Method == "block" {
				blocked <- req.Responder() // it outlives the request, and never answers
				return
			}
			var in struct{ N int }
			_ = req.Decode(&in)
			// The caller may have its result and end the test before the
			// router acknowledges the reply.
			if _, err := req.Reply(context.WithoutCancel(ctx), map[string]int{"n": in.N + 1}); err != nil {
				t.Errorf("reply: %v", err)
			}
		})
	}()
	defer func() {
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	publishFrame(t, ctx, prod, 1)
	receiveFrames(t, ctx, s1, 1, 1)
	receiveFrames(t, ctx, s2, 1, 1)
	firstInc := svc.Incarnation()
	// Kept across the loss: a message, an unsealed writer, a call in flight.
	publishFrame(t, ctx, prod, 2)
	kept, err := s1.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	w := bustest.MustAllocate(t, ctx, prod, 16, "x/y")
	defer w.Close()
	inFlight, err := caller.Call(ctx, "echo", "block", map[string]int{})
	if err != nil {
		t.Fatal(err)
	}
	defer inFlight.Close()
	var resp *client.Responder
	select {
	case resp = <-blocked:
	case <-ctx.Done():
		t.Fatal("the blocking call never reached the service")
	}
	defer resp.Close()

	bus.stop(t)
	for _, c := range []*client.Client{prod, cons1, cons2, svcC, caller} {
		waitState(t, c, client.Reconnecting)
	}
	if _, err := inFlight.Result(ctx); bustest.Code(t, err) != wire.ErrRouterLost || bustest.DispatchOf(t, err) != wire.DispatchUnknown {
		t.Fatalf("a call in flight at the loss: %v, want ROUTER_LOST with its outcome unknown", err)
	}
	if _, err := kept.Artifact("frame"); !errors.Is(err, client.ErrStaleHandle) || bustest.Code(t, err) != wire.ErrRouterLost {
		t.Fatalf("a message of the lost connection: %v, want ErrStaleHandle", err)
	}
	if _, err := resp.Reply(ctx, map[string]int{}); !errors.Is(err, client.ErrStaleHandle) {
		t.Fatalf("a responder of the lost connection: %v, want ErrStaleHandle", err)
	}
	if _, err := w.Seal(ctx); err == nil {
		t.Fatal("a writer of the lost connection sealed")
	}

	bus.start(t)
	for _, c := range []*client.Client{prod, cons1, cons2, svcC, caller} {
		waitState(t, c, client.Connected)
	}
	// A consumer back before its producer awaits the topic's declaration:
	// once every client is back, the topic is declared and both
	// subscriptions are live.
	for n := 3; n <= 12; n++ {
		publishFrame(t, ctx, prod, n)
	}
	receiveFrames(t, ctx, s1, 3, 12)
	receiveFrames(t, ctx, s2, 3, 12)

	res, err := caller.CallAndWait(ctx, "echo", "inc", map[string]int{"n": 41})
	if err != nil {
		t.Fatalf("call after the restart: %v", err)
	}
	var out struct{ N int }
	if err := res.Decode(&out); err != nil || out.N != 42 || res.ServiceIncarnation != svc.Incarnation() {
		t.Fatalf("result %+v (%v) from incarnation %v, want 42 from the service's current one %v", out, err, res.ServiceIncarnation, svc.Incarnation())
	}
	res.Close()
	_ = firstInc // a new router numbers incarnations from 1 again: a pin does not tell routers apart
	for _, c := range []*client.Client{prod, cons1, cons2, svcC, caller} {
		if st := c.Stats(); st.Reconnects != 1 || st.Leaked != 0 {
			t.Errorf("%s: %+v, want one reconnect and nothing leaked", c.Info().Identity.ClientID, st)
		}
	}
}

func TestDialSurvivesARouterRestart(t *testing.T) {
	for _, mode := range bustest.StoreModes {
		for _, unix := range []bool{false, true} {
			name := fmt.Sprintf("%s/unix=%v", mode, unix)
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				restartScenario(t, &inProcess{mode: mode, unix: unix, dir: dir, sroot: shmtest.Dir(t, "flybus-test-"),
					socket: filepath.Join(dir, "bus.sock")})
			})
		}
	}
}

// Close ends a Dial client for good, reconnecting or not: Done closes, Err
// says so, the subscription ends, and commands fail with ErrClosed.
func TestDialCloseWhileReconnecting(t *testing.T) {
	dir := t.TempDir()
	bus := &inProcess{mode: store.ModePool, dir: dir, sroot: shmtest.Dir(t, "flybus-test-"), socket: filepath.Join(dir, "bus.sock")}
	base := leakcheck.Goroutines()
	bus.start(t)
	ctx := bustest.Ctx(t)
	c, err := client.Dial(ctx, bus.dial, client.Config{ClientID: "c", StoreRoot: bus.root()})
	if err != nil {
		t.Fatal(err)
	}
	bustest.MustDeclare(t, c, "t", wire.RetainNone)
	s := bustest.MustSubscribe(t, ctx, c, "t")
	bus.stop(t)
	waitState(t, c, client.Reconnecting)
	if err := c.Err(); bustest.Code(t, err) != wire.ErrRouterLost {
		t.Fatalf("Err while reconnecting: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = c.Publish(short, "t", nil)
	cancel()
	if bustest.Code(t, err) != wire.ErrRouterLost || bustest.DispatchOf(t, err) != wire.NotDispatched {
		t.Fatalf("a publish whose context ends while reconnecting: %v, want ROUTER_LOST, not sent", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if st, _ := c.State(); st != client.Closed || !errors.Is(c.Err(), client.ErrClosed) {
		t.Fatalf("after Close: %s, %v", st, c.Err())
	}
	if _, err := s.Next(ctx); !errors.Is(err, client.ErrSubscriptionClosed) {
		t.Fatalf("subscription after Close: %v", err)
	}
	if _, err := c.Publish(ctx, "t", nil); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("publish after Close: %v", err)
	}
	leakcheck.WaitGoroutines(t, base)
}

// Dial waits for a router that is not up yet, and gives up with the last
// dial error when its context ends first.
func TestDialWaitsForTheRouter(t *testing.T) {
	dir := t.TempDir()
	bus := &inProcess{mode: store.ModeFiles, unix: true, dir: dir, sroot: shmtest.Dir(t, "flybus-test-"), socket: filepath.Join(dir, "bus.sock")}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := client.Dial(short, bus.dial, client.Config{ClientID: "early", StoreRoot: bus.root()})
	cancel()
	var oe *net.OpError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &oe) {
		t.Fatalf("Dial with no router: %v, want the deadline and the dial error", err)
	}
	dialed := make(chan *client.Client, 1)
	go func() {
		c, err := client.DialUnix(context.Background(), bus.socket, client.Config{ClientID: "early", StoreRoot: bus.root()})
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	bus.start(t)
	defer bus.stop(t)
	c := <-dialed
	if c == nil {
		return
	}
	defer c.Close()
	if st, _ := c.State(); st != client.Connected {
		t.Fatalf("state %s", st)
	}
}

// inAProcess restarts `flybus serve`, killed with SIGKILL: the router
// never says goodbye, and the clients find out from the socket.
type inAProcess struct {
	bin, sroot, socket string
	mode               store.Mode
	cmd                *exec.Cmd
}

func (p *inAProcess) root() string { return p.sroot }

func (p *inAProcess) start(t *testing.T) {
	t.Helper()
	p.cmd, _ = bustest.Serve(t, p.bin, p.sroot, p.socket, "--store-mode", p.mode.String())
}

func (p *inAProcess) stop(t *testing.T) {
	t.Helper()
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
}

func (p *inAProcess) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", p.socket)
}

func TestDialSurvivesAKilledRouterProcess(t *testing.T) {
	bin := bustest.FlybusBinary(t)
	for _, mode := range bustest.StoreModes {
		t.Run(mode.String(), func(t *testing.T) {
			restartScenario(t, &inAProcess{bin: bin, mode: mode, sroot: shmtest.Dir(t, "flybus-test-"),
				socket: filepath.Join(t.TempDir(), "bus.sock")})
		})
	}
}

// A Connect client's State announces its one change: the connection's end.
func TestConnectStateAnnouncesTheEnd(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		c := h.Dial("once")
		st, changed := c.State()
		if st != client.Connected {
			t.Fatalf("state %s", st)
		}
		c.Close()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("the change channel taken while connected did not close at the end")
		}
		if st, _ := c.State(); st != client.Closed {
			t.Fatalf("state %s after Close", st)
		}
	})
}

// OnConnect runs on every connection before the client restores anything
// on it: while it runs on the new router, the consumer is not subscribed
// there yet, so nothing published can reach it; once it returns, the
// subscription is restored and delivers.
func TestOnConnectRunsBeforeTheRestore(t *testing.T) {
	for _, mode := range bustest.StoreModes {
		for _, unix := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unix=%v", mode, unix), func(t *testing.T) {
				dir := t.TempDir()
				bus := &inProcess{mode: mode, unix: unix, dir: dir, sroot: shmtest.Dir(t, "flybus-test-"), socket: filepath.Join(dir, "bus.sock")}
				base := leakcheck.Goroutines()
				defer leakcheck.WaitGoroutines(t, base)
				bus.start(t)
				defer bus.stop(t)
				ctx := bustest.Ctx(t)
				var mu sync.Mutex
				var conns []wire.ConnID
				entered, gate := make(chan struct{}, 2), make(chan struct{})
				var release sync.Once
				open := func() { release.Do(func() { close(gate) }) }
				defer open() // a failure while the consumer is held still lets it go
				cons, err := client.Dial(ctx, bus.dial, client.Config{ClientID: "cons", StoreRoot: bus.root(), Logger: quiet,
					OnConnect: func(info client.Info) {
						mu.Lock()
						conns = append(conns, info.ConnectionID)
						n := len(conns)
						mu.Unlock()
						entered <- struct{}{}
						if n == 2 {
							<-gate
						}
					}})
				if err != nil {
					t.Fatal(err)
				}
				defer cons.Close()
				wait := func() {
					select {
					case <-entered:
					case <-ctx.Done():
						t.Fatal("OnConnect did not run")
					}
				}
				wait()
				if mu.Lock(); len(conns) != 1 || conns[0] != cons.Info().ConnectionID {
					t.Fatalf("first connection %v, the client's %v", conns, cons.Info().ConnectionID)
				}
				mu.Unlock()
				prod, err := client.Dial(ctx, bus.dial, client.Config{ClientID: "prod", StoreRoot: bus.root(), Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				defer prod.Close()
				bustest.MustDeclare(t, prod, "t", wire.RetainNone)
				s := bustest.MustSubscribe(t, ctx, cons, "t")

				bus.stop(t)
				bus.start(t)
				wait() // the consumer is held in OnConnect on the new router
				waitState(t, prod, client.Connected)
				if rc, err := prod.Publish(ctx, "t", map[string]int{"n": 1}); err != nil || rc.Subscribers != 0 {
					t.Fatalf("a publication while OnConnect runs reached %d subscribers (%v), want none", rc.Subscribers, err)
				}
				if st, _ := cons.State(); st != client.Reconnecting {
					t.Fatalf("the consumer is %s while OnConnect runs", st)
				}
				open()
				waitState(t, cons, client.Connected)
				if rc, err := prod.Publish(ctx, "t", map[string]int{"n": 2}); err != nil || rc.Subscribers != 1 {
					t.Fatalf("a publication after OnConnect reached %d subscribers (%v), want 1", rc.Subscribers, err)
				}
				m, err := s.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(m.Payload) != `{"n":2}` {
					t.Fatalf("got %s", m.Payload)
				}
				m.Close()
				if mu.Lock(); len(conns) != 2 || conns[1] != cons.Info().ConnectionID {
					t.Fatalf("connections %v, the client's %v", conns, cons.Info().ConnectionID)
				}
				mu.Unlock()
			})
		}
	}
}
