package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flybus/flybus/internal/scrape"
	"github.com/flybus/flybus/router"
)

var statsCmd = &command{
	name:    "stats",
	summary: "print a running router's figures from its metrics endpoint",
	run:     runStats,
	usage:   statsUsage,
}

type statsOptions struct {
	metrics string
	timeout time.Duration
	json    bool
}

func statsFlags(o *statsOptions) *flag.FlagSet {
	set := newFlagSet("stats")
	metricsFlag(set, &o.metrics)
	durationVar(set, &o.timeout, "timeout", 5*time.Second, "give up after `D`")
	set.BoolVar(&o.json, "json", false, "print the whole snapshot (per topic, subscription, service and client, and\nthe store) as JSON, from /details, instead of the totals")
	return set
}

func statsUsage() string {
	notes := "Fetches /metrics from a router started with --metrics and prints each\nrouter-wide figure, refusals by code grouped under their total. The series per\ntopic, subscription, service and client are flybus top's (or --json's).\n"
	return usageText("flybus stats --metrics ADDR [--json] [--timeout D]",
		"Print a running router's figures from its metrics endpoint.", statsFlags(&statsOptions{}), notes,
		walkExample("stats"))
}

func runStats(c *command, args []string, stdout, stderr io.Writer) int {
	o := &statsOptions{}
	addr, code, ok := metricsCommand(c, statsFlags(o), &o.metrics, args, stdout, stderr)
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := printStats(ctx, stdout, addr, o.json); err != nil {
		fmt.Fprintf(stderr, "flybus stats: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// printStats prints the router-wide figures of /metrics, or with asJSON
// the whole /details snapshot.
func printStats(ctx context.Context, w io.Writer, addr string, asJSON bool) error {
	if asJSON {
		d, err := fetchDetails(ctx, addr)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	hc, base := metricsClient(addr)
	samples, err := scrape.Metrics(ctx, hc, base+"/metrics")
	if err != nil {
		return err
	}
	return writeStatsTable(w, samples)
}

// metricsFlag defines --metrics, the endpoint of stats and top.
func metricsFlag(set *flag.FlagSet, metrics *string) {
	set.StringVar(metrics, "metrics", "", "the router's metrics `ADDR`, as given to serve --metrics: PORT, HOST:PORT,\nhttp://HOST:PORT or unix:PATH (required)")
}

// metricsCommand parses the flags of a command that reads a router's
// metrics endpoint (no positional arguments, --metrics required) and
// returns the endpoint's host:port.
func metricsCommand(c *command, set *flag.FlagSet, metrics *string, args []string, stdout, stderr io.Writer) (string, int, bool) {
	pos, code, ok := parse(c, set, args, stdout, stderr)
	if !ok {
		return "", code, false
	}
	if len(pos) > 0 {
		return "", usageError(c, stderr, "unexpected argument "+pos[0]), false
	}
	if *metrics == "" {
		return "", usageError(c, stderr, "--metrics ADDR is required"), false
	}
	addr, err := metricsAddr(*metrics)
	if err != nil {
		return "", usageError(c, stderr, err.Error()), false
	}
	return addr, 0, true
}

// fetchDetails reads a router's /details snapshot.
func fetchDetails(ctx context.Context, addr string) (router.Details, error) {
	hc, base := metricsClient(addr)
	return scrape.Details(ctx, hc, base+"/details")
}

// metricsClient returns the client and base URL of a metrics address as
// metricsAddr returns it: host:port, or unix:PATH, a Unix socket.
func metricsClient(addr string) (*http.Client, string) {
	path, ok := metricsSocket(addr)
	if !ok {
		return http.DefaultClient, "http://" + addr
	}
	// A client per fetch: without keep-alives it leaves no connection
	// behind (top fetches every interval). The URL's host is only a name.
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}, "http://unix"
}

// writeStatsTable prints the router's identity, then one figure a line,
// names without the flybus_ prefix, values right-aligned. A labelled metric shows its total, then its
// nonzero members indented beneath it.
func writeStatsTable(w io.Writer, samples []scrape.Sample) error {
	var rows [][2]string
	for i := 0; i < len(samples); {
		s := samples[i]
		switch {
		case s.Name == "flybus_router_info":
			for _, l := range s.Labels {
				fmt.Fprintf(w, "%s %s\n", strings.TrimSuffix(l.Name, "_id"), l.Value)
			}
			i++
		case perEntity(s):
			i++ // flybus top shows these
		case len(s.Labels) == 0:
			rows = append(rows, [2]string{displayName(s.Name), s.Value})
			i++
		default:
			j := i
			var total float64
			for j < len(samples) && samples[j].Name == s.Name && !perEntity(samples[j]) {
				v, _ := strconv.ParseFloat(samples[j].Value, 64)
				total += v
				j++
			}
			rows = append(rows, [2]string{displayName(s.Name), strconv.FormatFloat(total, 'f', -1, 64)})
			for _, m := range samples[i:j] {
				if m.Value != "0" && len(m.Labels) > 0 {
					rows = append(rows, [2]string{"  " + m.Labels[0].Value, m.Value})
				}
			}
			i = j
		}
	}
	nameW, valueW := 0, 0
	for _, r := range rows {
		nameW, valueW = max(nameW, len(r[0])), max(valueW, len(r[1]))
	}
	bw := bufio.NewWriter(w)
	for _, r := range rows {
		fmt.Fprintf(bw, "%-*s  %*s\n", nameW, r[0], valueW, r[1])
	}
	return bw.Flush()
}

// perEntity reports whether a sample belongs to a topic, subscription,
// service or client, or is a histogram bucket: figures the table leaves to
// flybus top, so that it stays one screen however busy the router is.
func perEntity(s scrape.Sample) bool {
	if strings.HasSuffix(s.Name, "_bucket") {
		return true
	}
	for _, l := range s.Labels {
		switch l.Name {
		case "topic", "subscription", "service", "client":
			return true
		}
	}
	return false
}

func displayName(metric string) string { return strings.TrimPrefix(metric, "flybus_") }
