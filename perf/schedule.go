package perf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// setupTimeout bounds connecting, declaring, subscribing and registering.
const setupTimeout = 15 * time.Second

// scheduleEnv is what a schedule needs from the run.
type scheduleEnv struct {
	host      routerHost
	sock      string
	storeRoot string
	fill      Fill
	path      producerPath
	seconds   float64
	index     int    // the schedule's number in the run, for unique names
	frame     []byte // the producer's source image (the schedule stamps it)
	progress  *progress
	profile   string // CPU profile file, or ""
	natsUs    *float64
	// samplingCPU is what the stats sampling alone costs the router, in
	// cores, taken off its CPU for the net figures.
	samplingCPU float64
	// label names the schedule in progress lines; empty: its agent count.
	label string
	// side adds the isolation passes' side traffic; nil for none.
	side *sidePlan
	// recorder adds a `flybus record` of the frame topic; nil for none.
	recorder *recorderPlan
}

// name is how progress lines call the schedule.
func (e scheduleEnv) name(agents int) string {
	if e.label != "" {
		return e.label
	}
	return agentsName(agents)
}

// schedule is one agent count's run: the clients, their loops and the
// figures they record.
type schedule struct {
	env    scheduleEnv
	agents int
	out    *Schedule
	errs   ErrorLog

	topic    string
	producer *client.Client
	cons     []*consumer
	agts     []*agent
	clients  []*client.Client
	fills    *fillStarts  // when each frame's fill began, for the frame latency
	side     *sideClients // nil without side traffic

	mu            sync.Mutex // guards out.Frames, out.Late and the fields below
	lastPublished int        // sequence number of the last frame published
	lastClose     time.Time  // when the producer let go of its last frame
	agentLast     []int      // per agent, the last sequence a call was admitted for
}

func runSchedule(ctx context.Context, env scheduleEnv, agents int) *Schedule {
	planned := frames(env.seconds)
	s := &schedule{env: env, agents: agents, topic: fmt.Sprintf("perf.frames.s%d", env.index),
		agentLast: make([]int, agents), fills: newFillStarts(planned)}
	s.out = newFigures(agents, planned, env.natsUs)
	defer func() {
		s.out.ErrorCount, s.out.Errors = s.errs.Summary()
	}()

	loops, cancelLoops := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancelLoops()
		for _, c := range s.clients {
			c.Close()
		}
		wg.Wait()
	}()
	setup, cancelSetup := context.WithTimeout(ctx, setupTimeout)
	err := s.connect(setup)
	cancelSetup()
	if err != nil {
		s.errs.Add("setup", err)
		return s.out
	}
	// After the topic's declaration and before the first frame; stopped
	// after the drain, before the clients close (defers run last first).
	if env.recorder != nil {
		rec, err := s.startRecorder(ctx)
		if err != nil {
			s.errs.Add("recorder", err)
			return s.out
		}
		defer s.stopRecorder(rec)
	}
	for _, c := range s.cons {
		wg.Go(func() { s.consume(loops, c) })
	}
	for _, a := range s.agts {
		wg.Go(func() { s.serve(loops, a) })
	}
	s.measure(ctx, planned)
	return s.out
}

// newFigures makes a schedule's figures with room for every sample.
func newFigures(agents, planned int, natsUs *float64) *Schedule {
	calls := agents * planned
	byAgent := make([]*Hist, agents)
	for i := range byAgent {
		byAgent[i] = newHist(planned)
	}
	return &Schedule{Agents: agents, Planned: planned, NATSRouterCPUPerFrameUs: natsUs,
		RPC: newHist(calls), RPCNet: newHist(calls), AgentAccess: newHist(calls), RPCByAgent: byAgent,
		Allocate: newHist(planned), Fill: newHist(planned), Seal: newHist(planned), Publish: newHist(planned),
		CriticalPath: newHist(planned), FrameLatency: newHist((Consumers - 1) * planned),
		DeliveryFast: newHist((Consumers - 1) * planned), DeliverySlow: newHist(planned),
		Access: newHist(Consumers * planned), View: newHist(Consumers * planned)}
}

// connect opens every client: one producer, three consumers, the agents.
func (s *schedule) connect(ctx context.Context) error {
	dial := func(role string) (*client.Client, error) {
		cfg := client.Config{ClientID: fmt.Sprintf("perf-s%d-%s", s.env.index, role), StoreRoot: s.env.storeRoot}
		if role == "producer" {
			cfg.AllocateAhead = s.env.path.allocateAhead
		} else {
			cfg.OpenAhead = s.env.path.openAhead // consumers and agents view every frame
		}
		c, err := client.ConnectUnix(ctx, s.env.sock, cfg)
		if err == nil {
			s.clients = append(s.clients, c)
		}
		return c, err
	}
	var err error
	if s.producer, err = dial("producer"); err != nil {
		return err
	}
	if _, err := s.producer.DeclareTopic(ctx, s.topic, wire.RetainNone); err != nil {
		return fmt.Errorf("declare %s: %w", s.topic, err)
	}
	for i := range Consumers {
		c, err := dial(fmt.Sprintf("consumer%d", i+1))
		if err != nil {
			return err
		}
		sub, err := c.Subscribe(ctx, s.topic, client.InFlight(1))
		if err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
		s.cons = append(s.cons, &consumer{c: c, sub: sub, slow: i == Consumers-1})
	}
	for i := range s.agents {
		c, err := dial(fmt.Sprintf("agent%d", i+1))
		if err != nil {
			return err
		}
		name := fmt.Sprintf("perf.agent.s%d.a%d", s.env.index, i+1)
		svc, err := c.Register(ctx, name)
		if err != nil {
			return fmt.Errorf("register %s: %w", name, err)
		}
		s.agts = append(s.agts, &agent{svc: svc, name: name})
	}
	if s.env.side != nil {
		return s.connectSide(ctx, dial)
	}
	return nil
}

// measure runs the producer between the before and after readings of
// the router's CPU, memory and counters, then waits for the drain.
func (s *schedule) measure(ctx context.Context, planned int) {
	host, out := s.env.host, s.out
	out.RouterCPU.What, out.HarnessCPU.What, out.Memory.What = host.what(), "harness process", host.what()
	out.Memory.PeakReset = host.resetPeak() == nil
	memBefore, memErr := host.memory()
	stats0, err := host.stats().sample(ctx)
	if err != nil {
		s.errs.Add("stats before", err)
	}
	cons0 := s.consumerStats()
	d0, d0Err := host.stats().details(ctx)
	r0, rErr := host.cpu()
	h0, hErr := SelfCPU()
	start := time.Now()

	smp := startSampler(ctx, host.stats())
	var waitProfile func() error
	if s.env.profile != "" {
		secs := max(1, int(s.env.seconds+0.999))
		if waitProfile, err = host.profile(ctx, secs, s.env.profile); err != nil {
			s.errs.Add("cpu profile", err)
		} else {
			out.Profile = s.env.profile
		}
	}
	s.env.progress.set(func() string {
		s.mu.Lock()
		produced, late := s.out.Frames, s.out.Late
		s.mu.Unlock()
		cur := smp.current()
		return fmt.Sprintf("%s: frame %d/%d, late %d, roots %d, store %s, errors %d",
			s.env.name(s.agents), produced, planned, late, cur.ArtifactRoots, mb(cur.StoreBytes), s.errs.Count())
	})

	stopSide := s.startSide(ctx)
	s.produce(ctx, planned)
	stopSide()
	// The operator's view as the last frame went out, before the drain.
	if d, err := host.stats().details(ctx); err == nil {
		out.Subscriptions = d.Subscriptions
		if d0Err == nil {
			out.Latencies = &router.Latencies{Admission: d.Latencies.Admission.Since(d0.Latencies.Admission),
				LaneWait: d.Latencies.LaneWait.Since(d0.Latencies.LaneWait)}
		}
	} else {
		s.errs.Add("details", err)
	}
	live, drained := s.drain(ctx)
	if !drained {
		// Read what is left even when interrupted, so that a leak shows.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if x, err := host.stats().sample(rctx); err == nil {
			live = x
		}
		cancel()
	}

	r1, rErr1 := host.cpu()
	h1, hErr1 := SelfCPU()
	wall := time.Since(start)
	memAfter, memErr1 := host.memory()
	peak, n, serrs, lastErr := smp.stop()
	if waitProfile != nil {
		if err := waitProfile(); err != nil {
			s.errs.Add("cpu profile", err)
			out.Profile = ""
		}
	}

	out.WallNs = wall
	out.Drained = drained
	out.RouterCPU = cpuFigure(out.RouterCPU.What, r1-r0, wall, out.Frames, s.env.samplingCPU, errors.Join(rErr, rErr1))
	out.HarnessCPU = cpuFigure(out.HarnessCPU.What, h1-h0, wall, out.Frames, 0, errors.Join(hErr, hErr1))
	out.Memory.Before, out.Memory.After = memBefore, memAfter
	if err := errors.Join(memErr, memErr1); err != nil {
		out.Memory.Err = err.Error()
	}
	out.Seals, out.LeaseSeals, out.CopySeals = delta(live.Seals, stats0.Seals), delta(live.LeaseSeals, stats0.LeaseSeals),
		delta(live.CopySeals, stats0.CopySeals)
	out.Publications, out.Collected = delta(live.Publications, stats0.Publications), delta(live.Collected, stats0.Collected)
	out.PoolHits, out.PoolMisses = delta(live.PoolHits, stats0.PoolHits), delta(live.PoolMisses, stats0.PoolMisses)
	out.Refusals = delta(live.Refusals, stats0.Refusals)
	out.StoreOpens, out.StoreFallocates = delta(live.StoreOpens, stats0.StoreOpens), delta(live.StoreFallocates, stats0.StoreFallocates)
	out.StoreUnlinks = delta(live.StoreUnlinks, stats0.StoreUnlinks)
	cons1 := s.consumerStats()
	out.ConsumerOpens = cons1.ArtifactOpens - cons0.ArtifactOpens
	out.ConsumerMaps, out.ConsumerUnmaps = cons1.Maps-cons0.Maps, cons1.Unmaps-cons0.Unmaps
	out.StoreBytesPeak, out.StoreBytesLive = max(peak.StoreBytes, live.StoreBytes), live.StoreBytes
	out.RootsPeak, out.RootsLive = max(peak.ArtifactRoots, live.ArtifactRoots), live.ArtifactRoots
	out.QueuedPeak, out.QueuedLive = max(peak.Queued, live.Queued), live.Queued
	out.ArtifactsPeak, out.ArtifactsLive = max(peak.Artifacts, live.Artifacts), live.Artifacts
	out.StatsSamples, out.StatsErrors = n, serrs
	if lastErr != nil {
		s.errs.Add("stats sampling", lastErr)
	}
	for _, c := range s.cons {
		c.mu.Lock()
		out.Consumers = append(out.Consumers, ConsumerFigures{Slow: c.slow, Seen: c.seen, Coalesced: c.coalesced})
		c.mu.Unlock()
	}
}

// delta is a counter's growth; a reading that failed (zero) gives zero.
func delta(after, before uint64) uint64 {
	if after < before {
		return 0
	}
	return after - before
}

// cpuFigure turns CPU time used over wall into cores and per-frame
// figures; sampling is the cores the stats sampling alone costs, taken
// off for the net figures.
func cpuFigure(what string, used, wall time.Duration, frames int, sampling float64, err error) CPU {
	c := CPU{What: what}
	if err != nil {
		c.Err = err.Error()
		return c
	}
	c.Seconds = used.Seconds()
	net := max(0, c.Seconds-sampling*wall.Seconds())
	if wall > 0 {
		c.Cores, c.NetCores = c.Seconds/wall.Seconds(), net/wall.Seconds()
	}
	if frames > 0 {
		c.PerFrameUs, c.NetPerFrameUs = c.Seconds*1e6/float64(frames), net*1e6/float64(frames)
	}
	return c
}

// mb formats a byte count in decimal megabytes.
func mb(n uint64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// consumerStats sums the consumers' SDK counters.
func (s *schedule) consumerStats() client.Stats {
	var sum client.Stats
	for _, c := range s.cons {
		st := c.c.Stats()
		sum.ArtifactOpens += st.ArtifactOpens
		sum.Maps += st.Maps
		sum.Unmaps += st.Unmaps
	}
	return sum
}
