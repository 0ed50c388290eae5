package router_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Soak: producers, agents and consumers connect over both transports to one
// router, work, and are closed or cut off at random, for a bounded time. At
// the end the router must hold nothing, the store must be empty, nothing of
// the store may still be mapped, no descriptor or goroutine may remain, and
// the heap must not have grown since the end of the warm-up. The schedule is
// seeded; the seed is logged, and -soak.seed replays the same choices (the
// interleaving is still the scheduler's).

var (
	soakSeconds = flag.Float64("soak", 0, "run the soak test for this many `seconds` (default 10, as CI runs it); an hour by hand: go test -run TestSoak -timeout 0 ./router/ -args -soak 3600")
	soakSeed    = flag.Uint64("soak.seed", 0, "seed the soak test's random choices (default: from the clock)")
)

const (
	soakProducers = 2
	soakAgents    = 2
	soakConsumers = 3
)

// soakPayload describes an artifact so that any reader can check its bytes.
type soakPayload struct {
	Seed uint64 `json:"seed"`
	Size int    `json:"size"`
}

func soakBytes(p soakPayload) []byte {
	b := make([]byte, p.Size)
	x := p.Seed | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// soakAgentDir is where producers find the agents that are up now.
type soakAgentDir struct {
	mu   sync.Mutex
	live map[int]soakAgent
}

type soakAgent struct {
	name string
	inc  wire.ServiceInc
}

func (d *soakAgentDir) set(slot int, a *soakAgent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a == nil {
		delete(d.live, slot)
		return
	}
	d.live[slot] = *a
}

func (d *soakAgentDir) pick(rng *rand.Rand) (soakAgent, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.live) == 0 {
		return soakAgent{}, false
	}
	slots := make([]int, 0, len(d.live))
	for s := range d.live {
		slots = append(slots, s)
	}
	sort.Ints(slots)
	return d.live[slots[rng.IntN(len(slots))]], true
}

// soakRun is the shared state of one soak.
type soakRun struct {
	t      *testing.T
	h      *harness
	agents soakAgentDir

	sessions, cuts, published, refused, calls, results, messages, verified atomic.Uint64

	mu       sync.Mutex
	expected map[string]uint64 // tolerated errors by code
	bad      []string
}

// tolerate classifies an operation's error: nil and the errors churn causes
// are fine; anything else is recorded as a failure. It reports whether the
// session should go on.
func (s *soakRun) tolerate(what string, err error) bool {
	if err == nil {
		return true
	}
	key := ""
	var be *wire.BusError
	switch {
	case errors.As(err, &be):
		switch be.Code {
		case wire.ErrRouterLost, wire.ErrBackpressure, wire.ErrNoService, wire.ErrTargetChanged, wire.ErrCallGone:
			key = be.Code.String()
		}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		key = "context"
	case errors.Is(err, client.ErrClosed), errors.Is(err, client.ErrSubscriptionClosed):
		key = "closed"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "" {
		if len(s.bad) < 20 {
			s.bad = append(s.bad, what+": "+err.Error())
		}
		return false
	}
	s.expected[key]++
	return key == wire.ErrBackpressure.String() || key == wire.ErrNoService.String() ||
		key == wire.ErrTargetChanged.String() || key == wire.ErrCallGone.String()
}

// tolerateOn is tolerate for operations that resolve a store location:
// when the session's connection is cut between the grant and the open, the
// router has already collected the file and the open fails with ENOENT
// rather than ROUTER_LOST. That is tolerated only if the connection really
// is gone, which the client learns when its reader next reads: the wait
// for that is not bounded by the session's deadline, which can pass first
// (a cut near the end of a session failed a CI run so). The session ends
// either way.
func (s *soakRun) tolerateOn(c *client.Client, what string, err error) bool {
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return s.tolerate(what, err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
	}
	if c.Err() == nil {
		s.failf("%s: %v with the connection up", what, err)
		return false
	}
	s.mu.Lock()
	s.expected["ENOENT after a cut"]++
	s.mu.Unlock()
	return false
}

func (s *soakRun) failf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) < 20 {
		s.bad = append(s.bad, fmt.Sprintf(format, args...))
	}
}

// connect opens one session's client over a transport chosen at random and
// returns it with the raw transport under it.
func (s *soakRun) connect(ctx context.Context, rng *rand.Rand, id string) (*client.Client, net.Conn, error) {
	var nc net.Conn
	var err error
	if rng.IntN(2) == 0 {
		nc, err = s.h.r.ConnectInMemory()
	} else {
		nc, err = net.Dial("unix", s.h.socket)
	}
	if err != nil {
		return nil, nil, err
	}
	c, err := client.Connect(ctx, nc, client.Config{ClientID: id, StoreRoot: s.h.root})
	return c, nc, err
}

// end finishes a session: an orderly Close, or a cut of the transport.
func (s *soakRun) end(rng *rand.Rand, c *client.Client, nc net.Conn) {
	if rng.IntN(2) == 0 {
		s.cuts.Add(1)
		cut(c, nc)
	}
	c.Close()
}

// session runs one client's life: connect, work until the session's own
// deadline (or a cut scheduled at random), end.
func (s *soakRun) session(ctx context.Context, rng *rand.Rand, role string, slot, n int) {
	s.sessions.Add(1)
	id := fmt.Sprintf("%s-%d-%d", role, slot, n)
	life := time.Duration(10+rng.IntN(150)) * time.Millisecond
	sctx, cancel := context.WithTimeout(ctx, life)
	defer cancel()
	c, nc, err := s.connect(sctx, rng, id)
	if err != nil {
		s.tolerate(id+" connect", err)
		return
	}
	if rng.IntN(4) == 0 {
		// Cut off in the middle of whatever it is doing.
		timer := time.AfterFunc(time.Duration(rng.IntN(int(life))), func() { nc.Close() })
		defer timer.Stop()
	}
	switch role {
	case "producer":
		s.produce(sctx, rng, c)
	case "agent":
		s.serve(sctx, rng, c, slot, n)
	case "consumer":
		s.consume(sctx, rng, c)
	}
	s.end(rng, c, nc)
}

// sealed allocates, writes and seals p's bytes through c, tolerating what
// a cut connection causes; who prefixes what it reports.
func (s *soakRun) sealed(ctx context.Context, c *client.Client, who string, p soakPayload) (*client.Artifact, bool) {
	w, err := c.Allocate(ctx, int64(p.Size), "application/x-soak")
	if !s.tolerateOn(c, who+"allocate", err) {
		return nil, false
	}
	if _, err := w.Write(soakBytes(p)); err != nil {
		w.Close()
		if c.Err() == nil {
			s.failf("%swrite: %v", who, err)
		}
		return nil, false
	}
	a, err := w.Seal(ctx)
	return a, s.tolerate(who+"seal", err)
}

func (s *soakRun) produce(ctx context.Context, rng *rand.Rand, c *client.Client) {
	for ctx.Err() == nil {
		p := soakPayload{Seed: rng.Uint64(), Size: 1 + rng.IntN(64<<10)}
		a, ok := s.sealed(ctx, c, "", p)
		if !ok {
			return
		}
		_, err := c.Publish(ctx, "soak.frames", p, client.Attach("frame", a))
		if err == nil {
			s.published.Add(1)
		} else if errors.Is(err, wire.ErrBackpressure) {
			s.refused.Add(1)
		}
		ok = s.tolerate("publish", err)
		if ok && rng.IntN(3) == 0 {
			ok = s.call(ctx, rng, c, p, a)
		}
		a.Close()
		if !ok {
			return
		}
		_, err = c.Publish(ctx, "soak.events", tick{N: int(p.Size)})
		if !s.tolerate("publish event", err) {
			return
		}
	}
}

// call asks a live agent to read the artifact; the agent may answer with an
// artifact of its own, which is checked too.
func (s *soakRun) call(ctx context.Context, rng *rand.Rand, c *client.Client, p soakPayload, a *client.Artifact) bool {
	ag, ok := s.agents.pick(rng)
	if !ok {
		return true
	}
	s.calls.Add(1)
	pc, err := c.Call(ctx, ag.name, "Soak.Read", p, client.Pin(ag.inc), client.Attach("frame", a))
	if err != nil {
		return s.tolerate("call", err)
	}
	if rng.IntN(8) == 0 {
		pc.Close() // abandoned: the SDK consumes or cancels
		return true
	}
	res, err := pc.Result(ctx)
	if err != nil {
		pc.Close()
		return s.tolerate("result", err)
	}
	s.results.Add(1)
	var back soakPayload
	if err := res.Decode(&back); err != nil {
		s.failf("result outcome: %v", err)
	} else if back.Size > 0 {
		img, err := res.Artifact("reply")
		if err != nil {
			s.failf("result artifact: %v", err)
		} else {
			s.check(ctx, c, img, back)
			img.Close()
		}
	}
	res.Close()
	return true
}

// check reads an artifact and compares it with what its producer wrote.
func (s *soakRun) check(ctx context.Context, c *client.Client, a *client.Artifact, p soakPayload) {
	got, err := a.ReadAll(ctx)
	if err != nil {
		s.tolerateOn(c, "read", err)
		return
	}
	if !bytes.Equal(got, soakBytes(p)) {
		s.failf("artifact of %d bytes (seed %d) does not hold what was written", p.Size, p.Seed)
		return
	}
	s.verified.Add(1)
}

func (s *soakRun) serve(ctx context.Context, rng *rand.Rand, c *client.Client, slot, n int) {
	name := fmt.Sprintf("soak.agent.%d.%d", slot, n)
	svc, err := c.Register(ctx, name, client.Queued(4), client.InFlight(2))
	if !s.tolerate("register", err) {
		return
	}
	s.agents.set(slot, &soakAgent{name: name, inc: svc.Incarnation()})
	defer s.agents.set(slot, nil)
	var hoard []*client.Request
	defer func() {
		for _, r := range hoard {
			r.Close()
		}
	}()
	for {
		req, err := svc.Next(ctx)
		if err != nil {
			s.tolerate("next request", err)
			return
		}
		var p soakPayload
		if err := req.Decode(&p); err != nil {
			s.failf("request payload: %v", err)
		}
		if img, err := req.Artifact("frame"); err == nil {
			s.check(ctx, c, img, p)
			img.Close()
		} else {
			s.failf("request without its frame: %v", err)
		}
		switch r := rng.IntN(10); {
		case r == 0:
			req.Close() // gives up without a reply
			continue
		case r == 1 && len(hoard) < 2:
			hoard = append(hoard, req) // answered by the session's end
			continue
		case r < 4:
			back := soakPayload{Seed: rng.Uint64(), Size: 1 + rng.IntN(8<<10)}
			out, ok := s.sealed(ctx, c, "agent ", back)
			if !ok {
				req.Close()
				return
			}
			_, err := req.Reply(ctx, back, client.Attach("reply", out))
			out.Close()
			if !s.tolerate("reply", err) {
				req.Close()
				return
			}
		default:
			if _, err := req.Reply(ctx, soakPayload{}); !s.tolerate("reply", err) {
				req.Close()
				return
			}
		}
		req.Close()
	}
}

func (s *soakRun) consume(ctx context.Context, rng *rand.Rand, c *client.Client) {
	cfg := []client.SubscribeOption{client.InFlight(1 + rng.IntN(2))}
	if rng.IntN(2) == 0 {
		cfg = append(cfg, client.Replay())
	}
	if rng.IntN(2) == 0 {
		cfg = []client.SubscribeOption{client.Bounded(), client.Queued(1 + rng.IntN(8)), client.InFlight(1 + rng.IntN(4))}
	}
	frames, err := c.Subscribe(ctx, "soak.frames", cfg...)
	if !s.tolerate("subscribe", err) {
		return
	}
	events, err := c.Subscribe(ctx, "soak.events", client.Bounded(), client.Queued(4), client.InFlight(2))
	if !s.tolerate("subscribe events", err) {
		return
	}
	hoarder := rng.IntN(5) == 0 // takes messages and never lets go
	type held struct {
		m    *client.Message
		v    *client.ArtifactView
		kept *client.Artifact
		p    soakPayload
	}
	var open []held
	defer func() {
		// Whatever is still open: mapped bytes must still be what was
		// written, even after a cut and collection, then it all closes.
		for _, o := range open {
			if o.v != nil {
				if !bytes.Equal(o.v.Bytes(), soakBytes(o.p)) {
					s.failf("a mapped artifact changed under its reader")
				}
				o.v.Close()
			}
			if o.kept != nil {
				o.kept.Close()
			}
			if o.m != nil {
				o.m.Close()
			}
		}
	}()
	for {
		if m, ok := events.TryNext(); ok {
			m.Close()
		}
		m, err := frames.Next(ctx)
		if err != nil {
			s.tolerate("next message", err)
			return
		}
		s.messages.Add(1)
		var p soakPayload
		if err := m.Decode(&p); err != nil {
			s.failf("message payload: %v", err)
			m.Close()
			continue
		}
		img, err := m.Artifact("frame")
		if err != nil {
			s.failf("message without its frame: %v", err)
			m.Close()
			continue
		}
		switch r := rng.IntN(6); {
		case hoarder || (r == 0 && len(open) < 4):
			v, err := img.View(ctx)
			img.Close()
			if err != nil {
				s.tolerateOn(c, "view", err)
				m.Close()
				continue
			}
			if !bytes.Equal(v.Bytes(), soakBytes(p)) {
				s.failf("a view does not hold what was written")
			}
			open = append(open, held{m: m, v: v, p: p})
			if hoarder && len(open) >= 3 {
				<-ctx.Done()
				return
			}
			continue
		case r == 1 && len(open) < 4:
			kept, err := img.Retain(ctx)
			img.Close()
			m.Close()
			if err != nil {
				s.tolerate("retain", err)
				continue
			}
			open = append(open, held{kept: kept, p: p})
			continue
		default:
			s.check(ctx, c, img, p)
			img.Close()
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // the consumer's work
			m.Close()
		}
	}
}

// vmRSS reads this process's resident set size in bytes.
func vmRSS(t *testing.T) uint64 {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS: %v", err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func TestSoak(t *testing.T) {
	d := 10 * time.Second
	if *soakSeconds > 0 {
		d = time.Duration(*soakSeconds * float64(time.Second))
	}
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("soak for %v with seed %d (replay the choices with -soak.seed %d)", d, seed, seed)

	h := leakCheckedHarness(t, router.Config{Policy: router.OpenPolicy()}, true, 10*time.Second)
	maps0 := storeMaps(t, h)
	admin := h.dial("soak-admin")
	mustDeclare(t, admin, "soak.frames", wire.RetainLatest)
	mustDeclare(t, admin, "soak.events", wire.RetainNone)

	s := &soakRun{t: t, h: h, agents: soakAgentDir{live: map[int]soakAgent{}}, expected: map[string]uint64{}}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	worker := func(role string, slot int) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, uint64(slot)<<8|uint64(len(role))))
		for n := 0; ctx.Err() == nil; n++ {
			s.session(ctx, rng, role, slot, n)
		}
	}
	slot := 0
	for _, r := range []struct {
		role string
		n    int
	}{{"producer", soakProducers}, {"agent", soakAgents}, {"consumer", soakConsumers}} {
		for range r.n {
			wg.Add(1)
			go worker(r.role, slot)
			slot++
		}
	}

	// The end of the warm-up: a quarter of the run.
	warmAt := started.Add(d / 4)
	select {
	case <-time.After(time.Until(warmAt)):
	case <-ctx.Done():
	}
	warmHeap, warmRSS := heapInUse(), vmRSS(t)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d + 30*time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("the soak did not stop within %v of its end:\n%s", 30*time.Second, buf[:runtime.Stack(buf, true)])
	}
	elapsed := time.Since(started)

	if cleared, err := admin.ClearTopic(ctxT(t), "soak.frames"); err != nil {
		t.Fatalf("clear: %v %v", cleared, err)
	}
	barrier(t, admin)
	settle(t, h, "every session's state to go", func(st router.Stats) bool {
		return st.Connections == 1 && st.Services == 0 && st.Subscriptions == 0 && st.Calls == 0 &&
			st.Artifacts == 0 && st.ArtifactRoots == 0 && st.Owners == 0 && st.ReplyCapabilities == 0 &&
			st.Queued == 0 && st.StoreBytes == 0 && st.StoreFiles == 0 && st.RetainedBytes == 0 && st.QueuedBytes == 0
	})
	if n := sealedFiles(t, h); n != 0 {
		t.Errorf("%d sealed files left in the store", n)
	}
	if m := storeMaps(t, h); m != maps0 {
		t.Errorf("store mappings: %d at the start, %d at the end", maps0, m)
	}
	admin.Close()
	endHeap, endRSS := heapInUse(), vmRSS(t)

	st := h.r.Stats()
	t.Logf("%v: %d sessions (%d cut off), %d connections, %d publications (%d refused), %d calls (%d results), "+
		"%d messages, %d artifacts verified, %d collected; tolerated %v",
		elapsed.Round(time.Millisecond), s.sessions.Load(), s.cuts.Load(), st.ConnectionsTotal, s.published.Load(),
		s.refused.Load(), s.calls.Load(), s.results.Load(), s.messages.Load(), s.verified.Load(), st.Collected, s.expected)
	t.Logf("heap in use %.1f MiB after the warm-up, %.1f MiB at the end; VmRSS %.1f MiB and %.1f MiB",
		float64(warmHeap)/(1<<20), float64(endHeap)/(1<<20), float64(warmRSS)/(1<<20), float64(endRSS)/(1<<20))
	for _, b := range s.bad {
		t.Error(b)
	}
	if s.published.Load() == 0 || s.verified.Load() == 0 || s.results.Load() == 0 || s.cuts.Load() == 0 {
		t.Errorf("the soak did too little to prove anything")
	}
	// Generous: the heap may not grow by half plus 16 MiB, RSS (which the
	// race detector's shadow memory inflates) not double plus 64 MiB.
	if endHeap > warmHeap+warmHeap/2+16<<20 {
		t.Errorf("heap grew from %d to %d bytes", warmHeap, endHeap)
	}
	if endRSS > 2*warmRSS+64<<20 {
		t.Errorf("VmRSS grew from %d to %d bytes", warmRSS, endRSS)
	}
	if elapsed > d+10*time.Second {
		t.Errorf("the soak ran %v, %v over its bound", elapsed, elapsed-d)
	}
}
