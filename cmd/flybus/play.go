package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/record"
)

var playCmd = &command{
	name:    "play",
	summary: "publish a recording again, at its recorded pace",
	run:     runPlay,
	usage:   playUsage,
}

type playOptions struct {
	store      string
	speed      float64
	loop       bool
	topics     string
	remap      listFlag
	start, end time.Duration
	client     string
	timeout    time.Duration
}

func playFlags(o *playOptions) *flag.FlagSet {
	set := newFlagSet("play")
	set.StringVar(&o.store, "store", "", "the router's store root `DIR`, as given to serve --store (needed to play\nartifacts)")
	set.Float64Var(&o.speed, "speed", 1, "play at `X` times the recorded pace (0: as fast as the router admits)")
	set.BoolVar(&o.loop, "loop", false, "start again at the end, until interrupted")
	set.StringVar(&o.topics, "topics", "", "play only these recorded topics: `A,B`")
	set.Var(&o.remap, "remap", "publish recorded topic OLD as NEW: `OLD=NEW` (repeatable)")
	durationVar(set, &o.start, "start", 0, "skip what was received in the recording's first `D`")
	durationVar(set, &o.end, "end", 0, "stop at `D` after the recording's start (0: at its end)")
	set.StringVar(&o.client, "client", "", clientFlagUsage)
	durationVar(set, &o.timeout, "timeout", 10*time.Second, "give up connecting after `D`")
	return set
}

func playUsage() string {
	notes := `Publishes the publications of the recordings (files, or directories of the
parts of a split recording, read in name order) to SOCKET, one stream with
no gap at the joins, each at its recorded time after the first (scaled by
--speed). Each artifact is allocated in the router's store, written there
from the recording and sealed (with its recorded digest, which the router
checks) ahead of its publication's time, so that at that time only the
publish is left. A topic that does not exist is declared
with its recorded retention first. A publication refused BACKPRESSURE by a
full bounded subscriber is offered again until admitted.

Prints "playing FILES to SOCKET" to stderr, its progress (live on a
terminal, every 10 s otherwise), and at the end what it published and how far
behind the recorded schedule it was sent and admitted (p50, p99, max);
exit 0.
Bad input (a truncated, corrupt or foreign file) stops it with the file and
offset, exit 1; nothing of the publication at fault is published. SIGINT or
SIGTERM stops it, exit 0.
`
	example := walkExample("play")
	if example == "" {
		example = `  flybus play run-0001.mcap run-0002.mcap /tmp/flybus.sock --store /dev/shm/flybus
  flybus play recordings/ /tmp/flybus.sock --store /dev/shm/flybus --speed 2 --remap camera.front=replay.front
`
	}
	return usageText("flybus play FILE.mcap|DIR... SOCKET [--store DIR] [--speed X] [--loop] [--topics A,B] [--remap OLD=NEW]... [--start D] [--end D] [--client ID] [--timeout D]",
		"Publish recordings again, at their recorded pace.", playFlags(&playOptions{}), notes, example)
}

func (o *playOptions) check(pos []string) (files []string, socket string, opts record.PlayOptions, err error) {
	if len(pos) < 2 {
		return nil, "", opts, fmt.Errorf("want FILE.mcap... SOCKET, got %d arguments", len(pos))
	}
	files, socket = pos[:len(pos)-1], pos[len(pos)-1]
	opts = record.PlayOptions{Speed: o.speed, Loop: o.loop, Start: o.start, End: o.end}
	switch {
	case o.speed < 0:
		return nil, "", opts, errors.New("--speed must not be negative")
	case o.start < 0 || o.end < 0:
		return nil, "", opts, errors.New("--start and --end must not be negative")
	case o.end > 0 && o.end <= o.start:
		return nil, "", opts, errors.New("--end must come after --start")
	}
	if o.topics != "" {
		for _, t := range strings.Split(o.topics, ",") {
			if err := checkName("topic", t); err != nil {
				return nil, "", opts, fmt.Errorf("--topics: %v", err)
			}
			opts.Topics = append(opts.Topics, t)
		}
	}
	for _, r := range o.remap {
		from, to, ok := strings.Cut(r, "=")
		if !ok {
			return nil, "", opts, fmt.Errorf("--remap %q: want OLD=NEW", r)
		}
		for _, n := range []string{from, to} {
			if err := checkName("topic", n); err != nil {
				return nil, "", opts, fmt.Errorf("--remap: %v", err)
			}
		}
		if opts.Remap == nil {
			opts.Remap = map[string]string{}
		}
		opts.Remap[from] = to
	}
	if msg := checkClientFlags(o.client, o.timeout); msg != "" {
		return nil, "", opts, errors.New(msg)
	}
	return files, socket, opts, nil
}

func runPlay(c *command, args []string, stdout, stderr io.Writer) int {
	o := &playOptions{}
	pos, code, ok := parse(c, playFlags(o), args, stdout, stderr)
	if !ok {
		return code
	}
	files, socket, opts, err := o.check(pos)
	if err != nil {
		return usageError(c, stderr, err.Error())
	}
	r, err := record.Open(files...)
	if err != nil {
		fmt.Fprintf(stderr, "flybus play: %v\n", err)
		return exitFailure
	}
	defer r.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	setup, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// One prepared allocation: a recording's frames are mostly of one size.
	bus, id, err := connectTool(setup, socket, c.name, o.client, client.Config{StoreRoot: o.store, AllocateAhead: 1})
	if err != nil {
		return connectFailed(stderr, c.name, id, o.timeout, err)
	}
	defer bus.Close()
	cancel()
	fmt.Fprintf(stderr, "playing %s to %s\n", strings.Join(r.Files(), " "), socket)

	var pubs, bytes atomic.Int64
	opts.OnPublish = func(p *record.Publication, _ client.PublishReceipt) {
		pubs.Add(1)
		for _, a := range p.Artifacts {
			bytes.Add(int64(len(a.Data)))
		}
	}
	start := time.Now()
	p := startRecProgress(stderr, func() string {
		return fmt.Sprintf("played %d publications, %s, %s", pubs.Load(), recBytes(bytes.Load()),
			recRate(uint64(pubs.Load()), bytes.Load(), time.Since(start)))
	})
	st, err := record.Play(ctx, bus, r, opts)
	p.stop()
	fmt.Fprintf(stderr, "played %d publications (%d artifacts, %s) in %v", st.Publications, st.Artifacts,
		recBytes(int64(st.ArtifactBytes)), time.Since(start).Round(time.Millisecond))
	if st.Loops > 1 {
		fmt.Fprintf(stderr, ", %d loops", st.Loops)
	}
	if st.Backpressured > 0 {
		fmt.Fprintf(stderr, ", %d sent again after BACKPRESSURE", st.Backpressured)
	}
	if l, a := st.Late, st.Admitted; l.Count > 0 {
		fmt.Fprintf(stderr, "; behind the recorded schedule: sent p50 %v p99 %v max %v, admitted p50 %v p99 %v max %v",
			l.Quantile(0.5), l.Quantile(0.99), l.Max.Round(time.Microsecond), a.Quantile(0.5), a.Quantile(0.99), a.Max.Round(time.Microsecond))
	}
	fmt.Fprintln(stderr)
	if err != nil && ctx.Err() == nil {
		return toolFailed(stderr, c.name, o.timeout, storeHint(err, o.store))
	}
	return exitOK
}
