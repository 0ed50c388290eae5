package perf

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Colors of the peers in the sweep's plots, and of their second series
// (the size set's 30 Hz, the small set's RPC).
const (
	colorFlybus  = "#1f77b4"
	colorFlybus2 = "#17becf"
	colorNATS    = "#d62728"
	colorNATS2   = "#ff7f0e"
)

// namedPlot is one of the sweep's figures and the file-name part it gets.
type namedPlot struct {
	name string
	plot plot
}

// setEntries returns the entries of one set, in the order they ran.
func (r *SweepReport) setEntries(set string) []*SweepEntry {
	var out []*SweepEntry
	for _, e := range r.Entries {
		if e.Point.Set == set {
			out = append(out, e)
		}
	}
	return out
}

// axisOf is the value a set varies.
func axisOf(set string, p SweepPoint) float64 {
	switch set {
	case SetConsumers:
		return float64(p.Consumers)
	case SetRate:
		return float64(p.RateHz)
	case SetSize:
		return float64(p.FrameBytes)
	}
	return float64(p.Senders)
}

// series builds one line of a set's plot from the entries that group
// admits, in the order of the axis.
func lineOf(name, color string, dashed bool, entries []*SweepEntry, set string, group func(*SweepEntry) bool,
	value func(*SweepEntry) (float64, bool), hollow func(*SweepEntry) bool) plotSeries {
	s := plotSeries{Name: name, Color: color, Dashed: dashed}
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b *SweepEntry) int {
		return cmp.Compare(axisOf(set, a.Point), axisOf(set, b.Point))
	})
	for _, e := range sorted {
		if group != nil && !group(e) {
			continue
		}
		v, ok := value(e)
		if !ok {
			continue
		}
		s.X, s.Y = append(s.X, axisOf(set, e.Point)), append(s.Y, v)
		s.Hollow = append(s.Hollow, hollow != nil && hollow(e))
	}
	return s
}

// peerOf picks a peer's result and verdict out of an entry.
type peerOf struct {
	name  string
	color string
	get   func(*SweepEntry) (*PointResult, Verdict)
}

var sweepPeers = []peerOf{
	{"flybus", colorFlybus, func(e *SweepEntry) (*PointResult, Verdict) { return e.Flybus, e.FlybusVerdict }},
	{"NATS", colorNATS, func(e *SweepEntry) (*PointResult, Verdict) { return e.NATS, e.NATSVerdict }},
}

// measured reads a figure of a peer's result when there is one to read.
func (pp peerOf) measured(f func(*PointResult) float64) func(*SweepEntry) (float64, bool) {
	return func(e *SweepEntry) (float64, bool) {
		r, _ := pp.get(e)
		if r == nil || r.Sent == 0 {
			return 0, false
		}
		v := f(r)
		return v, v > 0
	}
}

func (pp peerOf) behind(e *SweepEntry) bool {
	r, v := pp.get(e)
	return r != nil && e.Point.Kind == PointFrames && !v.KeepsUp
}

// plots are the sweep's figures: for each frames set its CPU and its
// latency against the value it varies; for the small set throughput and
// CPU per message against the senders.
func (r *SweepReport) plots() []namedPlot {
	var out []namedPlot
	frameSet := func(set, what string, sub func(e *SweepEntry) (string, string, bool)) {
		entries := r.setEntries(set)
		if len(entries) == 0 {
			return
		}
		var ticks []float64
		for _, e := range entries {
			if v := axisOf(set, e.Point); !slices.Contains(ticks, v) {
				ticks = append(ticks, v)
			}
		}
		xlabel := map[string]string{SetConsumers: "consumers", SetRate: "frames per second", SetSize: "frame bytes"}[set]
		fixed := setCaption(set, entries)
		cpu := plot{Title: "Mover CPU per frame, " + what + " (" + fixed + ")", XLabel: xlabel,
			YLabel: "µs of CPU (router or NATS server)", LogX: true, LogY: true, XTicks: ticks}
		lat := plot{Title: "Delivery latency, " + what + " (" + fixed + ")", XLabel: xlabel,
			YLabel: "ms, publish to first byte read", LogX: true, LogY: true, XTicks: ticks}
		groups := []string{""}
		if sub != nil {
			groups = nil
			for _, e := range entries {
				if g, _, _ := sub(e); !slices.Contains(groups, g) {
					groups = append(groups, g)
				}
			}
		}
		for _, pp := range sweepPeers {
			for gi, g := range groups {
				name, color := pp.name, pp.color
				var in func(*SweepEntry) bool
				if sub != nil {
					in = func(e *SweepEntry) bool { x, _, _ := sub(e); return x == g }
					name += " " + g
					if gi > 0 {
						color = map[string]string{"flybus": colorFlybus2, "NATS": colorNATS2}[pp.name]
					}
				}
				cpu.Series = append(cpu.Series, lineOf(name+" per frame", color, false, entries, set, in,
					pp.measured((*PointResult).PerSentUs), pp.behind))
				if sub == nil {
					cpu.Series = append(cpu.Series, lineOf(name+" per delivery", color, true, entries, set, in,
						pp.measured((*PointResult).PerDeliveryUs), pp.behind))
				}
				lat.Series = append(lat.Series,
					lineOf(name+" p50", color, false, entries, set, in, pp.measured(func(x *PointResult) float64 {
						return ms(time.Duration(x.Latency.P50Ns))
					}), pp.behind),
					lineOf(name+" p99", color, true, entries, set, in, pp.measured(func(x *PointResult) float64 {
						return ms(time.Duration(x.Latency.P99Ns))
					}), pp.behind))
			}
		}
		out = append(out, namedPlot{set + "-cpu", cpu}, namedPlot{set + "-latency", lat})
	}
	frameSet(SetConsumers, "by consumers", nil)
	frameSet(SetRate, "by rate", nil)
	frameSet(SetSize, "by frame size", func(e *SweepEntry) (string, string, bool) {
		return fmt.Sprintf("%d Hz", e.Point.RateHz), "", true
	})

	small := r.setEntries(SetSmall)
	if len(small) == 0 {
		return out
	}
	var ticks []float64
	for _, e := range small {
		if v := float64(e.Point.Senders); !slices.Contains(ticks, v) {
			ticks = append(ticks, v)
		}
	}
	thr := plot{Title: fmt.Sprintf("Small messages (%d-byte payloads): throughput", small[0].Point.PayloadBytes),
		XLabel: "publishers or callers", YLabel: "messages or calls per second", LogX: true, XTicks: ticks}
	cpu := plot{Title: fmt.Sprintf("Small messages (%d-byte payloads): mover CPU", small[0].Point.PayloadBytes),
		XLabel: "publishers or callers", YLabel: "µs of CPU per message or call", LogX: true, XTicks: ticks}
	for _, pp := range sweepPeers {
		for i, kind := range []string{PointPubSub, PointRPC} {
			in := func(e *SweepEntry) bool { return e.Point.Kind == kind }
			name := pp.name + map[string]string{PointPubSub: " pub/sub", PointRPC: " RPC"}[kind]
			color := pp.color
			if i > 0 {
				color = map[string]string{"flybus": colorFlybus2, "NATS": colorNATS2}[pp.name]
			}
			thr.Series = append(thr.Series, lineOf(name, color, i > 0, small, SetSmall, in, pp.measured((*PointResult).SentPerSecond), nil))
			cpu.Series = append(cpu.Series, lineOf(name, color, i > 0, small, SetSmall, in, pp.measured((*PointResult).PerSentUs), nil))
		}
	}
	return append(out, namedPlot{"small-throughput", thr}, namedPlot{"small-cpu", cpu})
}

// setCaption names what a frames set holds fixed.
func setCaption(set string, entries []*SweepEntry) string {
	p := entries[0].Point
	switch set {
	case SetConsumers:
		return fmt.Sprintf("%s B at %d Hz", thousands(int64(p.FrameBytes)), p.RateHz)
	case SetRate:
		return fmt.Sprintf("%s B to %d consumers", thousands(int64(p.FrameBytes)), p.Consumers)
	case SetSize:
		return fmt.Sprintf("%d consumers", p.Consumers)
	}
	return ""
}

// SweepFiles names the files of one sweep in a directory.
type SweepFiles struct {
	Dir, Prefix string
}

// sweepFilesIn picks the first name of the form DATE-sweep, DATE-sweep-2,
// ... whose markdown file does not exist yet in dir.
func sweepFilesIn(dir string, started time.Time) SweepFiles {
	base := started.UTC().Format("2006-01-02") + "-sweep"
	prefix := base
	for i := 2; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, prefix+".md")); errors.Is(err, os.ErrNotExist) {
			return SweepFiles{Dir: dir, Prefix: prefix}
		}
		prefix = fmt.Sprintf("%s-%d", base, i)
	}
}

// Markdown, JSON and plot are the files' paths.
func (f SweepFiles) Markdown() string { return filepath.Join(f.Dir, f.Prefix+".md") }
func (f SweepFiles) JSON() string     { return filepath.Join(f.Dir, f.Prefix+".json") }
func (f SweepFiles) plot(name string) string {
	return filepath.Join(f.Dir, f.plotFile(name))
}
func (f SweepFiles) plotFile(name string) string { return f.Prefix + "-" + name + ".svg" }

// WriteFiles writes the report into dir (created if missing): the
// markdown report, the JSON of every figure and one SVG per plot, named
// after the sweep's date. It returns the paths written.
func (r *SweepReport) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f := sweepFilesIn(dir, r.Started)
	var written []string
	write := func(path string, data []byte) error {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		written = append(written, path)
		return nil
	}
	for _, np := range r.plots() {
		if err := write(f.plot(np.name), np.plot.SVG()); err != nil {
			return written, err
		}
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return written, err
	}
	if err := write(f.JSON(), append(js, '\n')); err != nil {
		return written, err
	}
	var md strings.Builder
	if err := r.WriteMarkdown(&md, f.Prefix); err != nil {
		return written, err
	}
	return written, write(f.Markdown(), []byte(md.String()))
}

// WriteMarkdown renders the report; its plots are referenced as
// PREFIX-NAME.svg beside it (no images when prefix is empty).
func (r *SweepReport) WriteMarkdown(w io.Writer, prefix string) error {
	var b strings.Builder
	r.writeSweepHeader(&b)
	r.writeKnees(&b)
	r.writeSweepBaselines(&b)
	plots := r.plots()
	images := func(set string) {
		if prefix == "" {
			return
		}
		for _, np := range plots {
			if strings.HasPrefix(np.name, set+"-") {
				fmt.Fprintf(&b, "![%s](%s)\n", np.plot.Title, SweepFiles{Prefix: prefix}.plotFile(np.name))
			}
		}
		b.WriteString("\n")
	}
	for _, set := range []string{SetConsumers, SetRate, SetSize} {
		entries := r.setEntries(set)
		if len(entries) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s (%s)\n\n", map[string]string{SetConsumers: "Consumers", SetRate: "Rate", SetSize: "Frame size"}[set],
			setCaption(set, entries))
		images(set)
		writeFramesTable(&b, entries)
		writeFrameCostsTable(&b, entries, r.Store)
	}
	if small := r.setEntries(SetSmall); len(small) > 0 {
		fmt.Fprintf(&b, "## Small messages (%d-byte payloads, no artifact)\n\n", small[0].Point.PayloadBytes)
		images(SetSmall)
		r.writeSmallTable(&b, small)
	}
	r.writeSweepErrors(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *SweepReport) writeSweepHeader(b *strings.Builder) {
	fmt.Fprintf(b, "# flybus perf --sweep: how the cost grows\n\n")
	fmt.Fprintf(b, "machine: %s\n\n", r.Machine.Line())
	fmt.Fprintf(b, "- started: %s, %s s of sending per point, each point on flybus and then on NATS\n",
		r.Started.Format(time.RFC3339), trimFloat(r.Seconds))
	fmt.Fprintf(b, "- store: %s\n", r.Store.line())
	fmt.Fprintf(b, "- router: %s\n", r.Router.line())
	fmt.Fprintf(b, "- NATS: %s\n", r.NATS)
	b.WriteString("- frames points: one producer allocates, fills (pwrite), seals without waiting and publishes a frame on " +
		"each tick of its rate, on a topic without retention, to N latest-mode consumers (InFlight 1), each viewing the frame " +
		"and reading one byte per 64-byte line; NATS publishes the same bytes to N subscribers that touch them alike. " +
		"Latency: from just before the publish to the first byte read by a consumer.\n")
	b.WriteString("- small points: publishers each publish a 256-byte JSON payload as soon as the last one was answered " +
		"(flybus: the publish's reply; NATS: Publish then Flush, a PING/PONG), to one subscriber (flybus: bounded mode, a " +
		"publish refused with BACKPRESSURE is retried and counted); RPC: callers each call as soon as the last result " +
		"arrived (flybus CallAndWait, NATS Request) one echoing service (flybus: served by one goroutine per caller).\n")
	b.WriteString("- CPU: time on a CPU of the mover's threads (the router process; the NATS server's child process) from " +
		"/proc/PID/task/*/schedstat (nanoseconds), from the first send until every consumer drained; per frame is over frames " +
		"published, per delivery over frames or messages the consumers received; cores are CPU over that interval.\n")
	b.WriteString("- per-frame costs (flybus frames points; NATS has no such figures: —): fill, the producer's Write (pwrite) of a " +
		"frame's bytes, without allocate, seal or publish; touch, a consumer's read of every 64-byte line, from having the view; " +
		"page faults, minor / major of the router process and of the harness (producer and consumers) from /proc/PID/stat " +
		"over the measured interval, per frame published.\n")
	fmt.Fprintf(b, "- keeping up (frames points): the producer published at least %.0f%% of its rate, at most %.0f%% of the deliveries "+
		"the consumers were owed were coalesced (flybus latest mode) or dropped (NATS), p99 latency under one frame period, and "+
		"no errors. Where it does not, the limit is named: the mover at %.1f cores or more (`flybus serve` runs its Go code on one "+
		"thread), or the machine (mover and clients together at %.0f%% of every core).\n\n",
		minRateShare*100, maxLossShare*100, saturatedCores, machineShare*100)
}

// knee describes where a peer stops keeping up along a set's entries.
func knee(entries []*SweepEntry, pp peerOf, label func(SweepPoint) string) string {
	var last string
	for _, e := range entries {
		r, v := pp.get(e)
		if r == nil {
			return "not measured"
		}
		if !v.KeepsUp {
			head := "behind from the first point"
			if last != "" {
				head = "keeps up through " + last + "; behind"
			}
			return fmt.Sprintf("%s at %s: %s%s", head, label(e.Point), strings.Join(v.Misses, ", "), boundText(v, r))
		}
		last = label(e.Point)
	}
	return "keeps up at every point (to " + last + ")"
}

func boundText(v Verdict, r *PointResult) string {
	switch v.Bound {
	case "mover":
		return fmt.Sprintf(" (limit: the mover, %.2f cores)", r.Cores())
	case "machine":
		return fmt.Sprintf(" (limit: the machine, mover %.2f + clients %.2f cores)", r.Cores(), r.ClientCores())
	}
	return fmt.Sprintf(" (mover %.2f cores, clients %.2f: neither at its limit)", r.Cores(), r.ClientCores())
}

// slope is the least-squares slope of y over x.
func slope(x, y []float64) (float64, bool) {
	n := float64(len(x))
	if len(x) < 2 || len(x) != len(y) {
		return 0, false
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, false
	}
	return (n*sxy - sx*sy) / d, true
}

func (r *SweepReport) writeKnees(b *strings.Builder) {
	var lines []string
	add := func(set, what string, entries []*SweepEntry, label func(SweepPoint) string) {
		if len(entries) == 0 {
			return
		}
		for _, pp := range sweepPeers {
			lines = append(lines, fmt.Sprintf("- %s, %s: %s", what, pp.name, knee(entries, pp, label)))
		}
	}
	add(SetConsumers, "consumers", r.setEntries(SetConsumers), func(p SweepPoint) string { return plural(p.Consumers, "consumer") })
	add(SetRate, "rate", r.setEntries(SetRate), func(p SweepPoint) string { return fmt.Sprintf("%d Hz", p.RateHz) })
	size := r.setEntries(SetSize)
	var rates []int
	for _, e := range size {
		if !slices.Contains(rates, e.Point.RateHz) {
			rates = append(rates, e.Point.RateHz)
		}
	}
	for _, hz := range rates {
		var at []*SweepEntry
		for _, e := range size {
			if e.Point.RateHz == hz {
				at = append(at, e)
			}
		}
		slices.SortStableFunc(at, func(a, b *SweepEntry) int { return a.Point.FrameBytes - b.Point.FrameBytes })
		add(SetSize, fmt.Sprintf("frame size at %d Hz", hz), at, func(p SweepPoint) string { return thousands(int64(p.FrameBytes)) + " B" })
	}
	if len(lines) == 0 && len(r.setEntries(SetSmall)) == 0 {
		return
	}
	b.WriteString("## Where the router stops keeping up\n\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	if cons := r.setEntries(SetConsumers); len(cons) > 1 {
		for _, pp := range sweepPeers {
			var x, y []float64
			for _, e := range cons {
				if res, _ := pp.get(e); res != nil && res.PerSentUs() > 0 {
					x, y = append(x, float64(e.Point.Consumers)), append(y, res.PerSentUs())
				}
			}
			if s, ok := slope(x, y); ok {
				fmt.Fprintf(b, "- %s CPU per added consumer, per frame (least-squares slope over %d to %d consumers): %.1f µs\n",
					pp.name, int(x[0]), int(x[len(x)-1]), s)
			}
		}
	}
	for _, e := range r.setEntries(SetSmall) {
		if e.Flybus != nil && e.FlybusVerdict.Bound != "" {
			fmt.Fprintf(b, "- %s on flybus: %s\n", e.Point.Label(), strings.TrimPrefix(boundText(e.FlybusVerdict, e.Flybus), " "))
		}
	}
	b.WriteString("\n")
}

func (r *SweepReport) writeSweepBaselines(b *strings.Builder) {
	bl := r.Baselines
	if bl == nil {
		return
	}
	b.WriteString("## Baselines (measured first, this run)\n\n" +
		"Back to back: a tight loop. Paced at 60 Hz: one operation per 1/60 s slot, after the machine idled.\n\n" +
		"| baseline | back to back p50 / p95 / p99 (n) | paced at 60 Hz p50 / p95 / p99 (n) |\n| --- | --- | --- |\n")
	row := func(name string, base Baseline) {
		fmt.Fprintf(b, "| %s | %s | %s |\n", name, summaryText(base.Hot), summaryText(base.Paced))
	}
	if pp := bl.CrossProcess; pp != nil {
		row(fmt.Sprintf("raw Unix-socket ping-pong of %d bytes with another process, one hop", pingPongBytes), pp.One)
		row("the same, two hops in a row (the floor of a publish or call through a router process)", pp.Two)
	} else if bl.CrossProcessErr != "" {
		fmt.Fprintf(b, "| cross-process ping-pong | not measured: %s | - |\n", bl.CrossProcessErr)
	}
	for _, s := range bl.Sizes {
		row(fmt.Sprintf("copy() of a %s-byte frame", thousands(int64(s.Bytes))), s.Copy)
		row(fmt.Sprintf("map + touch + unmap of a %s-byte store file (a consumer's floor)", thousands(int64(s.Bytes))), s.MapTouch)
	}
	b.WriteString("\n")
}

// latencyText is p50 / p99 in ms.
func latencyText(l Latency) string {
	if l.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f / %.3f", ms(time.Duration(l.P50Ns)), ms(time.Duration(l.P99Ns)))
}

func verdictText(r *PointResult, v Verdict) string {
	if r.ErrorCount > 0 && r.Sent == 0 {
		return "failed"
	}
	if v.KeepsUp {
		return "yes"
	}
	return "no: " + strings.Join(v.Misses, "; ")
}

func writeFramesTable(b *strings.Builder, entries []*SweepEntry) {
	b.WriteString("| frames | peer | frames sent (late) | µs CPU per frame | µs CPU per delivery | mover cores | clients cores | " +
		"latency p50 / p99 ms | coalesced or dropped | keeps up |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, e := range entries {
		for _, pp := range sweepPeers {
			r, v := pp.get(e)
			if r == nil {
				continue
			}
			lost := "-"
			if r.Sent > 0 {
				lost = fmt.Sprintf("%s coalesced, %s dropped", thousands(int64(r.Coalesced)), thousands(int64(r.Dropped)))
			}
			fmt.Fprintf(b, "| %s | %s | %d of %d (%d) | %s | %s | %s | %s | %s | %s | %s |\n", e.Point.Label(), pp.name, r.Sent, r.Planned,
				r.Late, usText(r.PerSentUs(), r), usText(r.PerDeliveryUs(), r), coresText(r.Cores(), r), coresText(r.ClientCores(), r),
				latencyText(r.Latency), lost, verdictText(r, v))
		}
		if e.Flybus != nil && e.NATS != nil && e.Flybus.PerSentUs() > 0 && e.NATS.PerSentUs() > 0 {
			fmt.Fprintf(b, "| %s | flybus / NATS | | %.2fx | | | | | | |\n", e.Point.Label(), e.Flybus.PerSentUs()/e.NATS.PerSentUs())
		}
	}
	b.WriteString("\n")
}

// writeFrameCostsTable shows what each frame cost the producer's fill,
// the consumers' touch, and page faults, with the store's filesystem, so
// that runs on two stores can be set side by side.
func writeFrameCostsTable(b *strings.Builder, entries []*SweepEntry, store StoreFS) {
	fmt.Fprintf(b, "Per-frame costs; store: %s.\n\n", store.brief())
	b.WriteString("| frames | peer | fill p50 / p99 ms | touch p50 / p99 ms | router faults per frame (minor / major) | " +
		"harness faults per frame (minor / major) |\n| --- | --- | --- | --- | --- | --- |\n")
	const none = "—"
	for _, e := range entries {
		for _, pp := range sweepPeers {
			r, _ := pp.get(e)
			if r == nil {
				continue
			}
			if pp.name != "flybus" {
				fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", e.Point.Label(), pp.name, none, none, none, none)
				continue
			}
			router, harness := "-", "-"
			switch f := r.Faults; {
			case f != nil && f.Err != "":
				router, harness = "n/a", "n/a"
			case f != nil && r.Sent > 0:
				router, harness = faultsText(f.Router), faultsText(f.Harness)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", e.Point.Label(), pp.name, latencyText(r.Fill), latencyText(r.Touch),
				router, harness)
		}
	}
	b.WriteString("\n")
}

// faultsText is minor / major faults per frame.
func faultsText(f FaultRate) string {
	return tenthsText(f.MinorPerFrame) + " / " + tenthsText(f.MajorPerFrame)
}

// brief names the store's filesystem as its mount has it: type and
// options, e.g. "tmpfs rw,size=8388608k,huge=always (mount /mnt/x)".
func (s StoreFS) brief() string {
	if s.FSType == "" {
		return s.line()
	}
	return fmt.Sprintf("%s %s (mount %s)", s.FSType, s.Options, s.MountPoint)
}

func (r *SweepReport) writeSmallTable(b *strings.Builder, entries []*SweepEntry) {
	floor := "-"
	if pp := r.Baselines; pp != nil && pp.CrossProcess != nil {
		if s := pp.CrossProcess.Two.Hot.Summary(); s.Count > 0 {
			floor = fmt.Sprintf("%.3f", ms(s.P50))
		}
	}
	fmt.Fprintf(b, "Latency: pub/sub, publish to the subscriber's receipt; RPC, the call's round trip (two-hop ping-pong p50: %s ms). "+
		"Publisher wait: flybus's publish answered, NATS's publish and flush.\n\n", floor)
	b.WriteString("| test | peer | per second | µs CPU per message or call | mover cores | clients cores | latency p50 / p99 ms | " +
		"publisher wait p50 / p99 ms | refused (retried) | limit |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, e := range entries {
		for _, pp := range sweepPeers {
			r, v := pp.get(e)
			if r == nil {
				continue
			}
			limit := map[string]string{"mover": "mover", "machine": "machine", "": "round trips"}[v.Bound]
			if r.ErrorCount > 0 && r.Sent == 0 {
				limit = "failed"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", e.Point.Label(), pp.name,
				thousands(int64(r.SentPerSecond())), usText(r.PerSentUs(), r), coresText(r.Cores(), r), coresText(r.ClientCores(), r),
				latencyText(r.Latency), latencyText(r.RoundTrip), thousands(int64(r.Refused)), limit)
		}
		if f, n := e.Flybus, e.NATS; f != nil && n != nil && f.SentPerSecond() > 0 && n.SentPerSecond() > 0 && n.PerSentUs() > 0 {
			fmt.Fprintf(b, "| %s | flybus / NATS | %.2fx | %.2fx | | | | | | |\n", e.Point.Label(),
				f.SentPerSecond()/n.SentPerSecond(), f.PerSentUs()/n.PerSentUs())
		}
	}
	b.WriteString("\n")
}

func usText(v float64, r *PointResult) string {
	if r.CPUErr != "" {
		return "n/a"
	}
	if v == 0 {
		return "-"
	}
	return tenthsText(v)
}

// tenthsText is v to one decimal, with thousands separated.
func tenthsText(v float64) string {
	tenths := int64(math.Round(v * 10))
	return fmt.Sprintf("%s.%d", thousands(tenths/10), tenths%10)
}

func coresText(v float64, r *PointResult) string {
	if r.CPUErr != "" {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", v)
}

func (r *SweepReport) writeSweepErrors(b *strings.Builder) {
	var lines []string
	for _, e := range r.Errors {
		lines = append(lines, "- "+e)
	}
	for _, e := range r.Entries {
		for _, pp := range sweepPeers {
			res, _ := pp.get(e)
			if res == nil {
				continue
			}
			if res.CPUErr != "" {
				lines = append(lines, fmt.Sprintf("- %s, %s: CPU not measured: %s", e.Point.Label(), pp.name, res.CPUErr))
			}
			if res.Faults != nil && res.Faults.Err != "" {
				lines = append(lines, fmt.Sprintf("- %s, %s: page faults not measured: %s", e.Point.Label(), pp.name, res.Faults.Err))
			}
			for _, msg := range res.Errors {
				lines = append(lines, fmt.Sprintf("- %s, %s: %s", e.Point.Label(), pp.name, msg))
			}
			if res.ErrorCount > len(res.Errors) {
				lines = append(lines, fmt.Sprintf("- %s, %s: ... and %d more", e.Point.Label(), pp.name, res.ErrorCount-len(res.Errors)))
			}
		}
	}
	b.WriteString("## Errors\n\n")
	if len(lines) == 0 {
		b.WriteString("none\n")
		return
	}
	b.WriteString(strings.Join(lines, "\n") + "\n")
}
