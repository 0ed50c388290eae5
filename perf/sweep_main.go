package perf

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/flybus/flybus/store"
)

// sweepOptions are the flags of `flybus perf --sweep`.
type sweepOptions struct {
	on                                       bool
	sets                                     string
	consumers, rates, sizes, sizeRates, send intList
	out                                      string
	compare                                  string
	noNATS                                   bool
}

// intList is a comma-separated list of positive integers.
type intList []int

func (l *intList) String() string {
	var parts []string
	for _, n := range *l {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("want positive integers like 1,4,16, not %q", s)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// sweepOnly names the flags that only --sweep reads; help lists them apart.
var sweepOnly = map[string]bool{"sweep": true, "sweep-sets": true, "sweep-consumers": true, "sweep-rates": true,
	"sweep-sizes": true, "sweep-size-rates": true, "sweep-senders": true, "out": true, "compare": true, "no-nats": true}

// harnessOnly names the flags of the 60 Hz schedules that --sweep refuses.
var harnessOnly = []string{"agents", "fill", "embedded", "cpuprofile", "nats-us-per-frame", "stalled-subscriber",
	"recorder", "seal-wait", "no-allocate-ahead", "no-open-ahead"}

// sweepSeconds is a point's default length.
const sweepSeconds = 3

func sweepFlags(fs *flag.FlagSet, o *sweepOptions) {
	def := SweepGrid{}.withDefaults()
	o.consumers, o.rates, o.sizes, o.sizeRates, o.send = def.Consumers, def.Rates, def.Sizes, def.SizeRates, def.Senders
	fs.BoolVar(&o.on, "sweep", false, "run the sweep described here instead of the 60 Hz schedules")
	fs.StringVar(&o.sets, "sweep-sets", strings.Join(sweepSets, ","), "the sets to run, comma-separated `LIST`")
	fs.Var(&o.consumers, "sweep-consumers", fmt.Sprintf("consumers of the consumers set (%s B frames at %d Hz), `LIST`",
		thousands(int64(def.ConsumersBytes)), def.ConsumersRate))
	fs.Var(&o.rates, "sweep-rates", fmt.Sprintf("rates in Hz of the rate set (%s B frames to %d consumers), `LIST`",
		thousands(int64(def.RateBytes)), def.RateConsumers))
	fs.Var(&o.sizes, "sweep-sizes", fmt.Sprintf("frame sizes in bytes of the size set (%d consumers), `LIST`", def.SizeConsumers))
	fs.Var(&o.sizeRates, "sweep-size-rates", "the rates in Hz each size of the size set is measured at, `LIST`")
	fs.Var(&o.send, "sweep-senders", fmt.Sprintf("publishers, and callers, of the small set (%d-byte payloads), `LIST`", SmallPayloadBytes))
	fs.StringVar(&o.out, "out", "", "write the sweep's report (DATE-sweep.md), JSON and SVG plots into `DIR`, created\nif missing (default: docs/perf-runs of the flybus module holding the working directory)")
	fs.StringVar(&o.compare, "compare", "", "bench/compare's executable `PATH`, which runs the NATS peer (default: built with\ngo build ./cmd/compare in bench/compare into a temporary directory)")
	fs.BoolVar(&o.noNATS, "no-nats", false, "measure flybus alone, without the NATS peer")
}

const sweepUsage = `Sweep (--sweep): how the cost grows. Each point runs on flybus (a router process) and then on
an embedded NATS server (bench/compare), with baselines measured first, and reports router CPU
per frame and per delivery, p50/p99 latency, frames coalesced or dropped, and whether the router
kept up (the rate held, at most 1% of deliveries lost, p99 under one frame period); for flybus
also the producer's fill, the consumers' touch and page faults per frame. The sets:
  consumers  1, 4, 16, 64 consumers of 1,228,800-byte frames at 60 Hz
  rate       60, 240, 1,000 Hz of 92,160-byte frames to 4 consumers
  size       92,160 / 1,228,800 / 33,177,600-byte frames to 3 consumers, at 60 and 30 Hz
  small      256-byte pub/sub and RPC with 1 and 8 publishers or callers
The default sweep is 17 points on both peers, about 3 minutes at the default 3 s a point.
--seconds is per point; --store, --store-mode, --flybus, --router-env, --json and --quiet apply
as above. The report is printed and written with its SVG plots into --out.

`

// sweepMain runs `flybus perf --sweep`; set holds the flags given.
func sweepMain(o *options, set map[string]bool, stdout, stderr io.Writer) int {
	for _, name := range harnessOnly {
		if set[name] {
			return usageError(stderr, "--"+name+" is for the 60 Hz schedules, not --sweep")
		}
	}
	cfg := SweepConfig{Seconds: sweepSeconds, Flybus: o.flybus, Store: o.store, RouterEnv: o.routerEnv,
		NoNATS: o.sweep.noNATS, Compare: o.sweep.compare}
	if set["seconds"] {
		cfg.Seconds = o.seconds
	}
	var err error
	if cfg.StoreMode, err = store.ParseMode(o.storeMode); err != nil {
		return usageError(stderr, err.Error())
	}
	if o.sweep.noNATS && o.sweep.compare != "" {
		return usageError(stderr, "--compare and --no-nats contradict each other")
	}
	for s := range strings.SplitSeq(o.sweep.sets, ",") {
		cfg.Grid.Sets = append(cfg.Grid.Sets, strings.TrimSpace(s))
	}
	cfg.Grid.Consumers, cfg.Grid.Rates, cfg.Grid.Sizes = o.sweep.consumers, o.sweep.rates, o.sweep.sizes
	cfg.Grid.SizeRates, cfg.Grid.Senders = o.sweep.sizeRates, o.sweep.send
	if _, err := cfg.withDefaults().Grid.Points(cfg.Seconds); err != nil {
		return usageError(stderr, err.Error())
	}
	if err := (Config{Seconds: 1, Flybus: cfg.Flybus, RouterEnv: cfg.RouterEnv}).withDefaults().validate(); err != nil {
		return usageError(stderr, err.Error())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The output directory is settled before minutes of measuring.
	out := o.sweep.out
	if out == "" {
		root, err := moduleRoot(ctx)
		if err != nil {
			return usageError(stderr, fmt.Sprintf("no --out DIR, and no flybus module here for docs/perf-runs (%v)", err))
		}
		out = filepath.Join(root, "docs", "perf-runs")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		fmt.Fprintf(stderr, "flybus perf: %v\n", err)
		return exitFailure
	}
	if !o.quiet {
		cfg.Progress = stderr
	}

	rep, err := RunSweep(ctx, cfg)
	code := exitOK
	if rep != nil {
		files, werr := rep.WriteFiles(out)
		if werr != nil {
			fmt.Fprintf(stderr, "flybus perf: %v\n", werr)
			code = exitFailure
		}
		if werr := rep.WriteMarkdown(stdout, ""); werr != nil {
			fmt.Fprintf(stderr, "flybus perf: %v\n", werr)
			code = exitFailure
		}
		if o.json != "" {
			if jerr := writeJSON(o.json, rep); jerr != nil {
				fmt.Fprintf(stderr, "flybus perf: %v\n", jerr)
				code = exitFailure
			}
		}
		fmt.Fprintf(stderr, "flybus perf: wrote %s\n", strings.Join(files, ", "))
		if rep.Failed() {
			fmt.Fprintln(stderr, "flybus perf: the sweep recorded errors (see the report's last section)")
			code = exitFailure
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "flybus perf: %v\n", err)
		code = exitFailure
	}
	return code
}

// writeJSON writes v as indented JSON to path.
func writeJSON(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
