package router

// The simulation's driver: the sim, its step loop (randomStep, afterStep),
// the transports and the teardown. See sim_test.go.

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/flybus/flybus/fastpath"
	"github.com/flybus/flybus/wire"
)

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
	coreCfg  coreConfig
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
	freeList map[uint64][]string // free slots by size, most recently freed last
	// views are the generations programs may still map: everything a
	// session owned when its connection ended (its program never closes a
	// view), and what live sessions own now. No slot may be reused under one.
	views    []simView
	accepted uint64
	svcIncs  map[string]wire.ServiceInc // last incarnation any client saw registered
	stale    []wire.ArtifactRef         // refs seen once, maybe collected since

	dec      wire.Decoder // the connection reader's decoder
	env      wire.Envelope
	out      []byte
	frameBuf []byte
	outcomes map[string]int
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
	l.MaxControlFrames = 4 + rng.IntN(12) // below fastpath.WriteBatch, see writerPulls
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
	s.coreCfg = coreConfig{limits: l, policy: policy, routerID: 0x51, storeID: 0x51, hasStore: true}
	s.k = newCore(s.coreCfg)
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

// simPickSome returns 1+rng.IntN(n) random keys of m, repeats allowed, or
// none when m is empty; sorted first, like simPick.
func simPickSome[K cmp.Ordered, V any](rng *rand.Rand, m map[K]V, n int) []K {
	keys := slices.Sorted(maps.Keys(m))
	var out []K
	for range 1 + rng.IntN(n) {
		if len(keys) > 0 {
			out = append(out, keys[rng.IntN(len(keys))])
		}
	}
	return out
}

// simWeighted returns the index of one of items, each chosen with a chance
// proportional to its weight (the weights are positive).
func simWeighted[T any](rng *rand.Rand, items []T, weight func(T) int) int {
	total := 0
	for _, x := range items {
		total += weight(x)
	}
	r := rng.IntN(total)
	i := 0
	for r >= weight(items[i]) {
		r -= weight(items[i])
		i++
	}
	return i
}

// simStepKind is one kind of random step; run returns false when it does
// not apply.
type simStepKind struct {
	weight int // per mille
	run    func(*sim) bool
}

var simStepKinds = [...]simStepKind{
	{30, (*sim).connect}, {40, (*sim).sayHello}, {450, (*sim).command}, {310, (*sim).writerPulls},
	{90, (*sim).completeEffect}, {65, (*sim).writerFinishes}, {12, (*sim).transportFails}, {3, (*sim).routerCloses},
}

// randomStep runs one operation chosen by weight among those that apply.
func (s *sim) randomStep() {
	for {
		k := simStepKinds[simWeighted(s.rng, simStepKinds[:], func(k simStepKind) int { return k.weight })]
		if k.run(s) {
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
			// Collection recycles the slot, or retires it when a connection
			// that ended owned it: the generation named must be the slot's
			// current one, in use.
			if !s.files[e.relPath].holdsArtifact() || s.slotGen[e.relPath] != e.gen {
				s.fail("slots", "recycle of %q generation %d, which is not the generation in use (%d, state %d)",
					e.relPath, e.gen, s.slotGen[e.relPath], s.files[e.relPath])
			}
			if e.retire {
				delete(s.files, e.relPath)
				unlinked = append(unlinked, fmt.Sprintf("%s@%d(retired)", e.relPath, e.gen))
				continue
			}
			s.files[e.relPath] = simFree
			size := s.slotSize[e.relPath]
			s.freeList[size] = append(s.freeList[size], e.relPath)
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
		// In the order the core collected them: it releases in an order
		// its inputs decide, so a seed replays this line exactly.
		s.logf("store unlinks %s", strings.Join(unlinked, " "))
	}
	for _, ss := range s.sessions {
		if ss.c.closing && !ss.closing {
			s.keepViews(ss)
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
	s.checkViews()
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
	c, err := s.accept(ss.bound)
	if err != nil {
		var be *wire.BusError
		switch {
		case !errors.As(err, &be):
			s.fail("conns", "accept: %v", err)
		case ss.bound == "" && !s.open:
			if be.Code != wire.ErrNotAuthorized {
				s.fail("conns", "unbound accept under a closed policy: %v", err)
			}
		case be.Code != wire.ErrQuotaExceeded || len(s.k.conns)-s.k.closingConns < s.lim.MaxClients:
			s.fail("conns", "accept refused with %d of %d connections (%d closing): %v", len(s.k.conns), s.lim.MaxClients, s.k.closingConns, err)
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
		// Most sessions ask for the extensions, some for none (a 1.0
		// client), some for one and a name this router does not know.
		h.Extensions = [][]string{nil, {wire.ExtAwaitTopic}, {"x-later", wire.ExtPresence},
			{wire.ExtAwaitTopic, wire.ExtPresence}, {wire.ExtPresence, wire.ExtAwaitTopic},
			{wire.ExtQuietConsume}, {wire.ExtAwaitTopic, wire.ExtPresence, wire.ExtQuietConsume}}[s.rng.IntN(7)]
		ss.asked = h.Extensions
		s.logf("%s > bus.hello %s %s extensions=%v", ss.name, h.ClientID, h.ClientIncarnation, h.Extensions)
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
	for _, ss := range s.sessions {
		if !ss.parked {
			cands = append(cands, ss)
		}
	}
	if len(cands) == 0 {
		return false
	}
	s.pullOnce(cands[simWeighted(s.rng, cands, (*simSession).speed)])
	return true
}

// pullOnce takes one batch off the connection's lanes, the shell's
// fastpath.WriteBatch, and has the client read it. That batch drains any control
// lane these limits allow at once, so a client never sees part of a burst
// of notices whose order the core leaves to map iteration.
func (s *sim) pullOnce(ss *simSession) int {
	frames := s.pull(ss, fastpath.WriteBatch)
	if len(frames) == 0 {
		s.logf("%s writer parks", ss.name)
	}
	for i := range frames {
		s.receive(ss, &frames[i])
	}
	if len(frames) < fastpath.WriteBatch {
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
	what := "transport fails"
	if s.rng.IntN(2) == 0 {
		// The writer's write failed: it finishes, dropping outside step.
		what += " (writer)"
	}
	s.logf("%s %s", ss.name, what)
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
	if !ss.closing {
		s.keepViews(ss) // what it owned as its connection ended
	}
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
	c, err := s.accept(ss.bound)
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

// accept registers a transport through the core's step, as the router's
// serve does.
func (s *sim) accept(bound string) (*conn, error) {
	rd := s.k.step(input{kind: inAccept, bound: bound})
	return rd.accepted, rd.acceptErr
}
