package router

// The interpreter of the testdata/sim scripts that TestSimScenarios runs.
// See sim_test.go.

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flybus/flybus/wire"
)

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
	s.coreCfg = coreConfig{limits: s.lim, policy: OpenPolicy(), routerID: 0x51, storeID: 0x51, hasStore: true}
	s.k = newCore(s.coreCfg)
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

// simArgs is one scenario command's words: positional ones, key=value
// options and att= attachments.
type simArgs struct {
	pos  []string
	opts map[string]string
	atts []string
}

func (a *simArgs) num(key string, dflt int) int {
	if v, ok := a.opts[key]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return dflt
}

// simClientCmd is one client command: its client's session, its arguments after
// the client's name, the attachments resolved and the payload.
type simClientCmd struct {
	sc      *simScenario
	cl      *simClient
	ss      *simSession
	name    string // the command
	pos     []string
	args    *simArgs
	atts    []wire.Attachment
	payload wire.RawJSON
}

func (c *simClientCmd) arg(i int) string {
	if i < len(c.pos) {
		return c.pos[i]
	}
	return ""
}

func (c *simClientCmd) serial(f wire.Family, i int) uint64 {
	n, _ := wire.ParseSerialBytes(f, []byte(c.arg(i)))
	return n
}

// simRouterCommands act on the router or the store; simClientCommands on
// one client's connection, named first. One handler each.
var (
	simRouterCommands = map[string]func(*simScenario, *simArgs) error{
		"limits":  (*simScenario).cmdLimits,
		"connect": (*simScenario).cmdConnect,
		"io":      (*simScenario).cmdIO,
		"shutdown": func(sc *simScenario, _ *simArgs) error {
			sc.s.logf("router shuts down")
			sc.s.stepCore(input{kind: inShutdown})
			return nil
		},
		"end": func(sc *simScenario, _ *simArgs) error { sc.s.teardown(); return nil },
	}
	simClientCommands = map[string]func(*simClientCmd) error{
		"pull": func(c *simClientCmd) error { c.sc.s.pullOnce(c.ss); return nil },
		"drop": func(c *simClientCmd) error {
			c.sc.s.logf("%s transport fails", c.ss.name)
			c.sc.s.dropSession(c.ss)
			return nil
		},
		"finish": func(c *simClientCmd) error {
			c.sc.s.logf("%s writer finishes", c.ss.name)
			c.sc.s.dropSession(c.ss)
			return nil
		},
		"close": func(c *simClientCmd) error {
			c.sc.s.stepCore(input{kind: inClose, conn: c.ss.c, code: wire.ErrBackpressure, msg: "closed by the scenario"})
			return nil
		},
		"register":        cmdRegister,
		"unregister":      cmdUnregister,
		"call":            cmdCall,
		"reply":           cmdReply,
		"respond-release": cmdReply,
		"cancel":          cmdCancel,
		"declare":         cmdDeclare,
		"clear":           cmdTopicName,
		"delete":          cmdTopicName,
		"subscribe":       cmdSubscribe,
		"unsubscribe":     cmdUnsubscribe,
		"publish":         cmdPublish,
		"consume":         cmdConsume,
		"allocate":        cmdAllocate,
		"seal":            cmdSeal,
		"open":            cmdRefOwner,
		"retain":          cmdRefOwner,
		"release":         cmdRelease,
	}
)

func (sc *simScenario) exec(words []string) error {
	if len(words) == 0 {
		return nil
	}
	cmd, a := words[0], &simArgs{opts: map[string]string{}}
	for _, w := range words[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			if k == "att" {
				a.atts = append(a.atts, v)
			} else {
				a.opts[k] = v
			}
			continue
		}
		a.pos = append(a.pos, w)
	}
	if h := simRouterCommands[cmd]; h != nil {
		return h(sc, a)
	}
	h := simClientCommands[cmd]
	if h == nil {
		return fmt.Errorf("unknown command %q", cmd)
	}
	if len(a.pos) == 0 {
		return fmt.Errorf("%s: which client?", cmd)
	}
	cl := sc.client(a.pos[0])
	if cl.sess == nil {
		return fmt.Errorf("%s has no connection", cl.id)
	}
	c := &simClientCmd{sc: sc, cl: cl, ss: cl.sess, name: cmd, pos: a.pos[1:], args: a, payload: wire.RawJSON(`{}`)}
	for i, spec := range a.atts {
		p, err := sc.ref(c.ss, spec)
		if err != nil {
			return err
		}
		c.atts = append(c.atts, wire.Attachment{Name: fmt.Sprintf("f%d", i), Ref: p.Ref, OwnerID: p.OwnerID})
	}
	if n := a.num("size", 0); n > 0 {
		c.payload = wire.RawJSON(`{"p":"` + strings.Repeat("x", n) + `"}`)
	}
	return h(c)
}

func (sc *simScenario) cmdLimits(a *simArgs) error {
	s := sc.s
	if s.accepted > 0 {
		return errors.New("limits must come before the first connect")
	}
	for _, k := range slices.Sorted(maps.Keys(a.opts)) {
		n, err := strconv.ParseUint(a.opts[k], 10, 64)
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
	s.coreCfg.limits = s.lim
	s.k = newCore(s.coreCfg)
	return nil
}

func (sc *simScenario) cmdConnect(a *simArgs) error {
	s := sc.s
	for _, name := range a.pos {
		cl := sc.client(name)
		c, err := s.accept("")
		if err != nil {
			s.logf("accept refused: %v", err)
			continue
		}
		ss := &simSession{cl: cl}
		s.attach(ss, c)
		cl.incs++
		ss.hello = true
		// ext=await-topic,presence asks for extensions.
		if e := a.opts["ext"]; e != "" {
			ss.asked = strings.Split(e, ",")
		}
		s.send(ss, wire.OpHello, &wire.Hello{ClientID: cl.id, ClientIncarnation: fmt.Sprintf("i%d", cl.incs),
			SupportedMajors: []uint32{1}, Extensions: ss.asked}, nil, &simCmd{expectOK: true})
		s.afterStep()
		s.pullOnce(ss)
	}
	return nil
}

func (sc *simScenario) cmdIO(a *simArgs) error {
	s := sc.s
	if len(s.effects) == 0 {
		return errors.New("no store I/O is pending")
	}
	outcome := simIOOK
	if len(a.pos) > 0 {
		outcome = map[string]simIO{"fail": simIOFails, "mismatch": simIOMismatch}[a.pos[0]]
	}
	s.finishIO(0, outcome)
	return nil
}

func cmdRegister(c *simClientCmd) error {
	c.sc.s.send(c.ss, wire.OpServiceRegister, &wire.Register{Name: c.arg(0), MaxQueued: uint32(c.args.num("q", 1)),
		MaxInFlight: uint32(c.args.num("f", 1))}, nil, &simCmd{name: c.arg(0)})
	return nil
}

func cmdUnregister(c *simClientCmd) error {
	inc := c.ss.services[c.arg(0)]
	c.sc.s.send(c.ss, wire.OpServiceUnregister, &wire.Unregister{Name: c.arg(0), ServiceIncarnation: inc}, nil,
		&simCmd{name: c.arg(0), inc: inc})
	return nil
}

func cmdCall(c *simClientCmd) error {
	ss := c.ss
	ss.callNext++
	ss.calls[ss.callNext] = &simCall{target: c.arg(0)}
	c.sc.s.send(ss, wire.OpRPCCall, &wire.Call{CallID: ss.callNext, Target: c.arg(0), Method: "m", Payload: c.payload},
		c.atts, &simCmd{call: ss.callNext, name: c.arg(0)})
	return nil
}

func cmdReply(c *simClientCmd) error {
	dlv := wire.DeliveryID(c.serial(wire.FamDelivery, 0))
	rc := wire.ReplyCapability{CallID: c.ss.caps[dlv], RequestDeliveryID: dlv}
	if c.name == "reply" {
		c.sc.s.send(c.ss, wire.OpRPCReply, &wire.Reply{ReplyCapability: rc, Outcome: c.payload}, c.atts,
			&simCmd{dlv: dlv, call: rc.CallID})
	} else {
		c.sc.s.send(c.ss, wire.OpRPCResponderRelease, &wire.ResponderRelease{ReplyCapability: rc}, nil,
			&simCmd{dlv: dlv, call: rc.CallID})
	}
	return nil
}

func cmdCancel(c *simClientCmd) error {
	id := wire.CallID(c.serial(wire.FamCall, 0))
	c.sc.s.send(c.ss, wire.OpRPCCancel, &wire.Cancel{CallID: id}, nil, &simCmd{call: id})
	return nil
}

func cmdDeclare(c *simClientCmd) error {
	r := wire.RetainNone
	if c.arg(1) == "latest" {
		r = wire.RetainLatest
	}
	c.sc.s.send(c.ss, wire.OpTopicDeclare, &wire.Declare{Name: c.arg(0), Retained: r}, nil, &simCmd{topic: c.arg(0)})
	return nil
}

func cmdTopicName(c *simClientCmd) error {
	op := map[string]wire.Op{"clear": wire.OpTopicClear, "delete": wire.OpTopicDelete}[c.name]
	c.sc.s.send(c.ss, op, &wire.TopicName{Name: c.arg(0)}, nil, &simCmd{topic: c.arg(0)})
	return nil
}

func cmdSubscribe(c *simClientCmd) error {
	b := &wire.Subscribe{Topic: c.arg(0), Mode: wire.ModeBounded, MaxQueued: uint32(c.args.num("q", 1)),
		MaxInFlight: uint32(c.args.num("f", 1)), ReplayLatest: slices.Contains(c.pos, "replay")}
	if c.arg(1) == "latest" {
		b.Mode = wire.ModeLatest
	}
	// await asks to wait for the topic's declaration.
	await := slices.Contains(c.pos, "await")
	if await {
		b.AwaitTopic = wire.Some(true)
	}
	c.sc.s.send(c.ss, wire.OpSubscribe, b, nil, &simCmd{topic: b.Topic, mode: b.Mode, await: await})
	return nil
}

func cmdUnsubscribe(c *simClientCmd) error {
	id := wire.SubID(c.serial(wire.FamSub, 0))
	c.sc.s.send(c.ss, wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: id}, nil, &simCmd{sub: id})
	return nil
}

func cmdPublish(c *simClientCmd) error {
	c.sc.s.send(c.ss, wire.OpPublish, &wire.Publish{Topic: c.arg(0), Payload: c.payload}, c.atts, &simCmd{topic: c.arg(0)})
	return nil
}

func cmdConsume(c *simClientCmd) error {
	var ids []wire.DeliveryID
	for i := range c.pos {
		ids = append(ids, wire.DeliveryID(c.serial(wire.FamDelivery, i)))
	}
	simPending(ids, c.ss.consuming, 1)
	c.sc.s.send(c.ss, wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: ids}, nil, &simCmd{dlvs: ids})
	return nil
}

func cmdAllocate(c *simClientCmd) error {
	size, err := strconv.ParseUint(c.arg(0), 10, 64)
	if err != nil {
		return fmt.Errorf("allocate: %v", err)
	}
	ctype := "application/octet-stream"
	c.sc.s.send(c.ss, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: size, ContentType: ctype}, nil,
		&simCmd{size: size, ctype: ctype})
	return nil
}

func cmdSeal(c *simClientCmd) error {
	own := c.serial(wire.FamOwn, 0)
	h := c.ss.holds[own]
	if h == nil || !h.writer {
		return fmt.Errorf("%s is no writer of %s", c.arg(0), c.cl.id)
	}
	h.seals++
	gen := uint64(c.args.num("gen", 1))
	c.sc.s.send(c.ss, wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: h.art, Generation: gen,
		OwnerID: wire.HoldOwner(wire.HoldID(own))}}, nil, &simCmd{own: own, gen: gen})
	return nil
}

func cmdRefOwner(c *simClientCmd) error {
	p, err := c.sc.ref(c.ss, c.arg(0))
	if err != nil {
		return err
	}
	op := map[string]wire.Op{"open": wire.OpArtifactOpen, "retain": wire.OpArtifactRetain}[c.name]
	c.sc.s.send(c.ss, op, &p, nil, &simCmd{ref: p.Ref, owners: []wire.OwnerID{p.OwnerID}})
	return nil
}

func cmdRelease(c *simClientCmd) error {
	var ids []wire.OwnerID
	for i := range c.pos {
		ids = append(ids, wire.HoldOwner(wire.HoldID(c.serial(wire.FamOwn, i))))
	}
	simPending(ids, c.ss.releasing, 1)
	c.sc.s.send(c.ss, wire.OpArtifactRelease, &wire.Release{OwnerIDs: ids}, nil, &simCmd{owners: ids})
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
		i := 0
		if idx != "" {
			var err error
			if i, err = strconv.Atoi(idx); err != nil {
				return wire.RefOwner{}, fmt.Errorf("%s: %v", spec, err)
			}
		}
		if dv := ss.dlvs[wire.DeliveryID(n)]; dv != nil && i < len(dv.atts) {
			return wire.RefOwner{Ref: dv.atts[i].Ref, OwnerID: wire.DeliveryOwner(wire.DeliveryID(n))}, nil
		}
	}
	return wire.RefOwner{}, fmt.Errorf("%s holds no %s", ss.name, spec)
}
