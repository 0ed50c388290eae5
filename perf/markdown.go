package perf

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flybus/flybus/router"
)

// Row keys shared by the report and the Rust reference.
const (
	rowFrames    = "frames"
	rowRPC       = "rpc"
	rowAllocate  = "allocate"
	rowFill      = "fill"
	rowSeal      = "seal"
	rowPublish   = "publish"
	rowAccess    = "access"
	rowRouterCPU = "routerCPU"
	rowTotalCPU  = "totalCPU"
	rowMemory    = "memory"
	rowStore     = "store"
	rowRoots     = "roots"
	rowQueue     = "queue"
	rowLag       = "lag"
	rowConsumers = "consumers"
)

// row is one line of the figures table: a label and, per schedule, our
// cell; ref names the Rust reference row, if any.
type row struct {
	label string
	ref   string
	cell  func(s *Schedule) string
}

// WriteMarkdown renders the report: the machine line, the run's setting,
// the baselines, the figures per schedule beside the Rust crate's, and
// the targets.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	r.writeHeader(&b)
	r.writeBaselines(&b)
	r.writeFigures(&b)
	r.writeTargets(&b)
	r.writeSubscriptions(&b)
	r.writeLatencies(&b)
	r.writeIsolation(&b)
	r.writeRecorder(&b)
	r.writeErrors(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) writeHeader(b *strings.Builder) {
	set := r.Settings
	fmt.Fprintf(b, "machine: %s\n\n", r.Machine.Line())
	fmt.Fprintf(b, "# flybus perf: %dx%d RGBA at %d Hz, %s s per schedule\n\n", set.Width, set.Height, set.Rate, trimFloat(set.Seconds))
	fmt.Fprintf(b, "- store: %s\n", r.Store.line())
	fmt.Fprintf(b, "- router: %s\n", r.Router.line())
	fill := "ArtifactWriter.Write (pwrite)"
	if set.Fill == FillMap {
		fill = "ArtifactWriter.Bytes (a writable mapping; Seal unmaps it)"
	}
	fmt.Fprintf(b, "- schedule: %s-byte frames, %d per schedule, on a topic declared retained:none to %d latest-mode "+
		"consumers (InFlight 1; the last sleeps %d ms per frame while holding it); every agent is called every frame "+
		"with the frame attached and touches it through a view; fill through %s\n",
		thousands(int64(set.FrameBytes)), set.Frames, set.Consumers, set.SlowDelayNs/1e6, fill)
	fmt.Fprintf(b, "- touch: readers read one byte per %d-byte line (%s reads per frame); router stats sampled every %d ms\n",
		set.TouchStride, thousands(int64(set.FrameBytes/set.TouchStride)), set.SampleEvery/1e6)
	fmt.Fprintf(b, "- latency cells: p50 / p95 / p99 in ms, then (samples; p50 over the named baseline's back-to-back p50, "+
		"and over its paced p50)\n\n")
}

func (s StoreFS) line() string {
	var parts []string
	kind := "not a tmpfs"
	if s.Tmpfs {
		kind = "tmpfs"
	}
	if s.Magic != "" {
		kind += " (statfs type " + s.Magic + ")"
	}
	parts = append(parts, s.Root+" on "+kind)
	if s.MountPoint != "" {
		parts = append(parts, fmt.Sprintf("mount %s (%s), options %s", s.MountPoint, s.FSType, s.Options))
	}
	if s.Huge != "" {
		pages := "4 KiB pages"
		if s.Huge != "never" && s.Huge != "deny" {
			pages = "large folios"
		}
		parts = append(parts, fmt.Sprintf("huge=%s (%s)", s.Huge, pages))
	}
	if s.ShmemEnabled != "" {
		parts = append(parts, "shmem_enabled ["+s.ShmemEnabled+"]")
	}
	if s.Err != "" {
		parts = append(parts, "unknown: "+s.Err)
	}
	return strings.Join(parts, "; ")
}

func (r Router) line() string {
	switch r.Mode {
	case "process":
		return fmt.Sprintf("own process, `%s serve` (%s), pid %d, %s, store mode %s, metrics %s", r.Binary, r.Found, r.PID, r.RouterID, r.StoreMode, r.Metrics)
	case "embedded":
		return fmt.Sprintf("embedded (router.New in the harness, pid %d), %s, store mode %s: its CPU and memory are the whole process's", r.PID, r.RouterID, r.StoreMode)
	}
	return "not started"
}

func (r *Report) writeBaselines(b *strings.Builder) {
	bl := r.Baselines
	if bl == nil {
		return
	}
	b.WriteString("## Baselines (measured first, this run)\n\n" +
		"Back to back: a tight loop. Paced at 60 Hz: one operation per 1/60 s slot, after the machine idled, as the schedule meets it.\n\n" +
		"| baseline | back to back p50 / p95 / p99 (n) | paced at 60 Hz p50 / p95 / p99 (n) |\n| --- | --- | --- |\n")
	line := func(name string, x Baseline) {
		fmt.Fprintf(b, "| %s | %s | %s |\n", name, summaryText(x.Hot), summaryText(x.Paced))
	}
	line("copy() of a 1,228,800-byte frame", bl.Copy)
	if bl.InProcess != nil {
		line("raw Unix-socket ping-pong of 300 bytes with a goroutine, one hop", bl.InProcess.One)
		line("the same, two hops in a row", bl.InProcess.Two)
	}
	if bl.CrossProcess != nil {
		line("raw Unix-socket ping-pong of 300 bytes with another process, one hop", bl.CrossProcess.One)
		line("the same, two hops in a row", bl.CrossProcess.Two)
	} else if bl.CrossProcessErr != "" {
		fmt.Fprintf(b, "| ping-pong with another process | not measured: %s | |\n", bl.CrossProcessErr)
	}
	line("pwrite of a frame into a fresh fallocated store file", bl.Pwrite)
	line("map + touch + unmap of a frame-sized store file (kernel floor)", bl.MapTouch)
	line("touch of a frame-sized store file mapped once (the floor of a cached slot view)", bl.Touch)
	_, topo := bl.matching(r.Router.Mode == "embedded")
	what := "router process"
	if r.Router.Mode == "embedded" {
		what = "whole process"
	}
	fmt.Fprintf(b, "\nRatios to a ping-pong use the %s one, the topology of this run's router. "+
		"Stats sampling alone (idle router, every %d ms) costs %.3f cores of the %s.\n\n",
		topo, r.Settings.SampleEvery/1e6, r.SamplingCPU, what)
}

// summaryText is "p50 / p95 / p99 (n)" in the unit that suits.
func summaryText(h *Hist) string {
	s := h.Summary()
	if s.Count == 0 {
		return "not measured"
	}
	return fmt.Sprintf("%s / %s / %s (%d)", dur(s.P50), dur(s.P95), dur(s.P99), s.Count)
}

func (r *Report) writeFigures(b *strings.Builder) {
	if len(r.Schedules) == 0 {
		return
	}
	embedded := r.Router.Mode == "embedded"
	bl := r.Baselines
	if bl == nil {
		bl = &Baselines{}
	}
	pp, _ := bl.matching(embedded)
	rows := []row{
		{"Frames produced (late)", rowFrames, func(s *Schedule) string {
			c := fmt.Sprintf("%d (%d)", s.Frames, s.Late)
			if s.Frames != s.Planned {
				c += fmt.Sprintf(" of %d", s.Planned)
			}
			if s.Late > 0 {
				c += fmt.Sprintf(", worst overrun %s", dur(s.MaxOverrunNs))
			}
			return c
		}},
		{"frame latency: fill start to every line touched, fast consumers (÷ the sum of its baselines, below)", "", func(s *Schedule) string {
			return budgetCell(s.FrameLatency, s.FrameBudget)
		}},
		{"the sum of its baselines, ms: pwrite + k x paced one-hop ping-pong + touch (k: the round trips after the fill)", "", func(s *Schedule) string {
			return s.FrameBudget.text()
		}},
		latencyRow("RPC round trip, call to result (÷ two-hop ping-pong)", rowRPC, pp.Two, func(s *Schedule) *Hist { return s.RPC }),
		latencyRow("RPC round trip less the agent's handler (÷ two-hop ping-pong)", "", pp.Two, func(s *Schedule) *Hist { return s.RPCNet }),
		latencyRow("allocate round trip (÷ ping-pong)", rowAllocate, pp.One, func(s *Schedule) *Hist { return s.Allocate }),
		latencyRow("producer fill "+fillName(r.Settings.Fill)+" (÷ pwrite)", rowFill, bl.Pwrite, func(s *Schedule) *Hist { return s.Fill }),
		latencyRow("seal round trip (÷ copy)", rowSeal, bl.Copy, func(s *Schedule) *Hist { return s.Seal }),
		{"seals by lease / by copy (router counters)", "", func(s *Schedule) string {
			return fmt.Sprintf("%d / %d", s.LeaseSeals, s.CopySeals)
		}},
		latencyRow("publish admission (÷ ping-pong)", rowPublish, pp.One, func(s *Schedule) *Hist { return s.Publish }),
		latencyRow("producer's critical path: Allocate returned to Publish answered (÷ ping-pong)", "", pp.One, func(s *Schedule) *Hist { return s.CriticalPath }),
		latencyRow("delivery, before Publish to first byte, fast consumers (÷ two-hop ping-pong)", "", pp.Two, func(s *Schedule) *Hist { return s.DeliveryFast }),
		latencyRow("delivery, the same, slow consumer (÷ two-hop ping-pong)", "", pp.Two, func(s *Schedule) *Hist { return s.DeliverySlow }),
		latencyRow("consumer access: View, touch every line, close (÷ map+touch+unmap)", rowAccess, bl.MapTouch, func(s *Schedule) *Hist { return s.Access }),
		latencyRow("of which the View call: artifact.open round trip, open, mmap (÷ ping-pong)", "", pp.One, func(s *Schedule) *Hist { return s.View }),
		latencyRow("agent access: the same in the agents (÷ map+touch+unmap)", "", bl.MapTouch, func(s *Schedule) *Hist { return s.AgentAccess }),
		{"Router CPU, cores (net of stats sampling)", rowRouterCPU, func(s *Schedule) string {
			if embedded {
				return "n/a (embedded)"
			}
			if s.RouterCPU.Err != "" {
				return "not measured"
			}
			return fmt.Sprintf("%.3f (%.3f)", s.RouterCPU.Cores, s.RouterCPU.NetCores)
		}},
		{"Router CPU per frame, µs (net of stats sampling)", "", func(s *Schedule) string {
			if embedded {
				return "n/a (embedded)"
			}
			if s.RouterCPU.Err != "" || s.Frames == 0 {
				return "not measured"
			}
			return fmt.Sprintf("%.0f (%.0f)", s.RouterCPU.PerFrameUs, s.RouterCPU.NetPerFrameUs)
		}},
		{"Router + clients CPU, cores", rowTotalCPU, func(s *Schedule) string {
			if embedded {
				return cpuCell(s.HarnessCPU)
			}
			if s.RouterCPU.Err != "" || s.HarnessCPU.Err != "" {
				return "not measured"
			}
			return fmt.Sprintf("%.3f", s.RouterCPU.Cores+s.HarnessCPU.Cores)
		}},
		{"Harness process CPU (the clients), cores", "", func(s *Schedule) string {
			if embedded {
				return cpuCell(s.HarnessCPU) + " (router included)"
			}
			return cpuCell(s.HarnessCPU)
		}},
		{memoryLabel(embedded), rowMemory, func(s *Schedule) string { return memoryCell(s.Memory) }},
		{"Store bytes peak / live after drain", rowStore, func(s *Schedule) string {
			return fmt.Sprintf("%s / %d", mb(s.StoreBytesPeak), s.StoreBytesLive)
		}},
		{"Outstanding roots peak / live", rowRoots, func(s *Schedule) string { return fmt.Sprintf("%d / %d", s.RootsPeak, s.RootsLive) }},
		{"Queue length peak / live", rowQueue, func(s *Schedule) string { return fmt.Sprintf("%d / %d", s.QueuedPeak, s.QueuedLive) }},
		{"Artifacts peak / live", "", func(s *Schedule) string { return fmt.Sprintf("%d / %d", s.ArtifactsPeak, s.ArtifactsLive) }},
		{"Collection lag after the last frame (polled every 0.25 ms)", rowLag, func(s *Schedule) string {
			if !s.Drained {
				return "NOT drained"
			}
			return fmt.Sprintf("%.2f ms", ms(s.CollectionLagNs))
		}},
		{"Frames seen by the three consumers (coalesced)", rowConsumers, consumersCell},
		{"Stats samples (failed reads)", "", func(s *Schedule) string { return fmt.Sprintf("%d (%d)", s.StatsSamples, s.StatsErrors) }},
		{"Staging pool hits / misses", "", func(s *Schedule) string { return fmt.Sprintf("%d / %d", s.PoolHits, s.PoolMisses) }},
		{"Store opens / fallocates / unlinks per frame", "", func(s *Schedule) string {
			return fmt.Sprintf("%s / %s / %s", perFrame(s.StoreOpens, s.Frames), perFrame(s.StoreFallocates, s.Frames), perFrame(s.StoreUnlinks, s.Frames))
		}},
		{"Consumer artifact.open / mmap / munmap per frame", "", func(s *Schedule) string {
			return fmt.Sprintf("%s / %s / %s", perFrame(s.ConsumerOpens, s.Frames), perFrame(s.ConsumerMaps, s.Frames), perFrame(s.ConsumerUnmaps, s.Frames))
		}},
		{"Errors (router refusals)", "", func(s *Schedule) string { return fmt.Sprintf("%d (%d)", s.ErrorCount, s.Refusals) }},
	}

	b.WriteString("## Figures\n\nRust: the Rust crate's table (2 s = 120 frames per schedule, router and clients in one process, two runs).\n\n")
	r.scheduleColumns(b, "figure", "Rust")
	for _, rw := range rows {
		fmt.Fprintf(b, "| %s |", rw.label)
		for _, s := range r.Schedules {
			ref := rustFor(rw.ref, s.Agents)
			if ref == "" {
				ref = "—"
			}
			fmt.Fprintf(b, " %s | %s |", rw.cell(s), ref)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// scheduleColumns writes the head of a table with a column per schedule
// (and after it one per extra name): first names the row column.
func (r *Report) scheduleColumns(b *strings.Builder, first string, extra ...string) {
	fmt.Fprintf(b, "| %s |", first)
	for _, s := range r.Schedules {
		fmt.Fprintf(b, " %s |", agentsName(s.Agents))
		for _, e := range extra {
			fmt.Fprintf(b, " %s |", e)
		}
	}
	b.WriteString("\n| --- |")
	b.WriteString(strings.Repeat(" --- |", len(r.Schedules)*(1+len(extra))))
	b.WriteString("\n")
}

func (r *Report) writeTargets(b *strings.Builder) {
	if len(r.Schedules) == 0 {
		return
	}
	b.WriteString("## Targets (docs/design.md)\n\nEach cell: the figure's p50 over the baseline's p50 measured as the target says " +
		"(back to back, or paced at 60 Hz) and the verdict, then in parentheses the ratio to the other measurement, for comparison.\n\n")
	r.scheduleColumns(b, "target")
	for i, t := range r.Schedules[0].Targets {
		fmt.Fprintf(b, "| %s |", t.Name)
		for _, s := range r.Schedules {
			if i < len(s.Targets) {
				fmt.Fprintf(b, " %s |", targetCell(s.Targets[i]))
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// writeSubscriptions shows the router's own view of each schedule's
// subscriptions as its last frame went out (router.Details): what the
// slow consumer was coalescing and holding.
func (r *Report) writeSubscriptions(b *strings.Builder) {
	found := false
	for _, s := range r.Schedules {
		found = found || len(s.Subscriptions) > 0
	}
	if !found {
		return
	}
	b.WriteString("## Subscriptions, as the router saw them at the last frame (router.Details)\n\n" +
		"| schedule | subscription | client | mode | delivered | coalesced | in flight | queued | refused | oldest queued |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range r.Schedules {
		for _, sd := range s.Subscriptions {
			age := "-"
			if sd.OldestQueuedAge > 0 {
				age = sd.OldestQueuedAge.Round(10 * time.Microsecond).String()
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %d | %d | %d | %d | %d | %s |\n", agentsName(s.Agents), sd.ID, sd.Client,
				sd.Mode, sd.Delivered, sd.Coalesced, sd.InFlight, sd.Queued, sd.RefusedPublications, age)
		}
	}
	b.WriteString("\n")
}

// writeLatencies shows the router's own timing of each schedule: the
// admission of commands and the wait of frames on their lanes, as bucket
// bounds (the router's buckets double from 1 µs).
func (r *Report) writeLatencies(b *strings.Builder) {
	found := false
	for _, s := range r.Schedules {
		found = found || s.Latencies != nil
	}
	if !found {
		return
	}
	b.WriteString("## The router's own timing (router.Latencies, bucket upper bounds)\n\n" +
		"| schedule | admission p50 / p99 / max (commands) | lane wait p50 / p99 / max (batches) |\n| --- | --- | --- |\n")
	for _, s := range r.Schedules {
		if l := s.Latencies; l != nil {
			fmt.Fprintf(b, "| %s | %s | %s |\n", agentsName(s.Agents), histogramCell(l.Admission), histogramCell(l.LaneWait))
		}
	}
	b.WriteString("\n")
}

func histogramCell(h router.Histogram) string {
	if h.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%v / %v / %v (%d)", h.Quantile(0.5), h.Quantile(0.99), h.Quantile(1), h.Count)
}

func (r *Report) writeErrors(b *strings.Builder) {
	var lines []string
	for _, e := range r.Errors {
		lines = append(lines, "- "+e)
	}
	all := make([]namedPass, 0, len(r.Schedules))
	for _, s := range r.Schedules {
		all = append(all, namedPass{agentsName(s.Agents), s})
	}
	for i, p := range append(all, r.passes()...) {
		name, s := p.name, p.s
		for _, e := range s.Errors {
			lines = append(lines, fmt.Sprintf("- %s: %s", name, e))
		}
		if more := s.ErrorCount - len(s.Errors); more > 0 {
			lines = append(lines, fmt.Sprintf("- %s: and %d more", name, more))
		}
		// A schedule's drain shows in its figures; a pass's only here.
		if !s.Drained && i >= len(r.Schedules) {
			lines = append(lines, fmt.Sprintf("- %s: NOT drained", name))
		}
		if s.Profile != "" {
			lines = append(lines, fmt.Sprintf("- %s: CPU profile written to %s", agentsName(s.Agents), s.Profile))
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("## Notes and errors\n\n" + strings.Join(lines, "\n") + "\n")
}

func targetCell(t Target) string {
	if !t.Measured {
		return t.Note
	}
	verdict := "NOT met"
	if t.Met {
		verdict = "met"
	}
	if t.Basis == BasisPaced {
		cell := fmt.Sprintf("paced %.2fx: %s", t.PacedRatio, verdict)
		if t.Ratio > 0 {
			cell += fmt.Sprintf(" (back to back %.2fx)", t.Ratio)
		}
		return cell
	}
	cell := fmt.Sprintf("%.2fx: %s", t.Ratio, verdict)
	if t.PacedRatio > 0 {
		cell += fmt.Sprintf(" (paced %.2fx)", t.PacedRatio)
	}
	return cell
}

// budgetCell is latencyCell against a frame budget: the p50 over the sum
// with the fill and touch back to back, then over the all-paced sum.
func budgetCell(h *Hist, fb FrameBudget) string {
	return percentilesCell(h, func(p50 time.Duration) string {
		if !fb.Measured {
			return ""
		}
		return fmt.Sprintf("; %.2fx, paced %.2fx", float64(p50)/float64(fb.SumNs), float64(p50)/float64(fb.PacedSumNs))
	})
}

// percentilesCell is "p50 / p95 / p99 (n)" in ms, with what ratios makes
// of the p50 after the n.
func percentilesCell(h *Hist, ratios func(p50 time.Duration) string) string {
	s := h.Summary()
	if s.Count == 0 {
		return "not measured"
	}
	return fmt.Sprintf("%s / %s / %s (%d%s)", msText(s.P50), msText(s.P95), msText(s.P99), s.Count, ratios(s.P50))
}

func isolationPassName(s *Schedule) string {
	if s.Side != nil && s.Side.Stalled {
		return "with the stalled subscriber"
	}
	return "without the stalled subscriber"
}

// writeIsolation renders the stalled-subscriber comparison.
func (r *Report) writeIsolation(b *strings.Builder) {
	iso := r.Isolation
	if iso == nil || iso.Without == nil || iso.With == nil {
		return
	}
	fmt.Fprintf(b, "## Slow consumer isolation (one agent, two passes)\n\n"+
		"The one-agent schedule twice more, one pass after the other, each with a side publisher posting a small message "+
		"(no artifact) per frame slot to a topic of its own; the second pass adds a bounded subscriber of that topic "+
		"(queue %d, %d in flight) that never takes a message. Each cell: p99 in ms. Target: every agent's RPC p99 "+
		"with it within %.1fx of its p99 without it.\n\n"+
		"| client | without | with | with ÷ without |\n| --- | --- | --- | --- |\n",
		stalledQueued, stalledInFlight, isolationLimit)
	for _, row := range iso.Rows {
		cell := "—"
		if row.Measured {
			cell = fmt.Sprintf("%.2fx", row.Ratio)
			if row.Limit > 0 {
				verdict := "NOT met"
				if row.Met {
					verdict = "met"
				}
				cell += fmt.Sprintf(": %s (within %.1fx)", verdict, row.Limit)
			}
		} else if row.Limit > 0 {
			cell = "NOT measured"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", row.Client, msText(time.Duration(row.WithoutP99Ns)),
			msText(time.Duration(row.WithP99Ns)), cell)
	}
	side := func(s *Schedule) string {
		if s.Side == nil {
			return "—"
		}
		return fmt.Sprintf("%d / %d", s.Side.Admitted, s.Side.Refused)
	}
	fmt.Fprintf(b, "| side publisher: publications admitted / refused (BACKPRESSURE) | %s | %s | |\n", side(iso.Without), side(iso.With))
	fmt.Fprintf(b, "| frames produced (late) | %d (%d) | %d (%d) | |\n\n", iso.Without.Frames, iso.Without.Late, iso.With.Frames, iso.With.Late)
}

// writeRecorder renders the recorder comparison.
func (r *Report) writeRecorder(b *strings.Builder) {
	rc := r.Recorder
	if rc == nil || rc.Without == nil || rc.With == nil {
		return
	}
	fmt.Fprintf(b, "## A recorder beside the consumers (one agent, two passes)\n\n"+
		"The one-agent schedule twice more, one pass after the other; in the second, a `flybus record` process records "+
		"the frame topic in latest mode (its default), every frame's bytes included, to a file on the store's filesystem. "+
		"It is started once the topic is declared and has said it is recording before the first frame; it is stopped "+
		"with SIGTERM after the drain, and its file removed. Each cell: p50 / p99 in ms. Target: the fast consumers' "+
		"frame latency p99 with the recorder within %.1fx of its p99 without it (the noise bound of the isolation "+
		"comparison); the other rows are for comparison.\n\n"+
		"| figure | without p50 / p99 | with p50 / p99 | with ÷ without, p50 / p99 |\n| --- | --- | --- | --- |\n",
		recorderLimit)
	for _, row := range rc.Rows {
		cell := "—"
		if row.Measured {
			cell = fmt.Sprintf("%.2fx / %.2fx", row.P50Ratio, row.P99Ratio)
			if row.Limit > 0 {
				verdict := "NOT met"
				if row.Met {
					verdict = "met"
				}
				cell += fmt.Sprintf(": %s (p99 within %.1fx)", verdict, row.Limit)
			}
		} else if row.Limit > 0 {
			cell = "NOT measured"
		}
		fmt.Fprintf(b, "| %s | %s / %s | %s / %s | %s |\n", row.Figure,
			msText(time.Duration(row.WithoutP50Ns)), msText(time.Duration(row.WithoutP99Ns)),
			msText(time.Duration(row.WithP50Ns)), msText(time.Duration(row.WithP99Ns)), cell)
	}
	w, rec := rc.With, rc.With.Recorder
	recorded, cpu := "not run", "not run"
	switch {
	case rec == nil:
	case !rec.Ready:
		recorded, cpu = "did not start", "did not start"
	default:
		recorded = fmt.Sprintf("%d of %d", rec.Publications, w.Frames)
		cpu = "not measured"
		if rec.CPUErr == "" && w.Frames > 0 {
			cpu = fmt.Sprintf("%.0f", rec.CPUPerFrameUs)
		}
	}
	fmt.Fprintf(b, "| frames produced (late) | %d (%d) | %d (%d) | |\n", rc.Without.Frames, rc.Without.Late, w.Frames, w.Late)
	fmt.Fprintf(b, "| recorder: publications recorded of frames produced | — | %s | |\n", recorded)
	fmt.Fprintf(b, "| recorder: CPU per frame produced, µs (time on a CPU, its start-up left out) | — | %s | |\n\n", cpu)
	if rec != nil {
		removed := "removed"
		if !rec.Removed {
			removed = "NOT removed"
		}
		ended := rec.Ended
		if ended == "" {
			ended = "still running"
		}
		fmt.Fprintf(b, "The recorder: `%s %s` (%s), ended: %s; its file held %s, %s.\n\n", rec.Binary,
			strings.Join(rec.Args, " "), rec.Found, ended, mb(uint64(max(rec.FileBytes, 0))), removed)
	}
}

// latencyRow is a figure that is a latency histogram of each schedule,
// shown with its ratios to base.
func latencyRow(label, ref string, base Baseline, hist func(*Schedule) *Hist) row {
	return row{label, ref, func(s *Schedule) string { return latencyCell(hist(s), base) }}
}

// latencyCell is "p50 / p95 / p99 (n; ratio, paced ratio)" in ms; the
// ratios are the p50's to the baseline's back-to-back and paced p50s.
func latencyCell(h *Hist, base Baseline) string {
	return percentilesCell(h, func(p50 time.Duration) string {
		var r string
		if bs := base.Hot.Summary(); bs.Count > 0 && bs.P50 > 0 {
			r += fmt.Sprintf("; %.2fx", float64(p50)/float64(bs.P50))
		}
		if ps := base.Paced.Summary(); ps.Count > 0 && ps.P50 > 0 {
			r += fmt.Sprintf(", paced %.2fx", float64(p50)/float64(ps.P50))
		}
		return r
	})
}

func cpuCell(c CPU) string {
	if c.Err != "" {
		return "not measured"
	}
	return fmt.Sprintf("%.3f", c.Cores)
}

func memoryLabel(embedded bool) string {
	if embedded {
		return "Whole process VmRSS / VmHWM, before → after"
	}
	return "Router VmRSS / VmHWM, before → after"
}

func memoryCell(m MemoryFigures) string {
	if m.Err != "" {
		return "not measured"
	}
	cell := fmt.Sprintf("%.1f / %.1f → %.1f / %.1f MB", float64(m.Before.RSS)/1e6, float64(m.Before.HWM)/1e6,
		float64(m.After.RSS)/1e6, float64(m.After.HWM)/1e6)
	if !m.PeakReset {
		cell += " (peak since start)"
	}
	return cell
}

func consumersCell(s *Schedule) string {
	var seen, coalesced []string
	for _, c := range s.Consumers {
		seen = append(seen, fmt.Sprint(c.Seen))
		coalesced = append(coalesced, fmt.Sprint(c.Coalesced))
	}
	if len(seen) == 0 {
		return "not measured"
	}
	return strings.Join(seen, ", ") + " (" + strings.Join(coalesced, ", ") + ")"
}

func agentsName(n int) string {
	if n == 1 {
		return "1 agent"
	}
	return fmt.Sprintf("%d agents", n)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// msText is a duration in ms with three decimals.
func msText(d time.Duration) string { return fmt.Sprintf("%.3f", ms(d)) }

// dur is a duration in the unit that suits it.
func dur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.3f ms", ms(d))
}

func trimFloat(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%g", f), ".0") }

// thousands formats n with comma separators.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// perFrame is n per frame, to two decimals.
func perFrame(n uint64, frames int) string {
	if frames <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(frames))
}
