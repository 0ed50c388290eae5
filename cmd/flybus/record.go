package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/term"
	"github.com/flybus/flybus/record"
)

var recordCmd = &command{
	name:    "record",
	summary: "record topics to an MCAP file; record info describes recordings",
	run:     runRecord,
	usage:   recordUsage,
}

type recordOptions struct {
	latest, bounded bool
	replay          bool
	output          string
	store           string
	count           int64
	duration        time.Duration
	splitSize       recSizeValue
	splitDuration   time.Duration
	compression     string
	client          string
	timeout         time.Duration
	nice            int
}

func recordFlags(o *recordOptions) *flag.FlagSet {
	set := newFlagSet("record")
	set.StringVar(&o.output, "o", "", "write the recording to `FILE.mcap` (required; the same as --output)")
	set.StringVar(&o.output, "output", "", "write the recording to `FILE.mcap`")
	set.BoolVar(&o.latest, "latest", false, "subscribe in latest mode: never slow a publisher; skipped messages are\ncounted in the recording (the default)")
	set.BoolVar(&o.bounded, "bounded", false, "subscribe in bounded mode: miss nothing; a full queue refuses publishers\nwith BACKPRESSURE, as any bounded subscriber's does")
	set.BoolVar(&o.replay, "replay", false, "first record each topic's retained message, if it keeps one")
	set.StringVar(&o.store, "store", "", "the router's store root `DIR`, as given to serve --store (needed to record\nartifacts)")
	set.Int64Var(&o.count, "count", 0, "stop after `N` publications, all topics together (0: no limit)")
	durationVar(set, &o.duration, "duration", 0, "stop after `D` (0: no limit)")
	set.Var(&o.splitSize, "split-size", "start a new part before one would grow past `BYTES` (512M, 2G; 0: never);\nthe parts of FILE.mcap are FILE-0001.mcap, FILE-0002.mcap, ...")
	durationVar(set, &o.splitDuration, "split-duration", 0, "start a new part when the current one spans `D` (0: never)")
	set.StringVar(&o.compression, "compression", "none", "compress chunks: `none` or zstd")
	set.IntVar(&o.nice, "nice", 10, "lower the recorder's CPU priority by `N` (0 to 19), so that on a busy host the\nbus's consumers get the CPU first when a frame arrives (0: leave it)")
	set.StringVar(&o.client, "client", "", clientFlagUsage)
	durationVar(set, &o.timeout, "timeout", 10*time.Second, "give up connecting and subscribing after `D`")
	return set
}

func recordUsage() string {
	notes := `Subscribes to every TOPIC (one nobody has declared yet is waited for)
and writes each publication as it arrives: its payload, and the bytes of every artifact it
carries with their names and content types, tied to the topic, its sequence
and incarnation, and the receive time. The file is standard MCAP (see
docs/recording.md for its channels). Once subscribed, record prints

  recording TOPIC,... to FILE (MODE, COMPRESSION)

to stderr, then its progress: a line redrawn in place on a terminal, a plain
line every 10 s otherwise. SIGINT or SIGTERM, --count or --duration ends the
recording with a complete file (summary and indexes written) and a last line
saying what was recorded; exit 0. If the recorder dies instead, the file
still reads up to its last complete chunk (chunks are finished at 4 MiB and
every second). A router that restarts is reconnected to, and the topics
are subscribed again; the recording goes on in the same file.

flybus record info FILE... [--json] describes recordings from their
summaries: topics, counts, sizes, duration, rate, coalesced counts and
compression. A file that has no summary (its recording did not finish) is
scanned instead, up to where it can be read.
`
	example := walkExample("record")
	if example == "" {
		example = `  flybus record /tmp/flybus.sock camera.front camera.rear --store /dev/shm/flybus -o run.mcap --split-size 1G
  flybus record info run-0001.mcap run-0002.mcap
`
	}
	return usageText("flybus record SOCKET TOPIC... -o FILE.mcap [--store DIR] [--latest|--bounded] [--replay] [--count N] [--duration D] [--split-size BYTES] [--split-duration D] [--compression none|zstd] [--client ID] [--timeout D]\n       flybus record info FILE... [--json]",
		"Record topics to an MCAP file, or describe recordings.", recordFlags(&recordOptions{}), notes, example)
}

// recSizeValue is a byte count flag: 1048576, 512K, 64M, 2G (powers of 1024).
type recSizeValue int64

func (s *recSizeValue) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *recSizeValue) Set(v string) error {
	n, err := parseRecSize(v)
	if err != nil {
		return err
	}
	*s = recSizeValue(n)
	return nil
}

func parseRecSize(v string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(v)), "B"), "I")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, errors.New("not a size; write it like 1048576, 512M or 2G")
	}
	return n * mult, nil
}

func (o *recordOptions) check(pos []string) (socket string, topics []string, err error) {
	if len(pos) < 2 {
		return "", nil, fmt.Errorf("want SOCKET TOPIC..., got %d arguments", len(pos))
	}
	socket, topics = pos[0], pos[1:]
	seen := map[string]bool{}
	for _, t := range topics {
		if err := checkName("topic", t); err != nil {
			return "", nil, err
		}
		if seen[t] {
			return "", nil, fmt.Errorf("topic %s is named twice", t)
		}
		seen[t] = true
	}
	switch {
	case o.output == "":
		return "", nil, errors.New("-o FILE.mcap is required: where to write the recording")
	case o.latest && o.bounded:
		return "", nil, errors.New("--latest and --bounded exclude each other")
	case o.count < 0, o.duration < 0, o.splitDuration < 0:
		return "", nil, errors.New("--count, --duration and --split-duration must not be negative")
	case o.nice < 0 || o.nice > 19:
		return "", nil, fmt.Errorf("--nice %d: want 0 to 19", o.nice)
	case o.compression != "none" && o.compression != "zstd":
		return "", nil, fmt.Errorf("--compression %q: want none or zstd", o.compression)
	}
	if msg := checkClientFlags(o.client, o.timeout); msg != "" {
		return "", nil, errors.New(msg)
	}
	return socket, topics, nil
}

func runRecord(c *command, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "info" {
		return runRecordInfo(c, args[1:], stdout, stderr)
	}
	o := &recordOptions{}
	pos, code, ok := parse(c, recordFlags(o), args, stdout, stderr)
	if !ok {
		return code
	}
	socket, topics, err := o.check(pos)
	if err != nil {
		return usageError(c, stderr, err.Error())
	}
	mode := "latest"
	if o.bounded {
		mode = "bounded"
	}
	if err := lowerPriority(o.nice); err != nil {
		fmt.Fprintf(stderr, "flybus record: --nice %d: %v (recording at the usual priority)\n", o.nice, err)
	}
	// The signals end the recording; Run then returns and Close writes the
	// summary, so an interrupted recording is a complete file.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	setup, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// A recorder outlives router restarts (it reconnects and subscribes
	// again) and may start before its producers: a topic nobody has
	// declared yet is waited for.
	bus, id, err := dialTool(setup, socket, c.name, o.client, client.Config{StoreRoot: o.store, OpenAhead: true})
	if err != nil {
		return connectFailed(stderr, c.name, id, o.timeout, err)
	}
	defer bus.Close()
	rec, err := record.Create(o.output, record.Options{Compression: o.compression, SplitSize: int64(o.splitSize),
		SplitDuration: o.splitDuration, Count: o.count, Duration: o.duration, Mode: mode})
	if err != nil {
		fmt.Fprintf(stderr, "flybus record: %v\n", err)
		return exitFailure
	}
	var subs []*client.Subscription
	for _, t := range topics {
		opts := []client.SubscribeOption{client.AwaitTopic()}
		if o.replay {
			opts = append(opts, client.Replay())
		}
		s, err := rec.Subscribe(setup, bus, t, opts...)
		if err != nil {
			// Nothing was recorded: leave no file behind.
			rec.Close()
			for _, f := range rec.Stats().Files {
				os.Remove(f)
			}
			return toolFailed(stderr, c.name, o.timeout, fmt.Errorf("subscribe %s: %w", t, err))
		}
		defer s.Close()
		subs = append(subs, s)
	}
	cancel()
	fmt.Fprintf(stderr, "recording %s to %s (%s, %s)\n", strings.Join(topics, ","), o.output, mode, o.compression)

	start := time.Now()
	p := startRecProgress(stderr, func() string {
		st := rec.Stats()
		return fmt.Sprintf("recorded %d publications, %s, %s, %d file(s)", st.Publications, recBytes(st.Bytes),
			recRate(st.Publications, st.Bytes, time.Since(start)), len(st.Files))
	})
	runErr := rec.Run(ctx, subs...)
	p.stop()
	closeErr := rec.Close()
	st := rec.Stats()
	fmt.Fprintf(stderr, "recorded %d publications (%d artifacts, %s of them; %s written) in %v to %s\n",
		st.Publications, st.Artifacts, recBytes(int64(st.ArtifactBytes)), recBytes(st.Bytes),
		time.Since(start).Round(time.Millisecond), strings.Join(st.Files, " "))
	if err := errors.Join(runErr, closeErr); err != nil {
		return toolFailed(stderr, c.name, o.timeout, storeHint(err, o.store))
	}
	return exitOK
}

func runRecordInfo(c *command, args []string, stdout, stderr io.Writer) int {
	set := newFlagSet("record info")
	asJSON := set.Bool("json", false, "print one JSON object per file")
	pos, code, ok := parse(c, set, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return usageError(c, stderr, "record info wants FILE...")
	}
	files, err := record.Expand(pos...)
	if err != nil {
		fmt.Fprintf(stderr, "flybus record info: %v\n", err)
		return exitFailure
	}
	status := exitOK
	enc := json.NewEncoder(stdout)
	for _, f := range files {
		fi, err := record.Info(f)
		if err != nil {
			fmt.Fprintf(stderr, "flybus record info: %v\n", err)
			status = exitFailure
			continue
		}
		if *asJSON {
			enc.Encode(fi)
			continue
		}
		writeRecordInfo(stdout, fi)
	}
	return status
}

func writeRecordInfo(w io.Writer, fi *record.FileInfo) {
	state := "complete"
	if !fi.Complete {
		state = "INCOMPLETE (no summary; scanned): " + fi.Problem
	}
	fmt.Fprintf(w, "%s: %s, %s\n", fi.File, recBytes(fi.Size), state)
	fmt.Fprintf(w, "  compression %s, %d chunks, %d messages", fi.Compression, fi.Chunks, fi.Messages)
	if fi.Mode != "" {
		fmt.Fprintf(w, ", recorded %s", fi.Mode)
	}
	if fi.Part > 0 {
		fmt.Fprintf(w, ", part %d", fi.Part)
	}
	fmt.Fprintln(w)
	if !fi.Start.IsZero() {
		fmt.Fprintf(w, "  %s to %s (%v)\n", fi.Start.Format(time.RFC3339Nano), fi.End.Format(time.RFC3339Nano), fi.Duration.Round(time.Microsecond))
	}
	fmt.Fprintf(w, "  %d publications (%.1f/s), %d replaced, artifacts %s\n", fi.Publications, fi.Rate, fi.Replaced, recBytes(int64(fi.ArtifactBytes)))
	for _, t := range fi.Topics {
		ret := t.Retention
		if ret == "" {
			ret = "?"
		}
		fmt.Fprintf(w, "  %-24s retained %-6s %8d publications %8.1f/s %6d replaced %10s", t.Topic, ret, t.Publications, t.Rate, t.Replaced, recBytes(int64(t.ArtifactBytes)))
		for i, a := range t.Attachments {
			sep := ", "
			if i == 0 {
				sep = "  "
			}
			fmt.Fprintf(w, "%s%s (%s) %d", sep, a.Name, a.ContentType, a.Count)
		}
		fmt.Fprintln(w)
	}
	if fi.Other > 0 {
		fmt.Fprintf(w, "  %d messages on channels that are not flybus's\n", fi.Other)
	}
}

// recProgress prints a status line: redrawn in place on a terminal, a plain
// line every 10 s otherwise.
type recProgress struct {
	done chan struct{}
	wg   sync.WaitGroup
	w    io.Writer
	live bool
}

func startRecProgress(w io.Writer, line func() string) *recProgress {
	p := &recProgress{done: make(chan struct{}), w: w, live: term.IsTerminal(w)}
	every := 10 * time.Second
	if p.live {
		every = 250 * time.Millisecond
	}
	p.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				if p.live {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
			}
			if p.live {
				fmt.Fprintf(w, "\r\033[K%s", line())
			} else {
				fmt.Fprintln(w, line())
			}
		}
	})
	return p
}

func (p *recProgress) stop() {
	close(p.done)
	p.wg.Wait()
}

func recRate(n uint64, bytes int64, d time.Duration) string {
	if d <= 0 {
		return "0/s"
	}
	s := d.Seconds()
	return fmt.Sprintf("%.1f/s, %s/s", float64(n)/s, recBytes(int64(float64(bytes)/s)))
}

func recBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// lowerPriority raises the process's nice value by n. Linux keeps it per
// thread, so every thread the runtime has started gets it; threads started
// later inherit it from the thread that starts them.
func lowerPriority(n int) error {
	if n == 0 {
		return nil
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue // the thread ended meanwhile
		}
		// The raw system call returns 20 - nice.
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, min(20-cur+n, 19)); err != nil && err != unix.ESRCH {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
