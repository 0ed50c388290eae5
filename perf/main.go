package perf

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/flybus/flybus/store"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// Exit statuses of Main.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

type options struct {
	seconds    float64
	agents     string
	fill       string
	embedded   bool
	flybus     string
	store      string
	storeMode  string
	json       string
	cpuprofile string
	nats       string
	stalled    bool
	recorder   bool
	sealWait   bool
	noAhead    bool
	noOpen     bool
	routerEnv  envList
	quiet      bool
	sweep      sweepOptions
}

func flags(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Float64Var(&o.seconds, "seconds", 5, "length of each schedule in `SECONDS` (60 frames per second)")
	fs.StringVar(&o.agents, "agents", "1,2,4", "the schedules: agent counts, comma-separated `LIST`")
	fs.StringVar(&o.fill, "fill", "write", "how the producer fills a frame, `MODE` write (ArtifactWriter.Write) or map (ArtifactWriter.Bytes)")
	fs.BoolVar(&o.embedded, "embedded", false, "run router.New in this process instead of a flybus serve process\n(the router's CPU then cannot be told apart from the clients')")
	fs.StringVar(&o.flybus, "flybus", "", "the flybus executable `PATH` for process mode and for --recorder (default: this executable if\nit is flybus, else a flybus beside it, else one built with go build ./cmd/flybus into a temporary\ndirectory)")
	fs.StringVar(&o.store, "store", "", "store root `DIR`, created if missing (default /dev/shm/flybus-perf-<pid>, removed afterwards);\ntry a tmpfs mounted huge=within_size")
	fs.StringVar(&o.storeMode, "store-mode", "pool", "the router's store `MODE`: pool (slots reused across generations; consumers\nkeep each slot mapped) or files (a file per frame)")
	fs.StringVar(&o.json, "json", "", "also write every figure and raw histogram as JSON to `FILE`")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a pprof CPU profile of the router during each schedule to `FILE`\n(several schedules: FILE gets .agentsN before its extension; embedded: the whole process)")
	fs.StringVar(&o.nats, "nats-us-per-frame", "", "an embedded NATS server's CPU per frame on the same schedules, `AGENTS=US,...`\n(measured by bench/compare), for the router CPU target")
	fs.BoolVar(&o.stalled, "stalled-subscriber", false, fmt.Sprintf("after the schedules, run the one-agent schedule twice more with a side topic and\n"+
		"publisher, the second time with a bounded subscriber (queue %d) that never takes a message, and\n"+
		"compare every agent's RPC p99 (target: within %.1fx); adds two schedules to the run", stalledQueued, isolationLimit))
	fs.BoolVar(&o.recorder, "recorder", false, fmt.Sprintf("after the schedules (and the isolation passes), run the one-agent schedule twice more, the\n"+
		"second time with a flybus record process recording its frame topic (latest mode) to a file\n"+
		"on the store's filesystem, and compare the consumers', producer's and agents' latency p50 and\n"+
		"p99 (target: the fast consumers' frame latency p99 within %.1fx); adds two schedules to the run", recorderLimit))
	fs.BoolVar(&o.sealWait, "seal-wait", false, "the producer waits for Seal's answer before it publishes (measures the seal round trip);\n"+
		"default: Seal with NoWait and the publish right behind it, one round trip for both")
	fs.BoolVar(&o.noAhead, "no-allocate-ahead", false, "the producer's Allocate makes its round trip every time\n(default: client.Config.AllocateAhead 1, a writer prepared in the background)")
	fs.BoolVar(&o.noOpen, "no-open-ahead", false, "consumers and agents make View's artifact.open round trip themselves\n(default: client.Config.OpenAhead, asked for as each delivery arrives)")
	fs.Var(&o.routerEnv, "router-env", "add `KEY=VALUE` to the router process's environment (repeatable; GOMAXPROCS=1, say)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress line on stderr")
	sweepFlags(fs, &o.sweep)
	return fs
}

// Usage is the help text of `flybus perf`.
func Usage() string {
	var b strings.Builder
	b.WriteString("Usage: flybus perf [FLAGS]\n\n" +
		"Run the 60 Hz harness behind the performance targets of docs/design.md: 640x480 RGBA\n" +
		"frames at 60 Hz to three latest-mode consumers (one slow) with 1, 2 and 4 agent services\n" +
		"called every frame, measured against baselines taken first in the same run, and print a\n" +
		"markdown report.\n\nFlags:\n")
	var sweep []*flag.Flag
	flags(&options{}).VisitAll(func(f *flag.Flag) {
		if sweepOnly[f.Name] {
			sweep = append(sweep, f)
			return
		}
		writeFlagHelp(&b, f)
	})
	b.WriteString("  -h, --help\n        print this help\n\n")
	b.WriteString(sweepUsage)
	for _, f := range sweep {
		writeFlagHelp(&b, f)
	}
	b.WriteString("\nThe report goes to stdout, the progress line and errors to stderr. Exit status 0 when every\n" +
		"schedule or point ran cleanly and drained, 1 when anything failed, 2 for bad arguments.\n\n" +
		"Example:\n  flybus perf --seconds 5 --store /mnt/fbhuge --json perf.json\n" +
		"  flybus perf --sweep                              # every set, 3 s a point, into docs/perf-runs/\n" +
		"  flybus perf --sweep --sweep-sets consumers,small --seconds 2 --out /tmp/sweep\n")
	return b.String()
}

// writeFlagHelp writes one flag's entry of the help text.
func writeFlagHelp(b *strings.Builder, f *flag.Flag) {
	kind, text := flag.UnquoteUsage(f)
	head := "  --" + f.Name
	if kind != "" {
		head += " " + kind
	}
	b.WriteString(head + "\n")
	for line := range strings.SplitSeq(text, "\n") {
		b.WriteString("        " + line + "\n")
	}
	if f.DefValue != "" && f.DefValue != "false" {
		fmt.Fprintf(b, "        (default %s)\n", f.DefValue)
	}
}

// Main is `flybus perf ARGS`: it parses args, runs the harness, prints
// the markdown report to stdout and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	o := &options{}
	fs := flags(o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, Usage())
			return exitOK
		}
		return usageError(stderr, err.Error())
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "unexpected argument "+fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.sweep.on {
		return sweepMain(o, set, stdout, stderr)
	}
	for name := range set {
		if sweepOnly[name] {
			return usageError(stderr, "--"+name+" is for --sweep")
		}
	}
	cfg, err := o.config()
	if err != nil {
		return usageError(stderr, err.Error())
	}
	if !o.quiet {
		cfg.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep, err := Run(ctx, cfg)
	code := exitOK
	if rep != nil {
		if werr := rep.WriteMarkdown(stdout); werr != nil {
			fmt.Fprintf(stderr, "flybus perf: %v\n", werr)
			code = exitFailure
		}
		if o.json != "" {
			if jerr := writeJSONFile(o.json, rep); jerr != nil {
				fmt.Fprintf(stderr, "flybus perf: %v\n", jerr)
				code = exitFailure
			}
		}
		if rep.Failed() {
			fmt.Fprintln(stderr, "flybus perf: the run recorded errors (see the report's last section)")
			code = exitFailure
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "flybus perf: %v\n", err)
		code = exitFailure
	}
	return code
}

// envList collects a repeatable KEY=VALUE flag.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }

func (e *envList) Set(v string) error {
	*e = append(*e, v)
	return nil
}

func usageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "flybus perf: %s\n\n%s", msg, Usage())
	return exitUsage
}

// config turns the flags into a Config and checks it.
func (o *options) config() (Config, error) {
	cfg := Config{Seconds: o.seconds, Fill: Fill(o.fill), Embedded: o.embedded, Flybus: o.flybus,
		Store: o.store, CPUProfile: o.cpuprofile, StalledSubscriber: o.stalled, Recorder: o.recorder, SealWait: o.sealWait, NoAllocateAhead: o.noAhead, NoOpenAhead: o.noOpen,
		RouterEnv: o.routerEnv}
	var err error
	if cfg.StoreMode, err = store.ParseMode(o.storeMode); err != nil {
		return Config{}, err
	}
	if cfg.Agents, err = parseAgents(o.agents); err != nil {
		return Config{}, err
	}
	if o.nats != "" {
		if cfg.NATSRouterCPUPerFrameUs, err = parseNATS(o.nats); err != nil {
			return Config{}, err
		}
	}
	if o.seconds <= 0 {
		return Config{}, fmt.Errorf("--seconds must be positive, not %g", o.seconds)
	}
	return cfg, cfg.withDefaults().validate()
}

func parseAgents(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--agents wants agent counts like 1,2,4, not %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseNATS(s string) (map[int]float64, error) {
	out := map[int]float64{}
	for f := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		n, err1 := strconv.Atoi(k)
		us, err2 := strconv.ParseFloat(v, 64)
		if !ok || err1 != nil || err2 != nil || us <= 0 {
			return nil, fmt.Errorf("--nats-us-per-frame wants AGENTS=MICROSECONDS pairs like 1=120,2=150, not %q", s)
		}
		out[n] = us
	}
	return out, nil
}

func writeJSONFile(path string, rep *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
