package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/wiretest"
	"github.com/flybus/flybus/wire"
)

// FuzzRouterFrames plays a hostile router: after a valid hello reply it
// writes arbitrary bytes into a client.Connect'ed client while the program
// has a service, a subscription, a call, an allocation, a publication and
// a declaration outstanding (commands msg-2 to msg-7, in that order) and
// handles whatever arrives (reading, mapping and retaining artifacts,
// replying to requests). Each input is two values:
//
//   - frames: the bytes the fake router sends after its hello reply (bus-1);
//   - plan: plan[0] chooses the end (even: the router hangs up; odd: the
//     program calls Close while the router answers every command left), the
//     rest is a sequence of uvarints: 2n writes the next n bytes of frames,
//     2n+1 waits (up to 2 ms) until the SDK has written n commands, so that
//     a reply can follow the command the program sends in reaction to an
//     earlier frame. What is left when the plan runs out is one write.
//
// Checked: the SDK never panics; when the bytes end on a frame boundary and
// the client still stands, it keeps working (a declaration answered
// correctly completes); Close returns; every operation of the program
// returns once the client is closed; no goroutine outlives the execution.
// The artifact files the program opens are fixed files under a store root
// of the fuzz process, 64 bytes each: store-5eedf0cc5eedf0cc/ holds
// stage-0000000000000001, sealed-0000000000000001 and, for the pool mode's
// cached slot mappings, slot-0000000000000001.
func FuzzRouterFrames(f *testing.F) {
	root := f.TempDir()
	dir := filepath.Join(root, wire.StoreID(fuzzStore).String())
	if err := os.Mkdir(dir, 0o700); err != nil {
		f.Fatal(err)
	}
	for _, name := range []string{fuzzStageFile, fuzzSealedFile, fuzzSlotFile} {
		if err := os.WriteFile(filepath.Join(dir, name), bytes.Repeat([]byte{0xab}, 64), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, frames, plan []byte) {
		runRouterFrames(t, root, frames, plan)
	})
}

const (
	fuzzStore      = 0x5eedf0cc5eedf0cc
	fuzzStageFile  = "stage-0000000000000001"
	fuzzSealedFile = "sealed-0000000000000001"
	fuzzSlotFile   = "slot-0000000000000001"
	// fuzzWait bounds every wait: an SDK that has not answered by then is
	// stuck, which is a finding.
	fuzzWait = 10 * time.Second
	// fuzzPlanWait bounds a wait of the plan: a mutated plan often waits
	// for a command that never comes.
	fuzzPlanWait = 2 * time.Millisecond
)

// fuzzHello is the fake router's valid hello reply.
func fuzzHello() []byte {
	ok := wire.HelloOK{RouterID: fuzzStore, ConnectionID: 1, SelectedMajor: wire.Major, SelectedMinor: wire.Minor,
		ContractDigest: wire.ContractDigestValue(), Limits: wire.DefaultLimits(), StoreID: fuzzStore}
	b, err := wire.AppendFrame(nil, wire.Header{ID: 1, Kind: wire.KindReply, Op: wire.OpHello, ReplyTo: wire.Some(wire.MsgID(1))},
		&wire.ReplyBody{Value: &ok}, nil)
	if err != nil {
		panic(err)
	}
	return b
}

// seenCommand is one command the SDK wrote.
type seenCommand struct {
	id    uint64
	op    wire.Op
	probe bool // the final topic.declare of "fuzz.probe"
}

// fuzzPeer is the fake router's end: a reader that logs every command the
// SDK writes, never blocking it.
type fuzzPeer struct {
	nc      net.Conn
	mu      sync.Mutex
	cmds    []seenCommand
	changed chan struct{} // capacity 1
	done    chan struct{} // the SDK closed its end
	wmu     sync.Mutex    // one writer at a time
}

func (p *fuzzPeer) readLoop() {
	defer close(p.done)
	rd := wiretest.NewReader(p.nc)
	var decl wire.Declare
	for env, err := range rd.Envelopes() {
		if err != nil || env.Kind != wire.KindCommand {
			panic(fmt.Sprintf("the SDK wrote a bad frame: %v %s", err, rd.Frame))
		}
		sc := seenCommand{id: env.ID, op: env.Op}
		if env.Op == wire.OpTopicDeclare && env.DecodeBody(&decl) == nil && decl.Name == "fuzz.probe" {
			sc.probe = true
		}
		p.mu.Lock()
		p.cmds = append(p.cmds, sc)
		p.mu.Unlock()
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// waitFor waits until cond holds over the commands seen, or the SDK closed
// its end, or the bound passes; it reports whether cond held.
func (p *fuzzPeer) waitFor(cond func([]seenCommand) bool) bool {
	deadline := time.After(fuzzWait)
	for {
		p.mu.Lock()
		ok := cond(p.cmds)
		p.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-p.changed:
		case <-p.done:
			p.mu.Lock()
			ok := cond(p.cmds)
			p.mu.Unlock()
			return ok
		case <-deadline:
			return false
		}
	}
}

// waitUpTo waits until the SDK has written n commands, at most d. A
// count far beyond what was written (a mutated plan) is not waited for:
// the program sends at most a few commands in reaction to a frame.
func (p *fuzzPeer) waitUpTo(n int, d time.Duration) {
	deadline := time.After(d)
	for {
		p.mu.Lock()
		seen := len(p.cmds)
		p.mu.Unlock()
		if seen >= n || n > seen+4 {
			return
		}
		select {
		case <-p.changed:
		case <-p.done:
			return
		case <-deadline:
			return
		}
	}
}

func (p *fuzzPeer) write(b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return wire.WriteFull(p.nc, b)
}

// streamFacts is what the fake router knows of its own bytes: the highest
// bus id among the frames that decode, the commands they answer, and
// whether the bytes end on a frame boundary.
type streamFacts struct {
	maxID    uint64
	answered map[uint64]bool
	whole    bool
}

func scanFrames(b []byte) streamFacts {
	sf := streamFacts{maxID: 1, answered: map[uint64]bool{}}
	rd := wiretest.NewReader(bytes.NewReader(b))
	for env, err := range rd.Envelopes() {
		var be *wire.BusError
		if err != nil && !errors.As(err, &be) {
			continue
		}
		sf.maxID = max(sf.maxID, env.ID)
		if env.Kind == wire.KindReply {
			sf.answered[uint64(env.ReplyTo.V)] = true
		}
	}
	sf.whole = errors.Is(rd.Err, io.EOF)
	return sf
}

// fuzzProgram is the application: its operations run on their own
// goroutines, as a program's would.
type fuzzProgram struct {
	c   *Client
	ctx context.Context
	wg  sync.WaitGroup
}

func (g *fuzzProgram) spawn(fn func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
}

// use reads every artifact a delivery carries, one way or another.
func (g *fuzzProgram) use(get func(string) (*Artifact, error), names []string, how int) {
	for _, name := range names {
		a, err := get(name)
		if err != nil {
			continue
		}
		switch how {
		case 0:
			if v, err := a.View(g.ctx); err == nil {
				var sum byte
				for _, x := range v.Bytes() {
					sum ^= x
				}
				_ = sum
				v.Close()
			}
		case 1:
			a.ReadAll(g.ctx)
		default:
			if kept, err := a.Retain(g.ctx); err == nil {
				kept.Close()
			}
		}
		a.Close()
	}
}

// untilErr hands each item next returns to each, until next fails.
func untilErr[T any](ctx context.Context, next func(context.Context) (T, error), each func(T)) {
	for {
		v, err := next(ctx)
		if err != nil {
			return
		}
		each(v)
	}
}

func (g *fuzzProgram) script() []func() {
	c, ctx := g.c, g.ctx
	return []func(){
		func() { // msg-2
			svc, err := c.Register(ctx, "fuzz.svc", Queued(4), InFlight(4))
			if err != nil {
				return
			}
			untilErr(ctx, svc.Next, func(req *Request) {
				g.use(req.Artifact, req.Attachments(), 1)
				req.Reply(ctx, map[string]int{"n": 1})
				req.Close()
			})
		},
		func() { // msg-3
			s, err := c.Subscribe(ctx, "fuzz.topic", Bounded(), Queued(4), InFlight(2))
			if err != nil {
				return
			}
			untilErr(ctx, s.Next, func(m *Message) {
				g.use(m.Artifact, m.Attachments(), 0)
				m.Close()
			})
		},
		func() { // msg-4
			p, err := c.Call(ctx, "fuzz.svc", "Fuzz.M", map[string]int{})
			if err != nil {
				return
			}
			res, err := p.Result(ctx)
			if err != nil {
				p.Close()
				return
			}
			g.use(res.Artifact, res.Attachments(), 2)
			res.Close()
		},
		func() { // msg-5
			w, err := c.Allocate(ctx, 64, "application/x-fuzz")
			if err != nil {
				return
			}
			w.Write(bytes.Repeat([]byte{7}, 64))
			a, err := w.Seal(ctx)
			if err != nil {
				w.Close()
				return
			}
			a.ReadAll(ctx)
			a.Close()
		},
		func() { // msg-6
			c.Publish(ctx, "fuzz.topic", map[string]int{"n": 1})
		},
		func() { // msg-7
			c.DeclareTopic(ctx, "fuzz.other", wire.RetainLatest)
		},
	}
}

func runRouterFrames(t *testing.T, root string, frames, plan []byte) {
	base := leakcheck.Goroutines()
	mode := byte(0)
	if len(plan) > 0 {
		mode, plan = plan[0], plan[1:]
	}
	facts := scanFrames(frames)
	a, b := net.Pipe()
	peer := &fuzzPeer{nc: a, changed: make(chan struct{}, 1), done: make(chan struct{})}
	go peer.readLoop()
	defer func() {
		a.Close()
		<-peer.done
	}()
	stuck := func(what string) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%s within %v:\n%s", what, fuzzWait, buf[:runtime.Stack(buf, true)])
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type connected struct {
		c   *Client
		err error
	}
	ch := make(chan connected, 1)
	go func() {
		c, err := Connect(ctx, b, Config{ClientID: "fuzz-sdk", ClientIncarnation: "inc-fuzz", StoreRoot: root})
		ch <- connected{c, err}
	}()
	if !peer.waitFor(func(cs []seenCommand) bool { return len(cs) == 1 }) {
		stuck("no bus.hello")
	}
	if err := peer.write(fuzzHello()); err != nil {
		t.Fatal(err)
	}
	cr := <-ch
	if cr.err != nil {
		t.Fatalf("connect: %v", cr.err)
	}
	c := cr.c
	g := &fuzzProgram{c: c, ctx: ctx}
	// One operation at a time until its command is written, so that the
	// script's commands are msg-2 to msg-7 in every execution.
	for i, op := range g.script() {
		g.spawn(op)
		if !peer.waitFor(func(cs []seenCommand) bool { return len(cs) >= i+2 }) {
			stuck(fmt.Sprintf("script command %d not written", i+2))
		}
	}

	for len(frames) > 0 {
		n := len(frames)
		if len(plan) > 0 {
			v, k := binary.Uvarint(plan)
			if k <= 0 {
				plan = nil
			} else if plan = plan[k:]; v&1 == 1 {
				peer.waitUpTo(int(min(v>>1, 1<<20)), fuzzPlanWait)
				continue
			} else {
				n = int(min(max(v>>1, 1), uint64(n)))
			}
		}
		if peer.write(frames[:n]) != nil {
			break // the SDK closed the connection
		}
		frames = frames[n:]
	}
	next := facts.maxID + 1

	// Still standing after bytes that end on a frame boundary: a command
	// answered correctly must complete.
	if facts.whole && c.Err() == nil && next < math.MaxUint64/2 {
		probe := make(chan error, 1)
		go func() {
			_, err := c.DeclareTopic(ctx, "fuzz.probe", wire.RetainNone)
			probe <- err
		}()
		var id uint64
		if peer.waitFor(func(cs []seenCommand) bool {
			for _, sc := range cs {
				if sc.probe {
					id = sc.id
					return true
				}
			}
			return false
		}) {
			reply, err := wire.AppendFrame(nil, wire.Header{ID: next, Kind: wire.KindReply, Op: wire.OpTopicDeclare,
				ReplyTo: wire.Some(wire.MsgID(id))}, &wire.ReplyBody{Value: &wire.DeclareOK{Declared: true, TopicIncarnation: 1}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			next++
			peer.write(reply)
		}
		select {
		case err := <-probe:
			if err != nil && c.Err() == nil {
				t.Fatalf("a correctly answered command failed (%v) with the connection up", err)
			}
		case <-time.After(fuzzWait):
			stuck("a correctly answered command did not complete")
		}
	}

	closed := make(chan error, 1)
	// Over a torn last frame no answer can arrive: the router hangs up.
	if mode&1 == 0 || !facts.whole {
		a.Close()
		go func() { closed <- c.Close() }()
	} else {
		go func() { closed <- c.Close() }()
		// Answer every command not answered yet, as a router does when a
		// client drains, until the SDK closes its end.
		answered := map[uint64]bool{1: true}
		for done := false; !done; {
			peer.mu.Lock()
			cmds := append([]seenCommand(nil), peer.cmds...)
			peer.mu.Unlock()
			for _, sc := range cmds {
				if answered[sc.id] || facts.answered[sc.id] || sc.probe {
					continue
				}
				answered[sc.id] = true
				refusal, err := wire.AppendFrame(nil, wire.Header{ID: next, Kind: wire.KindReply, Op: sc.op,
					ReplyTo: wire.Some(wire.MsgID(sc.id))}, &wire.ReplyBody{Err: wire.NewError(wire.ErrConflict, 0, "fuzz")}, nil)
				if err != nil {
					t.Fatal(err)
				}
				next++
				if peer.write(refusal) != nil {
					break
				}
			}
			select {
			case <-peer.done:
				done = true
			case <-peer.changed:
			case <-time.After(fuzzWait):
				stuck("Close did not finish draining")
			}
		}
	}
	select {
	case <-closed:
	case <-time.After(2 * fuzzWait):
		stuck("Close did not return")
	}
	if c.Err() == nil {
		t.Fatal("Err is nil after Close")
	}
	progDone := make(chan struct{})
	go func() { g.wg.Wait(); close(progDone) }()
	select {
	case <-progDone:
	case <-time.After(fuzzWait):
		stuck("the program's operations did not return after Close")
	}
	cancel()
	a.Close()
	<-peer.done
	leakcheck.WaitGoroutines(t, base)
}
