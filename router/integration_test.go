package router_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Integration: the acceptance list's end-to-end session on one router under a closed
// policy. An environment service advances on complete batches of actions
// and publishes every frame; a coordinator takes each frame from the
// environment's topic, forwards it to two agent services called in
// parallel, sends their actions to the environment as one batch, and
// publishes a committed snapshot to a retained topic. A slow latest-mode
// presentation consumer and a bounded recorder follow the snapshots. The
// domain lives entirely in this file; the router only sees names, grants
// and artifacts.

const (
	simSteps     = 30
	simFrameSize = 160 * 144 * 4         // the live feed's frame, 92,160 bytes
	simWork      = 20 * time.Millisecond // slower than a step, so the presentation coalesces
)

// simPolicy grants each participant exactly what it needs, nothing more.
func simPolicy() router.Policy {
	ex := func(names ...string) []router.Pattern {
		var ps []router.Pattern
		for _, n := range names {
			ps = append(ps, router.Exact(n))
		}
		return ps
	}
	return router.ClosedPolicy().
		Client("env", router.Grants{Register: ex("sim.env"), Publish: ex("sim.env.frames"), ManageTopics: ex("sim.env.frames")}).
		Client("agent-a", router.Grants{Register: ex("sim.agent.a")}).
		Client("agent-b", router.Grants{Register: ex("sim.agent.b")}).
		Client("coordinator", router.Grants{Call: ex("sim.agent.a", "sim.agent.b", "sim.env"),
			Subscribe: ex("sim.env.frames"), Publish: ex("sim.snapshots"), ManageTopics: ex("sim.snapshots")}).
		Client("presentation", router.Grants{Subscribe: ex("sim.snapshots")}).
		Client("recorder", router.Grants{Subscribe: ex("sim.snapshots")})
}

// dialBound connects an SDK client over the transport the launcher bound
// to id.
func dialBound(t *testing.T, h *harness, id string) *client.Client {
	t.Helper()
	c, err := client.Connect(ctxT(t), h.conn(id), client.Config{ClientID: id, StoreRoot: h.root})
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	t.Cleanup(func() { c.Close() })
	return h.track(c)
}

// simFrame is the environment's frame for a step, a function of the step
// and the actions that produced it.
func simFrame(step int, a, b uint32) []byte {
	f := make([]byte, simFrameSize)
	x := uint32(step)*2654435761 ^ a*40503 ^ b*97
	for i := range f {
		x = x*1664525 + 1013904223
		f[i] = byte(x >> 24)
	}
	return f
}

// simAction is what an agent decides from a frame.
func simAction(agent string, frame []byte) uint32 {
	h := fnv.New32a()
	h.Write([]byte(agent))
	h.Write(frame)
	return h.Sum32() % 1_000_000
}

type simStep struct {
	Step int `json:"step"`
}

type simAct struct {
	Agent  string `json:"agent"`
	Step   int    `json:"step"`
	Action uint32 `json:"action"`
}

type simBatch struct {
	Step    int      `json:"step"`
	Actions []simAct `json:"actions"`
}

type simAdvanced struct {
	Step  int    `json:"step"`
	Error string `json:"error,omitempty"`
}

type simSnapshot struct {
	Step    int      `json:"step"`
	Actions []simAct `json:"actions"`
}

// simProduce writes and seals one artifact from a goroutine that must not
// call t.Fatal.
func simProduce(ctx context.Context, c *client.Client, data []byte) (*client.Artifact, error) {
	w, err := c.Allocate(ctx, int64(len(data)), "image/x-rgba")
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return nil, err
	}
	return w.Seal(ctx)
}

// rendezvous lets the two agents prove they were called in parallel: each
// answers step n only once both have received step n.
type rendezvous struct {
	mu    sync.Mutex
	steps map[int]chan struct{}
	seen  map[int]int
}

func (r *rendezvous) arrive(ctx context.Context, step int) error {
	r.mu.Lock()
	ch := r.steps[step]
	if ch == nil {
		ch = make(chan struct{})
		r.steps[step] = ch
	}
	r.seen[step]++
	if r.seen[step] == 2 {
		close(ch)
	}
	r.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("step %d: the other agent was never called while this one waited: %w", step, ctx.Err())
	}
}

// frames is the coordinator's record of every frame by step, shared with
// the consumers that check what they map.
type frames struct {
	mu sync.Mutex
	m  map[int][]byte
}

func (f *frames) put(step int, b []byte) {
	f.mu.Lock()
	f.m[step] = b
	f.mu.Unlock()
}

func (f *frames) get(step int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[step]
}

// spawn runs fn on a goroutine and delivers its error.
func spawn(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// serveRequests hands each request of svc to handle: nil once svc is
// closed, the first error of Next or handle otherwise.
func serveRequests(ctx context.Context, svc *client.Service, handle func(req *client.Request) error) error {
	for {
		req, err := svc.Next(ctx)
		if errors.Is(err, client.ErrHandleClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := handle(req); err != nil {
			return err
		}
	}
}

func serveAgent(ctx context.Context, svc *client.Service, name string, gate *rendezvous) error {
	return serveRequests(ctx, svc, func(req *client.Request) error {
		var s simStep
		if err := req.Decode(&s); err != nil {
			return err
		}
		img, err := req.Artifact("frame")
		if err != nil {
			return err
		}
		v, err := img.View(ctx)
		if err != nil {
			return err
		}
		action := simAction(name, v.Bytes())
		v.Close()
		img.Close()
		if err := gate.arrive(ctx, s.Step); err != nil {
			return err
		}
		if _, err := req.Reply(ctx, simAct{Agent: name, Step: s.Step, Action: action}); err != nil {
			return err
		}
		req.Close()
		return nil
	})
}

func serveEnv(ctx context.Context, c *client.Client, svc *client.Service) error {
	step := 0
	return serveRequests(ctx, svc, func(req *client.Request) error {
		var b simBatch
		if err := req.Decode(&b); err != nil {
			return err
		}
		// A complete batch is one action from each agent for this step.
		var agents []string
		for _, a := range b.Actions {
			if a.Step == step {
				agents = append(agents, a.Agent)
			}
		}
		slices.Sort(agents)
		if b.Step != step || !slices.Equal(agents, []string{"agent-a", "agent-b"}) || len(b.Actions) != 2 {
			if _, err := req.Reply(ctx, simAdvanced{Step: step, Error: "incomplete batch"}); err != nil {
				return err
			}
			req.Close()
			return nil
		}
		var acts [2]uint32
		for _, a := range b.Actions {
			acts[map[string]int{"agent-a": 0, "agent-b": 1}[a.Agent]] = a.Action
		}
		step++
		art, err := simProduce(ctx, c, simFrame(step, acts[0], acts[1]))
		if err != nil {
			return err
		}
		// Published first, so the frame is on the topic by the time the
		// coordinator has the result.
		if _, err := c.Publish(ctx, "sim.env.frames", simStep{Step: step}, client.Attach("frame", art)); err != nil {
			return err
		}
		if _, err := req.Reply(ctx, simAdvanced{Step: step}, client.Attach("frame", art)); err != nil {
			return err
		}
		art.Close()
		req.Close()
		return nil
	})
}

// nextSnapshot receives the next snapshot message of s and decodes it.
func nextSnapshot(ctx context.Context, s *client.Subscription) (*client.Message, simSnapshot, error) {
	var snap simSnapshot
	m, err := s.Next(ctx)
	if err != nil {
		return nil, snap, err
	}
	if err := m.Decode(&snap); err != nil {
		return nil, snap, err
	}
	return m, snap, nil
}

// presentationStats is what the slow consumer saw.
type presentationStats struct {
	seen, replaced, last int
}

func present(ctx context.Context, s *client.Subscription, fr *frames, firstGate <-chan struct{}) (presentationStats, error) {
	var st presentationStats
	for {
		m, snap, err := nextSnapshot(ctx, s)
		if err != nil {
			return st, err
		}
		st.seen++
		st.replaced += int(m.Replaced)
		st.last = snap.Step
		img, err := m.Artifact("frame")
		if err != nil {
			return st, err
		}
		v, err := img.View(ctx)
		if err != nil {
			return st, err
		}
		if !slices.Equal(v.Bytes(), fr.get(snap.Step)) {
			return st, fmt.Errorf("presentation: snapshot %d maps the wrong frame", snap.Step)
		}
		if st.seen == 1 {
			// The first render is stalled until the session has moved on,
			// so coalescing is certain rather than a matter of timing.
			select {
			case <-firstGate:
			case <-ctx.Done():
				return st, ctx.Err()
			}
		}
		time.Sleep(simWork) // the render
		v.Close()
		img.Close()
		m.Close()
		if snap.Step == simSteps-1 {
			return st, nil
		}
	}
}

func record(ctx context.Context, s *client.Subscription) ([]uint64, error) {
	var seqs []uint64
	for len(seqs) < simSteps {
		m, snap, err := nextSnapshot(ctx, s)
		if err != nil {
			return seqs, err
		}
		img, err := m.Artifact("frame")
		if err != nil {
			return seqs, fmt.Errorf("recorder: snapshot %d without its frame: %w", snap.Step, err)
		}
		if img.Ref().ByteLength != simFrameSize {
			return seqs, fmt.Errorf("recorder: snapshot %d names %d bytes", snap.Step, img.Ref().ByteLength)
		}
		img.Close()
		if m.Replaced != 0 || uint64(snap.Step)+1 != m.TopicSequence {
			return seqs, fmt.Errorf("recorder: step %d at sequence %d, replaced %d", snap.Step, m.TopicSequence, m.Replaced)
		}
		seqs = append(seqs, m.TopicSequence)
		m.Close()
	}
	return seqs, nil
}

func TestIntegrationSessionOverOneRouter(t *testing.T) {
	forEachTransport(t, router.Config{Policy: simPolicy()}, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		start := time.Now()
		env, agentA, agentB := dialBound(t, h, "env"), dialBound(t, h, "agent-a"), dialBound(t, h, "agent-b")
		coord, pres, rec := dialBound(t, h, "coordinator"), dialBound(t, h, "presentation"), dialBound(t, h, "recorder")

		// Authority is exactly the grants: naming a target is not enough.
		for what, err := range map[string]error{
			"presentation calls the environment": func() error {
				_, err := pres.Call(ctx, "sim.env", "Env.Advance", nil)
				return err
			}(),
			"presentation subscribes to raw frames": func() error {
				_, err := pres.Subscribe(ctx, "sim.env.frames")
				return err
			}(),
			"an agent registers the other's name": func() error {
				_, err := agentA.Register(ctx, "sim.agent.b")
				return err
			}(),
			"the recorder publishes a snapshot": func() error {
				_, err := rec.Publish(ctx, "sim.snapshots", nil)
				return err
			}(),
		} {
			if code(t, err) != wire.ErrNotAuthorized {
				t.Fatalf("%s: %v", what, err)
			}
		}

		mustDeclare(t, env, "sim.env.frames", wire.RetainNone)
		mustDeclare(t, coord, "sim.snapshots", wire.RetainLatest)
		frameSub := mustSubscribe(t, ctx, coord, "sim.env.frames", client.Bounded(), client.Queued(4), client.InFlight(2))
		presSub := mustSubscribe(t, ctx, pres, "sim.snapshots", client.InFlight(1), client.Replay())
		recSub := mustSubscribe(t, ctx, rec, "sim.snapshots", client.Bounded(), client.Queued(64), client.InFlight(4), client.Replay())
		svcA := mustRegister(t, ctx, agentA, "sim.agent.a", client.Queued(2), client.InFlight(1))
		svcB := mustRegister(t, ctx, agentB, "sim.agent.b", client.Queued(2), client.InFlight(1))
		svcEnv := mustRegister(t, ctx, env, "sim.env", client.Queued(2), client.InFlight(1))

		gate := &rendezvous{steps: map[int]chan struct{}{}, seen: map[int]int{}}
		fr := &frames{m: map[int][]byte{}}
		firstGate := make(chan struct{})
		var presStats presentationStats
		var seqs []uint64
		doneA := spawn(func() error { return serveAgent(ctx, svcA, "agent-a", gate) })
		doneB := spawn(func() error { return serveAgent(ctx, svcB, "agent-b", gate) })
		doneEnv := spawn(func() error { return serveEnv(ctx, env, svcEnv) })
		donePres := spawn(func() error {
			var err error
			presStats, err = present(ctx, presSub, fr, firstGate)
			return err
		})
		doneRec := spawn(func() error {
			var err error
			seqs, err = record(ctx, recSub)
			return err
		})

		// The environment's first frame.
		expect := simFrame(0, 0, 0)
		first := produce(t, env, expect)
		if _, err := env.Publish(ctx, "sim.env.frames", simStep{Step: 0}, client.Attach("frame", first)); err != nil {
			t.Fatal(err)
		}
		first.Close()

		// An incomplete batch is refused by the environment's domain, not
		// by the bus, and does not advance it.
		res, err := coord.CallAndWait(ctx, "sim.env", "Env.Advance",
			simBatch{Step: 0, Actions: []simAct{{Agent: "agent-a", Step: 0}}}, client.Pin(svcEnv.Incarnation()),
		)
		if err != nil {
			t.Fatal(err)
		}
		var adv simAdvanced
		if err := res.Decode(&adv); err != nil || adv.Error == "" || adv.Step != 0 {
			t.Fatalf("incomplete batch: %+v %v", adv, err)
		}
		res.Close()

		var lastRef wire.ArtifactRef
		results := 0
		for step := 0; step < simSteps; step++ {
			m := nextMessage(t, ctx, frameSub)
			var got simStep
			if err := m.Decode(&got); err != nil || got.Step != step {
				t.Fatalf("frame for step %d: %+v %v", step, got, err)
			}
			img := mustArtifact(t, m, "frame")
			m.Close() // the forwarded artifact keeps the delivery
			if step > 0 && img.Ref() != lastRef {
				t.Fatalf("step %d: the topic's frame %s is not the result's %s", step, img.Ref().ArtifactID, lastRef.ArtifactID)
			}
			fr.put(step, expect)
			pa := mustCall(t, ctx, coord, "sim.agent.a", svcA.Incarnation(), "Agent.Act", simStep{Step: step}, client.Attach("frame", img))
			pb := mustCall(t, ctx, coord, "sim.agent.b", svcB.Incarnation(), "Agent.Act", simStep{Step: step}, client.Attach("frame", img))
			var acts []simAct
			for _, pc := range []*client.PendingCall{pa, pb} {
				r := mustResult(t, ctx, pc)
				var a simAct
				if err := r.Decode(&a); err != nil {
					t.Fatal(err)
				}
				if a.Agent != r.Responder.ClientID || a.Step != step || a.Action != simAction(a.Agent, expect) {
					t.Fatalf("step %d: %s answered %+v, want action %d", step, r.Responder.ClientID, a, simAction(a.Agent, expect))
				}
				r.Close()
				acts = append(acts, a)
				results++
			}
			res, err := coord.CallAndWait(ctx, "sim.env", "Env.Advance", simBatch{Step: step, Actions: acts}, client.Pin(svcEnv.Incarnation()))
			if err != nil {
				t.Fatal(err)
			}
			adv = simAdvanced{}
			if err := res.Decode(&adv); err != nil || adv.Error != "" || adv.Step != step+1 {
				t.Fatalf("advance from step %d: %+v %v", step, adv, err)
			}
			nextFrame := mustArtifact(t, res, "frame")
			expectNext := simFrame(step+1, acts[0].Action, acts[1].Action)
			mustRead(t, nextFrame, expectNext)
			lastRef = nextFrame.Ref()
			nextFrame.Close()
			res.Close()
			results++
			// Commit: the snapshot names the frame the step acted on.
			rc, err := coord.Publish(ctx, "sim.snapshots", simSnapshot{Step: step, Actions: acts}, client.Attach("frame", img))
			if err != nil {
				t.Fatal(err)
			}
			if rc.TopicSequence != uint64(step+1) || rc.Subscribers != 2 {
				t.Fatalf("snapshot %d: %+v", step, rc)
			}
			img.Close()
			expect = expectNext
			if step == 3 {
				close(firstGate)
			}
		}
		// The frame after the last step is on the topic too.
		m := nextMessage(t, ctx, frameSub)
		img, err := m.Artifact("frame")
		if err != nil || img.Ref() != lastRef {
			t.Fatalf("the last frame: %v", err)
		}
		mustRead(t, img, expect)
		img.Close()
		m.Close()

		for who, ch := range map[string]<-chan error{"presentation": donePres, "recorder": doneRec} {
			if err := <-ch; err != nil {
				t.Fatalf("%s: %v", who, err)
			}
		}
		if results != 3*simSteps {
			t.Fatalf("%d RPC results checked, want %d", results, 3*simSteps)
		}
		for i, s := range seqs {
			if s != uint64(i+1) {
				t.Fatalf("recorder: sequence %d at position %d: a gap or a reorder in %v", s, i, seqs)
			}
		}
		if presStats.last != simSteps-1 || presStats.seen+presStats.replaced != simSteps || presStats.replaced < 2 {
			t.Fatalf("presentation saw %d snapshots (last %d) and %d coalesced, want the last and %d in all with coalescing",
				presStats.seen, presStats.last, presStats.replaced, simSteps)
		}
		st := h.r.Stats()
		if st.CallsTotal != 3*simSteps+1 || st.Publications != 2*simSteps+1 {
			t.Fatalf("router counted %d calls and %d publications", st.CallsTotal, st.Publications)
		}
		if n := st.Refusals[wire.ErrNotAuthorized.String()]; n != 4 {
			t.Fatalf("%d refusals for authority, want the 4 probes: %v", n, st.Refusals)
		}

		// Wind down: services and subscriptions close, the retained
		// snapshot is cleared, and nothing is left.
		for _, s := range []*client.Service{svcA, svcB, svcEnv} {
			s.Close()
		}
		for who, ch := range map[string]<-chan error{"agent-a": doneA, "agent-b": doneB, "env": doneEnv} {
			if err := <-ch; err != nil {
				t.Fatalf("%s: %v", who, err)
			}
		}
		for _, s := range []*client.Subscription{frameSub, presSub, recSub} {
			s.Close()
		}
		if cleared, err := coord.ClearTopic(ctx, "sim.snapshots"); err != nil || !cleared {
			t.Fatalf("clear: %v %v", cleared, err)
		}
		for _, c := range []*client.Client{env, agentA, agentB, coord, pres, rec} {
			barrierAny(t, c)
		}
		requireDrained(t, h, maps0)
		settle(t, h, "services and subscriptions to go", func(s router.Stats) bool { return s.Services == 0 && s.Subscriptions == 0 })
		for _, c := range []*client.Client{env, agentA, agentB, coord, pres, rec} {
			if n := c.Stats().ControlErrors; n != 0 {
				t.Fatalf("%s: %d consumes, releases or unregisters refused", c.Info().Identity.ClientID, n)
			}
		}
		t.Logf("%d steps in %v: presentation rendered %d snapshots and coalesced %d; recorder kept %d",
			simSteps, time.Since(start).Round(time.Millisecond), presStats.seen, presStats.replaced, len(seqs))
	})
}

// barrierAny is barrier for a client without grants to manage topics: a
// refusal is answered in order too, after everything the client queued.
func barrierAny(t *testing.T, c *client.Client) {
	t.Helper()
	if _, err := c.DeclareTopic(ctxT(t), "test.barrier", wire.RetainNone); err != nil && !errors.Is(err, wire.ErrNotAuthorized) {
		t.Fatal(err)
	}
}
