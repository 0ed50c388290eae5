package record

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/record/mcap"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// stream is a deterministic set of publications over three topics: frames
// with and without digests, two attachments, and payloads alone.
type streamPub struct {
	topic   string
	payload map[string]any
	atts    []streamArt
}

type streamArt struct {
	name, contentType string
	data              []byte
	digest            bool // sealed with client.Digest
}

func testStream(n int) []streamPub {
	rng := rand.New(rand.NewPCG(1, 2))
	bytesOf := func(size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var out []streamPub
	for i := range n {
		p := streamPub{payload: map[string]any{"i": i}}
		switch i % 3 {
		case 0:
			p.topic = "cam.front"
			p.atts = []streamArt{{name: "frame", contentType: "image/x-rgba", data: bytesOf(96 << 10), digest: true}}
		case 1:
			p.topic = "cam.rear"
			p.atts = []streamArt{{name: "frame", contentType: "image/x-rgba", data: bytesOf(50000)},
				{name: "depth", contentType: "application/octet-stream", data: bytesOf(7000 + i)}}
		default:
			p.topic = "telemetry"
			p.payload["speed"] = float64(i) / 2
		}
		out = append(out, p)
	}
	return out
}

var streamTopics = []struct {
	name string
	ret  wire.Retention
}{{"cam.front", wire.RetainNone}, {"cam.rear", wire.RetainNone}, {"telemetry", wire.RetainLatest}}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func publishStream(t *testing.T, c *client.Client, pubs []streamPub) {
	t.Helper()
	ctx := bustest.Ctx(t)
	for _, p := range pubs {
		var atts []client.Attachment
		for _, a := range p.atts {
			w, err := c.Allocate(ctx, int64(len(a.data)), a.contentType)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(a.data); err != nil {
				t.Fatal(err)
			}
			var opts []client.SealOption
			if a.digest {
				opts = append(opts, client.Digest(sum(a.data)))
			}
			art, err := w.Seal(ctx, opts...)
			if err != nil {
				t.Fatal(err)
			}
			atts = append(atts, client.Attach(a.name, art))
		}
		if _, err := c.Publish(ctx, p.topic, p.payload, atts...); err != nil {
			t.Fatal(err)
		}
		for _, a := range atts {
			a.Artifact.Close()
		}
	}
}

// record records pubs from h's router with two recorders at once, one
// uncompressed and one zstd, both split by size, and returns their parts.
func recordStream(t *testing.T, h *bustest.Harness, dir string, pubs []streamPub) (plain, zstd []string) {
	t.Helper()
	ctx := bustest.Ctx(t)
	pub := h.Dial("camera")
	for _, tp := range streamTopics {
		bustest.MustDeclare(t, pub, tp.name, tp.ret)
	}
	type job struct {
		rec  *Recorder
		subs []*client.Subscription
	}
	var jobs []job
	for _, comp := range []string{"none", "zstd"} {
		rec, err := Create(filepath.Join(dir, comp, "run.mcap"), Options{Compression: comp, ChunkSize: 64 << 10,
			SplitSize: 400_000, Mode: "bounded", Count: int64(len(pubs))})
		if err != nil {
			t.Fatal(err)
		}
		c := h.Dial("recorder-" + comp)
		j := job{rec: rec}
		for _, tp := range streamTopics {
			s, err := rec.Subscribe(ctx, c, tp.name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			j.subs = append(j.subs, s)
		}
		jobs = append(jobs, j)
	}
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { errs <- j.rec.Run(ctx, j.subs...) }()
	}
	publishStream(t, pub, pubs)
	for range jobs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range jobs {
		st := j.rec.Stats()
		if err := j.rec.Close(); err != nil {
			t.Fatal(err)
		}
		if st.Publications != uint64(len(pubs)) || len(st.Files) < 2 {
			t.Fatalf("recorded %d publications in %d files, want %d in several", st.Publications, len(st.Files), len(pubs))
		}
	}
	return jobs[0].rec.Stats().Files, jobs[1].rec.Stats().Files
}

// checkInfo checks that the parts' summaries count the stream.
func checkInfo(t *testing.T, files []string, pubs []streamPub, compression string) {
	t.Helper()
	want := map[string]uint64{}
	var bytes uint64
	for _, p := range pubs {
		want[p.topic]++
		for _, a := range p.atts {
			bytes += uint64(len(a.data))
		}
	}
	got := map[string]uint64{}
	var gotBytes uint64
	for i, f := range files {
		fi, err := Info(f)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Complete || fi.Compression != compression || fi.Part != i+1 || fi.Mode != "bounded" {
			t.Fatalf("%s: %+v", f, fi)
		}
		for _, tp := range fi.Topics {
			got[tp.Topic] += tp.Publications
			if tp.Topic == "telemetry" && tp.Retention != "latest" || tp.Topic == "cam.front" && tp.Retention != "none" {
				t.Fatalf("%s: topic %+v", f, tp)
			}
		}
		gotBytes += fi.ArtifactBytes
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || gotBytes != bytes {
		t.Fatalf("info counts %v, %d bytes; want %v, %d", got, gotBytes, want, bytes)
	}
}

// TestRecordSplitPlay records a stream split by size, uncompressed and
// zstd, plays both sets of parts as one stream each into another router,
// and checks every artifact there against the original's SHA-256.
func TestRecordSplitPlay(t *testing.T) {
	pubs := testStream(30)
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		dir := t.TempDir()
		plain, zstd := recordStream(t, h, dir, pubs)
		checkInfo(t, plain, pubs, "none")
		checkInfo(t, zstd, pubs, "zstd")
		msgs := 0
		for _, p := range pubs {
			msgs += 1 + len(p.atts)
		}
		checkWithNode(t, append(append([]string{}, plain...), zstd...), 2*msgs)

		cfg := bustest.Open()
		cfg.StoreMode = h.Mode()
		h2 := bustest.LeakChecked(t, cfg, h.Unix(), 0)
		consumer, player := h2.Dial("consumer"), h2.Dial("player")
		ctx := bustest.Ctx(t)
		var subs []*client.Subscription
		for _, topic := range []string{"cam.front", "cam.rear"} {
			bustest.MustDeclare(t, consumer, topic, wire.RetainNone)
			subs = append(subs, bustest.MustSubscribe(t, ctx, consumer, topic, client.Bounded()))
		}
		want := map[string]string{} // "i/name" -> digest
		wantCam := 0
		for i, p := range pubs {
			for _, a := range p.atts {
				want[fmt.Sprintf("%d/%s", i, a.name)] = sum(a.data)
			}
			if p.topic != "telemetry" {
				wantCam++
			}
		}
		// Two playbacks (the directory of plain parts, then the zstd parts
		// as files): each camera publication arrives twice.
		var wg sync.WaitGroup
		checked := make([]int, len(subs))
		for k, s := range subs {
			wg.Go(func() {
				for range 2 * (wantCam / 2) {
					m, err := s.Next(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					checked[k] += checkMessage(t, ctx, m, want)
				}
			})
		}
		for _, files := range [][]string{{filepath.Dir(plain[0])}, zstd} {
			r, err := Open(files...)
			if err != nil {
				t.Fatal(err)
			}
			st, err := Play(ctx, player, r, PlayOptions{Remap: map[string]string{"telemetry": "telemetry.replay"}})
			r.Close()
			if err != nil || st.Publications != uint64(len(pubs)) {
				t.Fatalf("play %v: %+v, %v", files, st, err)
			}
		}
		wg.Wait()
		if checked[0]+checked[1] != 2*(10+2*10) {
			t.Fatalf("checked %v artifacts", checked)
		}
		// The player declared the remapped topic with the recorded
		// retention, so it kept the last telemetry value.
		if ret, err := TopicRetention(ctx, player, "telemetry.replay"); err != nil || ret != wire.RetainLatest {
			t.Fatalf("telemetry.replay: %v %v", ret, err)
		}
		s := bustest.MustSubscribe(t, ctx, consumer, "telemetry.replay", client.Replay())
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		m.Decode(&got)
		m.Close()
		s.Close()
		if got["i"] != float64(29) {
			t.Fatalf("retained telemetry %v", got)
		}
		for _, s := range subs {
			s.Close()
		}
		h2.Await("the played artifacts collected", func(s router.Stats) bool { return bustest.Drained(s) })
	})
}

// checkMessage checks m's artifacts against want and closes m; it returns
// how many it checked.
func checkMessage(t *testing.T, ctx context.Context, m *client.Message, want map[string]string) int {
	defer m.Close()
	var p struct{ I int }
	if err := m.Decode(&p); err != nil {
		t.Error(err)
		return 0
	}
	n := 0
	for _, name := range m.Attachments() {
		a, err := m.Artifact(name)
		if err != nil {
			t.Error(err)
			return n
		}
		v, err := a.View(ctx)
		if err != nil {
			a.Close()
			t.Error(err)
			return n
		}
		key := fmt.Sprintf("%d/%s", p.I, name)
		if got := sum(v.Bytes()); got != want[key] {
			t.Errorf("%s on %s: digest %s, want %s", key, m.Topic, got, want[key])
		}
		v.Close()
		a.Close()
		n++
	}
	return n
}

// A recorder that is never closed (a crash) leaves a file whose finished
// chunks read as whole publications, then an error at the unfinished one.
func TestCrashLeavesReadableFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "crash.mcap")
	rec, err := Create(path, Options{ChunkSize: 1, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	data := make([]byte, 40000)
	for i := range 6 {
		data[0] = byte(i)
		if err := rec.write("t", 1, uint64(i+1), 0, []byte(`{"i":1}`), []artifactInfo{{Name: "a", ContentType: "x/y", ByteLength: uint64(len(data))}}, [][]byte{data}); err != nil {
			t.Fatal(err)
		}
	}
	// What is on disk now is what a crash would leave: the buffered tail of
	// the last chunk is not there.
	snap, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{len(snap), len(snap) - 100, len(snap) / 2, 200} {
		p := filepath.Join(dir, fmt.Sprintf("cut-%d.mcap", cut))
		os.WriteFile(p, snap[:cut], 0o644)
		r, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			pub, err := r.Next()
			if err != nil {
				if !errors.Is(err, mcap.ErrTruncated) {
					t.Fatalf("cut %d: %v", cut, err)
				}
				break
			}
			if len(pub.Artifacts) != 1 || pub.Artifacts[0].Data[0] != byte(n) || len(pub.Artifacts[0].Data) != len(data) {
				t.Fatalf("cut %d: publication %d is not whole", cut, n)
			}
			n++
		}
		r.Close()
		if cut == len(snap) && n < 5 {
			t.Fatalf("only %d of 6 publications readable after a crash", n)
		}
		fi, err := Info(p)
		if err != nil || fi.Complete || fi.Problem == "" || fi.Publications != uint64(n) {
			t.Fatalf("info of a crashed file: %+v %v", fi, err)
		}
	}
}

// Bad flybus content is an error at its offset, and nothing of the
// publication is returned.
func TestLayoutErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, fill func(w *mcap.Writer, pub, art uint16)) string {
		p := filepath.Join(dir, name)
		f, _ := os.Create(p)
		defer f.Close()
		w, _ := mcap.NewWriter(f, mcap.WriterOptions{Profile: Profile})
		s, _ := w.AddSchema(schemaName, schemaEncoding, envelopeSchema)
		pc, _ := w.AddChannel(s, "t", "json", publicationChannel("t", wire.RetainNone, "latest"))
		ac, _ := w.AddChannel(0, "t/a", "x/y", artifactChannel("t", "a", "x/y"))
		fill(w, pc, ac)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := func(n int) []byte {
		return appendEnvelope(nil, "t", 0, 1, 0, []byte(`{}`), []artifactInfo{{Name: "a", ContentType: "x/y", ByteLength: uint64(n)}})
	}
	cases := map[string]func(w *mcap.Writer, pc, ac uint16){
		"orphan": func(w *mcap.Writer, pc, ac uint16) {
			w.WriteMessages(mcap.Message{ChannelID: ac, Sequence: 1, Data: []byte("x")})
		},
		"short": func(w *mcap.Writer, pc, ac uint16) {
			w.WriteMessages(mcap.Message{ChannelID: pc, Sequence: 1, Data: env(5)}, mcap.Message{ChannelID: ac, Sequence: 1, Data: []byte("x")})
		},
		"missing": func(w *mcap.Writer, pc, ac uint16) {
			w.WriteMessages(mcap.Message{ChannelID: pc, Sequence: 1, Data: env(1)})
		},
		"sequence": func(w *mcap.Writer, pc, ac uint16) {
			w.WriteMessages(mcap.Message{ChannelID: pc, Sequence: 1, Data: env(1)}, mcap.Message{ChannelID: ac, Sequence: 2, Data: []byte("x")})
		},
		"json": func(w *mcap.Writer, pc, ac uint16) {
			w.WriteMessages(mcap.Message{ChannelID: pc, Sequence: 1, Data: []byte(`{"topic":`)})
		},
	}
	for name, fill := range cases {
		p := write(name+".mcap", fill)
		r, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := r.Next()
		var e *mcap.Error
		if pub != nil || !errors.Is(err, ErrLayout) || !errors.As(err, &e) || e.File != p || e.Offset <= 0 {
			t.Errorf("%s: %v, %v", name, pub, err)
		}
		r.Close()
	}
	// A file that is not MCAP at all.
	p := filepath.Join(dir, "text.mcap")
	os.WriteFile(p, []byte("just some text"), 0o644)
	if _, err := Open(p); !errors.Is(err, mcap.ErrNotMCAP) {
		t.Fatalf("text: %v", err)
	}
	// A flipped byte in a chunk is a CRC error, with no publication.
	good := filepath.Join(dir, "good.mcap")
	rec, _ := Create(good, Options{})
	rec.write("t", 1, 1, 0, []byte(`{}`), []artifactInfo{{Name: "a", ContentType: "x/y", ByteLength: 3}}, [][]byte{[]byte("abc")})
	rec.Close()
	b, _ := os.ReadFile(good)
	i := indexOf(b, []byte("abc"))
	b[i] = 'X'
	os.WriteFile(good, b, 0o644)
	r, err := Open(good)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if pub, err := r.Next(); pub != nil || !errors.Is(err, mcap.ErrCRC) {
		t.Fatalf("flipped byte: %v %v", pub, err)
	}
}

func indexOf(b, sub []byte) int {
	for i := range len(b) - len(sub) {
		if string(b[i:i+len(sub)]) == string(sub) {
			return i
		}
	}
	return -1
}

// Start, End, Topics and Remap choose what is played; Speed paces it.
func TestPlayOptions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "timed.mcap")
	rec, err := Create(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Publications 100 ms apart on two topics.
	for i := range 10 {
		rec.clock = func() uint64 { return 1_000_000_000 + uint64(i)*100_000_000 }
		topic := []string{"a", "b"}[i%2]
		if err := rec.write(topic, 1, uint64(i), 0, fmt.Appendf(nil, `{"i":%d}`, i), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	rec.Close()

	h := bustest.LeakChecked(t, bustest.Open(), false, 0)
	c := h.Dial("player")
	ctx := bustest.Ctx(t)
	bustest.MustDeclare(t, c, "c", wire.RetainNone)
	s := bustest.MustSubscribe(t, ctx, c, "c", client.Bounded())
	defer s.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []int
	opts := PlayOptions{Topics: []string{"a"}, Remap: map[string]string{"a": "c"}, Start: 150 * time.Millisecond, End: 650 * time.Millisecond,
		Speed: 100, Loop: false}
	var times []time.Time
	opts.OnPublish = func(p *Publication, _ client.PublishReceipt) { times = append(times, time.Now()) }
	start := time.Now()
	st, err := Play(ctx, c, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	for range st.Publications {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ I int }
		m.Decode(&p)
		m.Close()
		got = append(got, p.I)
	}
	if fmt.Sprint(got) != "[2 4 6]" {
		t.Fatalf("played %v", got)
	}
	if st.Late.Count != 3 || st.Admitted.Count != 3 || st.Late.Max > st.Admitted.Max {
		t.Fatalf("lateness %+v, admitted %+v for 3 paced publications", st.Late, st.Admitted)
	}
	// At speed 100, each 200 ms of recording takes at least 2 ms: the
	// schedule starts after start, and no publication goes before its time.
	for i := range times {
		if d := times[i].Sub(start); d < time.Duration(i)*2*time.Millisecond {
			t.Fatalf("publication %d came %v after the start", i, d)
		}
	}
}

// Lateness reads quantiles off 10 µs steps, and past 100 ms gives the
// largest it saw.
func TestLatenessQuantiles(t *testing.T) {
	var l Lateness
	if l.Quantile(0.99) != 0 {
		t.Fatal("an empty lateness has a quantile")
	}
	for i := range 100 {
		l.add(time.Duration(i) * time.Millisecond / 10) // 0, 0.1 ms, ... 9.9 ms
	}
	l.add(-time.Millisecond) // early counts as on time
	if l.Count != 101 || l.Max != 9900*time.Microsecond {
		t.Fatalf("%+v", l)
	}
	if q := l.Quantile(0.5); q != 4910*time.Microsecond && q != 5010*time.Microsecond {
		t.Fatalf("p50 %v", q)
	}
	if q := l.Quantile(1); q != 9900*time.Microsecond {
		t.Fatalf("p100 %v", q)
	}
	l.add(250 * time.Millisecond)
	if q := l.Quantile(1); q != 250*time.Millisecond {
		t.Fatalf("past the last step: %v", q)
	}
}
