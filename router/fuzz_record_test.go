package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/internal/wiretest"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// The seed corpus of FuzzConnection: sessions of the SDK recorded through a
// tapping transport against a router of each store mode, and malformed
// streams the SDK cannot send, built frame by frame, for each mode.
// Recording replays every seed through the fuzz harness, and an SDK
// session's replay must get the very answers its recording got, so a seed
// exercises what its name says. Rewrite the corpus with
//
//	go test -run TestRecordFuzzSeeds ./router/ -args -record

var recordSeeds = flag.Bool("record", false, "rewrite testdata/fuzz/FuzzConnection from recorded sessions (TestRecordFuzzSeeds)")

func TestRecordFuzzSeeds(t *testing.T) {
	if !*recordSeeds {
		t.Skip("rewrites the seed corpus; run with -args -record")
	}
	cf := newConnFuzzer(t)
	dir := filepath.Join("testdata", "fuzz", "FuzzConnection")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The recorded seeds are all written again below, and a session's cut
	// seeds are named by where the cuts fell: remove the old ones first so
	// that none outlives its session. Seeds the fuzzer found stay.
	for _, pattern := range []string{"session-*", "malformed-*"} {
		old, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	write := func(name string, stream, plan []byte) {
		t.Helper()
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\n", stream, plan)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	replay := func(name string, stream, plan []byte) *fuzzTranscript {
		t.Helper()
		tr, err := cf.run(stream, plan)
		if err != nil {
			t.Fatalf("seed %s: %v", name, err)
		}
		return tr
	}

	for _, s := range seedSessions() {
		for _, mode := range []store.Mode{store.ModeFiles, store.ModePool} {
			recordSeedsOf(t, s, mode, replay, write)
		}
	}
	for _, m := range malformedSeeds() {
		var stream []byte
		plan := []byte{m.end}
		for _, f := range m.frames {
			stream = append(stream, f...)
			plan = binary.AppendUvarint(plan, uint64(len(f)))
		}
		for _, suffix := range []string{"", "-pool"} {
			if suffix != "" {
				plan = append([]byte{plan[0] | 2}, plan[1:]...)
			}
			tr := replay(m.name+suffix, stream, plan)
			if m.end == 0 && !tr.closing {
				t.Fatalf("seed %s: no connection.closing", m.name+suffix)
			}
			write("malformed-"+m.name+suffix, stream, plan)
		}
	}
}

// recordSeedsOf records one session against a router of the given store
// mode and writes its seeds.
func recordSeedsOf(t *testing.T, s seedSession, mode store.Mode, replay func(name string, stream, plan []byte) *fuzzTranscript,
	write func(name string, stream, plan []byte)) {
	t.Helper()
	name := s.name
	if mode == store.ModePool {
		name += "-pool"
	}
	// The seeds as recorded replay the router's own reads, so they run as
	// the session did; the small-pieces seed steps through torn frames,
	// which numbers deliveries as the recording did only where no read of
	// the session held two commands that a delivery could come between:
	// record again until every seed agrees.
	for attempt := 1; ; attempt++ {
		rec := recordSession(t, s.run, mode)
		files, err := sessionSeeds(name, rec, mode == store.ModePool, replay)
		if err == nil {
			for _, f := range files {
				write("session-"+f.name, f.stream, f.plan)
			}
			t.Logf("session %s: %d bytes in %d reads, %d commands answered", name, len(rec.stream),
				len(uvarints(rec.reads)), len(rec.outcomes))
			return
		}
		if attempt == 10 {
			t.Fatal(err)
		}
		t.Logf("session %s, recording %d: %v; recording again", name, attempt, err)
	}
}

type seedFile struct {
	name         string
	stream, plan []byte
}

// sessionSeeds makes a recorded session's seeds and checks each replays
// with the answers the recording got: written as recorded (the client
// vanishes after its last reply), with the router closing instead, in
// small pieces, and cut short (the client leaving or the router closing
// with services, calls, subscriptions and holds still alive).
func sessionSeeds(name string, rec recording, pool bool, replay func(name string, stream, plan []byte) *fuzzTranscript) ([]seedFile, error) {
	var store byte // plan[0] bit 1
	if pool {
		store = 2
	}
	files := []seedFile{
		{name, rec.stream, append([]byte{store | 1}, rec.reads...)},
		{name + "-router-closes", rec.stream, append([]byte{store}, rec.reads...)},
		{name + "-small-pieces", rec.stream, smallPieces(store, len(rec.stream))},
	}
	sizes := uvarints(rec.reads)
	for i, cut := range []int{len(sizes) / 3, len(sizes) / 2, 2 * len(sizes) / 3} {
		if cut == 0 {
			continue
		}
		n, plan := 0, []byte{store | byte(i%2)}
		for _, k := range sizes[:cut] {
			n += k
			plan = binary.AppendUvarint(plan, uint64(k))
		}
		files = append(files, seedFile{fmt.Sprintf("%s-cut-%d", name, cut), rec.stream[:n], plan})
	}
	for _, f := range files {
		tr := replay(f.name, f.stream, f.plan)
		for id, out := range tr.outcomes {
			if rec.outcomes[id] != out {
				return nil, fmt.Errorf("seed %s answers msg-%d with %v, recorded %v", f.name, id, out, rec.outcomes[id])
			}
		}
		if len(f.stream) == len(rec.stream) && len(tr.outcomes) != len(rec.outcomes) {
			return nil, fmt.Errorf("seed %s answers %d commands, recorded %d", f.name, len(tr.outcomes), len(rec.outcomes))
		}
	}
	return files, nil
}

func uvarints(b []byte) []int {
	var out []int
	for len(b) > 0 {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			break
		}
		b, out = b[k:], append(out, int(v))
	}
	return out
}

// smallPieces is a plan that writes n bytes in chunks of 1 to 13 bytes,
// the router closing at the end: every frame arrives torn.
func smallPieces(store byte, n int) []byte {
	plan := []byte{store}
	for i := 0; n > 0; i++ {
		k := 1 + (i*7)%13
		plan = binary.AppendUvarint(plan, uint64(k))
		n -= k
	}
	return plan
}

// recording is one session's client-to-router bytes, the sizes of the
// router's reads of them as plan uvarints, and how each command was
// answered.
type recording struct {
	stream, reads []byte
	outcomes      map[uint64]fuzzOutcome
}

// recordTap is the client's end of the transport: it keeps everything
// written and read.
type recordTap struct {
	net.Conn
	mu     sync.Mutex
	stream []byte
	read   bytes.Buffer
}

func (t *recordTap) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.stream = append(t.stream, p...)
	t.mu.Unlock()
	return t.Conn.Write(p)
}

func (t *recordTap) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	t.mu.Lock()
	t.read.Write(p[:n])
	t.mu.Unlock()
	return n, err
}

// readSizes is the router's end of a recorded session's transport: it
// keeps the size of every read that returned bytes.
type readSizes struct {
	net.Conn
	mu    sync.Mutex
	sizes []int
}

func (r *readSizes) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if n > 0 {
		r.mu.Lock()
		r.sizes = append(r.sizes, n)
		r.mu.Unlock()
	}
	return n, err
}

// plan is the reads as plan uvarints, covering all n bytes of the stream
// (bytes the router never read, after its last read, are one last piece).
func (r *readSizes) plan(n int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var plan []byte
	for _, k := range r.sizes {
		plan = binary.AppendUvarint(plan, uint64(k))
		n -= k
	}
	if n > 0 {
		plan = binary.AppendUvarint(plan, uint64(n))
	}
	return plan
}

// recordSession runs a session against a new router of its own, so that
// its ids start where the fuzz harness's do, and rewrites the router's
// random store id to the pinned one.
func recordSession(t *testing.T, run func(ctx context.Context, t *testing.T, nc net.Conn, root string), mode store.Mode) recording {
	t.Helper()
	root := shmtest.Dir(t, "flybus-seed-")
	defer os.RemoveAll(root) // at once: a test records many sessions
	r, err := New(Config{StoreRoot: root, StoreMode: mode, Policy: OpenPolicy(), Limits: fuzzLimits()})
	if err != nil {
		t.Fatal(err)
	}
	// The plan is cut where the router's reads fell, not where the client
	// wrote: the router takes what one read returned as one step, and a
	// delivery a step readied (a queued message after a credit came back)
	// is numbered before the next read's commands run. Cut at the client's
	// writes, a replay could run as one step what the recording ran as
	// two, and number its deliveries differently.
	a, nc := memPipe(0)
	reads := &readSizes{Conn: a}
	if err := r.Serve(reads); err != nil {
		t.Fatal(err)
	}
	tap := &recordTap{Conn: nc}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	func() {
		defer func() {
			if p := recover(); p != nil {
				if f, ok := p.(seedFailure); ok {
					t.Fatalf("recording: %v", f.err)
				}
				panic(p)
			}
		}()
		run(ctx, t, tap, root)
	}()
	tap.Close()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	rec := recording{stream: bytes.ReplaceAll(tap.stream, []byte(r.StoreID().String()), []byte(wire.StoreID(fuzzTag).String())),
		reads: reads.plan(len(tap.stream)), outcomes: map[uint64]fuzzOutcome{}}
	for env, err := range wiretest.NewReader(bytes.NewReader(tap.read.Bytes())).Envelopes() {
		if err != nil || env.Kind != wire.KindReply {
			continue
		}
		out := fuzzOutcome{op: env.Op, code: "ok"}
		be, err := env.DecodeReply(replyValue(env.Op))
		if err != nil {
			t.Fatalf("recording: a malformed %s reply: %v", env.Op, err)
		}
		if be != nil {
			out.code = be.Code.String()
		}
		rec.outcomes[uint64(env.ReplyTo.V)] = out
	}
	return rec
}

type seedSession struct {
	name string
	run  func(ctx context.Context, t *testing.T, nc net.Conn, root string)
}

func seedConnect(ctx context.Context, t *testing.T, nc net.Conn, root, id string) *client.Client {
	t.Helper()
	c, err := client.Connect(ctx, nc, client.Config{ClientID: id, ClientIncarnation: "inc-" + id, StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// must ends a recording session on an error; recordSession reports it.
func must[T any](v T, err error) T {
	if err != nil {
		panic(seedFailure{err})
	}
	return v
}

type seedFailure struct{ err error }

func seedBytes(n int, salt byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ salt
	}
	return b
}

func hexDigest(b []byte) string {
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:])
}

// seedArtifact allocates, writes and seals one artifact. The replay does
// not write the staging file (the bytes never cross the connection), so a
// recorded seal checks no digest unless the digest is of zeros.
func seedArtifact(ctx context.Context, t *testing.T, c *client.Client, data []byte) *client.Artifact {
	t.Helper()
	w := must(c.Allocate(ctx, int64(len(data)), "application/x-seed"))
	must(w.Write(data))
	return must(w.Seal(ctx))
}

// seedView maps a and fails the session with what unless it holds want.
func seedView(ctx context.Context, t *testing.T, a *client.Artifact, want []byte, what string) {
	t.Helper()
	v := must(a.View(ctx))
	if !bytes.Equal(v.Bytes(), want) {
		t.Fatal(what)
	}
	v.Close()
}

func seedSessions() []seedSession {
	return []seedSession{
		{"hello", func(ctx context.Context, t *testing.T, nc net.Conn, root string) {
			seedConnect(ctx, t, nc, root, "seed-hello").Close()
		}},
		{"rpc", func(ctx context.Context, t *testing.T, nc net.Conn, root string) {
			c := seedConnect(ctx, t, nc, root, "seed-rpc")
			svc := must(c.Register(ctx, "seed.svc", client.Queued(2), client.InFlight(1)))
			// A call answered.
			p := must(c.Call(ctx, "seed.svc", "Seed.Echo", map[string]int{"n": 1}, client.Pin(svc.Incarnation())))
			req := must(svc.Next(ctx))
			must(req.Reply(ctx, map[string]int{"n": 2}))
			req.Close()
			must(p.Result(ctx)).Close()
			// A call cancelled after dispatch, its request given up.
			p = must(c.Call(ctx, "seed.svc", "Seed.Slow", map[string]int{}))
			req = must(svc.Next(ctx))
			must(p.Cancel(ctx))
			req.Close()
			p.Close()
			// A call queued behind a dispatched one, cancelled before dispatch.
			p = must(c.Call(ctx, "seed.svc", "Seed.First", map[string]int{}))
			q := must(c.Call(ctx, "seed.svc", "Seed.Second", map[string]int{}))
			req = must(svc.Next(ctx))
			must(q.Cancel(ctx))
			q.Close()
			must(req.Reply(ctx, map[string]int{}))
			req.Close()
			must(p.Result(ctx)).Close()
			// Refused calls: no service, a stale incarnation.
			if _, err := c.Call(ctx, "seed.none", "X", map[string]int{}); err == nil {
				t.Fatal("a call to no service was admitted")
			}
			if _, err := c.Call(ctx, "seed.svc", "X", map[string]int{}, client.Pin(svc.Incarnation()+1)); err == nil {
				t.Fatal("a call to another incarnation was admitted")
			}
			svc.Close()
			c.Close()
		}},
		{"pubsub", func(ctx context.Context, t *testing.T, nc net.Conn, root string) {
			c := seedConnect(ctx, t, nc, root, "seed-pubsub")
			must(c.DeclareTopic(ctx, "seed.topic", wire.RetainLatest))
			must(c.DeclareTopic(ctx, "seed.topic", wire.RetainLatest))
			s := must(c.Subscribe(ctx, "seed.topic", client.Bounded(), client.Queued(2), client.InFlight(1)))
			for n := range 3 {
				must(c.Publish(ctx, "seed.topic", map[string]int{"n": n}))
			}
			for range 2 {
				must(s.Next(ctx)).Close()
			}
			l := must(c.Subscribe(ctx, "seed.topic", client.Replay()))
			must(l.Next(ctx)).Close()
			if _, err := c.Subscribe(ctx, "seed.none"); err == nil {
				t.Fatal("subscribed to no topic")
			}
			l.Close()
			s.Close()
			must(c.ClearTopic(ctx, "seed.topic"))
			must(c.DeleteTopic(ctx, "seed.topic"))
			c.Close()
		}},
		{"artifacts", func(ctx context.Context, t *testing.T, nc net.Conn, root string) {
			c := seedConnect(ctx, t, nc, root, "seed-artifacts")
			data := seedBytes(5000, 1)
			a := seedArtifact(ctx, t, c, data)
			must(c.DeclareTopic(ctx, "seed.frames", wire.RetainLatest))
			s := must(c.Subscribe(ctx, "seed.frames"))
			must(c.Publish(ctx, "seed.frames", map[string]int{"size": len(data)}, client.Attach("frame", a)))
			m := must(s.Next(ctx))
			img := must(m.Artifact("frame"))
			seedView(ctx, t, img, data, "view differs")
			kept := must(img.Retain(ctx))
			img.Close()
			m.Close()
			if got := must(kept.ReadAll(ctx)); !bytes.Equal(got, data) {
				t.Fatal("read differs")
			}
			kept.Close()
			a.Close()
			// A writer abandoned, a seal without digest, a digest mismatch,
			// an allocation over maxArtifactBytes.
			w := must(c.Allocate(ctx, 100, "application/x-seed"))
			w.Close()
			w = must(c.Allocate(ctx, 64, "application/x-seed"))
			must(w.Seal(ctx, client.Digest(hexDigest(make([]byte, 64))))).Close()
			w = must(c.Allocate(ctx, 64, "application/x-seed"))
			must(w.Write(seedBytes(64, 3)))
			if _, err := w.Seal(ctx, client.Digest(hexDigest(seedBytes(64, 4)))); err == nil {
				t.Fatal("a wrong digest was sealed")
			}
			if _, err := c.Allocate(ctx, 2<<20, "application/x-seed"); err == nil {
				t.Fatal("allocated over maxArtifactBytes")
			}
			s.Close()
			must(c.ClearTopic(ctx, "seed.frames"))
			c.Close()
		}},
		{"rpc-artifacts", func(ctx context.Context, t *testing.T, nc net.Conn, root string) {
			c := seedConnect(ctx, t, nc, root, "seed-rpc-artifacts")
			svc := must(c.Register(ctx, "seed.render"))
			in := seedBytes(3000, 5)
			a := seedArtifact(ctx, t, c, in)
			p := must(c.Call(ctx, "seed.render", "Render", map[string]int{}, client.Attach("in", a)))
			a.Close()
			req := must(svc.Next(ctx))
			ra := must(req.Artifact("in"))
			if got := must(ra.ReadAll(ctx)); !bytes.Equal(got, in) {
				t.Fatal("request artifact differs")
			}
			ra.Close()
			outData := seedBytes(2000, 6)
			out := seedArtifact(ctx, t, c, outData)
			must(req.Reply(ctx, map[string]int{"size": len(outData)}, client.Attach("out", out)))
			out.Close()
			req.Close()
			res := must(p.Result(ctx))
			img := must(res.Artifact("out"))
			seedView(ctx, t, img, outData, "result artifact differs")
			img.Close()
			res.Close()
			svc.Close()
			c.Close()
		}},
		{"backpressure", func(ctx context.Context, t *testing.T, nc net.Conn, root string) {
			c := seedConnect(ctx, t, nc, root, "seed-backpressure")
			must(c.DeclareTopic(ctx, "seed.full", wire.RetainNone))
			s := must(c.Subscribe(ctx, "seed.full", client.Bounded(), client.Queued(1), client.InFlight(1)))
			refused := 0
			for n := range 4 {
				if _, err := c.Publish(ctx, "seed.full", map[string]int{"n": n}); err != nil {
					refused++
				}
			}
			if refused == 0 {
				t.Fatal("no publication was refused")
			}
			s.Close()
			must(c.DeleteTopic(ctx, "seed.full"))
			svc := must(c.Register(ctx, "seed.busy", client.Queued(1), client.InFlight(1)))
			var calls []*client.PendingCall
			for range 3 {
				if p, err := c.Call(ctx, "seed.busy", "M", map[string]int{}); err == nil {
					calls = append(calls, p)
				}
			}
			svc.Close()
			for _, p := range calls {
				p.Result(ctx)
				p.Close()
			}
			c.Close()
		}},
	}
}

// malformedSeed is a stream the SDK would never send, one frame per write.
type malformedSeed struct {
	name   string
	end    byte // the plan's first byte
	frames [][]byte
}

func seedFrame(json string) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(json))), json...)
}

func seedCommand(id int, op, body, atts string) string {
	return fmt.Sprintf(`{"protocol":"flybus","major":1,"minor":0,"id":"msg-%d","replyTo":null,"kind":"command","op":%q,"body":%s,"attachments":%s}`,
		id, op, body, atts)
}

func malformedSeeds() []malformedSeed {
	hello := seedCommand(1, "bus.hello", `{"clientId":"seed-raw","clientIncarnation":"inc-raw","supportedMajors":[1]}`, `[]`)
	ref := fmt.Sprintf(`{"storeId":%q,"artifactId":"artifact-1","generation":"1","byteLength":"64","contentType":"x/y","digest":null}`,
		wire.StoreID(fuzzTag).String())
	att := func(name string) string { return fmt.Sprintf(`{"name":%q,"ref":%s,"ownerId":"own-1"}`, name, ref) }
	var many []string
	for i := range 33 {
		many = append(many, att(fmt.Sprintf("a%d", i)))
	}
	deep := strings.Repeat(`{"a":`, 2*wire.MaxDepth) + "1" + strings.Repeat("}", 2*wire.MaxDepth)
	after := func(name string, frames ...string) malformedSeed {
		m := malformedSeed{name: name, frames: [][]byte{seedFrame(hello)}}
		for _, f := range frames {
			m.frames = append(m.frames, seedFrame(f))
		}
		return m
	}
	raw := func(name string, b ...[]byte) malformedSeed {
		return malformedSeed{name: name, frames: append([][]byte{seedFrame(hello)}, b...)}
	}
	publish := func(id int, payload, atts string) string {
		return seedCommand(id, "publish", `{"topic":"seed.t","payload":`+payload+`}`, atts)
	}
	seeds := []malformedSeed{
		raw("zero-length", []byte{0, 0, 0, 0}),
		raw("length-over-64k", binary.LittleEndian.AppendUint32(nil, wire.MaxEnvelopeBytes+1)),
		raw("length-4g", []byte{0xff, 0xff, 0xff, 0xff}),
		raw("torn-frame", seedFrame(seedCommand(2, "topic.clear", `{"name":"x"}`, `[]`))[:20]),
		after("bad-json", `{"protocol":`),
		after("duplicate-key", strings.Replace(seedCommand(2, "topic.clear", `{"name":"x"}`, `[]`), `"major":1,`, `"major":1,"major":1,`, 1)),
		after("escaped-key", strings.Replace(seedCommand(2, "topic.clear", `{"name":"x"}`, `[]`), `"op"`, `"\u006fp"`, 1)),
		after("unknown-field", strings.Replace(seedCommand(2, "topic.clear", `{"name":"x"}`, `[]`), `"minor":0,`, `"minor":0,"extra":1,`, 1)),
		after("invalid-utf8", seedCommand(2, "topic.clear", "{\"name\":\"\xff\"}", `[]`)),
		after("kind-reply", strings.Replace(seedCommand(2, "topic.clear", `{"name":"x"}`, `[]`), `"kind":"command"`, `"kind":"reply"`, 1)),
		after("reply-to-set", strings.Replace(seedCommand(2, "topic.clear", `{"name":"x"}`, `[]`), `"replyTo":null`, `"replyTo":"msg-1"`, 1)),
		after("non-canonical-id", strings.Replace(seedCommand(2, "topic.clear", `{"name":"x"}`, `[]`), `"msg-2"`, `"msg-02"`, 1)),
		after("id-repeated", seedCommand(1, "topic.clear", `{"name":"x"}`, `[]`)),
		after("second-hello", strings.Replace(hello, `"msg-1"`, `"msg-2"`, 1)),
		after("minor-1", strings.Replace(seedCommand(2, "topic.clear", `{"name":"x"}`, `[]`), `"minor":0`, `"minor":1`, 1)),
		after("unknown-op", seedCommand(2, "topic.rename", `{"name":"x"}`, `[]`), seedCommand(3, "topic.clear", `{"name":"x"}`, `[]`)),
		after("attachments-not-allowed", seedCommand(2, "topic.clear", `{"name":"x"}`, `[`+att("a")+`]`)),
		after("33-attachments", publish(2, `{}`, `[`+strings.Join(many, ",")+`]`)),
		after("duplicate-attachment", publish(2, `{}`, `[`+att("a")+`,`+att("a")+`]`)),
		after("deep-payload", publish(2, deep, `[]`)),
		after("nan-payload", publish(2, `{"x":NaN}`, `[]`)),
		after("huge-number", publish(2, `{"x":1e400}`, `[]`)),
		after("payload-not-object", publish(2, `[1]`, `[]`)),
		after("foreign-artifact", publish(2, `{}`, `[`+att("a")+`]`),
			seedCommand(3, "artifact.seal", `{"artifactId":"artifact-9","generation":"1","ownerId":"own-3","digest":null}`, `[]`),
			seedCommand(4, "artifact.open", `{"ref":`+ref+`,"ownerId":"own-1"}`, `[]`),
			seedCommand(5, "artifact.release", `{"ownerIds":["own-7","dlv-2"]}`, `[]`),
			seedCommand(6, "delivery.consumed", `{"deliveryIds":["dlv-1"]}`, `[]`),
			seedCommand(7, "rpc.reply", `{"callId":"call-1","requestDeliveryId":"dlv-1","outcome":{}}`, `[]`),
			seedCommand(8, "rpc.responder.release", `{"callId":"call-1","requestDeliveryId":"dlv-1"}`, `[]`),
			seedCommand(9, "unsubscribe", `{"subscriptionId":"sub-4"}`, `[]`),
			seedCommand(10, "service.unregister", `{"name":"seed.svc","serviceIncarnation":"svc-2"}`, `[]`),
			seedCommand(11, "rpc.cancel", `{"callId":"call-5"}`, `[]`)),
		after("call-ids", seedCommand(2, "service.register", `{"name":"seed.s","maxQueued":1,"maxInFlight":1}`, `[]`),
			seedCommand(3, "rpc.call", `{"callId":"call-2","target":"seed.s","expectedIncarnation":null,"method":"M","payload":{}}`, `[]`),
			seedCommand(4, "rpc.call", `{"callId":"call-2","target":"seed.s","expectedIncarnation":null,"method":"M","payload":{}}`, `[]`),
			seedCommand(5, "rpc.call", `{"callId":"call-1","target":"seed.s","expectedIncarnation":"svc-1","method":"M","payload":{}}`, `[]`)),
		after("allocate-seal-twice", seedCommand(2, "artifact.allocate", `{"byteLength":"64","contentType":"x/y"}`, `[]`),
			seedCommand(3, "artifact.seal", `{"artifactId":"artifact-1","generation":"1","ownerId":"own-1","digest":null}`, `[]`),
			seedCommand(4, "artifact.seal", `{"artifactId":"artifact-1","generation":"1","ownerId":"own-1","digest":null}`, `[]`),
			seedCommand(5, "artifact.retain", `{"ref":`+ref+`,"ownerId":"own-2"}`, `[]`),
			seedCommand(6, "artifact.release", `{"ownerIds":["own-2","own-3","own-2"]}`, `[]`)),
		{name: "command-before-hello", frames: [][]byte{seedFrame(seedCommand(1, "topic.clear", `{"name":"x"}`, `[]`))}},
		{name: "hello-major-2", frames: [][]byte{seedFrame(strings.Replace(hello, `[1]`, `[2]`, 1))}},
		{name: "hello-bad-body", frames: [][]byte{seedFrame(strings.Replace(hello, `"seed-raw"`, `"a b"`, 1)), seedFrame(strings.Replace(hello, `"msg-1"`, `"msg-2"`, 1))}},
		{name: "no-hello-client-leaves", end: 1},
	}
	// The torn frame only makes sense with the client leaving mid-frame.
	for i := range seeds {
		if seeds[i].name == "torn-frame" {
			seeds[i].end = 1
		}
	}
	return seeds
}
