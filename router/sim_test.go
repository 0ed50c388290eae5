package router

// A deterministic simulation of the routing core.
//
// A seeded generator plays a handful of clients against one core with no
// shell in between. Every command is encoded with wire.AppendEnvelope and
// decoded by a wire.Decoder, so handle receives exactly what a connection's
// reader would give it; every frame a writer pulls is encoded the way the
// writer encodes it and decoded by the client that receives it, which learns
// its delivery ids, requests, results, messages and attachments from those
// frames alone. The store is a model: staging and seal effects complete at
// random later steps, in random order, sometimes failing; unlinks apply at
// once and must name a file that exists.
//
// The core is driven the way the shell drives it: commands through handle,
// writers through pull (one writeBatch at a time, only when woken), store
// completions through staged and sealed, transports through drop and
// closeConn, with the core's settle after each step where Router.step
// runs one. After every step the test walks the core's registries
// (checkInvariants), probes parked writers for lost wake-ups
// (checkWakeups) and compares each quiet client's view of its own
// resources with the core (checkView). At the end everyone disconnects and
// nothing may remain (teardown).
//
//	go test ./router -run 'TestSim$'                  the fixed CI seeds
//	go test ./router -run 'TestSim$' -sim.seed=17     replay one seed
//	go test ./router -run 'TestSim$' -sim.seeds=5000  5000 more seeds
//	go test ./router -run TestSimScenarios            testdata/sim scripts
//
// A failure names the broken invariant: closing-empty, calls, client-view,
// collected, conns, control, deliveries, files, frames, holds, inflight,
// owners, owners-results, queued-bytes, refusals, retained-bytes, roots,
// services, snapshot, store-bytes, subs, teardown, topics or wakeup (panic
// when the core panics). -sim.skip=name[,name] stops enforcing some, to
// look past a known bug for the next one.

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/wire"
)

var (
	simSeedFlag  = flag.Int64("sim.seed", 0, "replay this one simulation seed")
	simSeedsFlag = flag.Int("sim.seeds", 0, "run this many seeds beyond the fixed set, from -sim.base")
	simBaseFlag  = flag.Int64("sim.base", 0, "first seed of -sim.seeds (0: from the clock, logged)")
	simStepsFlag = flag.Int("sim.steps", 2000, "steps per seed")
	simTraceFlag = flag.Int("sim.trace", 60, "steps of trace printed with a failure")
	simSkipFlag  = flag.String("sim.skip", "", "invariants not to enforce, comma separated")
	simLogFlag   = flag.Bool("sim.log", false, "log the whole trace of every seed")
)

// simFixedSeeds is the set CI runs.
const simFixedSeeds = 30

func TestSim(t *testing.T) {
	skip := map[string]bool{}
	for _, name := range strings.Split(*simSkipFlag, ",") {
		if name = strings.TrimSpace(name); name != "" {
			skip[name] = true
		}
	}
	if *simSeedFlag != 0 {
		runSim(t, *simSeedFlag, *simStepsFlag, skip)
		return
	}
	var seeds []int64
	for i := int64(1); i <= simFixedSeeds; i++ {
		seeds = append(seeds, i)
	}
	if n := *simSeedsFlag; n > 0 {
		base := *simBaseFlag
		if base == 0 {
			base = time.Now().UnixNano()%1e9 + 1000
			t.Logf("-sim.seeds=%d starts at -sim.base=%d", n, base)
		}
		for i := range int64(n) {
			seeds = append(seeds, base+i)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runSim(t, seed, *simStepsFlag, skip)
		})
		t.Run(fmt.Sprintf("seed=%d/pool", seed), func(t *testing.T) {
			t.Parallel()
			runSimPool(t, seed, *simStepsFlag, skip)
		})
	}
}

// TestSimReplays runs seeds twice and compares their verdicts and traces.
// Within one step the order of frames (and so their bus ids) may differ:
// the core fails a disconnected service's calls in map order (see
// releaseServiceSide), so call.failed notices to one caller come in any
// order. Everything the generator decides, and every verdict, must replay.
func TestSimReplays(t *testing.T) {
	for _, seed := range []int64{3, 11, 13, 19} {
		var traces [2][]string
		var verdicts [2]string
		for i := range traces {
			s := newSim(seed, nil)
			s.full = &traces[i]
			if err := s.run(1000); err != nil {
				verdicts[i], _, _ = strings.Cut(err.Error(), "\n")
			}
		}
		if verdicts[0] != verdicts[1] {
			t.Fatalf("seed %d: verdicts differ:\n  %s\n  %s", seed, verdicts[0], verdicts[1])
		}
		a, b := simSteps(traces[0]), simSteps(traces[1])
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("seed %d diverges:\n  first:  %s\n  second: %s", seed, a[i], b[i])
			}
		}
		if len(a) != len(b) {
			t.Fatalf("seed %d: %d and %d steps", seed, len(a), len(b))
		}
	}
}

// simSteps groups trace lines by step, sorted and without bus ids.
func simSteps(lines []string) []string {
	var steps []string
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && simStepOf(lines[j]) == simStepOf(lines[i]) {
			j++
		}
		group := slices.Clone(lines[i:j])
		for k, l := range group {
			if at := strings.Index(l, "< bus-"); at >= 0 {
				rest := l[at+len("< bus-"):]
				group[k] = l[:at] + "<" + rest[strings.IndexByte(rest, ' '):]
			}
		}
		slices.Sort(group)
		steps = append(steps, strings.Join(group, " | "))
		i = j
	}
	return steps
}

func runSim(t *testing.T, seed int64, steps int, skip map[string]bool) {
	runSimWith(t, newSim(seed, skip), seed, steps)
}

// runSimPool runs a seed against a pooled store.
func runSimPool(t *testing.T, seed int64, steps int, skip map[string]bool) {
	s := newSim(seed, skip)
	s.usePool()
	runSimWith(t, s, seed, steps)
}

func runSimWith(t *testing.T, s *sim, seed int64, steps int) {
	if *simLogFlag {
		s.echo = func(line string) { t.Log(line) }
	}
	if err := s.run(steps); err != nil {
		t.Fatal(err)
	}
	if len(s.skipped) > 0 {
		t.Logf("seed %d: violations not enforced: %v", seed, s.skipped)
	}
	if testing.Verbose() {
		t.Logf("seed %d: %d clients, %d steps, outcomes: %s", seed, len(s.clients), steps, s.outcomeSummary())
	}
}

// simFailure is a broken invariant; run recovers it.
type simFailure struct {
	check string
	msg   string
}

// sim is one simulated router and its clients.
type sim struct {
	seed     int64
	rng      *rand.Rand
	scripted bool // a scenario drives it: teardown takes no random turns
	k        *core
	lim      wire.Limits
	open     bool
	step     int

	skip    map[string]bool
	skipped map[string]int

	trace   []string // ring of the last lines
	traceAt int
	full    *[]string // every line, when set
	echo    func(string)

	clients  []*simClient
	sessions []*simSession // transports not dropped yet, in accept order
	byConn   map[*conn]*simSession
	names    map[*conn]string // every connection ever, for effects that outlive them

	effects []effect // stage and seal I/O not finished yet
	// what the steps since the last afterStep made ready
	readyEffects []effect
	readyWake    []*conn
	files        map[string]simFile
	fileSeq      int
	// pool mode: the core names slots, whose generations the model counts
	pool     bool
	slotSize map[string]uint64
	slotGen  map[string]uint64
	accepted uint64
	svcIncs  map[string]wire.ServiceInc // last incarnation any client saw registered
	stale    []wire.ArtifactRef         // refs seen once, maybe collected since

	dec      wire.Decoder // the connection reader's decoder
	env      wire.Envelope
	out      []byte
	frameBuf []byte
	outcomes map[string]int
}

type simFile uint8

const (
	simStaging simFile = iota + 1
	simSealed
	simFree        // pool mode: a slot no generation uses
	simQuarantined // pool mode: a slot a copying seal left (never reused here)
)

// holdsArtifact reports a file that some artifact must name.
func (f simFile) holdsArtifact() bool { return f == simStaging || f == simSealed }

var (
	simServices = []string{"svc.a", "svc.b", "svc.c", "svc.d"}
	simTopics   = []string{"t.a", "t.b", "t.c", "t.d"}
)

// simClient is one client id across its incarnations.
type simClient struct {
	id    string
	incs  int
	speed int         // how eagerly its writer is scheduled, 1..4
	sess  *simSession // the transport it uses or is opening, nil when none

	weights []int // per simOps entry
}

// simSession is one transport and what its client learned from it.
type simSession struct {
	cl      *simClient // nil for a stray transport whose hello must fail
	c       *conn
	name    string
	hello   bool // bus.hello sent
	ready   bool // its HelloOK was read
	closed  bool // connection.closing was read
	closing bool // the trace said the core is closing it
	parked  bool // the writer waits for a wake-up
	bound   string
	stray   int // the failing hello a stray sends

	msg     uint64
	lastBus uint64
	lastDlv wire.DeliveryID
	dec     wire.Decoder
	env     wire.Envelope
	pending map[uint64]*simCmd

	services map[string]wire.ServiceInc
	calls    map[wire.CallID]*simCall
	callNext wire.CallID
	caps     map[wire.DeliveryID]wire.CallID
	dlvs     map[wire.DeliveryID]*simDlv
	retired  []wire.DeliveryID
	subs     map[wire.SubID]*simSub
	holds    map[uint64]*simHold
	released []uint64
}

type simCall struct {
	target     string
	accepted   bool
	resultSeen bool
}

type simDlv struct {
	op        wire.Op
	call      wire.CallID
	sub       wire.SubID
	atts      []wire.Attachment
	consuming int // delivery.consumed commands naming it await their replies
}

type simSub struct {
	topic   string
	inc     wire.TopicInc
	mode    wire.Mode
	lastSeq uint64
}

// simHold is an explicit owner: a writer (staging or sealing) or a hold on
// a sealed artifact.
type simHold struct {
	writer    bool
	seals     int // artifact.seal commands awaiting their replies
	releasing int // artifact.release commands naming it await their replies
	art       wire.ArtifactID
	gen       uint64 // a writer's: the generation it writes
	size      uint64
	ctype     string
	ref       wire.ArtifactRef
}

// simCmd is a command awaiting its reply, with what the reply is checked
// against.
type simCmd struct {
	op       wire.Op
	expectOK bool // the reply must be ok
	mustFail bool // the reply must be a refusal
	tampered string
	name     string
	inc      wire.ServiceInc
	call     wire.CallID
	reused   bool
	dlv      wire.DeliveryID
	dlvs     []wire.DeliveryID
	owners   []wire.OwnerID
	own      uint64
	gen      uint64
	size     uint64
	ctype    string
	ref      wire.ArtifactRef
	topic    string
	mode     wire.Mode
	sub      wire.SubID
}

func newSim(seed int64, skip map[string]bool) *sim {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed_f1b0_5eed_f1b0))
	n := 3 + rng.IntN(6)
	l := wire.DefaultLimits()
	l.MaxClients = n + rng.IntN(2)
	l.MaxServices = 2 + rng.IntN(3)
	l.MaxTopics = 2 + rng.IntN(3)
	l.MaxSubscriptionsPerClient = 2 + rng.IntN(3)
	l.MaxSubscriptions = l.MaxSubscriptionsPerClient + rng.IntN(2*n)
	l.MaxActiveCallsPerClient = 2 + rng.IntN(4)
	l.MaxServiceQueued = 1 + rng.IntN(4)
	l.MaxServiceInFlight = 1 + rng.IntN(3)
	l.MaxLatestInFlight = 1 + rng.IntN(2)
	l.MaxBoundedQueued = 1 + rng.IntN(5)
	l.MaxBoundedInFlight = 1 + rng.IntN(3)
	l.MaxOwnersPerClient = 6 + rng.IntN(10)
	l.ReservedOwnersPerClient = 2 + rng.IntN(3)
	l.MaxControlFrames = 4 + rng.IntN(12) // below writeBatch, see writerPulls
	l.MaxArtifactBytes = 4096 << rng.IntN(3)
	l.MaxStoreBytes = l.MaxArtifactBytes * uint64(2+rng.IntN(4))
	l.MaxRetainedBytes = l.MaxArtifactBytes * uint64(1+rng.IntN(2))
	l.MaxQueuedBytesPerClient = wire.MaxEnvelopeBytes + 4 + uint64(rng.IntN(64<<10))
	l.MaxControlBytes = wire.MaxEnvelopeBytes + 4 + uint64(rng.IntN(64<<10))

	s := &sim{seed: seed, rng: rng, lim: l, open: rng.IntN(2) == 0, skip: skip, skipped: map[string]int{},
		byConn: map[*conn]*simSession{}, names: map[*conn]string{}, files: map[string]simFile{},
		svcIncs: map[string]wire.ServiceInc{}, outcomes: map[string]int{}}
	policy := OpenPolicy()
	if !s.open {
		policy = ClosedPolicy().Client("admin", AllGrants())
	}
	for i := range n {
		cl := &simClient{id: fmt.Sprintf("c%d", i), speed: 1 + rng.IntN(4)}
		cl.weights = s.personality()
		s.clients = append(s.clients, cl)
		if !s.open {
			policy = policy.Client(cl.id, s.randomGrants())
		}
	}
	s.k = newCore(l, policy, wire.RouterID(0x51), wire.StoreID(0x51))
	s.k.hasStore = true
	return s
}

func (s *sim) randomGrants() Grants {
	pick := func(pool []string) []Pattern {
		switch s.rng.IntN(10) {
		case 0:
			return nil
		case 1:
			return []Pattern{Exact(pool[s.rng.IntN(len(pool))])}
		case 2:
			return []Pattern{Prefix(pool[0][:strings.IndexByte(pool[0], '.')+1])}
		}
		return []Pattern{Any()}
	}
	return Grants{Register: pick(simServices), Call: pick(simServices), Publish: pick(simTopics),
		Subscribe: pick(simTopics), ManageTopics: pick(simTopics)}
}

// run plays steps random steps and the teardown, and reports the first
// broken invariant with the trace that led to it.
func (s *sim) run(steps int) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		f, ok := r.(simFailure)
		if !ok {
			f = simFailure{check: "panic", msg: fmt.Sprintf("%v\n%s", r, debug.Stack())}
		}
		err = s.report(f)
	}()
	if err := s.lim.Validate(); err != nil {
		s.fail("setup", "limits: %v", err)
	}
	s.logf("seed %d: %d clients, open policy %v, limits %+v", s.seed, len(s.clients), s.open, s.lim)
	for s.step = 1; s.step <= steps; s.step++ {
		s.randomStep()
		s.afterStep()
	}
	s.teardown()
	return nil
}

func (s *sim) report(f simFailure) error {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, step %d: invariant %q broken: %s\n", s.seed, s.step, f.check, f.msg)
	fmt.Fprintf(&b, "%d clients, open policy %v, limits %+v\n", len(s.clients), s.open, s.lim)
	lines := append(append([]string(nil), s.trace[s.traceAt:]...), s.trace[:s.traceAt]...)
	from := 0
	if *simTraceFlag >= 0 {
		first := s.step - *simTraceFlag
		for from < len(lines) && simStepOf(lines[from]) < first {
			from++
		}
	}
	fmt.Fprintf(&b, "trace (%d lines):\n", len(lines)-from)
	for _, l := range lines[from:] {
		b.WriteString("  " + l + "\n")
	}
	fmt.Fprintf(&b, "replay: go test ./router -run 'TestSim$' -sim.seed=%d -sim.steps=%d -sim.trace=%d",
		s.seed, *simStepsFlag, *simTraceFlag)
	return errors.New(b.String())
}

func simStepOf(line string) int {
	var n int
	fmt.Sscanf(line, "%d", &n)
	return n
}

// fail reports a broken invariant, unless -sim.skip names it.
func (s *sim) fail(check, format string, args ...any) {
	if s.skip[check] {
		s.skipped[check]++
		return
	}
	panic(simFailure{check: check, msg: fmt.Sprintf(format, args...)})
}

const simTraceRing = 4096

func (s *sim) logf(format string, args ...any) {
	line := fmt.Sprintf("%5d %s", s.step, fmt.Sprintf(format, args...))
	if s.full != nil {
		*s.full = append(*s.full, line)
	}
	if s.echo != nil {
		s.echo(line)
	}
	if len(s.trace) < simTraceRing {
		s.trace = append(s.trace, line)
		return
	}
	s.trace[s.traceAt] = line
	s.traceAt = (s.traceAt + 1) % simTraceRing
}

func (s *sim) outcome(op wire.Op, be *wire.BusError) {
	key := op.String() + ":ok"
	if be != nil {
		key = op.String() + ":" + be.Code.String()
	}
	s.outcomes[key]++
}

func (s *sim) outcomeSummary() string {
	keys := slices.Sorted(maps.Keys(s.outcomes))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, s.outcomes[k])
	}
	return strings.Join(parts, " ")
}

// simPick returns a random entry of m, choosing among sorted keys so that
// map order never reaches the generator.
func simPick[K cmp.Ordered, V any](rng *rand.Rand, m map[K]V) (K, V, bool) {
	if len(m) == 0 {
		var k K
		var v V
		return k, v, false
	}
	keys := slices.Sorted(maps.Keys(m))
	k := keys[rng.IntN(len(keys))]
	return k, m[k], true
}

// randomStep runs one operation chosen by weight among those that apply.
func (s *sim) randomStep() {
	for {
		var ok bool
		switch r := s.rng.IntN(1000); {
		case r < 30:
			ok = s.connect()
		case r < 70:
			ok = s.sayHello()
		case r < 520:
			ok = s.command()
		case r < 830:
			ok = s.writerPulls()
		case r < 920:
			ok = s.completeEffect()
		case r < 985:
			ok = s.writerFinishes()
		case r < 997:
			ok = s.transportFails()
		default:
			ok = s.routerCloses()
		}
		if ok {
			return
		}
	}
}

// afterStep does what the shell does after each step (runs unlinks, queues
// the other I/O, wakes writers) and then checks everything.
func (s *sim) afterStep() {
	var unlinked []string
	effects, wake := s.readyEffects, s.readyWake
	s.readyEffects, s.readyWake = nil, nil
	for _, e := range effects {
		if e.kind != effUnlink {
			s.effects = append(s.effects, e)
			continue
		}
		if s.pool {
			// Collection recycles the slot: the generation named must be
			// the slot's current one, in use.
			if !s.files[e.relPath].holdsArtifact() || s.slotGen[e.relPath] != e.gen {
				s.fail("slots", "recycle of %q generation %d, which is not the generation in use (%d, state %d)",
					e.relPath, e.gen, s.slotGen[e.relPath], s.files[e.relPath])
			}
			s.files[e.relPath] = simFree
			unlinked = append(unlinked, fmt.Sprintf("%s@%d", e.relPath, e.gen))
			continue
		}
		if _, ok := s.files[e.relPath]; !ok {
			s.fail("files", "unlink of %q, which is not in the store", e.relPath)
		}
		delete(s.files, e.relPath)
		unlinked = append(unlinked, e.relPath)
	}
	if len(unlinked) > 0 {
		slices.Sort(unlinked)
		s.logf("store unlinks %s", strings.Join(unlinked, " "))
	}
	for _, ss := range s.sessions {
		if ss.c.closing && !ss.closing {
			ss.closing = true
			s.logf("%s is closing (%d control frames queued, maxControlFrames %d)", ss.name, len(ss.c.control)-ss.c.ctrlHead, s.lim.MaxControlFrames)
		}
	}
	for _, c := range wake {
		if c.dirty {
			s.fail("wakeup", "%s still marked dirty after its step", s.names[c])
		}
		if ss := s.byConn[c]; ss != nil {
			ss.parked = false
		}
	}
	s.checkInvariants()
	s.checkWakeups()
	for _, ss := range s.sessions {
		s.checkView(ss)
	}
}

// ---- transports -----------------------------------------------------------

func (s *sim) connect() bool {
	var free []*simClient
	for _, cl := range s.clients {
		if cl.sess == nil || cl.sess.c.closing {
			free = append(free, cl)
		}
	}
	var ss *simSession
	if len(free) > 0 && s.rng.IntN(8) != 0 {
		cl := free[s.rng.IntN(len(free))]
		ss = &simSession{cl: cl}
		if !s.open {
			ss.bound = cl.id
		}
	} else {
		// A stray transport: its hello is one that must fail.
		ss = &simSession{stray: 1 + s.rng.IntN(4)}
		if !s.open {
			ss.bound = s.clients[s.rng.IntN(len(s.clients))].id
			if s.rng.IntN(4) == 0 {
				ss.bound = "" // unbound under a closed policy: refused at accept
			}
		}
	}
	c, err := s.k.accept(ss.bound)
	if err != nil {
		var be *wire.BusError
		switch {
		case !errors.As(err, &be):
			s.fail("conns", "accept: %v", err)
		case ss.bound == "" && !s.open:
			if be.Code != wire.ErrNotAuthorized {
				s.fail("conns", "unbound accept under a closed policy: %v", err)
			}
		case be.Code != wire.ErrQuotaExceeded || len(s.k.conns) < s.lim.MaxClients:
			s.fail("conns", "accept refused with %d of %d connections: %v", len(s.k.conns), s.lim.MaxClients, err)
		}
		s.logf("accept(%q) refused: %s", ss.bound, be.Code)
		return true
	}
	if ss.bound == "" && !s.open {
		s.fail("conns", "unbound transport accepted under a closed policy")
	}
	s.attach(ss, c)
	return true
}

// attach records a transport the core accepted.
func (s *sim) attach(ss *simSession, c *conn) {
	s.accepted++
	ss.c = c
	ss.parked = true // the writer found nothing to write yet
	ss.pending = map[uint64]*simCmd{}
	ss.services = map[string]wire.ServiceInc{}
	ss.calls = map[wire.CallID]*simCall{}
	ss.caps = map[wire.DeliveryID]wire.CallID{}
	ss.dlvs = map[wire.DeliveryID]*simDlv{}
	ss.subs = map[wire.SubID]*simSub{}
	ss.holds = map[uint64]*simHold{}
	if ss.cl != nil {
		ss.name = fmt.Sprintf("%s/%s", ss.cl.id, c.id)
		ss.cl.sess = ss
	} else {
		ss.name = fmt.Sprintf("stray/%s", c.id)
	}
	s.sessions = append(s.sessions, ss)
	s.byConn[c] = ss
	s.names[c] = ss.name
	s.logf("accept(%q) -> %s", ss.bound, ss.name)
}

func (s *sim) sayHello() bool {
	var cands []*simSession
	for _, ss := range s.sessions {
		if !ss.hello && !ss.c.closing {
			cands = append(cands, ss)
		}
	}
	if len(cands) == 0 {
		return false
	}
	ss := cands[s.rng.IntN(len(cands))]
	ss.hello = true
	if cl := ss.cl; cl != nil {
		if s.rng.IntN(80) == 0 {
			s.logf("%s sends service.register before bus.hello", ss.name)
			s.send(ss, wire.OpServiceRegister, &wire.Register{Name: "svc.a", MaxQueued: 1, MaxInFlight: 1}, nil, &simCmd{})
			if !ss.c.closing {
				s.fail("conns", "%s: a command before bus.hello did not close the connection", ss.name)
			}
			return true
		}
		cl.incs++
		h := &wire.Hello{ClientID: cl.id, ClientIncarnation: fmt.Sprintf("i%d", cl.incs), SupportedMajors: []uint32{1}}
		s.logf("%s > bus.hello %s %s", ss.name, h.ClientID, h.ClientIncarnation)
		s.send(ss, wire.OpHello, h, nil, &simCmd{expectOK: true})
		return true
	}
	// A stray: every variant must be refused and close the transport.
	id, inc, majors, what := "", "x1", []uint32{1}, ""
	var live, idle []*simClient
	for _, cl := range s.clients {
		if rec := s.k.clients[cl.id]; rec != nil && rec.live != nil {
			live = append(live, cl)
		} else if rec != nil && cl.incs > 0 && (!s.open || ss.bound == "") {
			idle = append(idle, cl)
		}
	}
	switch {
	case ss.stray == 1 && len(live) > 0 && s.open:
		cl := live[s.rng.IntN(len(live))]
		id, inc, what = cl.id, fmt.Sprintf("i%d", cl.incs+100), "a live client id"
	case ss.stray == 2 && len(idle) > 0 && s.open:
		cl := idle[s.rng.IntN(len(idle))]
		id, inc, what = cl.id, fmt.Sprintf("i%d", cl.incs), "a used incarnation"
	case ss.stray == 3 && !s.open:
		id, what = "intruder", "an id the policy does not admit"
		if ss.bound != "" {
			what = "an id other than the bound one"
		}
	default:
		id, majors, what = "c0", []uint32{2, 3}, "no supported major"
	}
	s.logf("%s > bus.hello %s %s majors=%v (%s)", ss.name, id, inc, majors, what)
	s.send(ss, wire.OpHello, &wire.Hello{ClientID: id, ClientIncarnation: inc, SupportedMajors: majors}, nil,
		&simCmd{mustFail: true, tampered: what})
	if !ss.c.closing {
		s.fail("conns", "%s: a hello with %s did not close the connection", ss.name, what)
	}
	return true
}

// writerPulls lets one awake writer take a batch of frames, which its
// client reads at once.
func (s *sim) writerPulls() bool {
	var cands []*simSession
	total := 0
	for _, ss := range s.sessions {
		if !ss.parked {
			cands = append(cands, ss)
			total += ss.speed()
		}
	}
	if total == 0 {
		return false
	}
	r := s.rng.IntN(total)
	var ss *simSession
	for _, x := range cands {
		if r -= x.speed(); r < 0 {
			ss = x
			break
		}
	}
	s.pullOnce(ss)
	return true
}

// pullOnce takes one batch off the connection's lanes, the shell's
// writeBatch, and has the client read it. That batch drains any control
// lane these limits allow at once, so a client never sees part of a burst
// of notices whose order the core leaves to map iteration.
func (s *sim) pullOnce(ss *simSession) int {
	frames := s.pull(ss, writeBatch)
	if len(frames) == 0 {
		s.logf("%s writer parks", ss.name)
	}
	for i := range frames {
		s.receive(ss, &frames[i])
	}
	if len(frames) < writeBatch {
		ss.parked = true
	}
	return len(frames)
}

func (ss *simSession) speed() int {
	if ss.cl == nil {
		return 2
	}
	return ss.cl.speed
}

// writerFinishes drops a transport whose closing notice was written, as the
// writer does after writing it.
func (s *sim) writerFinishes() bool {
	var cands []*simSession
	for _, ss := range s.sessions {
		if ss.c.closeWritten {
			cands = append(cands, ss)
		}
	}
	if len(cands) == 0 {
		return false
	}
	ss := cands[s.rng.IntN(len(cands))]
	s.logf("%s writer finishes", ss.name)
	s.dropSession(ss)
	return true
}

// transportFails drops a random transport: the peer went away, and the
// reader steps the core with drop, or the writer's write failed and it
// finishes.
func (s *sim) transportFails() bool {
	if len(s.sessions) == 0 {
		return false
	}
	ss := s.sessions[s.rng.IntN(len(s.sessions))]
	if s.rng.IntN(2) == 0 {
		// The writer's write failed: it finishes, dropping outside step.
		s.logf("%s transport fails (writer)", ss.name)
		s.dropSession(ss)
		return true
	}
	s.logf("%s transport fails", ss.name)
	s.dropSession(ss)
	return true
}

// stepCore applies one input through the core's step, as the shell does,
// and keeps what it made ready for afterStep.
func (s *sim) stepCore(in input) {
	rd := s.k.step(in)
	s.readyEffects = append(s.readyEffects, rd.effects...)
	s.readyWake = append(s.readyWake, rd.wake...)
}

// pull is ss's writer taking up to max frames through the core's step; a
// pull readies nothing else, which the shell relies on.
func (s *sim) pull(ss *simSession, max int) []frame {
	rd := s.k.step(input{kind: inPull, conn: ss.c, frames: make([]frame, 0, max)})
	if len(rd.wake) > 0 || len(rd.effects) > 0 {
		s.fail("wakeup", "a pull of %s readied %d connections and %d effects", ss.name, len(rd.wake), len(rd.effects))
	}
	return rd.frames
}

func (s *sim) dropSession(ss *simSession) {
	s.stepCore(input{kind: inDrop, conn: ss.c})
	if !ss.c.gone {
		s.fail("conns", "%s: drop left the connection live", ss.name)
	}
	if _, ok := s.k.conns[ss.c.id]; ok {
		s.fail("conns", "%s: drop left the connection registered", ss.name)
	}
	if ss.cl != nil && ss.cl.sess == ss {
		ss.cl.sess = nil
	}
	i := slices.Index(s.sessions, ss)
	s.sessions = slices.Delete(s.sessions, i, i+1)
	delete(s.byConn, ss.c)
}

// routerCloses closes a connection from the router's side, as the hello
// timer or an operator would.
func (s *sim) routerCloses() bool {
	if len(s.sessions) == 0 {
		return false
	}
	ss := s.sessions[s.rng.IntN(len(s.sessions))]
	s.logf("%s closed by the router", ss.name)
	s.stepCore(input{kind: inClose, conn: ss.c, code: wire.ErrBackpressure, msg: "closed by the simulation"})
	if !ss.c.closing && !ss.c.gone {
		s.fail("conns", "%s: closeConn left it open", ss.name)
	}
	return true
}

// completeEffect finishes one staging or seal I/O, maybe failing it.
func (s *sim) completeEffect() bool {
	if len(s.effects) == 0 {
		return false
	}
	outcome := simIOOK
	switch s.rng.IntN(10) {
	case 0:
		outcome = simIOFails
	case 1:
		outcome = simIOMismatch
	}
	s.finishIO(s.rng.IntN(len(s.effects)), outcome)
	return true
}

// simIO is how a store operation ends.
type simIO int

const (
	simIOOK simIO = iota
	simIOFails
	simIOMismatch // seals only; staging just succeeds
)

// finishIO completes pending effect i as the shell would after the store's
// I/O.
func (s *sim) finishIO(i int, outcome simIO) {
	e := s.effects[i]
	s.effects = slices.Delete(s.effects, i, i+1)
	who := s.names[e.conn]
	if s.pool {
		s.finishPoolIO(e, who, outcome)
		return
	}
	switch e.kind {
	case effStage:
		if outcome == simIOFails {
			s.logf("store: staging %s for %s msg-%d fails", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inStaged, eff: e, err: errors.New("simulated staging failure")})
			return
		}
		s.fileSeq++
		path := fmt.Sprintf("stage-%04x", s.fileSeq)
		s.files[path] = simStaging
		s.logf("store: %s staged at %s for %s msg-%d", e.art.id, path, who, e.replyTo)
		s.stepCore(input{kind: inStaged, eff: e, loc: artLoc{relPath: path, gen: 1}})
	case effSeal:
		if s.files[e.relPath] != simStaging {
			s.fail("files", "seal of %q, which is not a staging file", e.relPath)
		}
		delete(s.files, e.relPath) // whatever the outcome, the staging file is gone
		switch outcome {
		case simIOFails:
			s.logf("store: seal of %s for %s msg-%d fails", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, err: errors.New("simulated seal failure")})
		case simIOMismatch:
			s.logf("store: seal of %s for %s msg-%d finds a mismatch", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, mismatch: true, err: errors.New("simulated digest mismatch")})
		default:
			s.fileSeq++
			path := fmt.Sprintf("sealed-%04x", s.fileSeq)
			s.files[path] = simSealed
			s.logf("store: %s sealed at %s for %s msg-%d", e.art.id, path, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: artLoc{relPath: path, gen: 1}})
		}
	default:
		s.fail("files", "unexpected effect kind %d", e.kind)
	}
}

// finishPoolIO is finishIO for a pooled store: slots are taken from the
// free ones of their size, sealed in place or (now and then) copied into
// another slot that is sealed instead, and recycled on collection.
func (s *sim) finishPoolIO(e effect, who string, outcome simIO) {
	switch e.kind {
	case effStage:
		if outcome == simIOFails {
			s.logf("store: staging for %s msg-%d fails", who, e.replyTo)
			s.stepCore(input{kind: inStaged, eff: e, err: errors.New("simulated staging failure")})
			return
		}
		path := s.takeSlot(uint64(e.size))
		s.logf("store: %s generation %d staged for %s msg-%d", path, s.slotGen[path], who, e.replyTo)
		s.stepCore(input{kind: inStaged, eff: e, loc: s.slotLoc(path)})
	case effSeal:
		if s.files[e.relPath] != simStaging {
			s.fail("slots", "seal of %q, which is not being written", e.relPath)
		}
		switch {
		case outcome != simIOOK:
			s.files[e.relPath] = simFree // the store recycles a slot whose seal failed
			s.logf("store: seal of %s for %s msg-%d fails", e.relPath, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, mismatch: outcome == simIOMismatch, err: errors.New("simulated seal failure")})
		case s.rng.IntN(5) == 0:
			s.files[e.relPath] = simQuarantined // a writer kept it: copied elsewhere
			path := s.takeSlot(uint64(e.size))
			s.files[path] = simSealed
			s.logf("store: seal of %s copied into %s generation %d for %s msg-%d", e.relPath, path, s.slotGen[path], who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: s.slotLoc(path)})
		default:
			s.files[e.relPath] = simSealed
			s.logf("store: %s sealed in place for %s msg-%d", e.relPath, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: s.slotLoc(e.relPath)})
		}
	default:
		s.fail("files", "unexpected effect kind %d", e.kind)
	}
}

// takeSlot hands out a free slot of size, or a new one, at its next
// generation.
func (s *sim) takeSlot(size uint64) string {
	for _, path := range slices.Sorted(maps.Keys(s.files)) {
		if s.files[path] == simFree && s.slotSize[path] == size {
			s.files[path] = simStaging
			s.slotGen[path]++
			return path
		}
	}
	s.fileSeq++
	path := fmt.Sprintf("slot-%016x", s.fileSeq)
	s.files[path], s.slotSize[path], s.slotGen[path] = simStaging, size, 1
	return path
}

func (s *sim) slotLoc(path string) artLoc {
	var n uint64
	fmt.Sscanf(path, "slot-%x", &n)
	return artLoc{relPath: path, slot: n, gen: s.slotGen[path]}
}

// usePool switches a new simulation to a pooled store.
func (s *sim) usePool() {
	s.pool, s.k.pool = true, true
	s.slotSize, s.slotGen = map[string]uint64{}, map[string]uint64{}
}

// ---- commands -------------------------------------------------------------

// send encodes a command, decodes it as the connection's reader does and
// steps the core with it.
func (s *sim) send(ss *simSession, op wire.Op, body wire.Body, atts []wire.Attachment, cmd *simCmd) {
	ss.msg++
	cmd.op = op
	ss.pending[ss.msg] = cmd
	s.out = wire.AppendEnvelope(s.out[:0], wire.Header{ID: ss.msg, Kind: wire.KindCommand, Op: op}, body, atts)
	s.deliver(ss, s.out)
}

func (s *sim) deliver(ss *simSession, frame []byte) {
	err := s.dec.Decode(frame, &s.env)
	var pe *wire.ProtocolError
	var be *wire.BusError
	switch {
	case errors.As(err, &pe):
		s.stepCore(input{kind: inViolation, conn: ss.c, msg: pe.Msg})
	case err != nil && !errors.As(err, &be):
		s.stepCore(input{kind: inViolation, conn: ss.c, msg: err.Error()})
	default:
		s.stepCore(input{kind: inCommand, conn: ss.c, env: &s.env, bodyErr: be})
	}
}

func (s *sim) command() bool {
	var cands []*simSession
	for _, ss := range s.sessions {
		if ss.ready && !ss.c.closing {
			cands = append(cands, ss)
		}
	}
	if len(cands) == 0 {
		return false
	}
	ss := cands[s.rng.IntN(len(cands))]
	w := ss.cl.weights
	total := 0
	for _, x := range w {
		total += x
	}
	for {
		r := s.rng.IntN(total)
		i := 0
		for r >= w[i] {
			r -= w[i]
			i++
		}
		if simOps[i].run(s, ss) {
			return true
		}
	}
}

// simOp is a command a client sends; run returns false when the client has
// nothing to send it about.
type simOp struct {
	run    func(*sim, *simSession) bool
	weight int  // base weight; each client scales it
	gives  bool // gives ownership back: hoarders rarely do
}

var simOps = [...]simOp{
	{(*sim).opRegister, 4, false}, {(*sim).opUnregister, 2, false},
	{(*sim).opCall, 14, false}, {(*sim).opReply, 10, false}, {(*sim).opCancel, 3, false},
	{(*sim).opResponderRelease, 2, false},
	{(*sim).opDeclare, 3, false}, {(*sim).opClearOrDelete, 2, false},
	{(*sim).opSubscribe, 6, false}, {(*sim).opUnsubscribe, 2, false}, {(*sim).opPublish, 12, false},
	{(*sim).opConsumed, 14, true},
	{(*sim).opAllocate, 6, false}, {(*sim).opSeal, 6, false}, {(*sim).opOpenOrRetain, 5, false},
	{(*sim).opRelease, 5, true},
	{(*sim).opMalformed, 1, false},
}

// personality scales every client's command weights at random, so some
// call or publish much more than others and some hoard deliveries and
// holds, pressing the owner budgets.
func (s *sim) personality() []int {
	hoarder := s.rng.IntN(3) == 0
	w := make([]int, len(simOps))
	for i, op := range simOps {
		w[i] = op.weight * (1 + s.rng.IntN(3))
		if hoarder && op.gives {
			w[i] /= 4
		}
	}
	return w
}

// serviceName and topicName mostly name what exists, as a client that
// knows its peers would, and sometimes anything.
func (s *sim) serviceName() string {
	if len(s.k.services) > 0 && s.rng.IntN(5) != 0 {
		return slices.Sorted(maps.Keys(s.k.services))[s.rng.IntN(len(s.k.services))]
	}
	return simServices[s.rng.IntN(len(simServices))]
}

func (s *sim) topicName() string {
	if len(s.k.topics) > 0 && s.rng.IntN(5) != 0 {
		return slices.Sorted(maps.Keys(s.k.topics))[s.rng.IntN(len(s.k.topics))]
	}
	return simTopics[s.rng.IntN(len(simTopics))]
}

// upTo returns 1..limit, and limit+1 one time in ten.
func (s *sim) upTo(limit int) uint32 {
	if s.rng.IntN(10) == 0 {
		return uint32(limit + 1)
	}
	return uint32(1 + s.rng.IntN(limit))
}

// payload returns an object payload: mostly small, sometimes large enough
// to press the byte budgets, now and then just under what fits a frame
// (fill > 0 is the room to leave for the rest of the envelope).
func (s *sim) payload(fill int) wire.RawJSON {
	n := 0
	switch r := s.rng.IntN(100); {
	case r < 60:
		return wire.RawJSON(fmt.Sprintf(`{"n":%d}`, s.rng.IntN(1000)))
	case r < 85:
		n = 100 + s.rng.IntN(2000)
	case r < 98 || fill <= 0:
		n = 6000 + s.rng.IntN(20000)
	default:
		n = max(wire.MaxEnvelopeBytes-fill-s.rng.IntN(400), 0)
	}
	return wire.RawJSON(`{"p":"` + strings.Repeat("x", n) + `"}`)
}

func (s *sim) opRegister(ss *simSession) bool {
	b := &wire.Register{Name: simServices[s.rng.IntN(len(simServices))],
		MaxQueued: s.upTo(s.lim.MaxServiceQueued), MaxInFlight: s.upTo(s.lim.MaxServiceInFlight)}
	s.logf("%s > service.register %s q=%d f=%d", ss.name, b.Name, b.MaxQueued, b.MaxInFlight)
	s.send(ss, wire.OpServiceRegister, b, nil, &simCmd{name: b.Name})
	return true
}

func (s *sim) opUnregister(ss *simSession) bool {
	name, inc, ok := simPick(s.rng, ss.services)
	if !ok || s.rng.IntN(6) == 0 {
		name = simServices[s.rng.IntN(len(simServices))]
		inc = s.svcIncs[name] + wire.ServiceInc(s.rng.IntN(2))
	}
	s.logf("%s > service.unregister %s %s", ss.name, name, inc)
	s.send(ss, wire.OpServiceUnregister, &wire.Unregister{Name: name, ServiceIncarnation: inc}, nil,
		&simCmd{name: name, inc: inc})
	return true
}

func (s *sim) opCall(ss *simSession) bool {
	b := &wire.Call{Target: s.serviceName(), Method: "m"}
	cmd := &simCmd{}
	if ss.callNext > 0 && s.rng.IntN(25) == 0 {
		b.CallID = wire.CallID(1 + s.rng.IntN(int(ss.callNext))) // reused or decreasing
		cmd.reused = true
	} else {
		ss.callNext += wire.CallID(1 + s.rng.IntN(2))
		b.CallID = ss.callNext
	}
	if s.rng.IntN(3) == 0 {
		inc := s.svcIncs[b.Target]
		if s.rng.IntN(4) == 0 {
			inc++
		}
		b.ExpectedIncarnation = wire.Some(inc)
	}
	atts, tampered := s.attachments(ss)
	b.Payload = s.payload(500 + 70*len(atts))
	cmd.call, cmd.name, cmd.tampered, cmd.mustFail = b.CallID, b.Target, tampered, tampered != "" || cmd.reused
	if !cmd.reused {
		ss.calls[b.CallID] = &simCall{target: b.Target}
	}
	s.logf("%s > rpc.call %s %s pin=%s payload=%dB atts=%s%s", ss.name, b.CallID, b.Target,
		b.ExpectedIncarnation, len(b.Payload), simAtts(atts), simTag(tampered, cmd.reused, "reused id"))
	s.send(ss, wire.OpRPCCall, b, atts, cmd)
	return true
}

func (s *sim) opReply(ss *simSession) bool {
	dlv, call, ok := simPick(s.rng, ss.caps)
	cmd := &simCmd{}
	switch r := s.rng.IntN(20); {
	case !ok && r != 0 && (r != 2 || len(ss.retired) == 0):
		return false
	case r == 0:
		dlv, call, cmd.tampered = ss.lastDlv+1+wire.DeliveryID(s.rng.IntN(3)), 1, "a never-issued delivery"
	case r == 1:
		call, cmd.tampered = call+1000, "the wrong call id"
	case r == 2 && len(ss.retired) > 0:
		dlv, cmd.tampered = ss.retired[s.rng.IntN(len(ss.retired))], "a retired delivery"
		if c, live := ss.caps[dlv]; live {
			call = c + 1000
		}
	}
	atts, tampered := s.attachments(ss)
	if cmd.tampered == "" {
		cmd.tampered = tampered
	}
	b := &wire.Reply{CallID: call, RequestDeliveryID: dlv, Outcome: s.payload(500 + 70*len(atts))}
	cmd.dlv, cmd.call, cmd.mustFail = dlv, call, cmd.tampered != ""
	s.logf("%s > rpc.reply %s %s outcome=%dB atts=%s%s", ss.name, call, dlv, len(b.Outcome), simAtts(atts),
		simTag(cmd.tampered, false, ""))
	s.send(ss, wire.OpRPCReply, b, atts, cmd)
	return true
}

func (s *sim) opCancel(ss *simSession) bool {
	id, _, ok := simPick(s.rng, ss.calls)
	if !ok || s.rng.IntN(8) == 0 {
		id = wire.CallID(1 + s.rng.IntN(int(ss.callNext)+3))
	}
	s.logf("%s > rpc.cancel %s", ss.name, id)
	s.send(ss, wire.OpRPCCancel, &wire.Cancel{CallID: id}, nil, &simCmd{call: id})
	return true
}

func (s *sim) opResponderRelease(ss *simSession) bool {
	dlv, call, ok := simPick(s.rng, ss.caps)
	cmd := &simCmd{}
	switch r := s.rng.IntN(8); {
	case !ok && r != 0:
		return false
	case r == 0:
		dlv, call, cmd.mustFail = ss.lastDlv+1, 1, true
	case r == 1:
		call += 1000
	}
	cmd.dlv, cmd.call = dlv, call
	s.logf("%s > rpc.responder.release %s %s", ss.name, call, dlv)
	s.send(ss, wire.OpRPCResponderRelease, &wire.ResponderRelease{CallID: call, RequestDeliveryID: dlv}, nil, cmd)
	return true
}

func (s *sim) opDeclare(ss *simSession) bool {
	b := &wire.Declare{Name: simTopics[s.rng.IntN(len(simTopics))], Retained: wire.RetainNone}
	if s.rng.IntN(2) == 0 {
		b.Retained = wire.RetainLatest
	}
	s.logf("%s > topic.declare %s retained=%s", ss.name, b.Name, b.Retained)
	s.send(ss, wire.OpTopicDeclare, b, nil, &simCmd{topic: b.Name})
	return true
}

func (s *sim) opClearOrDelete(ss *simSession) bool {
	name := s.topicName()
	op := wire.OpTopicClear
	if s.rng.IntN(3) == 0 {
		op = wire.OpTopicDelete
	}
	s.logf("%s > %s %s", ss.name, op, name)
	s.send(ss, op, &wire.TopicName{Name: name}, nil, &simCmd{topic: name})
	return true
}

func (s *sim) opSubscribe(ss *simSession) bool {
	b := &wire.Subscribe{Topic: s.topicName(), ReplayLatest: s.rng.IntN(2) == 0}
	if s.rng.IntN(2) == 0 {
		b.Mode, b.MaxQueued = wire.ModeLatest, 1
		if s.rng.IntN(15) == 0 {
			b.MaxQueued = 2
		}
		b.MaxInFlight = s.upTo(s.lim.MaxLatestInFlight)
	} else {
		b.Mode = wire.ModeBounded
		b.MaxQueued, b.MaxInFlight = s.upTo(s.lim.MaxBoundedQueued), s.upTo(s.lim.MaxBoundedInFlight)
	}
	s.logf("%s > subscribe %s %s q=%d f=%d replay=%v", ss.name, b.Topic, b.Mode, b.MaxQueued, b.MaxInFlight, b.ReplayLatest)
	s.send(ss, wire.OpSubscribe, b, nil, &simCmd{topic: b.Topic, mode: b.Mode})
	return true
}

func (s *sim) opUnsubscribe(ss *simSession) bool {
	id, _, ok := simPick(s.rng, ss.subs)
	if !ok || s.rng.IntN(6) == 0 {
		id = wire.SubID(1 + s.rng.IntN(int(s.k.nextSub)+2))
	}
	s.logf("%s > unsubscribe %s", ss.name, id)
	s.send(ss, wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: id}, nil, &simCmd{sub: id})
	return true
}

func (s *sim) opPublish(ss *simSession) bool {
	atts, tampered := s.attachments(ss)
	b := &wire.Publish{Topic: s.topicName(), Payload: s.payload(300 + 70*len(atts))}
	s.logf("%s > publish %s payload=%dB atts=%s%s", ss.name, b.Topic, len(b.Payload), simAtts(atts), simTag(tampered, false, ""))
	s.send(ss, wire.OpPublish, b, atts, &simCmd{topic: b.Topic, tampered: tampered, mustFail: tampered != ""})
	return true
}

func (s *sim) opConsumed(ss *simSession) bool {
	keys := slices.Sorted(maps.Keys(ss.dlvs))
	var ids []wire.DeliveryID
	for range 1 + s.rng.IntN(4) {
		if len(keys) > 0 {
			ids = append(ids, keys[s.rng.IntN(len(keys))])
		}
	}
	if len(ss.retired) > 0 && (len(ids) == 0 || s.rng.IntN(6) == 0) {
		ids = append(ids, ss.retired[s.rng.IntN(len(ss.retired))])
	}
	cmd := &simCmd{}
	if len(ids) == 0 && s.rng.IntN(5) != 0 {
		return false
	}
	if len(ids) == 0 || s.rng.IntN(30) == 0 {
		ids = append(ids, ss.lastDlv+1+wire.DeliveryID(s.rng.IntN(5)))
		cmd.mustFail, cmd.tampered = true, "a never-issued delivery"
	}
	cmd.dlvs = ids
	for _, d := range ids {
		if dv := ss.dlvs[d]; dv != nil {
			dv.consuming++
		}
	}
	s.logf("%s > delivery.consumed %v%s", ss.name, ids, simTag(cmd.tampered, false, ""))
	s.send(ss, wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: ids}, nil, cmd)
	return true
}

func (s *sim) opAllocate(ss *simSession) bool {
	var size uint64
	switch r := s.rng.IntN(10); {
	case r < 7:
		size = uint64(s.rng.Int64N(int64(s.lim.MaxArtifactBytes/2) + 1))
	case r < 9:
		size = uint64(s.rng.Int64N(int64(s.lim.MaxArtifactBytes) + 1))
	default:
		size = s.lim.MaxArtifactBytes + 1 + uint64(s.rng.IntN(100))
	}
	ctype := [...]string{"application/octet-stream", "image/x-raw"}[s.rng.IntN(2)]
	s.logf("%s > artifact.allocate %dB %s", ss.name, size, ctype)
	s.send(ss, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: size, ContentType: ctype}, nil,
		&simCmd{size: size, ctype: ctype})
	return true
}

func (s *sim) opSeal(ss *simSession) bool {
	var writers []uint64
	for _, own := range slices.Sorted(maps.Keys(ss.holds)) {
		if ss.holds[own].writer {
			writers = append(writers, own)
		}
	}
	if len(writers) == 0 {
		return false
	}
	own := writers[s.rng.IntN(len(writers))]
	h := ss.holds[own]
	b := &wire.Seal{ArtifactID: h.art, Generation: h.gen, OwnerID: wire.HoldOwner(wire.HoldID(own))}
	if s.rng.IntN(2) == 0 {
		var d wire.Digest
		for i := range d {
			d[i] = byte(s.rng.IntN(256))
		}
		b.Digest = wire.Some(d)
	}
	cmd := &simCmd{own: own}
	switch s.rng.IntN(25) {
	case 0:
		b.Generation, cmd.mustFail, cmd.tampered = h.gen+1, true, "another generation"
	case 1:
		b.OwnerID, cmd.mustFail, cmd.tampered = wire.DeliveryOwner(ss.lastDlv+1), true, "a delivery owner"
	case 2:
		b.ArtifactID, cmd.mustFail, cmd.tampered = h.art+1000, true, "another artifact id"
	}
	cmd.gen = b.Generation
	h.seals++
	pendingNote := ""
	if h.seals > 1 {
		pendingNote = " (another seal pending)"
	}
	s.logf("%s > artifact.seal %s own-%d digest=%v%s%s", ss.name, b.ArtifactID, own, b.Digest.Valid,
		simTag(cmd.tampered, false, ""), pendingNote)
	s.send(ss, wire.OpArtifactSeal, b, nil, cmd)
	return true
}

func (s *sim) opOpenOrRetain(ss *simSession) bool {
	op := wire.OpArtifactOpen
	if s.rng.IntN(2) == 0 {
		op = wire.OpArtifactRetain
	}
	owned := ss.owned()
	cmd := &simCmd{}
	var b wire.RefOwner
	if len(owned) > 0 && s.rng.IntN(8) != 0 {
		b = owned[s.rng.IntN(len(owned))]
		cmd.expectOK = op == wire.OpArtifactOpen
	} else if len(owned) == 0 && s.rng.IntN(4) != 0 {
		return false
	} else {
		var ok bool
		if b, cmd.tampered, ok = s.tamperedRef(ss); !ok {
			return false
		}
		cmd.mustFail = true
	}
	cmd.ref, cmd.owners = b.Ref, []wire.OwnerID{b.OwnerID}
	s.logf("%s > %s %s via %s%s", ss.name, op, b.Ref.ArtifactID, b.OwnerID, simTag(cmd.tampered, false, ""))
	s.send(ss, op, &b, nil, cmd)
	return true
}

func (s *sim) opRelease(ss *simSession) bool {
	keys := slices.Sorted(maps.Keys(ss.holds))
	var ids []wire.OwnerID
	for range 1 + s.rng.IntN(3) {
		if len(keys) > 0 {
			ids = append(ids, wire.HoldOwner(wire.HoldID(keys[s.rng.IntN(len(keys))])))
		}
	}
	if len(ss.released) > 0 && (len(ids) == 0 || s.rng.IntN(5) == 0) {
		ids = append(ids, wire.HoldOwner(wire.HoldID(ss.released[s.rng.IntN(len(ss.released))])))
	}
	cmd := &simCmd{}
	switch s.rng.IntN(20) {
	case 0:
		ids = append(ids, wire.HoldOwner(1<<40))
		cmd.mustFail, cmd.tampered = true, "a never-issued hold"
	case 1:
		ids = append(ids, wire.DeliveryOwner(1))
		cmd.mustFail, cmd.tampered = true, "a delivery owner"
	}
	if len(ids) == 0 {
		return false
	}
	cmd.owners = ids
	for _, o := range ids {
		if h := ss.holds[o.N]; h != nil && !o.Delivery {
			h.releasing++
		}
	}
	s.logf("%s > artifact.release %v%s", ss.name, ids, simTag(cmd.tampered, false, ""))
	s.send(ss, wire.OpArtifactRelease, &wire.Release{OwnerIDs: ids}, nil, cmd)
	return true
}

// opMalformed sends what a broken client would: a refusal that changes
// nothing, or a violation that closes the connection.
func (s *sim) opMalformed(ss *simSession) bool {
	owned := ss.owned()
	switch r := s.rng.IntN(11); {
	case r == 0 && len(owned) > 0:
		att := []wire.Attachment{{Name: "f0", Ref: owned[0].Ref, OwnerID: owned[0].OwnerID}}
		s.logf("%s > topic.declare with an attachment", ss.name)
		s.send(ss, wire.OpTopicDeclare, &wire.Declare{Name: "t.a", Retained: wire.RetainNone}, att, &simCmd{mustFail: true})
	case r == 1 && len(owned) > 0:
		att := []wire.Attachment{{Name: "f0", Ref: owned[0].Ref, OwnerID: owned[0].OwnerID},
			{Name: "f0", Ref: owned[0].Ref, OwnerID: owned[0].OwnerID}}
		s.logf("%s > publish with two attachments named f0", ss.name)
		s.send(ss, wire.OpPublish, &wire.Publish{Topic: "t.a", Payload: wire.RawJSON(`{}`)}, att, &simCmd{mustFail: true})
	case r < 8:
		s.logf("%s > service.register maxQueued=0", ss.name)
		s.send(ss, wire.OpServiceRegister, &wire.Register{Name: "svc.a", MaxQueued: 0, MaxInFlight: 1}, nil, &simCmd{mustFail: true})
	case r == 8:
		s.logf("%s > a second bus.hello (violation)", ss.name)
		s.send(ss, wire.OpHello, &wire.Hello{ClientID: ss.cl.id, ClientIncarnation: "again", SupportedMajors: []uint32{1}}, nil, &simCmd{})
		if !ss.c.closing {
			s.fail("conns", "%s: a second hello did not close the connection", ss.name)
		}
	case r == 9:
		s.logf("%s > a command reusing msg-%d (violation)", ss.name, ss.msg)
		s.out = wire.AppendEnvelope(s.out[:0], wire.Header{ID: ss.msg, Kind: wire.KindCommand, Op: wire.OpRPCCancel},
			&wire.Cancel{CallID: 1}, nil)
		s.deliver(ss, s.out)
		if !ss.c.closing {
			s.fail("conns", "%s: a repeated command id did not close the connection", ss.name)
		}
	default:
		s.logf("%s > a notice instead of a command (violation)", ss.name)
		ss.msg++
		s.out = wire.AppendEnvelope(s.out[:0], wire.Header{ID: ss.msg, Kind: wire.KindNotice, Op: wire.OpRouteRemoved},
			&wire.RouteRemoved{Name: "svc.a", ServiceIncarnation: 1, Reason: "x"}, nil)
		s.deliver(ss, s.out)
		if !ss.c.closing {
			s.fail("conns", "%s: a notice from a client did not close the connection", ss.name)
		}
	}
	return true
}

// owned lists the (ref, owner) pairs the client may name: its holds on
// sealed artifacts and the attachments of deliveries it has not consumed
// (nor asked to), in a stable order.
func (ss *simSession) owned() []wire.RefOwner {
	var out []wire.RefOwner
	for _, own := range slices.Sorted(maps.Keys(ss.holds)) {
		if h := ss.holds[own]; !h.writer && h.releasing == 0 {
			out = append(out, wire.RefOwner{Ref: h.ref, OwnerID: wire.HoldOwner(wire.HoldID(own))})
		}
	}
	for _, d := range slices.Sorted(maps.Keys(ss.dlvs)) {
		if ss.dlvs[d].consuming > 0 {
			continue
		}
		for _, a := range ss.dlvs[d].atts {
			out = append(out, wire.RefOwner{Ref: a.Ref, OwnerID: wire.DeliveryOwner(d)})
		}
	}
	return out
}

// stillOwns reports whether the client holds owner and has not asked to
// give it up.
func (ss *simSession) stillOwns(owner wire.OwnerID) bool {
	if ss.c.closing {
		return false
	}
	if owner.Delivery {
		dv := ss.dlvs[wire.DeliveryID(owner.N)]
		return dv != nil && dv.consuming == 0
	}
	h := ss.holds[owner.N]
	return h != nil && !h.writer && h.releasing == 0
}

// tamperedRef returns a (ref, owner) pair that must be refused, and why.
func (s *sim) tamperedRef(ss *simSession) (wire.RefOwner, string, bool) {
	owned := ss.owned()
	var writers []uint64
	for _, own := range slices.Sorted(maps.Keys(ss.holds)) {
		if h := ss.holds[own]; h.writer && h.seals == 0 {
			writers = append(writers, own)
		}
	}
	switch r := s.rng.IntN(6); {
	case r < 4 && len(owned) > 0:
		p := owned[s.rng.IntN(len(owned))]
		switch r {
		case 0:
			p.Ref.ByteLength++
			return p, "a wrong byteLength", true
		case 1:
			p.Ref.StoreID++
			return p, "another store", true
		case 2:
			if p.Ref.Digest.Valid {
				p.Ref.Digest.V[0]++
			} else {
				p.Ref.Digest = wire.Some(wire.Digest{1})
			}
			return p, "a wrong digest", true
		default:
			p.OwnerID = wire.HoldOwner(1 << 40)
			return p, "an owner never issued", true
		}
	case r == 4 && len(writers) > 0:
		own := writers[s.rng.IntN(len(writers))]
		h := ss.holds[own]
		ref := wire.ArtifactRef{StoreID: s.k.storeID, ArtifactID: h.art, Generation: h.gen, ByteLength: h.size, ContentType: h.ctype}
		return wire.RefOwner{Ref: ref, OwnerID: wire.HoldOwner(wire.HoldID(own))}, "an unsealed artifact", true
	case len(s.stale) > 0:
		ref := s.stale[s.rng.IntN(len(s.stale))]
		return wire.RefOwner{Ref: ref, OwnerID: wire.HoldOwner(1 << 40)}, "a stale ref and no owner", true
	}
	return wire.RefOwner{}, "", false
}

// attachments picks what a call, reply or publish carries: mostly nothing,
// otherwise refs the client owns, and now and then one that must be
// refused.
func (s *sim) attachments(ss *simSession) ([]wire.Attachment, string) {
	n := 0
	switch r := s.rng.IntN(20); {
	case r < 11:
		return nil, ""
	case r < 17:
		n = 1
	default:
		n = 2 + s.rng.IntN(3)
	}
	owned := ss.owned()
	var atts []wire.Attachment
	for i := range n {
		if len(owned) == 0 {
			break
		}
		p := owned[s.rng.IntN(len(owned))]
		atts = append(atts, wire.Attachment{Name: fmt.Sprintf("f%d", i), Ref: p.Ref, OwnerID: p.OwnerID})
	}
	if s.rng.IntN(8) == 0 {
		if p, why, ok := s.tamperedRef(ss); ok {
			atts = append(atts, wire.Attachment{Name: "bad", Ref: p.Ref, OwnerID: p.OwnerID})
			return atts, why
		}
	}
	return atts, ""
}

func simAtts(atts []wire.Attachment) string {
	if len(atts) == 0 {
		return "[]"
	}
	parts := make([]string, len(atts))
	for i, a := range atts {
		parts[i] = fmt.Sprintf("%s=%s@%s", a.Name, a.Ref.ArtifactID, a.OwnerID)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func simTag(tampered string, bad bool, what string) string {
	switch {
	case tampered != "":
		return " (bad: " + tampered + ")"
	case bad:
		return " (bad: " + what + ")"
	}
	return ""
}

// ---- frames the client reads ----------------------------------------------

// receive encodes a pulled frame exactly as the writer does and has the
// client decode and interpret it.
func (s *sim) receive(ss *simSession, f *frame) {
	var atts []wire.Attachment
	for _, a := range f.atts {
		a.OwnerID = wire.DeliveryOwner(f.deliveryID())
		atts = append(atts, a)
	}
	b, err := wire.AppendFrame(s.frameBuf[:0], f.hdr, f.body(), atts)
	if err != nil {
		s.fail("frames", "%s: the writer cannot encode %s %s: %v", ss.name, f.hdr.Kind, f.hdr.Op, err)
		return
	}
	s.frameBuf = b
	env := &ss.env
	if err := ss.dec.Decode(b[wire.FrameHeaderLen:], env); err != nil {
		s.fail("frames", "%s: router frame %s %s does not decode: %v", ss.name, f.hdr.Kind, f.hdr.Op, err)
		return
	}
	if ss.closed {
		s.fail("frames", "%s: %s %s after connection.closing", ss.name, env.Kind, env.Op)
	}
	if env.ID <= ss.lastBus {
		s.fail("frames", "%s: bus-%d after bus-%d", ss.name, env.ID, ss.lastBus)
	}
	ss.lastBus = env.ID
	if f.closeAfter != (env.Op == wire.OpConnectionClosing) {
		s.fail("frames", "%s: %s with closeAfter=%v", ss.name, env.Op, f.closeAfter)
	}
	switch env.Kind {
	case wire.KindReply:
		s.onReply(ss, env)
	case wire.KindDelivery:
		s.onDelivery(ss, env)
	case wire.KindNotice:
		s.onNotice(ss, env)
	default:
		s.fail("frames", "%s: router sent a %s", ss.name, env.Kind)
	}
}

func simReplyValue(op wire.Op) wire.Body {
	switch op {
	case wire.OpHello:
		return &wire.HelloOK{}
	case wire.OpServiceRegister:
		return &wire.RegisterOK{}
	case wire.OpServiceUnregister, wire.OpUnsubscribe:
		return &wire.Removed{}
	case wire.OpRPCCall:
		return &wire.CallOK{}
	case wire.OpRPCReply:
		return &wire.Routed{}
	case wire.OpRPCCancel:
		return &wire.CancelOK{}
	case wire.OpRPCResponderRelease, wire.OpDeliveryConsumed, wire.OpArtifactRelease:
		return &wire.Released{}
	case wire.OpTopicDeclare:
		return &wire.DeclareOK{}
	case wire.OpTopicClear:
		return &wire.Cleared{}
	case wire.OpTopicDelete:
		return &wire.Deleted{}
	case wire.OpSubscribe:
		return &wire.SubscribeOK{}
	case wire.OpPublish:
		return &wire.PublishOK{}
	case wire.OpArtifactAllocate:
		return &wire.AllocateOK{}
	case wire.OpArtifactSeal:
		return &wire.SealOK{}
	case wire.OpArtifactOpen:
		return &wire.OpenOK{}
	case wire.OpArtifactRetain:
		return &wire.RetainOK{}
	}
	return &wire.Released{}
}

func (s *sim) onReply(ss *simSession, env *wire.Envelope) {
	id := uint64(env.ReplyTo.V)
	cmd := ss.pending[id]
	if cmd == nil {
		s.fail("frames", "%s: reply %s to msg-%d, which awaits no reply", ss.name, env.Op, id)
		return
	}
	delete(ss.pending, id)
	if env.Op != cmd.op {
		s.fail("frames", "%s: msg-%d was %s, its reply says %s", ss.name, id, cmd.op, env.Op)
	}
	v := simReplyValue(cmd.op)
	be, err := env.DecodeReply(v)
	if err != nil {
		s.fail("frames", "%s: malformed %s reply: %v", ss.name, cmd.op, err)
		return
	}
	s.outcome(cmd.op, be)
	if be != nil {
		s.logf("%s < bus-%d %s msg-%d refused %s: %s", ss.name, env.ID, cmd.op, id, be.Code, be.Message)
		if cmd.expectOK {
			s.fail("refusals", "%s: msg-%d %s refused, but the client owns what it names: %v", ss.name, id, cmd.op, be)
		}
	} else {
		detail := string(v.AppendJSON(nil))
		if ok, hello := v.(*wire.HelloOK); hello {
			detail = ok.ConnectionID.String()
		}
		s.logf("%s < bus-%d %s msg-%d ok %s", ss.name, env.ID, cmd.op, id, detail)
		if cmd.mustFail {
			s.fail("refusals", "%s: msg-%d %s admitted despite %s", ss.name, id, cmd.op, cmp.Or(cmd.tampered, "being invalid"))
		}
	}
	switch cmd.op {
	case wire.OpHello:
		if be == nil {
			ok := v.(*wire.HelloOK)
			if ok.ConnectionID != ss.c.id || ok.Limits != s.lim {
				s.fail("frames", "%s: HelloOK names %s and limits %+v", ss.name, ok.ConnectionID, ok.Limits)
			}
			ss.ready = true
		}
	case wire.OpServiceRegister:
		if be == nil {
			inc := v.(*wire.RegisterOK).ServiceIncarnation
			if _, dup := ss.services[cmd.name]; dup {
				s.fail("client-view", "%s: registered %s twice", ss.name, cmd.name)
			}
			ss.services[cmd.name] = inc
			s.svcIncs[cmd.name] = inc
		}
	case wire.OpServiceUnregister:
		if be == nil {
			inc, held := ss.services[cmd.name]
			mine := held && inc == cmd.inc
			if removed := v.(*wire.Removed).Removed; removed != mine {
				s.fail("client-view", "%s: unregister %s %s says removed=%v; the client holds it: %v",
					ss.name, cmd.name, cmd.inc, removed, mine)
			}
			if mine {
				delete(ss.services, cmd.name)
			}
		}
	case wire.OpRPCCall:
		if cmd.reused {
			break
		}
		cl := ss.calls[cmd.call]
		switch {
		case cl == nil || cl.accepted:
			s.fail("client-view", "%s: reply for %s, which the client does not await", ss.name, cmd.call)
		case be != nil:
			delete(ss.calls, cmd.call)
		default:
			cl.accepted = true
		}
	case wire.OpRPCReply:
		call, live := ss.caps[cmd.dlv]
		live = live && call == cmd.call
		if be == nil {
			if !live {
				s.fail("client-view", "%s: reply to %s on %s routed without a capability", ss.name, cmd.call, cmd.dlv)
			}
			delete(ss.caps, cmd.dlv)
		} else if live && be.Code == wire.ErrCallGone {
			s.fail("client-view", "%s: reply on the live capability %s refused CALL_GONE", ss.name, cmd.dlv)
		}
	case wire.OpRPCCancel:
		s.onCancel(ss, cmd, be, v.(*wire.CancelOK))
	case wire.OpRPCResponderRelease:
		call, live := ss.caps[cmd.dlv]
		live = live && call == cmd.call
		if be == nil {
			if n := v.(*wire.Released).Released; (n == 1) != live {
				s.fail("client-view", "%s: responder.release of %s released %d; the client holds it: %v", ss.name, cmd.dlv, n, live)
			}
			if live {
				delete(ss.caps, cmd.dlv)
			}
		} else if live {
			s.fail("client-view", "%s: responder.release of the live %s refused", ss.name, cmd.dlv)
		}
	case wire.OpSubscribe:
		if be == nil {
			ok := v.(*wire.SubscribeOK)
			if _, dup := ss.subs[ok.SubscriptionID]; dup {
				s.fail("client-view", "%s: %s issued twice", ss.name, ok.SubscriptionID)
			}
			ss.subs[ok.SubscriptionID] = &simSub{topic: cmd.topic, inc: ok.TopicIncarnation, mode: cmd.mode}
		}
	case wire.OpUnsubscribe:
		if be == nil {
			id := cmd.sub
			_, mine := ss.subs[id]
			if removed := v.(*wire.Removed).Removed; removed != mine {
				s.fail("client-view", "%s: unsubscribe %s says removed=%v; the client holds it: %v", ss.name, id, removed, mine)
			}
			delete(ss.subs, id)
		}
	case wire.OpDeliveryConsumed:
		s.onConsumed(ss, cmd, be, v.(*wire.Released))
	case wire.OpArtifactAllocate:
		if be == nil {
			ok := v.(*wire.AllocateOK)
			if _, dup := ss.holds[ok.OwnerID.N]; dup || ok.OwnerID.Delivery {
				s.fail("client-view", "%s: allocate handed out %s again", ss.name, ok.OwnerID)
			}
			// A closing connection abandons the writer before the client
			// reads the grant.
			if !ss.c.closing && (s.files[ok.WriteLocation.RelativePath] != simStaging || ok.WriteLocation.StoreID != s.k.storeID) {
				s.fail("files", "%s: allocate's write location %+v is no staging file", ss.name, ok.WriteLocation)
			}
			ss.holds[ok.OwnerID.N] = &simHold{writer: true, art: ok.ArtifactID, gen: ok.Generation, size: cmd.size, ctype: cmd.ctype}
		}
	case wire.OpArtifactSeal:
		s.onSeal(ss, cmd, be, v.(*wire.SealOK))
	case wire.OpArtifactOpen:
		if be == nil {
			// The file must exist while the client still owns the artifact.
			loc := v.(*wire.OpenOK).ReadLocation
			if ss.stillOwns(cmd.owners[0]) && (s.files[loc.RelativePath] != simSealed || loc.StoreID != s.k.storeID) {
				s.fail("files", "%s: open of %s returned %+v, which is no sealed file", ss.name, cmd.ref.ArtifactID, loc)
			}
		}
	case wire.OpArtifactRetain:
		if be == nil {
			own := v.(*wire.RetainOK).OwnerID
			if _, dup := ss.holds[own.N]; dup || own.Delivery {
				s.fail("client-view", "%s: retain handed out %s again", ss.name, own)
			}
			ss.holds[own.N] = &simHold{ref: cmd.ref, art: cmd.ref.ArtifactID}
			s.stale = append(s.stale, cmd.ref)
		} else if !cmd.mustFail && be.Code != wire.ErrQuotaExceeded {
			s.fail("refusals", "%s: retain of an owned %s refused: %v", ss.name, cmd.ref.ArtifactID, be)
		}
	case wire.OpArtifactRelease:
		s.onRelease(ss, cmd, be, v.(*wire.Released))
	}
}

func (s *sim) onCancel(ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.CancelOK) {
	if be != nil {
		s.fail("refusals", "%s: rpc.cancel refused: %v", ss.name, be)
		return
	}
	cl := ss.calls[cmd.call]
	active := cl != nil && cl.accepted
	switch ok.State {
	case wire.CancelledBeforeDispatch, wire.ExecutionUnknown:
		if !active || cl.resultSeen {
			s.fail("client-view", "%s: cancel of %s says %s, but the client saw it end", ss.name, cmd.call, ok.State)
		}
		delete(ss.calls, cmd.call)
	case wire.Completed:
		if !active {
			s.fail("client-view", "%s: cancel of %s says completed, but the client saw it end", ss.name, cmd.call)
		}
	case wire.CallGoneState:
		if active {
			s.fail("client-view", "%s: cancel of %s says call-gone, but no result or failure reached the client", ss.name, cmd.call)
		}
	}
}

func (s *sim) onConsumed(ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.Released) {
	if be != nil {
		if !cmd.mustFail {
			s.fail("refusals", "%s: delivery.consumed of issued ids refused: %v", ss.name, be)
		}
		for _, d := range cmd.dlvs {
			if dv := ss.dlvs[d]; dv != nil {
				dv.consuming--
			}
		}
		return
	}
	held := map[wire.DeliveryID]bool{}
	for _, d := range cmd.dlvs {
		if ss.dlvs[d] != nil {
			held[d] = true
		}
	}
	if ok.Released != uint64(len(held)) {
		s.fail("client-view", "%s: consumed %v released %d; the client held %d of them", ss.name, cmd.dlvs, ok.Released, len(held))
	}
	for _, d := range slices.Sorted(maps.Keys(held)) {
		dv := ss.dlvs[d]
		delete(ss.dlvs, d)
		ss.retire(d)
		if dv.op == wire.OpRPCResult {
			if cl := ss.calls[dv.call]; cl == nil || !cl.resultSeen {
				s.fail("client-view", "%s: consumed the result of %s, which the client does not await", ss.name, dv.call)
			}
			delete(ss.calls, dv.call)
		}
	}
}

func (ss *simSession) retire(d wire.DeliveryID) {
	ss.retired = append(ss.retired, d)
	if len(ss.retired) > 16 {
		ss.retired = ss.retired[1:]
	}
}

// onSeal tells, as a client would, a refused seal (the writer stays) from a
// failed one (the store's I/O failed and the writer is gone).
func (s *sim) onSeal(ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.SealOK) {
	h := ss.holds[cmd.own]
	if h != nil && h.writer {
		h.seals--
	}
	if be == nil {
		if h == nil || !h.writer {
			s.fail("client-view", "%s: seal ok for own-%d, which is no writer of the client", ss.name, cmd.own)
			return
		}
		// A pooled store's copying seal moves the artifact to another slot.
		moved := s.pool && ok.Ref.ArtifactID != h.art
		if ok.OwnerID != wire.HoldOwner(wire.HoldID(cmd.own)) || ok.Ref.ByteLength != h.size ||
			ok.Ref.ContentType != h.ctype || ok.Ref.StoreID != s.k.storeID ||
			!moved && (ok.Ref.ArtifactID != h.art || ok.Ref.Generation != h.gen) {
			s.fail("frames", "%s: seal of %s answered %+v", ss.name, h.art, ok)
		}
		ss.holds[cmd.own] = &simHold{ref: ok.Ref, art: ok.Ref.ArtifactID, releasing: h.releasing}
		s.stale = append(s.stale, ok.Ref)
		return
	}
	switch {
	case be.Code == wire.ErrStoreFailure || be.Code == wire.ErrArtifactMismatch && h != nil && cmd.gen == h.gen:
		if h != nil && h.writer {
			delete(ss.holds, cmd.own)
			ss.released = append(ss.released, cmd.own)
		}
	case be.Code == wire.ErrArtifactGone:
		// In pool mode a seal naming a generation other than the writer's
		// is as gone as a collected artifact; the writer stays.
		if h != nil && h.writer && !(s.pool && cmd.gen != h.gen) {
			s.fail("client-view", "%s: seal of own-%d says ARTIFACT_GONE, but the client still holds the writer", ss.name, cmd.own)
		}
	}
}

func (s *sim) onRelease(ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.Released) {
	if be != nil {
		if !cmd.mustFail {
			s.fail("refusals", "%s: release of issued holds refused: %v", ss.name, be)
		}
		for _, o := range cmd.owners {
			if h := ss.holds[o.N]; h != nil && !o.Delivery {
				h.releasing--
			}
		}
		return
	}
	held := map[uint64]bool{}
	for _, o := range cmd.owners {
		if ss.holds[o.N] != nil {
			held[o.N] = true
		}
	}
	if ok.Released != uint64(len(held)) {
		s.fail("client-view", "%s: release %v released %d; the client held %d of them", ss.name, cmd.owners, ok.Released, len(held))
	}
	for _, own := range slices.Sorted(maps.Keys(held)) {
		delete(ss.holds, own)
		ss.released = append(ss.released, own)
	}
}

func (s *sim) onDelivery(ss *simSession, env *wire.Envelope) {
	var dlv wire.DeliveryID
	atts := slices.Clone(env.Attachments)
	switch env.Op {
	case wire.OpRPCRequest:
		var req wire.Request
		if err := env.DecodeBody(&req); err != nil {
			s.fail("frames", "%s: malformed request: %v", ss.name, err)
		}
		dlv = req.DeliveryID
		if ss.services[req.Target] != req.ServiceIncarnation {
			s.fail("client-view", "%s: request for %s %s, which the client does not serve", ss.name, req.Target, req.ServiceIncarnation)
		}
		ss.caps[dlv] = req.CallID
		ss.dlvs[dlv] = &simDlv{op: env.Op, call: req.CallID, atts: atts}
		s.logf("%s < bus-%d rpc.request %s %s from %s/%s payload=%dB atts=%s", ss.name, env.ID, dlv, req.CallID,
			req.Caller.ClientID, req.Caller.ClientIncarnation, len(req.Payload), simAtts(atts))
	case wire.OpRPCResult:
		var res wire.Result
		if err := env.DecodeBody(&res); err != nil {
			s.fail("frames", "%s: malformed result: %v", ss.name, err)
		}
		dlv = res.DeliveryID
		cl := ss.calls[res.CallID]
		if cl == nil || !cl.accepted || cl.resultSeen {
			s.fail("client-view", "%s: result for %s, which the client does not await", ss.name, res.CallID)
		} else {
			cl.resultSeen = true
		}
		ss.dlvs[dlv] = &simDlv{op: env.Op, call: res.CallID, atts: atts}
		s.logf("%s < bus-%d rpc.result %s %s outcome=%dB atts=%s", ss.name, env.ID, dlv, res.CallID, len(res.Outcome), simAtts(atts))
	case wire.OpTopicMessage:
		var m wire.TopicMessage
		if err := env.DecodeBody(&m); err != nil {
			s.fail("frames", "%s: malformed message: %v", ss.name, err)
		}
		dlv = m.DeliveryID
		sub := ss.subs[m.SubscriptionID]
		switch {
		case sub == nil:
			s.fail("client-view", "%s: message for %s, which the client does not hold", ss.name, m.SubscriptionID)
		case sub.topic != m.Topic || sub.inc != m.TopicIncarnation:
			s.fail("frames", "%s: %s of %s %s carries %s %s", ss.name, m.SubscriptionID, sub.topic, sub.inc, m.Topic, m.TopicIncarnation)
		case m.TopicSequence <= sub.lastSeq:
			s.fail("frames", "%s: %s sequence %d after %d", ss.name, m.SubscriptionID, m.TopicSequence, sub.lastSeq)
		case sub.mode == wire.ModeBounded && m.Replaced != 0:
			s.fail("frames", "%s: bounded %s reports %d replaced", ss.name, m.SubscriptionID, m.Replaced)
		default:
			sub.lastSeq = m.TopicSequence
		}
		ss.dlvs[dlv] = &simDlv{op: env.Op, sub: m.SubscriptionID, atts: atts}
		s.logf("%s < bus-%d topic.message %s %s %s seq=%d replaced=%d payload=%dB atts=%s", ss.name, env.ID, dlv,
			m.SubscriptionID, m.Topic, m.TopicSequence, m.Replaced, len(m.Payload), simAtts(atts))
	default:
		s.fail("frames", "%s: delivery op %s", ss.name, env.Op)
	}
	if dlv <= ss.lastDlv {
		s.fail("frames", "%s: %s after %s", ss.name, dlv, ss.lastDlv)
	}
	ss.lastDlv = dlv
	for _, a := range atts {
		if a.OwnerID != wire.DeliveryOwner(dlv) || a.Ref.StoreID != s.k.storeID {
			s.fail("frames", "%s: attachment %s of %s is owned by %s in %s", ss.name, a.Name, dlv, a.OwnerID, a.Ref.StoreID)
		}
		s.stale = append(s.stale, a.Ref)
	}
	if len(s.stale) > 64 {
		s.stale = s.stale[len(s.stale)-64:]
	}
}

func (s *sim) onNotice(ss *simSession, env *wire.Envelope) {
	switch env.Op {
	case wire.OpCallFailed:
		var n wire.CallFailed
		if err := env.DecodeBody(&n); err != nil {
			s.fail("frames", "%s: malformed call.failed: %v", ss.name, err)
		}
		s.logf("%s < bus-%d call.failed %s %s %s", ss.name, env.ID, n.CallID, n.Code, n.Dispatch)
		cl := ss.calls[n.CallID]
		if cl == nil || !cl.accepted || cl.resultSeen {
			s.fail("client-view", "%s: call.failed for %s, which the client does not await", ss.name, n.CallID)
		}
		delete(ss.calls, n.CallID)
	case wire.OpRouteRemoved:
		var n wire.RouteRemoved
		if err := env.DecodeBody(&n); err != nil {
			s.fail("frames", "%s: malformed route.removed: %v", ss.name, err)
		}
		s.logf("%s < bus-%d route.removed %s %s %s", ss.name, env.ID, n.Name, n.ServiceIncarnation, n.Reason)
	case wire.OpSubscriptionClosed:
		var n wire.SubscriptionClosed
		if err := env.DecodeBody(&n); err != nil {
			s.fail("frames", "%s: malformed subscription.closed: %v", ss.name, err)
		}
		s.logf("%s < bus-%d subscription.closed %s %s", ss.name, env.ID, n.SubscriptionID, n.Reason)
		if ss.subs[n.SubscriptionID] == nil {
			s.fail("client-view", "%s: subscription.closed for %s, which the client does not hold", ss.name, n.SubscriptionID)
		}
		delete(ss.subs, n.SubscriptionID)
	case wire.OpConnectionClosing:
		var n wire.ConnectionClosing
		if err := env.DecodeBody(&n); err != nil {
			s.fail("frames", "%s: malformed connection.closing: %v", ss.name, err)
		}
		s.logf("%s < bus-%d connection.closing %s: %s", ss.name, env.ID, n.Code, n.Message)
		s.outcomes["closing:"+n.Code.String()]++
		ss.closed = true
	default:
		s.fail("frames", "%s: notice op %s", ss.name, env.Op)
	}
}

// ---- invariants -----------------------------------------------------------

// checkInvariants walks every registry of the core and counts what it finds
// independently of the core's own counters:
//
//   - every artifact's roots equal the queue entries, deliveries, admitted
//     results, holds and retained values naming it; no sealed artifact
//     without roots survives; nothing names a collected artifact;
//   - every hold, delivery, capability, call, service and subscription
//     belongs to a live connection and both sides of each link agree;
//   - owners, queued bytes, store bytes, retained bytes, queues, credits and
//     registries stay within their limits and equal their sums;
//   - a closing connection holds nothing;
//   - the store holds exactly the files live artifacts name;
//   - the stats snapshot agrees with the walk.
func (s *sim) checkInvariants() {
	k, lim := s.k, s.lim
	roots := map[*artifact]int{}
	root := func(where string, arts []*artifact) {
		for i, a := range arts {
			if slices.Index(arts, a) != i {
				s.fail("roots", "%s names %s twice in one root", where, a.id)
			}
			roots[a]++
		}
	}
	svcInflight := map[*service]int{}
	subInflight := map[*subscription]int{}
	var want simGauges
	want.Connections, want.Topics, want.Artifacts = len(k.conns), len(k.topics), len(k.artifacts)
	want.StoreBytes, want.RetainedBytes, want.ConnectionsTotal = k.storeBytes, k.retainedBytes, s.accepted

	if len(k.conns) > lim.MaxClients {
		s.fail("conns", "%d connections, maxClients %d", len(k.conns), lim.MaxClients)
	}
	subCount := 0
	for id, c := range k.conns {
		name := s.names[c]
		if c.id != id || c.gone {
			s.fail("conns", "%s registered as %s, gone=%v", name, id, c.gone)
		}
		if !c.helloDone && !c.closing {
			want.PendingHello++
		}
		if c.helloDone && !c.closing {
			if rec := k.clients[c.ident.ClientID]; rec == nil || rec.live != c {
				s.fail("conns", "%s is live but not its client's live connection", name)
			}
		}
		// The control lane.
		bytes := 0
		for _, it := range c.control[c.ctrlHead:] {
			bytes += len(it.body) + controlOverhead
		}
		if bytes != c.controlBytes {
			s.fail("control", "%s: control lane holds %d bytes, counted %d", name, bytes, c.controlBytes)
		}
		if n := len(c.control) - c.ctrlHead; n > lim.MaxControlFrames+1 {
			s.fail("control", "%s: %d control frames queued, maxControlFrames %d", name, n, lim.MaxControlFrames)
		}
		want.Queued += len(c.control) - c.ctrlHead + len(c.results)
		if c.closing {
			if len(c.services)+len(c.subs)+len(c.calls)+len(c.results)+len(c.dlvs)+len(c.caps)+len(c.holds) != 0 || c.queuedBytes != 0 {
				s.fail("closing-empty", "%s is closing but holds %d services, %d subscriptions, %d calls, %d results, %d deliveries, %d capabilities, %d holds, %d queued bytes",
					name, len(c.services), len(c.subs), len(c.calls), len(c.results), len(c.dlvs), len(c.caps), len(c.holds), c.queuedBytes)
			}
		}
		// Owners, counted here rather than by c.owners().
		held := len(c.dlvs) + len(c.caps) + len(c.holds)
		if held > lim.MaxOwnersPerClient {
			s.fail("owners", "%s holds %d owners (%d deliveries, %d capabilities, %d holds), maxOwnersPerClient %d",
				name, held, len(c.dlvs), len(c.caps), len(c.holds), lim.MaxOwnersPerClient)
		}
		if held+len(c.results) > lim.MaxOwnersPerClient {
			s.fail("owners-results", "%s holds %d owners and %d admitted results, maxOwnersPerClient %d",
				name, held, len(c.results), lim.MaxOwnersPerClient)
		}
		want.Owners += c.owners() // the core's own definition
		want.ReplyCapabilities += len(c.caps)
		// Deliveries.
		for d, ref := range c.dlvs {
			where := fmt.Sprintf("%s %s", name, d)
			if d == 0 || uint64(d) >= c.dlvNext {
				s.fail("deliveries", "%s was never issued (next %d)", where, c.dlvNext)
			}
			if (ref.sub != nil) == (ref.call != nil) {
				s.fail("deliveries", "%s roots a subscription and a call, or neither", where)
				continue
			}
			root(where, ref.arts)
			if sub := ref.sub; sub != nil {
				if sub.conn != c || ref.msg == nil || !slices.Equal(ref.arts, ref.msg.arts) {
					s.fail("deliveries", "%s: message delivery of %s disagrees with it", where, sub.id)
				}
				subInflight[sub]++
				continue
			}
			cl := ref.call
			if ref.result {
				if cl.resDlv != d || cl.caller != c || c.calls[cl.id] != cl || cl.state != callReplied || !slices.Equal(ref.arts, cl.resArts) {
					s.fail("calls", "%s: result delivery of %s disagrees with its call (caller %s, state %d)", where, cl.id, s.names[cl.caller], cl.state)
				}
			} else {
				if cl.reqDlv != d || cl.svc.conn != c || cl.state < callDispatched || !slices.Equal(ref.arts, cl.arts) {
					s.fail("calls", "%s: request delivery of %s disagrees with its call (state %d)", where, cl.id, cl.state)
				}
				svcInflight[cl.svc]++
			}
		}
		for d, cl := range c.caps {
			if d == 0 || uint64(d) >= c.dlvNext || cl.reqDlv != d || cl.svc.conn != c || cl.state != callDispatched {
				s.fail("calls", "%s: capability %s of %s disagrees with its call (state %d)", name, d, cl.id, cl.state)
			}
			if cl.caller == nil {
				want.Calls++
			}
		}
		// Calls as a caller.
		if len(c.calls) > lim.MaxActiveCallsPerClient {
			s.fail("calls", "%s has %d active calls, maxActiveCallsPerClient %d", name, len(c.calls), lim.MaxActiveCallsPerClient)
		}
		want.Calls += len(c.calls)
		want.ActiveCalls += len(c.calls)
		for id, cl := range c.calls {
			if cl.id != id || cl.caller != c {
				s.fail("calls", "%s: call %s is filed as %s with caller %s", name, cl.id, id, s.names[cl.caller])
			}
			switch cl.state {
			case callQueued:
				if n := simCount(cl.svc.queue, cl); n != 1 || k.services[cl.svc.name] != cl.svc {
					s.fail("calls", "%s: queued %s is %d times in the queue of %s %s (registered: %v)",
						name, id, n, cl.svc.name, cl.svc.inc, k.services[cl.svc.name] == cl.svc)
				}
			case callDispatched:
				if cl.svc.conn.caps[cl.reqDlv] != cl {
					s.fail("calls", "%s: dispatched %s has no reply capability on %s: it can never end",
						name, id, s.names[cl.svc.conn])
				}
			case callReplied:
				inResults := simCount(c.results, cl)
				ref, delivered := c.dlvs[cl.resDlv]
				delivered = delivered && ref.call == cl && ref.result
				if inResults+simBtoi(delivered) != 1 {
					s.fail("calls", "%s: replied %s is %d times among results, delivered %v", name, id, inResults, delivered)
				}
			default:
				s.fail("calls", "%s: call %s in state %d", name, id, cl.state)
			}
		}
		for _, cl := range c.results {
			if cl.caller != c || cl.state != callReplied || c.calls[cl.id] != cl {
				s.fail("calls", "%s: admitted result of %s disagrees with its call", name, cl.id)
			}
			root(fmt.Sprintf("%s result of %s", name, cl.id), cl.resArts)
		}
		// Holds.
		for id, h := range c.holds {
			if h.id != id || h.conn != c || uint64(id) > c.holdNext {
				s.fail("holds", "%s: hold %s filed as %s on %s (next %d)", name, h.id, id, s.names[h.conn], c.holdNext)
			}
			a := h.art
			if h.writer {
				// In pool mode an artifact has no id, and is filed
				// nowhere, until the store hands it a slot.
				filed := k.artifacts[a.id] == a || k.pool && a.id == 0 && a.relPath == "" && !a.dead
				if a.writer != h || !filed || (a.state != artStaging && a.state != artSealing) {
					s.fail("holds", "%s: writer %s of %s disagrees with it (state %d)", name, id, a.id, a.state)
				}
				continue
			}
			roots[a]++
		}
		// Subscriptions and their byte budget.
		if len(c.subs) > lim.MaxSubscriptionsPerClient {
			s.fail("subs", "%s has %d subscriptions, maxSubscriptionsPerClient %d", name, len(c.subs), lim.MaxSubscriptionsPerClient)
		}
		queued := 0
		for _, sub := range c.subs {
			subCount++
			if sub.conn != c || sub.closed || k.topics[sub.topic.name] != sub.topic || simCount(sub.topic.subs, sub) != 1 {
				s.fail("subs", "%s: %s disagrees with its connection or topic", name, sub.id)
			}
			limit := sub.maxQueued
			if sub.mode == wire.ModeLatest {
				limit = 1
			}
			if len(sub.queue) > limit {
				s.fail("subs", "%s: %s queues %d, maxQueued %d", name, sub.id, len(sub.queue), sub.maxQueued)
			}
			for _, m := range sub.queue {
				root(fmt.Sprintf("%s queue of %s", name, sub.id), m.arts)
				if sub.mode == wire.ModeBounded {
					queued += m.size
				}
			}
			want.Queued += len(sub.queue)
		}
		if queued != c.queuedBytes {
			s.fail("queued-bytes", "%s: bounded queues hold %d bytes, counted %d", name, queued, c.queuedBytes)
		}
		if uint64(c.queuedBytes) > lim.MaxQueuedBytesPerClient {
			s.fail("queued-bytes", "%s: %d queued bytes, maxQueuedBytesPerClient %d", name, c.queuedBytes, lim.MaxQueuedBytesPerClient)
		}
		want.QueuedBytes += uint64(c.queuedBytes)
		for _, sv := range c.services {
			if k.services[sv.name] != sv || sv.conn != c {
				s.fail("services", "%s lists %s %s, which the registry does not", name, sv.name, sv.inc)
			}
		}
	}
	if subCount != k.subCount {
		s.fail("subs", "connections hold %d subscriptions, counted %d", subCount, k.subCount)
	}
	if k.subCount > lim.MaxSubscriptions {
		s.fail("subs", "%d subscriptions, maxSubscriptions %d", k.subCount, lim.MaxSubscriptions)
	}
	want.Subscriptions = subCount
	if want.PendingHello != k.pending {
		s.fail("conns", "%d connections await hello, counted %d", want.PendingHello, k.pending)
	}
	for id, rec := range k.clients {
		if c := rec.live; c != nil && (k.conns[c.id] != c || c.ident.ClientID != id || !c.helloDone || c.closing) {
			s.fail("conns", "client %s's live connection %s is not live", id, s.names[c])
		}
	}
	// Services.
	if len(k.services) > lim.MaxServices {
		s.fail("services", "%d services, maxServices %d", len(k.services), lim.MaxServices)
	}
	want.Services = len(k.services)
	for name, sv := range k.services {
		if sv.name != name || sv.removed || k.conns[sv.conn.id] != sv.conn || sv.conn.closing || simCount(sv.conn.services, sv) != 1 {
			s.fail("services", "%s %s disagrees with its connection %s", name, sv.inc, s.names[sv.conn])
		}
		if sv.inflight > sv.maxInFlight || len(sv.queue)+sv.inflight > sv.maxQueued+sv.maxInFlight {
			s.fail("inflight", "%s %s: %d queued and %d in flight, maxQueued %d maxInFlight %d",
				name, sv.inc, len(sv.queue), sv.inflight, sv.maxQueued, sv.maxInFlight)
		}
		for _, cl := range sv.queue {
			if cl.state != callQueued || cl.svc != sv || cl.caller == nil || cl.caller.calls[cl.id] != cl {
				s.fail("calls", "%s %s queues %s (state %d), which its caller does not hold", name, sv.inc, cl.id, cl.state)
				continue
			}
			root(fmt.Sprintf("queue of %s", name), cl.arts)
		}
		want.Queued += len(sv.queue)
		if _, ok := svcInflight[sv]; !ok {
			svcInflight[sv] = 0
		}
	}
	for sv, n := range svcInflight {
		if sv.inflight != n {
			s.fail("inflight", "%s %s counts %d in flight; %d request deliveries exist", sv.name, sv.inc, sv.inflight, n)
		}
	}
	for _, c := range k.conns {
		for _, sub := range c.subs {
			if _, ok := subInflight[sub]; !ok {
				subInflight[sub] = 0
			}
		}
	}
	for sub, n := range subInflight {
		if sub.inflight != n || n > sub.maxInFlight {
			s.fail("inflight", "%s counts %d in flight; %d deliveries exist, maxInFlight %d", sub.id, sub.inflight, n, sub.maxInFlight)
		}
	}
	// Topics and retained values.
	if len(k.topics) > lim.MaxTopics {
		s.fail("topics", "%d topics, maxTopics %d", len(k.topics), lim.MaxTopics)
	}
	var retained uint64
	topicSubs := 0
	for name, t := range k.topics {
		if t.name != name {
			s.fail("topics", "topic %s filed as %s", t.name, name)
		}
		topicSubs += len(t.subs)
		for _, sub := range t.subs {
			if sub.topic != t || k.conns[sub.conn.id] != sub.conn || simCount(sub.conn.subs, sub) != 1 {
				s.fail("subs", "topic %s lists %s, which its connection does not", name, sub.id)
			}
		}
		if m := t.latest; m != nil {
			if t.retained != wire.RetainLatest || m.seq > t.seq {
				s.fail("topics", "topic %s (retained %s, seq %d) retains seq %d", name, t.retained, t.seq, m.seq)
			}
			root("retained value of "+name, m.arts)
			retained += artifactBytes(m.arts)
		}
	}
	if topicSubs != k.subCount {
		s.fail("subs", "topics list %d subscriptions, counted %d", topicSubs, k.subCount)
	}
	if retained != k.retainedBytes || retained > lim.MaxRetainedBytes {
		s.fail("retained-bytes", "retained values pin %d bytes, counted %d, maxRetainedBytes %d", retained, k.retainedBytes, lim.MaxRetainedBytes)
	}
	// Artifacts, their roots and the store.
	var store uint64
	if k.pool {
		for _, c := range k.conns {
			for _, h := range c.holds {
				if h.writer && h.art.id == 0 && !h.art.dead {
					store += h.art.size // being staged: reserved, not yet filed
				}
			}
		}
	}
	for id, a := range k.artifacts {
		if a.id != id {
			s.fail("roots", "%s filed as %s", a.id, id)
		}
		store += a.size
		if a.copyReserve {
			store += a.size
			if a.state != artSealing {
				s.fail("store-bytes", "%s reserves a seal copy in state %d", id, a.state)
			}
		}
		want.ArtifactRoots += a.roots
		switch a.state {
		case artSealed:
			want.SealedArtifacts++
			if a.roots <= 0 {
				s.fail("collected", "sealed %s has %d roots and was not collected", id, a.roots)
			}
			if a.roots != roots[a] {
				s.fail("roots", "%s counts %d roots; %d exist", id, a.roots, roots[a])
			}
			if a.writer != nil {
				s.fail("holds", "sealed %s still has a writer", id)
			}
			if s.files[a.relPath] != simSealed {
				s.fail("files", "sealed %s names %q, which is no sealed file", id, a.relPath)
			}
		case artStaging, artSealing:
			if a.roots != 0 || roots[a] != 0 {
				s.fail("roots", "unsealed %s (state %d) has %d roots, %d found", id, a.state, a.roots, roots[a])
			}
			if w := a.writer; w != nil && (k.conns[w.conn.id] != w.conn || w.conn.holds[w.id] != w) {
				s.fail("holds", "writer %s of %s is not held by a live connection", w.id, id)
			}
			if a.state == artStaging && a.writer == nil {
				s.fail("holds", "staging %s has no writer and was not abandoned", id)
			}
			if a.state == artSealing && !a.copyReserve {
				s.fail("store-bytes", "sealing %s reserves no copy", id)
			}
			if a.relPath != "" && s.files[a.relPath] != simStaging {
				s.fail("files", "unsealed %s names %q, which is no staging file", id, a.relPath)
			}
		default:
			s.fail("roots", "%s in state %d", id, a.state)
		}
	}
	for a, n := range roots {
		if k.artifacts[a.id] != a {
			s.fail("roots", "%s is named by %d roots but was collected or abandoned", a.id, n)
		}
	}
	if store != k.storeBytes || store > lim.MaxStoreBytes {
		s.fail("store-bytes", "artifacts and reservations take %d bytes, counted %d, maxStoreBytes %d", store, k.storeBytes, lim.MaxStoreBytes)
	}
	named := map[string]bool{}
	for _, a := range k.artifacts {
		if a.relPath != "" {
			named[a.relPath] = true
		}
	}
	for path, f := range s.files {
		if f.holdsArtifact() && !named[path] {
			s.fail("files", "%s is in the store but no artifact names it", path)
		}
	}
	if s.pool {
		// No slot is free, or handed to a writer, while a root of its
		// current generation exists: every live artifact names its slot at
		// the slot's current generation, in the state the artifact is in.
		for id, a := range k.artifacts {
			if a.relPath == "" {
				continue
			}
			if loc := s.slotLoc(a.relPath); loc.slot != uint64(id) || loc.gen != a.gen {
				s.fail("slots", "%s generation %d names %s, which is at generation %d", id, a.gen, a.relPath, loc.gen)
			}
		}
	}
	if got := simGaugesOf(k.snapshot()); got != want {
		s.fail("snapshot", "snapshot %+v, walk %+v", got, want)
	}
}

// filesInUse counts the store's files that hold an artifact.
func (s *sim) filesInUse() int {
	n := 0
	for _, f := range s.files {
		if f.holdsArtifact() {
			n++
		}
	}
	return n
}

// simGauges are the snapshot's figures the walk recomputes.
type simGauges struct {
	Connections, PendingHello, Services, Topics, Subscriptions, Calls, ActiveCalls int
	Artifacts, SealedArtifacts, ArtifactRoots, Owners, ReplyCapabilities, Queued   int
	StoreBytes, RetainedBytes, QueuedBytes, ConnectionsTotal                       uint64
}

func simGaugesOf(st Stats) simGauges {
	return simGauges{st.Connections, st.PendingHello, st.Services, st.Topics, st.Subscriptions, st.Calls, st.ActiveCalls,
		st.Artifacts, st.SealedArtifacts, st.ArtifactRoots, st.Owners, st.ReplyCapabilities, st.Queued,
		st.StoreBytes, st.RetainedBytes, st.QueuedBytes, st.ConnectionsTotal}
}

func simCount[T comparable](xs []T, x T) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

func simBtoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkWakeups probes every parked writer: one with output it was never
// woken for would wait forever.
func (s *sim) checkWakeups() {
	for _, ss := range s.sessions {
		if !ss.parked {
			continue
		}
		if fr := s.pull(ss, 1); len(fr) > 0 {
			s.fail("wakeup", "%s's writer is parked without a wake-up while %s %s waits", ss.name, fr[0].hdr.Kind, fr[0].hdr.Op)
		}
	}
}

// checkView compares what a quiet client knows of its own resources with
// the core: deliveries, capabilities, calls, subscriptions, services and
// holds. Quiet means every command was answered and the control lane is
// drained, so nothing that changed them is still in flight.
func (s *sim) checkView(ss *simSession) {
	c := ss.c
	if !ss.ready || c.closing || len(ss.pending) > 0 || c.ctrlHead != len(c.control) {
		return
	}
	diff := func(what string, view, core []uint64) {
		slices.Sort(view)
		slices.Sort(core)
		if !slices.Equal(view, core) {
			s.fail("client-view", "%s: the client holds %s %v, the core %v", ss.name, what, view, core)
		}
	}
	var v, k []uint64
	for d := range ss.dlvs {
		v = append(v, uint64(d))
	}
	for d := range c.dlvs {
		k = append(k, uint64(d))
	}
	diff("deliveries", v, k)
	v, k = v[:0], k[:0]
	for d := range ss.caps {
		v = append(v, uint64(d))
	}
	for d := range c.caps {
		k = append(k, uint64(d))
	}
	diff("capabilities", v, k)
	v, k = v[:0], k[:0]
	for id, cl := range ss.calls {
		if cl.accepted {
			v = append(v, uint64(id))
		}
	}
	for id := range c.calls {
		k = append(k, uint64(id))
	}
	diff("calls", v, k)
	v, k = v[:0], k[:0]
	for id := range ss.subs {
		v = append(v, uint64(id))
	}
	for _, sub := range c.subs {
		k = append(k, uint64(sub.id))
	}
	diff("subscriptions", v, k)
	v, k = v[:0], k[:0]
	for _, inc := range ss.services {
		v = append(v, uint64(inc))
	}
	for _, sv := range c.services {
		k = append(k, uint64(sv.inc))
	}
	diff("services", v, k)
	v, k = v[:0], k[:0]
	for own, h := range ss.holds {
		v = append(v, own<<1|uint64(simBtoi(h.writer)))
	}
	for id, h := range c.holds {
		k = append(k, uint64(id)<<1|uint64(simBtoi(h.writer)))
	}
	diff("holds (own<<1|writer)", v, k)
}

// ---- teardown -------------------------------------------------------------

// teardown disconnects everyone (half the seeds through shutdown), lets the
// outstanding I/O finish, clears the router-owned topics through an admin
// connection and checks that nothing is left.
func (s *sim) teardown() {
	s.step++
	if !s.scripted && s.rng.IntN(2) == 0 {
		s.logf("router shuts down")
		s.stepCore(input{kind: inShutdown})
		s.afterStep()
		for len(s.sessions) > 0 {
			s.step++
			ss := s.sessions[0]
			for !ss.c.closeWritten {
				if s.pullOnce(ss) == 0 && !ss.c.closeWritten {
					s.fail("teardown", "%s: the writer has nothing to write but never wrote connection.closing", ss.name)
					break
				}
			}
			s.logf("%s writer finishes", ss.name)
			s.dropSession(ss)
			s.afterStep()
		}
	} else {
		for len(s.sessions) > 0 {
			s.step++
			if s.scripted {
				ss := s.sessions[0]
				s.logf("%s transport fails", ss.name)
				s.dropSession(ss)
			} else if len(s.effects) > 0 && s.rng.IntN(3) == 0 {
				s.completeEffect()
			} else {
				ss := s.sessions[s.rng.IntN(len(s.sessions))]
				s.logf("%s transport fails", ss.name)
				s.dropSession(ss)
			}
			s.afterStep()
		}
	}
	for len(s.effects) > 0 {
		s.step++
		if s.scripted {
			s.finishIO(0, simIOOK)
		} else {
			s.completeEffect()
		}
		s.afterStep()
	}
	// Only router-owned state may remain: topics and their retained values.
	k := s.k
	if len(k.conns) != 0 || k.pending != 0 || len(k.services) != 0 || k.subCount != 0 {
		s.fail("teardown", "after every disconnect: %d connections, %d pending, %d services, %d subscriptions",
			len(k.conns), k.pending, len(k.services), k.subCount)
	}
	for id, rec := range k.clients {
		if rec.live != nil {
			s.fail("teardown", "client %s still has a live connection", id)
		}
	}
	retainedRoots := map[*artifact]int{}
	for _, t := range k.topics {
		if t.latest != nil {
			for _, a := range t.latest.arts {
				retainedRoots[a]++
			}
		}
	}
	for id, a := range k.artifacts {
		if a.state != artSealed || a.roots != retainedRoots[a] {
			s.fail("teardown", "%s (state %d, %d roots) outlives every connection; retained values root it %d times",
				id, a.state, a.roots, retainedRoots[a])
		}
	}
	// An admin connection deletes every topic, which drops the retained roots.
	s.step++
	admin := &simClient{id: "admin", speed: 1}
	ss := &simSession{cl: admin, bound: ""}
	if !s.open {
		ss.bound = "admin"
	}
	c, err := s.k.accept(ss.bound)
	if err != nil {
		s.fail("teardown", "admin accept: %v", err)
		return
	}
	s.attach(ss, c)
	s.send(ss, wire.OpHello, &wire.Hello{ClientID: "admin", ClientIncarnation: "a1", SupportedMajors: []uint32{1}}, nil, &simCmd{expectOK: true})
	for _, name := range slices.Sorted(maps.Keys(k.topics)) {
		s.logf("%s > topic.delete %s", ss.name, name)
		s.send(ss, wire.OpTopicDelete, &wire.TopicName{Name: name}, nil, &simCmd{expectOK: true})
		for s.pullOnce(ss) > 0 {
		}
		s.afterStep()
	}
	s.step++
	s.logf("%s transport fails", ss.name)
	s.dropSession(ss)
	s.afterStep()

	st := k.snapshot()
	if len(k.conns)+k.pending+len(k.services)+len(k.topics)+k.subCount+len(k.artifacts) != 0 ||
		k.storeBytes != 0 || k.retainedBytes != 0 || s.filesInUse() != 0 || len(k.effects) != 0 || len(k.dirty) != 0 {
		s.fail("teardown", "not empty at the end: %+v, store files %v", st, slices.Sorted(maps.Keys(s.files)))
	}
	if st.Calls+st.ActiveCalls+st.ArtifactRoots+st.Owners+st.ReplyCapabilities+st.Queued != 0 || st.QueuedBytes != 0 {
		s.fail("teardown", "gauges not zero at the end: %+v", st)
	}
	s.logf("teardown complete: %d connections in all, %d collected", st.ConnectionsTotal, st.Collected)
}

// ---- scenarios ------------------------------------------------------------

var simRewrite = flag.Bool("sim.rewrite", false, "rewrite the expected output of the testdata/sim scenarios")

// TestSimScenarios runs the scripts in testdata/sim/*.txt through the same
// simulator. A script is a list of blocks:
//
//	# comments
//	<command>
//	----
//	<what the command made happen, one trace line each>
//	<blank line>
//
// Commands name clients; the trace shows replies, deliveries and notices
// when a client's writer is pulled, store I/O, closings and unlinks.
// Invariants are checked after every command; a broken one ends the
// script. -sim.rewrite regenerates the expected output.
//
//	limits <hello name>=<n>...     before the first connect
//	connect <client>...            accept, say hello and read the HelloOK
//	pull <client>                  the writer takes one batch; the client reads it
//	drop|close <client>            transport gone; the router closes it
//	finish <client>                the writer wrote connection.closing and drops it
//	register <client> <svc> [q=n] [f=n]   unregister <client> <svc>
//	call <client> <svc> [size=n] [att=<ref>]...
//	reply <client> <dlv> [att=<ref>]...   respond-release <client> <dlv>
//	cancel <client> <call>
//	declare <client> <topic> [latest]     clear|delete <client> <topic>
//	subscribe <client> <topic> latest|bounded [q=n] [f=n] [replay]
//	unsubscribe <client> <sub>
//	publish <client> <topic> [size=n] [att=<ref>]...
//	consume <client> <dlv>...
//	allocate <client> <bytes>      seal <client> <own>
//	open|retain <client> <ref>     release <client> <own>...
//	io [fail|mismatch]             finish the oldest staging or seal
//	shutdown
//	end                            everyone leaves; nothing may remain
//
// A <ref> is own-<n> (a sealed hold) or dlv-<n>[.<i>] (the i-th attachment
// of a delivery).
func TestSimScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/sim/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			simRunScenario(t, file)
		})
	}
}

type simBlock struct {
	pre  []string // comments and blank lines before the command
	line int
	cmd  string
	want string
}

func simParseScenario(text string) ([]simBlock, []string, error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var blocks []simBlock
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := simBlock{pre: pre, line: i + 1, cmd: l}
		pre = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			return nil, nil, fmt.Errorf("line %d: %q is not followed by ----", i+1, l)
		}
		i += 2
		var want []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		b.want = strings.Join(want, "\n")
		blocks = append(blocks, b)
	}
	return blocks, pre, nil
}

func simRunScenario(t *testing.T, file string) {
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blocks, tail, err := simParseScenario(string(text))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	sc := newSimScenario()
	broken := false
	for i := range blocks {
		b := &blocks[i]
		got := "(not run: an invariant broke above)"
		if !broken {
			got, broken = sc.run(b.cmd)
		}
		if *simRewrite {
			b.want = got
		} else if got != b.want {
			t.Errorf("%s:%d: %s\nwant:\n%s\ngot:\n%s", file, b.line, b.cmd, b.want, got)
		}
	}
	if !*simRewrite {
		return
	}
	var out strings.Builder
	for _, b := range blocks {
		for _, p := range b.pre {
			out.WriteString(p + "\n")
		}
		out.WriteString(b.cmd + "\n----\n")
		if b.want != "" {
			out.WriteString(b.want + "\n")
		}
		out.WriteString("\n")
	}
	for _, p := range tail {
		out.WriteString(p + "\n")
	}
	if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// simScenario drives a sim by command instead of by seed.
type simScenario struct {
	s     *sim
	lines []string
}

func newSimScenario() *simScenario {
	sc := &simScenario{}
	s := &sim{seed: 1, rng: rand.New(rand.NewPCG(1, 1)), lim: wire.DefaultLimits(), open: true, scripted: true,
		skipped: map[string]int{}, byConn: map[*conn]*simSession{}, names: map[*conn]string{},
		files: map[string]simFile{}, svcIncs: map[string]wire.ServiceInc{}, outcomes: map[string]int{}, full: &sc.lines}
	s.k = newCore(s.lim, OpenPolicy(), wire.RouterID(0x51), wire.StoreID(0x51))
	s.k.hasStore = true
	sc.s = s
	return sc
}

// run executes one command and returns the trace it produced, and whether
// an invariant broke.
func (sc *simScenario) run(line string) (out string, broken bool) {
	s := sc.s
	start := len(sc.lines)
	func() {
		defer func() {
			if r := recover(); r != nil {
				f, ok := r.(simFailure)
				if !ok {
					f = simFailure{check: "panic", msg: fmt.Sprint(r)}
				}
				s.logf("invariant %q broken: %s", f.check, f.msg)
				broken = true
			}
		}()
		s.step++
		if err := sc.exec(strings.Fields(line)); err != nil {
			s.logf("error: %v", err)
			return
		}
		s.afterStep()
	}()
	lines := sc.lines[start:]
	for i, l := range lines {
		_, lines[i], _ = strings.Cut(strings.TrimLeft(l, " "), " ")
	}
	return strings.Join(lines, "\n"), broken
}

func (sc *simScenario) exec(args []string) error {
	s := sc.s
	if len(args) == 0 {
		return nil
	}
	cmd, args := args[0], args[1:]
	var pos, atts []string
	opts := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			if k == "att" {
				atts = append(atts, v)
			} else {
				opts[k] = v
			}
			continue
		}
		pos = append(pos, a)
	}
	num := func(key string, dflt int) int {
		if v, ok := opts[key]; ok {
			n, err := strconv.Atoi(v)
			if err == nil {
				return n
			}
		}
		return dflt
	}
	switch cmd {
	case "limits":
		if s.accepted > 0 {
			return errors.New("limits must come before the first connect")
		}
		for _, k := range slices.Sorted(maps.Keys(opts)) {
			n, err := strconv.ParseUint(opts[k], 10, 64)
			if err != nil {
				return err
			}
			if err := s.lim.Set(k, n); err != nil {
				return err
			}
		}
		if err := s.lim.Validate(); err != nil {
			return err
		}
		s.k = newCore(s.lim, OpenPolicy(), s.k.routerID, s.k.storeID)
		s.k.hasStore = true
		return nil
	case "connect":
		for _, name := range pos {
			cl := sc.client(name)
			c, err := s.k.accept("")
			if err != nil {
				s.logf("accept refused: %v", err)
				continue
			}
			ss := &simSession{cl: cl}
			s.attach(ss, c)
			cl.incs++
			ss.hello = true
			s.send(ss, wire.OpHello, &wire.Hello{ClientID: cl.id, ClientIncarnation: fmt.Sprintf("i%d", cl.incs),
				SupportedMajors: []uint32{1}}, nil, &simCmd{expectOK: true})
			s.afterStep()
			s.pullOnce(ss)
		}
		return nil
	case "io":
		if len(s.effects) == 0 {
			return errors.New("no store I/O is pending")
		}
		outcome := simIOOK
		if len(pos) > 0 {
			outcome = map[string]simIO{"fail": simIOFails, "mismatch": simIOMismatch}[pos[0]]
		}
		s.finishIO(0, outcome)
		return nil
	case "shutdown":
		s.logf("router shuts down")
		s.stepCore(input{kind: inShutdown})
		return nil
	case "end":
		s.teardown()
		return nil
	}
	if len(pos) == 0 {
		return fmt.Errorf("%s: which client?", cmd)
	}
	cl := sc.client(pos[0])
	ss := cl.sess
	if ss == nil {
		return fmt.Errorf("%s has no connection", cl.id)
	}
	pos = pos[1:]
	arg := func(i int) string {
		if i < len(pos) {
			return pos[i]
		}
		return ""
	}
	serial := func(f wire.Family, i int) uint64 {
		n, _ := wire.ParseSerialBytes(f, []byte(arg(i)))
		return n
	}
	var attachments []wire.Attachment
	for i, spec := range atts {
		p, err := sc.ref(ss, spec)
		if err != nil {
			return err
		}
		attachments = append(attachments, wire.Attachment{Name: fmt.Sprintf("f%d", i), Ref: p.Ref, OwnerID: p.OwnerID})
	}
	payload := wire.RawJSON(`{}`)
	if n := num("size", 0); n > 0 {
		payload = wire.RawJSON(`{"p":"` + strings.Repeat("x", n) + `"}`)
	}
	switch cmd {
	case "pull":
		s.pullOnce(ss)
	case "drop":
		s.logf("%s transport fails", ss.name)
		s.dropSession(ss)
	case "finish":
		s.logf("%s writer finishes", ss.name)
		s.dropSession(ss)
	case "close":
		s.stepCore(input{kind: inClose, conn: ss.c, code: wire.ErrBackpressure, msg: "closed by the scenario"})
	case "register":
		s.send(ss, wire.OpServiceRegister, &wire.Register{Name: arg(0), MaxQueued: uint32(num("q", 1)),
			MaxInFlight: uint32(num("f", 1))}, nil, &simCmd{name: arg(0)})
	case "unregister":
		inc := ss.services[arg(0)]
		s.send(ss, wire.OpServiceUnregister, &wire.Unregister{Name: arg(0), ServiceIncarnation: inc}, nil,
			&simCmd{name: arg(0), inc: inc})
	case "call":
		ss.callNext++
		ss.calls[ss.callNext] = &simCall{target: arg(0)}
		s.send(ss, wire.OpRPCCall, &wire.Call{CallID: ss.callNext, Target: arg(0), Method: "m", Payload: payload},
			attachments, &simCmd{call: ss.callNext, name: arg(0)})
	case "reply", "respond-release":
		dlv := wire.DeliveryID(serial(wire.FamDelivery, 0))
		call := ss.caps[dlv]
		if cmd == "reply" {
			s.send(ss, wire.OpRPCReply, &wire.Reply{CallID: call, RequestDeliveryID: dlv, Outcome: payload}, attachments,
				&simCmd{dlv: dlv, call: call})
		} else {
			s.send(ss, wire.OpRPCResponderRelease, &wire.ResponderRelease{CallID: call, RequestDeliveryID: dlv}, nil,
				&simCmd{dlv: dlv, call: call})
		}
	case "cancel":
		id := wire.CallID(serial(wire.FamCall, 0))
		s.send(ss, wire.OpRPCCancel, &wire.Cancel{CallID: id}, nil, &simCmd{call: id})
	case "declare":
		r := wire.RetainNone
		if arg(1) == "latest" {
			r = wire.RetainLatest
		}
		s.send(ss, wire.OpTopicDeclare, &wire.Declare{Name: arg(0), Retained: r}, nil, &simCmd{topic: arg(0)})
	case "clear", "delete":
		op := map[string]wire.Op{"clear": wire.OpTopicClear, "delete": wire.OpTopicDelete}[cmd]
		s.send(ss, op, &wire.TopicName{Name: arg(0)}, nil, &simCmd{topic: arg(0)})
	case "subscribe":
		b := &wire.Subscribe{Topic: arg(0), Mode: wire.ModeBounded, MaxQueued: uint32(num("q", 1)),
			MaxInFlight: uint32(num("f", 1)), ReplayLatest: slices.Contains(pos, "replay")}
		if arg(1) == "latest" {
			b.Mode = wire.ModeLatest
		}
		s.send(ss, wire.OpSubscribe, b, nil, &simCmd{topic: b.Topic, mode: b.Mode})
	case "unsubscribe":
		id := wire.SubID(serial(wire.FamSub, 0))
		s.send(ss, wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: id}, nil, &simCmd{sub: id})
	case "publish":
		s.send(ss, wire.OpPublish, &wire.Publish{Topic: arg(0), Payload: payload}, attachments, &simCmd{topic: arg(0)})
	case "consume":
		var ids []wire.DeliveryID
		for i := range pos {
			d := wire.DeliveryID(serial(wire.FamDelivery, i))
			ids = append(ids, d)
			if dv := ss.dlvs[d]; dv != nil {
				dv.consuming++
			}
		}
		s.send(ss, wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: ids}, nil, &simCmd{dlvs: ids})
	case "allocate":
		size, _ := strconv.ParseUint(arg(0), 10, 64)
		ctype := "application/octet-stream"
		s.send(ss, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: size, ContentType: ctype}, nil,
			&simCmd{size: size, ctype: ctype})
	case "seal":
		own := serial(wire.FamOwn, 0)
		h := ss.holds[own]
		if h == nil || !h.writer {
			return fmt.Errorf("%s is no writer of %s", arg(0), cl.id)
		}
		h.seals++
		gen := uint64(num("gen", 1))
		s.send(ss, wire.OpArtifactSeal, &wire.Seal{ArtifactID: h.art, Generation: gen,
			OwnerID: wire.HoldOwner(wire.HoldID(own))}, nil, &simCmd{own: own, gen: gen})
	case "open", "retain":
		p, err := sc.ref(ss, arg(0))
		if err != nil {
			return err
		}
		op := map[string]wire.Op{"open": wire.OpArtifactOpen, "retain": wire.OpArtifactRetain}[cmd]
		s.send(ss, op, &p, nil, &simCmd{ref: p.Ref, owners: []wire.OwnerID{p.OwnerID}})
	case "release":
		var ids []wire.OwnerID
		for i := range pos {
			own := serial(wire.FamOwn, i)
			ids = append(ids, wire.HoldOwner(wire.HoldID(own)))
			if h := ss.holds[own]; h != nil {
				h.releasing++
			}
		}
		s.send(ss, wire.OpArtifactRelease, &wire.Release{OwnerIDs: ids}, nil, &simCmd{owners: ids})
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}

func (sc *simScenario) client(name string) *simClient {
	for _, cl := range sc.s.clients {
		if cl.id == name {
			return cl
		}
	}
	cl := &simClient{id: name, speed: 1}
	sc.s.clients = append(sc.s.clients, cl)
	return cl
}

// ref resolves own-<n> or dlv-<n>[.<i>] to what the client holds.
func (sc *simScenario) ref(ss *simSession, spec string) (wire.RefOwner, error) {
	if n, ok := wire.ParseSerialBytes(wire.FamOwn, []byte(spec)); ok {
		if h := ss.holds[n]; h != nil && !h.writer {
			return wire.RefOwner{Ref: h.ref, OwnerID: wire.HoldOwner(wire.HoldID(n))}, nil
		}
		return wire.RefOwner{}, fmt.Errorf("%s holds no sealed %s", ss.name, spec)
	}
	d, idx, _ := strings.Cut(spec, ".")
	if n, ok := wire.ParseSerialBytes(wire.FamDelivery, []byte(d)); ok {
		i, _ := strconv.Atoi(idx)
		if dv := ss.dlvs[wire.DeliveryID(n)]; dv != nil && i < len(dv.atts) {
			return wire.RefOwner{Ref: dv.atts[i].Ref, OwnerID: wire.DeliveryOwner(wire.DeliveryID(n))}, nil
		}
	}
	return wire.RefOwner{}, fmt.Errorf("%s holds no %s", ss.name, spec)
}
