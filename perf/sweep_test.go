package perf

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSweepGridPoints(t *testing.T) {
	pts, err := SweepGrid{}.Points(3)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, p := range pts {
		count[p.Set]++
		if p.Seconds != 3 {
			t.Errorf("%s: %g s", p.Label(), p.Seconds)
		}
	}
	want := map[string]int{SetConsumers: 4, SetRate: 3, SetSize: 6, SetSmall: 4}
	for set, n := range want {
		if count[set] != n {
			t.Errorf("set %s has %d points, want %d", set, count[set], n)
		}
	}
	if got := frameSizes(pts); !slices.Equal(got, []int{FeedFrameBytes, FrameBytes, UHDFrameBytes}) {
		t.Errorf("frame sizes %v", got)
	}
	// A subset keeps the order of the sets.
	pts, err = SweepGrid{Sets: []string{SetSmall, SetRate}, Senders: []int{2}}.Points(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 5 || pts[0].Set != SetRate || pts[3].Kind != PointPubSub || pts[4].Kind != PointRPC || pts[4].Senders != 2 {
		t.Errorf("subset %+v", pts)
	}
	for name, g := range map[string]SweepGrid{
		"UnknownSet":   {Sets: []string{"colour"}},
		"TooBig":       {Sets: []string{SetSize}, Sizes: []int{1 << 30}},
		"ZeroRate":     {Sets: []string{SetRate}, Rates: []int{0, 60}},
		"ManySenders":  {Sets: []string{SetSmall}, Senders: []int{1000}},
		"ManyConsumer": {Sets: []string{SetConsumers}, Consumers: []int{100000}},
	} {
		if _, err := g.Points(1); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSweepJudge(t *testing.T) {
	p := SweepPoint{Set: SetRate, Kind: PointFrames, Consumers: 4, RateHz: 100, FrameBytes: FeedFrameBytes, Seconds: 1}
	good := &PointResult{Planned: 100, Sent: 100, SendNs: time.Second, WallNs: time.Second, Deliveries: 400,
		MoverCPU: 0.2, ClientCPU: 0.3, Latency: Latency{Count: 400, P50Ns: 1e6, P99Ns: 5e6}}
	if v := judgePoint(p, good, 2); !v.KeepsUp || v.Bound != "" || len(v.Misses) != 0 {
		t.Errorf("good point: %+v", v)
	}
	slow := *good
	slow.Sent, slow.Coalesced, slow.Latency.P99Ns, slow.MoverCPU = 80, 40, 20e6, 0.95
	v := judgePoint(p, &slow, 2)
	if v.KeepsUp || len(v.Misses) != 3 || v.Bound != "mover" {
		t.Errorf("slow point: %+v", v)
	}
	busy := *good
	busy.ClientCPU = 1.7
	if v := judgePoint(p, &busy, 2); !v.KeepsUp || v.Bound != "machine" {
		t.Errorf("busy machine: %+v", v)
	}
	small := SweepPoint{Set: SetSmall, Kind: PointRPC, Senders: 8, PayloadBytes: SmallPayloadBytes, Seconds: 1}
	if v := judgePoint(small, &PointResult{Sent: 10, WallNs: time.Second, MoverCPU: 0.99}, 2); v.KeepsUp || v.Bound != "mover" || len(v.Misses) != 0 {
		t.Errorf("small point: %+v", v)
	}
}

func TestSweepSmallPayload(t *testing.T) {
	for _, size := range []int{minSmallPayload, SmallPayloadBytes, 1000} {
		b := SmallPayload(nil, time.Now().UnixNano(), size)
		var m smallMessage
		if len(b) != size || json.Unmarshal(b, &m) != nil || m.T == 0 {
			t.Errorf("size %d: %d bytes %q", size, len(b), b)
		}
	}
}

func TestSweepPerfMainFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"--help"}, &out, &errOut); code != exitOK {
		t.Fatalf("help: exit %d", code)
	}
	for _, s := range []string{"--sweep", "--sweep-sets", "--sweep-consumers", "--sweep-rates", "--sweep-sizes",
		"--sweep-size-rates", "--sweep-senders", "--out", "--compare", "--no-nats", "Sweep (--sweep)"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("help does not describe %s", s)
		}
	}
	for name, args := range map[string][]string{
		"SweepFlagAlone":  {"--sweep-rates", "60"},
		"HarnessFlag":     {"--sweep", "--agents", "1"},
		"Embedded":        {"--sweep", "--embedded"},
		"BadSet":          {"--sweep", "--sweep-sets", "colour"},
		"BadList":         {"--sweep", "--sweep-consumers", "1,x"},
		"NoNATSAndBinary": {"--sweep", "--no-nats", "--compare", "/bin/true"},
		"ZeroSeconds":     {"--sweep", "--seconds", "0"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(args, &out, &errOut); code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %s", code, exitUsage, errOut.String())
			}
		})
	}
}

func TestSweepPlotSVG(t *testing.T) {
	p := plot{Title: "T <&>", XLabel: "consumers", YLabel: "µs", LogX: true, LogY: true, XTicks: []float64{1, 4, 16, 64},
		Series: []plotSeries{
			{Name: "a", X: []float64{1, 4, 16, 64}, Y: []float64{500, 600, 1000, 2400}, Hollow: []bool{false, false, false, true}},
			{Name: "b", X: []float64{1, 4}, Y: []float64{2000, 0}, Dashed: true}, // 0 cannot sit on a log axis
			{Name: "empty"},
		}}
	svg := p.SVG()
	if !bytes.Equal(svg, p.SVG()) {
		t.Error("two renderings differ")
	}
	got := checkSVG(t, "synthetic", svg, p)
	if got.polylines != 2 || !slices.Equal(got.legend, []string{"a", "b"}) || got.hollow != 1 {
		t.Errorf("parsed %+v", got)
	}
	if !slices.Contains(got.ticks, "64") || !slices.Contains(got.ticks, "1k") {
		t.Errorf("ticks %v", got.ticks)
	}
	// Linear axes get round steps from zero.
	a := newAxis([]float64{3, 47}, false, 0, 100)
	if a.lo != 0 || a.hi != 50 || len(a.ticks(nil)) != 6 {
		t.Errorf("linear axis %+v, ticks %v", a, a.ticks(nil))
	}
	for v, want := range map[float64]string{0.5: "0.5", 64: "64", 1000: "1k", 0.002: "0.002", 92160: "92.2k", 33177600: "33.2M"} {
		if got := formatTick(v); got != want {
			t.Errorf("formatTick(%g) = %q, want %q", v, got, want)
		}
	}
	empty := plot{Title: "none", XLabel: "x", YLabel: "y"}
	if got := checkSVG(t, "empty", empty.SVG(), empty); got.polylines != 0 || !slices.Contains(got.texts, "no data") {
		t.Errorf("empty plot %+v", got)
	}
}

// parsedSVG is what checkSVG read out of a plot.
type parsedSVG struct {
	polylines int
	hollow    int
	legend    []string
	ticks     []string
	texts     []string
}

// checkSVG parses svg as XML and checks the plot's structure: a root svg
// element, the title and axis labels, one polyline per series with a
// drawable point, and a legend entry naming each.
func checkSVG(t *testing.T, name string, svg []byte, p plot) parsedSVG {
	t.Helper()
	var got parsedSVG
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var stack []string
	class := ""
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not XML: %v\n%s", name, err, svg)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
				if el.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("%s: root namespace %q", name, el.Name.Space)
				}
			}
			stack = append(stack, el.Name.Local)
			class = ""
			for _, a := range el.Attr {
				switch {
				case a.Name.Local == "class":
					class = a.Value
				case el.Name.Local == "circle" && a.Name.Local == "fill" && a.Value == "white":
					got.hollow++
				}
			}
			if el.Name.Local == "polyline" {
				got.polylines++
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 || stack[len(stack)-1] != "text" {
				continue
			}
			s := string(el)
			got.texts = append(got.texts, s)
			switch class {
			case "legend":
				got.legend = append(got.legend, s)
			case "tick":
				got.ticks = append(got.ticks, s)
			}
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q", name, root)
	}
	for _, want := range []string{p.Title, p.XLabel, p.YLabel} {
		if !slices.Contains(got.texts, want) {
			t.Errorf("%s: no text %q among %q", name, want, got.texts)
		}
	}
	var drawn []string
	for _, s := range p.Series {
		for j := range min(len(s.X), len(s.Y)) {
			if s.Y[j] > 0 || !p.LogY {
				drawn = append(drawn, s.Name)
				break
			}
		}
	}
	if got.polylines != len(drawn) || !slices.Equal(got.legend, drawn) {
		t.Errorf("%s: %d polylines and legend %q for the series %q", name, got.polylines, got.legend, drawn)
	}
	return got
}

// syntheticSweep is a report of every set with made-up figures: flybus
// falls behind at 16 consumers and 1,000 Hz, one NATS point failed.
func syntheticSweep() *SweepReport {
	hist := func(ms ...float64) *Hist {
		h := newHist(len(ms))
		for _, v := range ms {
			h.Add(time.Duration(v * float64(time.Millisecond)))
		}
		return h
	}
	base := Baseline{Hot: hist(0.01, 0.02), Paced: hist(0.05)}
	rep := &SweepReport{Started: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC), Machine: Machine{CPU: "test CPU", NumCPU: 2},
		Store: StoreFS{Root: "/mnt/huge/store", Magic: "0x01021994", Tmpfs: true, MountPoint: "/mnt/huge", FSType: "tmpfs",
			Options: "rw,size=8388608k,huge=always", Huge: "always"},
		Router: Router{Mode: "process", StoreMode: "pool", PID: 42}, Seconds: 3, NATS: "synthetic",
		Baselines: &SweepBaselines{CrossProcess: &PingPong{One: base, Two: base},
			Sizes: []SizeBaseline{{Bytes: FeedFrameBytes, Copy: base, MapTouch: base}}}}
	pts, err := SweepGrid{}.Points(3)
	if err != nil {
		panic(err)
	}
	for i, p := range pts {
		e := &SweepEntry{Point: p}
		mk := func(peer string, scale float64) *PointResult {
			r := &PointResult{Peer: peer, Mover: peer + " mover", SendNs: 3 * time.Second, WallNs: 3 * time.Second,
				Latency: Latency{Count: 100, P50Ns: int64(scale * 5e5), P99Ns: int64(scale * 2e6)}}
			if p.Kind == PointFrames {
				r.Planned, r.Sent = p.planned(), p.planned()
				r.Deliveries = uint64(r.Sent * p.Consumers)
				r.MoverCPU = scale * float64(r.Sent) * (400 + 30*float64(p.Consumers)) / 1e6
			} else {
				r.Sent = int(30000 * float64(p.Senders) / scale)
				r.Deliveries = uint64(r.Sent)
				r.MoverCPU = 0.8 * scale
				r.RoundTrip = Latency{Count: 10, P50Ns: 80e3, P99Ns: 400e3}
			}
			r.ClientCPU = 0.5
			return r
		}
		e.Flybus, e.NATS = mk("flybus", 1), mk("nats", 4)
		if p.Kind == PointFrames {
			pages := uint64(p.FrameBytes / 4096)
			e.Flybus.Fill = Latency{Count: e.Flybus.Sent, P50Ns: int64(p.FrameBytes / 4), P99Ns: int64(p.FrameBytes / 2)}
			e.Flybus.Touch = Latency{Count: int(e.Flybus.Deliveries), P50Ns: int64(p.FrameBytes / 2), P99Ns: int64(p.FrameBytes)}
			sent := e.Flybus.Sent
			e.Flybus.Faults = &PointFaults{
				Router:  FaultRate{Faults: Faults{Minor: uint64(sent)}, MinorPerFrame: 1},
				Harness: FaultRate{Faults: Faults{Minor: uint64(sent) * pages * uint64(p.Consumers)}, MinorPerFrame: float64(pages * uint64(p.Consumers))},
			}
		}
		if p.Consumers >= 16 && p.Set == SetConsumers || p.RateHz == 1000 {
			e.Flybus.Coalesced = e.Flybus.Deliveries / 10
		}
		if i == len(pts)-1 {
			e.NATS = &PointResult{Peer: "nats", ErrorCount: 1, Errors: []string{"the server would not start"}}
		}
		e.FlybusVerdict, e.NATSVerdict = judgePoint(p, e.Flybus, 2), judgePoint(p, e.NATS, 2)
		rep.Entries = append(rep.Entries, e)
	}
	return rep
}

func TestSweepReportFiles(t *testing.T) {
	rep := syntheticSweep()
	dir := t.TempDir()
	files, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkSweepFiles(t, rep, files)
	md, err := os.ReadFile(filepath.Join(dir, "2026-12-05-sweep.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Where the router stops keeping up",
		"- consumers, flybus: keeps up through 4 consumers; behind at 16 consumers",
		"- rate, flybus: keeps up through 240 Hz; behind at 1000 Hz",
		"- frame size at 60 Hz, flybus: keeps up at every point",
		"flybus CPU per added consumer, per frame (least-squares slope over 1 to 64 consumers): 30.0 µs",
		"## Consumers (1,228,800 B at 60 Hz)", "## Rate (92,160 B to 4 consumers)", "## Frame size (3 consumers)",
		"## Small messages (256-byte payloads, no artifact)", "| RPC, 8 callers | flybus |",
		"the server would not start", "## Baselines",
		"Per-frame costs; store: tmpfs rw,size=8388608k,huge=always (mount /mnt/huge).",
		"| frames | peer | fill p50 / p99 ms | touch p50 / p99 ms | router faults per frame (minor / major) | harness faults per frame (minor / major) |",
		// 33,177,600 B: fill 8.3 / 16.6 ms, touch 16.6 / 33.2 ms, 8,100 pages to each of 3 consumers.
		"| 33,177,600 B x 30 Hz x 3 consumers | flybus | 8.294 / 16.589 | 16.589 / 33.178 | 1.0 / 0.0 | 24,300.0 / 0.0 |",
		"| 33,177,600 B x 30 Hz x 3 consumers | NATS | — | — | — | — |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", md)
	}
	// The same report renders the same files; a second sweep of the day
	// gets names of its own.
	again, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		a, _ := os.ReadFile(files[i])
		b, _ := os.ReadFile(again[i])
		if !bytes.Equal(a, b) && !strings.HasSuffix(files[i], ".md") {
			t.Errorf("%s and %s differ", files[i], again[i])
		}
		if filepath.Base(again[i]) == filepath.Base(files[i]) || !strings.Contains(again[i], "-sweep-2") {
			t.Errorf("second sweep wrote %s", again[i])
		}
	}
}

// checkSweepFiles checks what WriteFiles wrote: the markdown references
// every SVG, every SVG is a well-formed plot, and the JSON reads back.
func checkSweepFiles(t *testing.T, rep *SweepReport, files []string) {
	t.Helper()
	plots := rep.plots()
	var md, js string
	var svgs []string
	for _, f := range files {
		switch filepath.Ext(f) {
		case ".md":
			md = f
		case ".json":
			js = f
		case ".svg":
			svgs = append(svgs, f)
		}
	}
	if md == "" || js == "" || len(svgs) != len(plots) {
		t.Fatalf("files %v for %d plots", files, len(plots))
	}
	text, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range svgs {
		if !strings.Contains(string(text), "]("+filepath.Base(f)+")") {
			t.Errorf("the report does not show %s", filepath.Base(f))
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(f, "-"+plots[i].name+".svg") {
			t.Errorf("%s is not plot %s", f, plots[i].name)
		}
		checkSVG(t, filepath.Base(f), b, plots[i].plot)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var back SweepReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Entries) != len(rep.Entries) || back.Entries[0].Flybus.Sent != rep.Entries[0].Flybus.Sent {
		t.Errorf("the JSON reads back %d entries", len(back.Entries))
	}
	for i, e := range back.Entries {
		want := rep.Entries[i].Flybus
		if got := e.Flybus; got.Fill != want.Fill || got.Touch != want.Touch || (got.Faults == nil) != (want.Faults == nil) ||
			got.Faults != nil && *got.Faults != *want.Faults {
			t.Errorf("%s: the JSON reads back fill %+v, touch %+v, faults %+v", e.Point.Label(), got.Fill, got.Touch, got.Faults)
		}
	}
}

func TestSweepFaultsOver(t *testing.T) {
	r, err := faultsOver(Faults{Minor: 1000, Major: 2}, Faults{Minor: 25300, Major: 5}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if r.Minor != 24300 || r.Major != 3 || r.MinorPerFrame != 2430 || r.MajorPerFrame != 0.3 {
		t.Errorf("got %+v", r)
	}
	if r, err := faultsOver(Faults{Minor: 5}, Faults{Minor: 9}, 0); err != nil || r.Minor != 4 || r.MinorPerFrame != 0 {
		t.Errorf("no frames sent: %+v %v", r, err)
	}
	if _, err := faultsOver(Faults{Minor: 9}, Faults{Minor: 5}, 1); err == nil {
		t.Error("counters that went down were accepted")
	}
}

// TestSweepNATSResultHasNoCosts: the NATS peer's JSON, which has no fill,
// touch or faults, carries no such fields.
func TestSweepNATSResultHasNoCosts(t *testing.T) {
	b, err := json.Marshal(&PointResult{Peer: "nats", Sent: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"fill"`, `"touch"`, `"pageFaults"`} {
		if strings.Contains(string(b), field) {
			t.Errorf("%s in %s", field, b)
		}
	}
}
