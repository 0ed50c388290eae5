package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

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
	samples, err := fetchMetrics(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return err
	}
	return writeStatsTable(w, samples)
}

// metricsFlag defines --metrics, the endpoint of stats and top.
func metricsFlag(set *flag.FlagSet, metrics *string) {
	set.StringVar(metrics, "metrics", "", "the router's metrics `ADDR`, as given to serve --metrics: PORT, HOST:PORT or\nhttp://HOST:PORT (required)")
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
	var d router.Details
	url := "http://" + addr + "/details"
	body, err := httpGet(ctx, url, " (a router older than this flybus has no /details)")
	if err != nil {
		return d, err
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("GET %s: %v", url, err)
	}
	return d, nil
}

func fetchMetrics(ctx context.Context, url string) ([]parsedSample, error) {
	body, err := httpGet(ctx, url, "")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return parseMetricsText(body)
}

// httpGet returns the body of a GET of url; any status but 200 is an
// error, hint added to it.
func httpGet(ctx context.Context, url, hint string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s%s", url, resp.Status, hint)
	}
	return resp.Body, nil
}

type label struct{ name, value string }

// parsedSample is one sample line of the text exposition format.
type parsedSample struct {
	name   string
	labels []label
	value  string
}

// parseMetricsText reads the sample lines of the text format, ignoring
// comments; enough of the format for what serve exports.
func parseMetricsText(r io.Reader) ([]parsedSample, error) {
	var out []parsedSample
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSampleLine(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %v", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSampleLine(line string) (parsedSample, error) {
	var s parsedSample
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return s, errors.New("no value")
	}
	s.name, line = line[:end], line[end:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ", ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				return s, errors.New("bad label")
			}
			name := line[:eq]
			value, rest, err := unquoteLabel(line[eq+2:])
			if err != nil {
				return s, err
			}
			s.labels = append(s.labels, label{name, value})
			line = rest
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, errors.New("no value")
	}
	s.value = fields[0] // a timestamp may follow; stats does not use it
	return s, nil
}

// unquoteLabel reads a label value up to its closing quote.
func unquoteLabel(s string) (value, rest string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 == len(s) {
				return "", "", errors.New("unterminated label value")
			}
			i++
			if s[i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated label value")
}

// writeStatsTable prints the router's identity, then one figure a line,
// names without the flybus_ prefix, values right-aligned. A labelled metric shows its total, then its
// nonzero members indented beneath it.
func writeStatsTable(w io.Writer, samples []parsedSample) error {
	var rows [][2]string
	for i := 0; i < len(samples); {
		s := samples[i]
		switch {
		case s.name == "flybus_router_info":
			for _, l := range s.labels {
				fmt.Fprintf(w, "%s %s\n", strings.TrimSuffix(l.name, "_id"), l.value)
			}
			i++
		case perEntity(s):
			i++ // flybus top shows these
		case len(s.labels) == 0:
			rows = append(rows, [2]string{displayName(s.name), s.value})
			i++
		default:
			j := i
			var total float64
			for j < len(samples) && samples[j].name == s.name && !perEntity(samples[j]) {
				v, _ := strconv.ParseFloat(samples[j].value, 64)
				total += v
				j++
			}
			rows = append(rows, [2]string{displayName(s.name), strconv.FormatFloat(total, 'f', -1, 64)})
			for _, m := range samples[i:j] {
				if m.value != "0" && len(m.labels) > 0 {
					rows = append(rows, [2]string{"  " + m.labels[0].value, m.value})
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
func perEntity(s parsedSample) bool {
	if strings.HasSuffix(s.name, "_bucket") {
		return true
	}
	for _, l := range s.labels {
		switch l.name {
		case "topic", "subscription", "service", "client":
			return true
		}
	}
	return false
}

func displayName(metric string) string { return strings.TrimPrefix(metric, "flybus_") }
