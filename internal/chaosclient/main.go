// Command chaosclient is the client process of the chaos test
// (cmd/flybus/chaos_test.go): one role of artifact work against a running
// `flybus serve`, driven and killed by the test.
//
// At every point worth dying at it prints "phase NAME" and waits for a line
// on stdin, so the test can SIGKILL it exactly there or let it go on. The
// end of stdin means "finish": the client closes and the process prints a
// summary and exits 0. Other lines on stdout:
//
//	ready                      connected
//	verified N                 N artifacts checked so far against their digests
//	mismatch DETAILS           bytes that disagree with their artifact's digest
//	note DETAILS               an error that other processes' deaths explain
//	error DETAILS              anything else
//	summary verified=N mismatches=M
//
// Every artifact carries its SHA-256 in the payload it travels with; the
// producer and the caller seal with that digest, so the router checks the
// bytes too, and every reader checks them again.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

const (
	topic    = "chaos.frames"
	services = 2 // chaos.svc.0 and chaos.svc.1
)

// sizes are few, so the router's staging pool keeps up.
var sizes = []int{1000, 4096, 65536, 200000}

// payload describes the artifact it travels with.
type payload struct {
	Digest string `json:"digest"`
	Size   int    `json:"size"`
}

type proc struct {
	c        *client.Client
	ctx      context.Context
	rng      *rand.Rand
	proceed  chan struct{}
	out      sync.Mutex
	verified int
	mismatch int
}

func main() {
	socket := flag.String("socket", "", "the router's socket")
	store := flag.String("store", "", "the router's store root")
	role := flag.String("role", "", "producer, consumer, service or caller")
	id := flag.String("id", "", "client id")
	slot := flag.Int("slot", 0, "service slot (service role)")
	seed := flag.Uint64("seed", 1, "random seed")
	hold := flag.Int("hold", 0, "consumer: views kept open and checked again later")
	mode := flag.String("mode", "", "consumer: latest or bounded (default: either, at random)")
	flag.Parse()

	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{ctx: ctx, rng: rand.New(rand.NewPCG(*seed, 0x5eed)), proceed: make(chan struct{})}
	go func() {
		// One line per "go"; the end of stdin finishes the process.
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			select {
			case p.proceed <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		cancel()
	}()
	c, err := client.ConnectUnix(ctx, *socket, client.Config{ClientID: *id, StoreRoot: *store})
	if err != nil {
		p.finish(fmt.Errorf("connect: %w", err))
	}
	p.c = c
	p.say("ready")
	switch *role {
	case "producer":
		err = p.produce()
	case "consumer":
		err = p.consume(*mode, *hold)
	case "service":
		err = p.serve(*slot)
	case "caller":
		err = p.call()
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	p.finish(err)
}

func (p *proc) say(format string, args ...any) {
	p.out.Lock()
	defer p.out.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// phase announces a point worth dying at and waits for the test.
func (p *proc) phase(name string) error {
	p.say("phase %s", name)
	select {
	case <-p.proceed:
		return nil
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// finish ends the process: exit 0 when the test asked for it, 1 on a
// failure.
func (p *proc) finish(err error) {
	code := 0
	if err != nil && !errors.Is(err, context.Canceled) && p.ctx.Err() == nil {
		p.say("error %v", err)
		code = 1
	}
	if p.c != nil {
		p.c.Close()
	}
	p.say("summary verified=%d mismatches=%d", p.verified, p.mismatch)
	os.Exit(code)
}

// tolerable reports whether err is explained by another process's death
// (or the test finishing this one); it notes it. Anything else ends the
// role with the error.
func (p *proc) tolerable(what string, err error) bool {
	if p.ctx.Err() != nil {
		return false // finishing: not worth a note
	}
	var be *wire.BusError
	if errors.As(err, &be) {
		switch be.Code {
		case wire.ErrNoService, wire.ErrCallGone, wire.ErrBackpressure, wire.ErrTargetChanged:
			p.say("note %s: %s", what, be.Code)
			return true
		}
	}
	return false
}

func (p *proc) fill(n int) ([]byte, string) {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		x := p.rng.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(x >> (8 * j))
		}
	}
	d := sha256.Sum256(b)
	return b, hex.EncodeToString(d[:])
}

// artifact allocates, writes in two halves and seals with the digest,
// announcing the phases in between.
func (p *proc) artifact() (*client.Artifact, payload, error) {
	size := sizes[p.rng.IntN(len(sizes))]
	data, digest := p.fill(size)
	w, err := p.c.Allocate(p.ctx, int64(size), "application/x-chaos")
	if err != nil {
		return nil, payload{}, fmt.Errorf("allocate: %w", err)
	}
	if err := p.phase("allocated"); err != nil {
		return nil, payload{}, err
	}
	if _, err := w.Write(data[:size/2]); err != nil {
		return nil, payload{}, fmt.Errorf("write: %w", err)
	}
	if err := p.phase("mid-write"); err != nil {
		return nil, payload{}, err
	}
	if _, err := w.Write(data[size/2:]); err != nil {
		return nil, payload{}, fmt.Errorf("write: %w", err)
	}
	a, err := w.Seal(p.ctx, client.Digest(digest))
	if err != nil {
		return nil, payload{}, fmt.Errorf("seal: %w", err)
	}
	return a, payload{Digest: digest, Size: size}, p.phase("sealed")
}

// check compares bytes with the digest their payload carries.
func (p *proc) check(what string, b []byte, want payload) {
	d := sha256.Sum256(b)
	if got := hex.EncodeToString(d[:]); len(b) != want.Size || got != want.Digest {
		p.mismatch++
		p.say("mismatch %s: %d bytes with digest %s, want %d bytes with %s", what, len(b), got, want.Size, want.Digest)
		return
	}
	p.verified++
	p.say("verified %d", p.verified)
}

func (p *proc) produce() error {
	if _, err := p.c.DeclareTopic(p.ctx, topic, wire.RetainLatest); err != nil {
		return fmt.Errorf("declare: %w", err)
	}
	for {
		a, pl, err := p.artifact()
		if err != nil {
			return err
		}
		_, err = p.c.Publish(p.ctx, topic, pl, client.Attach("frame", a))
		a.Close()
		if err != nil && !p.tolerable("publish", err) {
			return fmt.Errorf("publish: %w", err)
		}
		if err := p.phase("published"); err != nil {
			return err
		}
	}
}

type held struct {
	v  *client.ArtifactView
	m  *client.Message
	pl payload
}

func (p *proc) consume(mode string, hold int) error {
	if _, err := p.c.DeclareTopic(p.ctx, topic, wire.RetainLatest); err != nil {
		return fmt.Errorf("declare: %w", err)
	}
	if mode == "" {
		mode = []string{"latest", "bounded"}[p.rng.IntN(2)]
	}
	// One credit more than the views held, so delivery goes on.
	cfg := []client.SubscribeOption{client.InFlight(min(1+hold, 2)), client.Replay()}
	if mode == "bounded" {
		cfg = []client.SubscribeOption{client.Bounded(), client.Queued(4), client.InFlight(1 + hold)}
	}
	s, err := p.c.Subscribe(p.ctx, topic, cfg...)
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	var kept []held
	defer func() {
		for _, h := range kept {
			p.check("a held view", h.v.Bytes(), h.pl)
			h.v.Close()
			h.m.Close()
		}
	}()
	for {
		m, err := s.Next(p.ctx)
		if err != nil {
			return fmt.Errorf("next: %w", err)
		}
		var pl payload
		if err := m.Decode(&pl); err != nil {
			return fmt.Errorf("payload: %w", err)
		}
		if err := p.phase("received"); err != nil {
			return err
		}
		img, err := m.Artifact("frame")
		if err != nil {
			return fmt.Errorf("attachment: %w", err)
		}
		v, err := img.View(p.ctx)
		img.Close()
		if err != nil {
			return fmt.Errorf("view: %w", err)
		}
		p.check("a view", v.Bytes(), pl)
		if err := p.phase("viewing"); err != nil {
			return err
		}
		if hold == 0 {
			v.Close()
			m.Close()
			continue
		}
		// Held views are checked again when they are let go, after the
		// router has collected and reused files around them.
		kept = append(kept, held{v: v, m: m, pl: pl})
		if len(kept) > hold {
			h := kept[0]
			kept = kept[1:]
			p.check("a held view", h.v.Bytes(), h.pl)
			h.v.Close()
			h.m.Close()
		}
	}
}

// register claims a service name. This slot's previous process was
// killed just before this one started, and the router frees its name only
// once it has read the end of that connection, so a CONFLICT is first taken
// as the predecessor not yet reaped and tried again; one that outlasts
// reapTimeout is a name the router kept, and is returned.
func (p *proc) register(name string) (*client.Service, error) {
	const reapTimeout = 10 * time.Second
	deadline := time.Now().Add(reapTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		svc, err := p.c.Register(p.ctx, name, client.Queued(4), client.InFlight(2))
		if !errors.Is(err, wire.ErrConflict) || time.Now().After(deadline) {
			return svc, err
		}
		p.say("note register: %s, retried", wire.ErrConflict)
		select {
		case <-p.ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

func (p *proc) serve(slot int) error {
	name := fmt.Sprintf("chaos.svc.%d", slot)
	svc, err := p.register(name)
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	p.say("registered %s", name)
	for {
		req, err := svc.Next(p.ctx)
		if err != nil {
			return fmt.Errorf("next request: %w", err)
		}
		if err := p.phase("request"); err != nil {
			return err
		}
		var pl payload
		if err := req.Decode(&pl); err != nil {
			return fmt.Errorf("request payload: %w", err)
		}
		if err := p.checkAttachment("request", req.Artifact, "in", pl, "serving"); err != nil {
			return err
		}
		if p.rng.IntN(2) == 0 {
			_, err = req.Reply(p.ctx, payload{})
		} else {
			var out *client.Artifact
			var back payload
			if out, back, err = p.artifact(); err != nil {
				return err
			}
			_, err = req.Reply(p.ctx, back, client.Attach("out", out))
			out.Close()
		}
		if err != nil && !p.tolerable("reply", err) {
			return fmt.Errorf("reply: %w", err)
		}
		req.Close()
	}
}

// checkAttachment views the attachment name of a request or result
// (kind), checks its bytes against pl and announces phase while it still
// holds the view, so that a kill can land there.
func (p *proc) checkAttachment(kind string, attachment func(string) (*client.Artifact, error), name string, pl payload, phase string) error {
	a, err := attachment(name)
	if err != nil {
		return fmt.Errorf("%s attachment: %w", kind, err)
	}
	v, err := a.View(p.ctx)
	a.Close()
	if err != nil {
		return fmt.Errorf("%s view: %w", kind, err)
	}
	p.check("a "+kind+"'s artifact", v.Bytes(), pl)
	if err := p.phase(phase); err != nil {
		return err
	}
	v.Close()
	return nil
}

func (p *proc) call() error {
	for {
		a, pl, err := p.artifact()
		if err != nil {
			return err
		}
		target := fmt.Sprintf("chaos.svc.%d", p.rng.IntN(services))
		pc, err := p.c.Call(p.ctx, target, "Chaos.Check", pl, client.Attach("in", a))
		a.Close()
		if err != nil {
			if !p.tolerable("call", err) {
				return fmt.Errorf("call: %w", err)
			}
			continue
		}
		if err := p.phase("called"); err != nil {
			return err
		}
		res, err := pc.Result(p.ctx)
		if err != nil {
			pc.Close()
			if !p.tolerable("result", err) {
				return fmt.Errorf("result: %w", err)
			}
			continue
		}
		var back payload
		if err := res.Decode(&back); err != nil {
			return fmt.Errorf("result outcome: %w", err)
		}
		if back.Size > 0 {
			if err := p.checkAttachment("result", res.Artifact, "out", back, "result"); err != nil {
				return err
			}
		}
		res.Close()
	}
}
