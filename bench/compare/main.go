package compare

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/flybus/flybus/perf"
)

const usage = `Usage:
  compare nats   [--seconds S] [--agents N] [--pending-msgs N] [--pending-bytes N] [--json FILE]
  compare direct [--seconds S] [--json FILE]
  compare plot   [--flybus perf.json] [--nats nats.json] [--direct direct.json] [--agents N] --out DIR
  compare sweep-point --point JSON

nats    the 60 Hz three-consumer schedule through an embedded NATS server in a child process
direct  the same schedule, the producer writing every frame to each consumer's Unix socket
plot    PNG plots of the JSON results, and a markdown table of the three side by side
sweep-point  one point of flybus perf --sweep (a perf.SweepPoint) through the NATS server;
        prints its perf.PointResult as JSON (flybus perf --sweep runs it)
`

// Main runs the compare command and returns its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "nats", "direct":
		err = runPeer(ctx, args[0], args[1:], stdout)
	case "plot":
		err = runPlot(args[1:], stdout)
	case "sweep-point":
		err = runSweepPoint(ctx, args[1:], stdout)
	default:
		err = fmt.Errorf("unknown command %q\n\n%s", args[0], usage)
	}
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	return 0
}

func runPeer(ctx context.Context, kind string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(kind, flag.ContinueOnError)
	seconds := fs.Float64("seconds", 5, "length of the schedule in `SECONDS` (60 frames per second)")
	jsonOut := fs.String("json", "", "write the figures and raw histograms as JSON to `FILE`")
	var ncfg NATSConfig
	if kind == "nats" {
		fs.IntVar(&ncfg.Agents, "agents", 0, "request-reply services called with the frame every frame")
		fs.IntVar(&ncfg.PendingMsgs, "pending-msgs", 0, "subscribers' nats.go pending message limit (0: nats.go default, 500000)")
		fs.IntVar(&ncfg.PendingBytes, "pending-bytes", 0, "subscribers' nats.go pending byte limit (0: nats.go default, 64 MiB)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *seconds <= 0 || frames(*seconds) < 1 {
		return fmt.Errorf("--seconds %g is less than one frame", *seconds)
	}
	var r *Result
	var err error
	if kind == "nats" {
		ncfg.Seconds = *seconds
		r, err = RunNATS(ctx, ncfg)
	} else {
		r, err = RunDirect(ctx, DirectConfig{Seconds: *seconds})
	}
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := writeFile(*jsonOut, r.WriteJSON); err != nil {
			return err
		}
	}
	fmt.Fprint(stdout, Table(nil, r.kindIs("nats"), r.kindIs("direct")))
	if len(r.Errors) > 0 {
		return fmt.Errorf("%s run had errors:\n  %s", kind, strings.Join(r.Errors, "\n  "))
	}
	return nil
}

func (r *Result) kindIs(k string) *Result {
	if r.Kind == k {
		return r
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(write(f), f.Close())
}

func runPlot(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("plot", flag.ContinueOnError)
	fb := fs.String("flybus", "", "the JSON report of `flybus perf --json`")
	nf := fs.String("nats", "", "the JSON of `compare nats --json`")
	df := fs.String("direct", "", "the JSON of `compare direct --json`")
	agents := fs.Int("agents", -1, "the flybus schedule to plot, by agent count (default: the first)")
	out := fs.String("out", "", "the directory for the PNGs (created if missing)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("plot needs --out DIR")
	}
	if *fb == "" && *nf == "" && *df == "" {
		return errors.New("plot needs at least one of --flybus, --nats, --direct")
	}
	in := PlotInput{Agents: *agents}
	var err error
	if *fb != "" {
		if in.Flybus, err = ReadFlybus(*fb); err != nil {
			return err
		}
	}
	if *nf != "" {
		if in.NATS, err = ReadResult(*nf); err != nil {
			return err
		}
	}
	if *df != "" {
		if in.Direct, err = ReadResult(*df); err != nil {
			return err
		}
	}
	files, err := Plot(in, *out)
	if err != nil {
		return err
	}
	var sched *perf.Schedule
	if in.Flybus != nil {
		sched, _ = pickSchedule(in.Flybus, in.Agents)
	}
	fmt.Fprint(stdout, Table(sched, in.NATS, in.Direct))
	fmt.Fprintln(stdout, "\nPlots:")
	for _, f := range files {
		fmt.Fprintln(stdout, " ", f)
	}
	return nil
}

// Table is the three designs side by side in markdown; any may be nil.
func Table(s *perf.Schedule, n, d *Result) string {
	var b strings.Builder
	b.WriteString("| figure | flybus | NATS | direct |\n| --- | --- | --- | --- |\n")
	row := func(name string, f func(s *perf.Schedule) string, g func(r *Result) string) {
		cells := []string{"-", "-", "-"}
		if s != nil {
			cells[0] = f(s)
		}
		if n != nil {
			cells[1] = g(n)
		}
		if d != nil {
			cells[2] = g(d)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", name, strings.Join(cells, " | "))
	}
	row("schedule", func(s *perf.Schedule) string {
		return fmt.Sprintf("%d frames, %d agents, %d late", s.Frames, s.Agents, s.Late)
	}, func(r *Result) string {
		return fmt.Sprintf("%d frames, %d agents, %d late", r.Frames, r.Settings.Agents, r.Late)
	})
	row("delivery fast p50 / p95 / p99", func(s *perf.Schedule) string { return pcts(s.DeliveryFast) },
		func(r *Result) string { return pcts(r.DeliveryFast) })
	row("delivery slow p50 / p95 / p99", func(s *perf.Schedule) string { return pcts(s.DeliverySlow) },
		func(r *Result) string { return pcts(r.DeliverySlow) })
	row("seen per consumer (slow last)", func(s *perf.Schedule) string {
		var p []string
		for _, c := range s.Consumers {
			p = append(p, fmt.Sprintf("%d (coalesced %d)", c.Seen, c.Coalesced))
		}
		return strings.Join(p, ", ")
	}, func(r *Result) string {
		var p []string
		for _, c := range r.Consumers {
			p = append(p, fmt.Sprintf("%d (dropped %d)", c.Seen, c.Dropped))
		}
		if len(p) == 0 {
			return "-"
		}
		return strings.Join(p, ", ")
	})
	row("CPU of the frame mover", func(s *perf.Schedule) string {
		return cpuCell("router", s.RouterCPU) + fmt.Sprintf("; less sampling %.0f µs/frame", s.RouterCPU.NetPerFrameUs)
	}, func(r *Result) string {
		if r.Kind == "nats" {
			return cpuCell("server", r.CPU)
		}
		return cpuCell("producer", r.CPU)
	})
	row("CPU of the clients", func(s *perf.Schedule) string { return cpuCell("harness", s.HarnessCPU) },
		func(r *Result) string {
			if r.Kind == "nats" {
				return cpuCell("nats.go clients", r.ClientCPU)
			}
			return cpuCell("consumers", r.ClientCPU)
		})
	row("RSS after / peak of the frame mover", func(s *perf.Schedule) string { return memCell(s.Memory) },
		func(r *Result) string { return memCell(r.Memory) })
	if s != nil && n != nil && n.CPU.PerFrameUs > 0 && s.RouterCPU.PerFrameUs > 0 {
		fmt.Fprintf(&b, "\nflybus router CPU per frame / NATS server CPU per frame: %.3fx (less sampling: %.3fx; target under 0.1x)\n",
			s.RouterCPU.PerFrameUs/n.CPU.PerFrameUs, s.RouterCPU.NetPerFrameUs/n.CPU.PerFrameUs)
		if s.Agents != n.Settings.Agents {
			fmt.Fprintf(&b, "(note: flybus ran %d agents, NATS %d)\n", s.Agents, n.Settings.Agents)
		}
	}
	return b.String()
}

func pcts(h *perf.Hist) string {
	if h == nil {
		return "-"
	}
	s := h.Summary()
	if s.Count == 0 {
		return "none"
	}
	f := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("%s / %s / %s ms (n=%d)", f(s.P50), f(s.P95), f(s.P99), s.Count)
}

func cpuCell(what string, c perf.CPU) string {
	if c.Err != "" {
		return what + ": " + c.Err
	}
	return fmt.Sprintf("%s %.0f µs/frame, %.3f cores", what, c.PerFrameUs, c.Cores)
}

func memCell(m perf.MemoryFigures) string {
	if m.Err != "" {
		return m.Err
	}
	return fmt.Sprintf("%.1f / %.1f MB", float64(m.After.RSS)/1e6, float64(m.After.HWM)/1e6)
}
