package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flybus/flybus/internal/term"
	"github.com/flybus/flybus/router"
)

var topCmd = &command{
	name:    "top",
	summary: "a live view of a running router: its busiest topics, subscriptions, services and clients",
	run:     runTop,
	usage:   topCmdUsage,
}

type topOptions struct {
	metrics  string
	once     bool
	interval time.Duration
	rows     int
}

func topFlags(o *topOptions) *flag.FlagSet {
	set := newFlagSet("top")
	metricsFlag(set, &o.metrics)
	set.BoolVar(&o.once, "once", false, "print one view (two snapshots an interval apart, for the rates) and exit")
	durationVar(set, &o.interval, "interval", time.Second, "refresh every `D`; rates are over the last D")
	set.IntVar(&o.rows, "rows", 20, "show at most `N` rows per table, busiest first")
	return set
}

func topCmdUsage() string {
	notes := "Reads /details from a router started with --metrics and shows, per table and busiest\n" +
		"first: topics (publications per second, last sequence, subscribers, retained bytes),\n" +
		"subscriptions (deliveries per second, queued, in flight, coalesced, refused publications,\n" +
		"the oldest queued message's age), services (queued, in flight, calls, failed calls) and\n" +
		"clients (owners of their budget, control lane, queued bytes, calls, traffic). On a\n" +
		"terminal it redraws every interval and quits on q or Ctrl-C; otherwise it prints one\n" +
		"view per interval, separated by a blank line. A router that is not up yet, or that\n" +
		"restarts, is waited for, one line per interval saying so; --once fails at once instead.\n"
	return usageText("flybus top --metrics ADDR [--once] [--interval D] [--rows N]",
		"Watch a running router's topics, subscriptions, services and clients.", topFlags(&topOptions{}), notes,
		walkExample("top"))
}

func runTop(c *command, args []string, stdout, stderr io.Writer) int {
	o := &topOptions{}
	addr, code, ok := metricsCommand(c, topFlags(o), &o.metrics, args, stdout, stderr)
	if !ok {
		return code
	}
	if o.interval <= 0 || o.rows <= 0 {
		return usageError(c, stderr, "--interval and --rows must be positive")
	}
	fetch := func() (router.Details, error) {
		ctx, cancel := context.WithTimeout(context.Background(), max(o.interval, 5*time.Second))
		defer cancel()
		return fetchDetails(ctx, addr)
	}
	prev, err := fetch()
	if o.once {
		if err != nil {
			fmt.Fprintf(stderr, "flybus top: %v\n", err)
			return exitFailure
		}
		time.Sleep(o.interval)
		cur, err := fetch()
		if err != nil {
			fmt.Fprintf(stderr, "flybus top: %v\n", err)
			return exitFailure
		}
		writeTop(stdout, addr, cur, prev, o.rows)
		return exitOK
	}
	if err != nil {
		// A live view waits for a router that is not up yet, as it waits
		// for one that restarts.
		fmt.Fprintf(stdout, "flybus top %s: %v (retrying every %v)\n", addr, err, o.interval)
	}
	return liveTop(stdout, stderr, addr, prev, fetch, o)
}

// liveTop redraws until q, Ctrl-C or a termination signal.
func liveTop(stdout, stderr io.Writer, addr string, prev router.Details, fetch func() (router.Details, error), o *topOptions) int {
	quit := make(chan struct{}, 1)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if restore, ok := term.Raw(os.Stdin); ok {
		defer restore()
		go func() {
			b := make([]byte, 1)
			for {
				if n, err := os.Stdin.Read(b); err != nil || n == 1 && (b[0] == 'q' || b[0] == 'Q' || b[0] == 3) {
					quit <- struct{}{}
					return
				}
			}
		}()
	}
	redraw := term.IsTerminal(stdout)
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for first := true; ; first = false {
		select {
		case <-quit:
			return exitOK
		case <-sigs:
			return exitOK
		case <-tick.C:
		}
		cur, err := fetch()
		var b strings.Builder
		if err != nil {
			fmt.Fprintf(&b, "flybus top %s: %v (retrying every %v)\n", addr, err, o.interval)
		} else {
			if prev.Taken.IsZero() {
				prev = cur // the first view of a router: no rates yet
			}
			writeTop(&b, addr, cur, prev, o.rows)
			prev = cur
		}
		switch {
		case redraw:
			// Home, clear, the view (raw input leaves output processing
			// on: newlines still return the carriage).
			fmt.Fprint(stdout, "\x1b[H\x1b[2J"+b.String())
		case first:
			fmt.Fprint(stdout, b.String())
		default:
			fmt.Fprint(stdout, "\n"+b.String())
		}
	}
}

// writeTop renders one view: a header, then the four tables.
func writeTop(w io.Writer, addr string, d, prev router.Details, rows int) {
	r := d.RatesSince(prev)
	st := d.Store
	store := fmt.Sprintf("files %d", st.Files)
	if st.Mode == "pool" {
		store = fmt.Sprintf("slots %d (free %d, quarantined %d)", st.Slots, st.FreeSlots, st.QuarantinedSlots)
	}
	fmt.Fprintf(w, "flybus top  %s  %s  rates over %.1fs  store %s: %s, %s reserved, seals %d lease / %d copy\n",
		addr, d.Taken.Format("15:04:05"), r.Interval.Seconds(), st.Mode, store, bytesText(st.Bytes), st.LeaseSeals, st.CopySeals)
	adm, lane := d.Latencies.Admission.Since(prev.Latencies.Admission), d.Latencies.LaneWait.Since(prev.Latencies.LaneWait)
	fmt.Fprintf(w, "latency (bucket bounds)  admission %s  lane wait %s\n", quantiles(adm), quantiles(lane))

	topics := slices.Clone(d.Topics)
	slices.SortStableFunc(topics, func(a, b router.TopicDetail) int {
		return cmp.Or(-cmp.Compare(r.Publications[a.Name], r.Publications[b.Name]), cmp.Compare(a.Name, b.Name))
	})
	table(w, "TOPIC\tPUB/S\tLAST SEQ\tSUBS\tRETAINED", len(topics), rows, func(i int) string {
		t := topics[i]
		return fmt.Sprintf("%s\t%.1f\t%d\t%d\t%s", t.Name, r.Publications[t.Name], t.LastSequence, t.Subscribers, bytesText(t.RetainedBytes))
	})

	subs := slices.Clone(d.Subscriptions)
	slices.SortStableFunc(subs, func(a, b router.SubscriptionDetail) int {
		return cmp.Or(-cmp.Compare(r.Deliveries[a.ID], r.Deliveries[b.ID]), -cmp.Compare(a.Coalesced, b.Coalesced), cmp.Compare(a.ID, b.ID))
	})
	table(w, "SUBSCRIPTION\tCLIENT\tTOPIC\tMODE\tDLV/S\tQUEUED\tIN FLIGHT\tCOALESCED\tREFUSED\tOLDEST", len(subs), rows, func(i int) string {
		s := subs[i]
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%.1f\t%d\t%d\t%d\t%d\t%s", s.ID, s.Client, s.Topic, s.Mode, r.Deliveries[s.ID],
			s.Queued, s.InFlight, s.Coalesced, s.RefusedPublications, ageText(s.OldestQueuedAge))
	})

	svcs := slices.Clone(d.Services)
	slices.SortStableFunc(svcs, func(a, b router.ServiceDetail) int {
		return cmp.Or(-cmp.Compare(a.Queued+a.InFlight, b.Queued+b.InFlight), -cmp.Compare(a.Calls, b.Calls), cmp.Compare(a.Name, b.Name))
	})
	table(w, "SERVICE\tCLIENT\tQUEUED\tIN FLIGHT\tCALLS\tFAILED", len(svcs), rows, func(i int) string {
		s := svcs[i]
		return fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d", s.Name, s.Client, s.Queued, s.InFlight, s.Calls, s.FailedCalls)
	})

	clients := slices.Clone(d.Clients)
	slices.SortStableFunc(clients, func(a, b router.ClientDetail) int {
		return cmp.Or(-cmp.Compare(a.BytesWritten+a.BytesRead, b.BytesWritten+b.BytesRead), cmp.Compare(a.ID, b.ID))
	})
	table(w, "CLIENT\tCONNECTION\tOWNERS\tCONTROL\tQUEUED\tCALLS\tOUT\tIN", len(clients), rows, func(i int) string {
		c := clients[i]
		return fmt.Sprintf("%s\t%s\t%d/%d\t%d\t%s\t%d\t%s (%d)\t%s (%d)", c.ID, c.Connection, c.Owners, c.OwnerBudget,
			c.ControlDepth, bytesText(uint64(c.QueuedBytes)), c.ActiveCalls, bytesText(c.BytesWritten), c.FramesWritten,
			bytesText(c.BytesRead), c.FramesRead)
	})
}

// table writes a header and up to rows of n lines, aligned, after a blank
// line; "(none)" for an empty table, "... k more" past the bound.
func table(w io.Writer, header string, n, rows int, line func(i int) string) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for i := range min(n, rows) {
		fmt.Fprintln(tw, line(i))
	}
	tw.Flush()
	switch {
	case n == 0:
		fmt.Fprintln(w, "(none)")
	case n > rows:
		fmt.Fprintf(w, "... %d more\n", n-rows)
	}
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// quantiles names a distribution by its median and 99th percentile, each
// as its bucket's upper bound ("-" when nothing was timed).
func quantiles(h router.Histogram) string {
	if h.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("p50 <=%v p99 <=%v (%d)", h.Quantile(0.5), h.Quantile(0.99), h.Count)
}

func ageText(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond / 10).String()
}
