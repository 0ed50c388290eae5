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
		s.coreCfg.limits = s.lim
		s.k = newCore(s.coreCfg)
		return nil
	case "connect":
		for _, name := range pos {
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
			s.send(ss, wire.OpRPCReply, &wire.Reply{ReplyCapability: wire.ReplyCapability{CallID: call, RequestDeliveryID: dlv}, Outcome: payload}, attachments,
				&simCmd{dlv: dlv, call: call})
		} else {
			s.send(ss, wire.OpRPCResponderRelease, &wire.ResponderRelease{ReplyCapability: wire.ReplyCapability{CallID: call, RequestDeliveryID: dlv}}, nil,
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
			ids = append(ids, wire.DeliveryID(serial(wire.FamDelivery, i)))
		}
		simPending(ids, ss.consuming, 1)
		s.send(ss, wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: ids}, nil, &simCmd{dlvs: ids})
	case "allocate":
		size, err := strconv.ParseUint(arg(0), 10, 64)
		if err != nil {
			return fmt.Errorf("allocate: %v", err)
		}
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
		s.send(ss, wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: h.art, Generation: gen,
			OwnerID: wire.HoldOwner(wire.HoldID(own))}}, nil, &simCmd{own: own, gen: gen})
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
			ids = append(ids, wire.HoldOwner(wire.HoldID(serial(wire.FamOwn, i))))
		}
		simPending(ids, ss.releasing, 1)
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
