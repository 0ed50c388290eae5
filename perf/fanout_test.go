package perf

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// BenchmarkFanout publishes to one topic with 1 to 64 subscribers over
// Unix sockets, the router in a process of its own, and reports the
// router's CPU per publication (router-µs/pub) and per delivery
// (router-µs/subscriber), read before and after (ProcessCPU: nanoseconds
// from schedstat; on a kernel without it, 10 ms clock ticks, and then ask
// for enough publications that a run spends a few hundred ms of router
// CPU, -benchtime=2s or more). ReportAllocs counts this process: the publisher
// and every subscriber's SDK, not the router.
//
// Each publication carries a small payload and one 4 KiB artifact sealed
// once and held by the publisher: fan-out then costs what it costs with a
// frame (a root per delivery, taken and released), while the store's
// per-artifact work (allocate, seal, collect), which the 60 Hz harness
// measures, stays out of the per-subscriber figure. The subscribers are
// bounded, so none can lose a message, and the publisher waits until every
// one has closed its message before the next: the router is never asked
// to refuse, and every publication costs it the same work.
func BenchmarkFanout(b *testing.B) {
	for _, n := range fanoutSubscribers {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			rig := startFanout(b, n)
			cpu, err := rig.run(b.Context(), b.N, b)
			if err != nil {
				b.Fatal(err)
			}
			perPub, perSub := fanoutMetrics(cpu, b.N, n)
			b.ReportMetric(perPub, "router-µs/pub")
			b.ReportMetric(perSub, "router-µs/subscriber")
		})
	}
}

// TestFanout runs every size of BenchmarkFanout for a few publications:
// every subscriber gets every message, in order, and the router process
// is measured and stops cleanly.
func TestFanout(t *testing.T) {
	for _, n := range fanoutSubscribers {
		t.Run(fmt.Sprintf("subscribers=%d", n), func(t *testing.T) {
			t.Parallel() // each has its own router; setup is mostly waiting
			rig := startFanout(t, n)
			cpu, err := rig.run(t.Context(), 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cpu < 0 {
				t.Fatalf("router CPU went back by %v", -cpu)
			}
			if got := rig.delivered(); got != 6*n { // the warm-up and 5
				t.Fatalf("%d deliveries consumed, want %d", got, 6*n)
			}
		})
	}
}

func TestFanoutMetrics(t *testing.T) {
	perPub, perSub := fanoutMetrics(20*time.Millisecond, 100, 4)
	if perPub != 200 || perSub != 50 {
		t.Fatalf("20 ms over 100 publications to 4: %g µs/pub, %g µs/subscriber", perPub, perSub)
	}
	if perPub, perSub := fanoutMetrics(time.Second, 0, 0); perPub != 0 || perSub != 0 {
		t.Fatalf("no publication: %g, %g", perPub, perSub)
	}
}

// fanoutSubscribers are the sizes BenchmarkFanout measures.
var fanoutSubscribers = []int{1, 4, 16, 64}

// fanoutArtifactBytes is the size of the artifact every publication carries.
const fanoutArtifactBytes = 4096

// fanoutMetrics turns the router CPU spent on pubs publications to subs
// subscribers into µs per publication and per delivery.
func fanoutMetrics(cpu time.Duration, pubs, subs int) (perPub, perSub float64) {
	if pubs <= 0 {
		return 0, 0
	}
	perPub = float64(cpu) / float64(time.Microsecond) / float64(pubs)
	if subs > 0 {
		perSub = perPub / float64(subs)
	}
	return perPub, perSub
}

// fanoutRig is a router process, a publisher holding one sealed artifact
// and n bounded subscribers of one topic, each reading on its own goroutine.
type fanoutRig struct {
	router *fanoutRouter
	pub    *client.Client
	art    *client.Artifact
	topic  string
	n      int

	consumed chan struct{} // one per message a subscriber closed
	failed   chan error    // a subscriber's first failure
	count    sync.Mutex
	total    int // messages consumed, all subscribers
	seq      uint64
	payload  []byte
}

// setupTimeoutFanout bounds starting the router and connecting everyone,
// generous for -race on a loaded machine.
const setupTimeoutFanout = 60 * time.Second

func startFanout(tb testing.TB, n int) *fanoutRig {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeoutFanout)
	defer cancel()
	root := smokeStore(tb)
	rt, err := startFanoutRouter(ctx, filepath.Join(tb.TempDir(), "bus.sock"), root, n+8)
	if err != nil {
		tb.Fatal(err)
	}
	r := &fanoutRig{router: rt, topic: "bench.fanout", n: n, consumed: make(chan struct{}, n), failed: make(chan error, n)}
	loops, stopLoops := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var clients []*client.Client
	// Cleanups run last first: the router stops after every client closed.
	tb.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := rt.stop(sctx); err != nil {
			tb.Errorf("fanout router: %v", err)
		}
	})
	tb.Cleanup(func() {
		stopLoops()
		wg.Wait()
		if r.art != nil {
			r.art.Close()
		}
		for _, c := range slices.Backward(clients) {
			if err := c.Close(); err != nil {
				tb.Errorf("closing a client: %v", err)
			}
		}
	})
	dial := func(id string) *client.Client {
		c, err := client.ConnectUnix(ctx, rt.sock, client.Config{ClientID: id, StoreRoot: root})
		if err != nil {
			tb.Fatalf("connect %s: %v", id, err)
		}
		clients = append(clients, c)
		return c
	}
	r.pub = dial("fanout-publisher")
	if _, err := r.pub.DeclareTopic(ctx, r.topic, wire.RetainNone); err != nil {
		tb.Fatal(err)
	}
	w, err := r.pub.Allocate(ctx, fanoutArtifactBytes, "application/octet-stream")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(make([]byte, fanoutArtifactBytes)); err != nil {
		w.Close()
		tb.Fatal(err)
	}
	if r.art, err = w.Seal(ctx); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		c := dial(fmt.Sprintf("fanout-subscriber-%d", i+1))
		sub, err := c.Subscribe(ctx, r.topic, client.Bounded())
		if err != nil {
			tb.Fatal(err)
		}
		wg.Go(func() { r.read(loops, sub) })
	}
	return r
}

// read takes every message of sub, checks that none is missing and that
// it carries the artifact, and consumes it.
func (r *fanoutRig) read(ctx context.Context, sub *client.Subscription) {
	fail := func(err error) {
		select {
		case r.failed <- err:
		default:
		}
	}
	for want := uint64(1); ; want++ {
		m, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return
		}
		switch {
		case m.TopicSequence != want:
			err = fmt.Errorf("subscription %s: message %d, want %d", sub.ID(), m.TopicSequence, want)
		case len(m.Payload) == 0:
			err = fmt.Errorf("subscription %s: message %d has no payload", sub.ID(), want)
		case want == 1 && !slices.Equal(m.Attachments(), []string{"blob"}):
			err = fmt.Errorf("subscription %s: attachments %q", sub.ID(), m.Attachments())
		}
		m.Close()
		if err != nil {
			fail(err)
			return
		}
		r.count.Lock()
		r.total++
		r.count.Unlock()
		select {
		case r.consumed <- struct{}{}:
		case <-ctx.Done(): // the publisher gave up: nobody will receive it
			return
		}
	}
}

func (r *fanoutRig) delivered() int {
	r.count.Lock()
	defer r.count.Unlock()
	return r.total
}

// publishOnce publishes one message and waits until every subscriber has
// consumed it.
func (r *fanoutRig) publishOnce(ctx context.Context) error {
	r.seq++
	r.payload = strconv.AppendUint(append(r.payload[:0], `{"seq":`...), r.seq, 10)
	r.payload = append(r.payload, '}')
	rc, err := r.pub.Publish(ctx, r.topic, wire.RawJSON(r.payload), client.Attach("blob", r.art))
	if err != nil {
		return fmt.Errorf("publish %d: %w", r.seq, err)
	}
	if rc.Subscribers != uint64(r.n) {
		return fmt.Errorf("publish %d reached %d subscribers, want %d", r.seq, rc.Subscribers, r.n)
	}
	for range r.n {
		select {
		case <-r.consumed:
		case err := <-r.failed:
			return err
		case <-ctx.Done():
			return fmt.Errorf("publish %d: waiting for the subscribers: %w", r.seq, ctx.Err())
		}
	}
	return nil
}

// benchTimer is the part of *testing.B that run uses; nil for a test.
type benchTimer interface {
	ResetTimer()
	StopTimer()
}

// run publishes once to warm every connection up, then iters times
// between two readings of the router's CPU, which it returns.
func (r *fanoutRig) run(ctx context.Context, iters int, timer benchTimer) (time.Duration, error) {
	if err := r.publishOnce(ctx); err != nil {
		return 0, err
	}
	cpu0, err := ProcessCPU(r.router.pid)
	if err != nil {
		return 0, err
	}
	if timer != nil {
		timer.ResetTimer()
	}
	for range iters {
		if err := r.publishOnce(ctx); err != nil {
			return 0, err
		}
	}
	if timer != nil {
		timer.StopTimer()
	}
	cpu1, err := ProcessCPU(r.router.pid)
	if err != nil {
		return 0, err
	}
	return cpu1 - cpu0, nil
}

// fanoutRouterEnv makes this test binary, started again with it set, a
// router process (router.New listening on a Unix socket, the library
// `flybus serve` runs) instead of running tests: so the benchmark needs no
// go build, and is not broken by a cmd/flybus that does not build.
const fanoutRouterEnv = "FLYBUS_PERF_FANOUT_ROUTER"

// fanoutRouterConfig is what the child router is told through the environment.
type fanoutRouterConfig struct {
	Socket     string `json:"socket"`
	Store      string `json:"store"`
	MaxClients int    `json:"maxClients"`
}

func init() {
	if v := os.Getenv(fanoutRouterEnv); v != "" {
		if err := serveFanoutRouter(v, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "fanout router: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// serveFanoutRouter runs the router until stdin ends (the parent closed it
// or died), then shuts it down.
func serveFanoutRouter(config string, stdin io.Reader, ready io.Writer) error {
	var cfg fanoutRouterConfig
	if err := json.Unmarshal([]byte(config), &cfg); err != nil {
		return err
	}
	limits := wire.DefaultLimits()
	limits.MaxClients = max(limits.MaxClients, cfg.MaxClients)
	r, err := router.New(router.Config{StoreRoot: cfg.Store, StoreMode: store.ModeFiles, Limits: limits,
		Policy: router.OpenPolicy()})
	if err != nil {
		return err
	}
	shutdown := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return r.Shutdown(ctx)
	}
	if _, err := r.ListenUnix(cfg.Socket); err != nil {
		return errors.Join(err, shutdown())
	}
	if _, err := fmt.Fprintln(ready, "ready"); err != nil {
		return errors.Join(err, shutdown())
	}
	io.Copy(io.Discard, stdin)
	return shutdown()
}

// fanoutRouter is the child router process.
type fanoutRouter struct {
	cmd    *exec.Cmd
	pid    int
	sock   string
	stdin  io.WriteCloser
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's, valid after exited
	tail   *lineTail
}

func startFanoutRouter(ctx context.Context, sock, storeRoot string, maxClients int) (*fanoutRouter, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cfg, err := json.Marshal(fanoutRouterConfig{Socket: sock, Store: storeRoot, MaxClients: maxClients})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fanoutRouterEnv+"="+string(cfg))
	// Its own process group, so ^C reaches only the test; killed if the
	// test dies without closing its stdin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	rt := &fanoutRouter{cmd: cmd, sock: sock, stdin: stdin, exited: make(chan struct{}), tail: &lineTail{max: 20}}
	line := make(chan string, 1)
	err = startReading(cmd, func(stdout io.Reader) {
		sc := bufio.NewScanner(stdout)
		sc.Scan()
		line <- sc.Text()
	}, func(stderr io.Reader) {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			rt.tail.add(sc.Text())
		}
	}, func(err error) {
		rt.err = err
		close(rt.exited)
	})
	if err != nil {
		return nil, err
	}
	rt.pid = cmd.Process.Pid
	select {
	case l := <-line:
		if l == "ready" {
			return rt, nil
		}
		err = fmt.Errorf("the router process printed %q, not ready", l)
	case <-ctx.Done():
		err = ctx.Err()
	}
	cmd.Process.Kill()
	<-rt.exited
	return nil, fmt.Errorf("%w%s", err, rt.tail.text())
}

// stop closes the router's stdin, which shuts it down, and waits for it;
// after ctx ends it kills it.
func (rt *fanoutRouter) stop(ctx context.Context) error {
	rt.stdin.Close()
	if !awaitExit(ctx, rt.cmd, rt.exited) {
		return fmt.Errorf("did not stop when its stdin closed; killed%s", rt.tail.text())
	}
	if rt.err != nil {
		return fmt.Errorf("%w%s", rt.err, rt.tail.text())
	}
	return nil
}
