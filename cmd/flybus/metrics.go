package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// The metrics endpoint renders router.Stats in the Prometheus text
// exposition format (version 0.0.4) by reflection, so a field added to
// Stats is exported without touching this file. The rules:
//
//   - signed integer and float fields are gauges: flybus_<snake_case>;
//   - unsigned fields ending in "Bytes" are gauges (sizes held now);
//   - other unsigned fields are counters, named with a _total suffix;
//   - map[string]<number> fields are counters labelled by key (Refusals
//     by error code, every code present, zero included, so rates work).

// The exposition format's escapes, built once: a scrape every few
// milliseconds must not rebuild them.
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// metricHelp describes the fields we know; a new field gets a generic line.
var metricHelp = map[string]string{
	"Connections":       "Open connections, including those still in hello.",
	"PendingHello":      "Connections that have not completed bus.hello.",
	"Services":          "Registered services.",
	"Topics":            "Declared topics.",
	"Subscriptions":     "Live subscriptions.",
	"Calls":             "Call correlation records, detached calls included.",
	"ActiveCalls":       "Calls holding a caller's active-call slot.",
	"Artifacts":         "Artifacts the router tracks, staged or sealed.",
	"SealedArtifacts":   "Sealed artifacts.",
	"ArtifactRoots":     "Ownership roots held on artifacts.",
	"Owners":            "Ownership records: deliveries not yet consumed, holds and writers.",
	"ReplyCapabilities": "Open reply capabilities of dispatched requests.",
	"Queued":            "Items waiting on any lane or service queue.",
	"StoreBytes":        "Bytes reserved in the store: staging, sealed and seal copies in progress.",
	"RetainedBytes":     "Bytes of artifacts retained by topics.",
	"QueuedBytes":       "Bytes of deliveries queued on bounded subscriptions.",
	"ConnectionsTotal":  "Connections accepted.",
	"CallsTotal":        "Calls admitted.",
	"ProtocolCloses":    "Connections closed for a protocol violation.",
	"ControlOverflows":  "Connections closed because their control lane overflowed.",
	"Publications":      "Publications admitted.",
	"Seals":             "Artifacts sealed.",
	"LeaseSeals":        "Seals that moved no bytes (the write lease was granted).",
	"CopySeals":         "Seals that copied because a writer kept the file open.",
	"Collected":         "Artifacts collected after their last root.",
	"StoreFiles":        "Staging and sealed files on disk.",
	"PoolHits":          "Allocations served by a prepared staging file.",
	"PoolMisses":        "Allocations that had to create a staging file (or, in pool mode, a slot).",
	"Slots":             "Pool mode: slot files, free and quarantined ones included.",
	"FreeSlots":         "Pool mode: slots ready for the next allocation of their size.",
	"QuarantinedSlots":  "Pool mode: slots kept from reuse because a writer still held them.",
	"SlotBytes":         "Pool mode: bytes of all slot files.",
	"StoreOpens":        "Files the store opened or created.",
	"StoreFallocates":   "fallocate calls of the store.",
	"StoreUnlinks":      "Files the store unlinked.",
	"AcceptRetries":     "Failed accepts on the Unix listeners, each retried after a back-off (out of descriptors, for example).",
	"Refusals":          "Commands refused, by error code.",
}

// mapLabel names the label of a map field's keys.
var mapLabel = map[string]string{"Refusals": "code"}

type label struct{ name, value string }

type sample struct {
	labels []label // none for a plain gauge or counter
	value  string
}

type metricFamily struct {
	name, help, kind string // kind is "gauge" or "counter"
	samples          []sample
}

// statsFamilies lists every metric of s in field order, after the info
// metric that identifies the router.
func statsFamilies(s router.Stats, routerID, storeID string) []metricFamily {
	fams := []metricFamily{{
		name: "flybus_router_info", kind: "gauge",
		help:    "The router incarnation serving these figures (always 1).",
		samples: []sample{{labels: []label{{"router_id", routerID}, {"store_id", storeID}}, value: "1"}},
	}}
	v := reflect.ValueOf(s)
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if fam, ok := fieldFamily(f.Name, v.Field(i)); ok {
			fams = append(fams, fam)
		}
	}
	return fams
}

func fieldFamily(field string, v reflect.Value) (metricFamily, bool) {
	fam := metricFamily{name: "flybus_" + snakeCase(field), help: metricHelp[field], kind: "gauge"}
	if fam.help == "" {
		fam.help = "router.Stats." + field + "."
	}
	if v.Kind() == reflect.Map {
		return mapFamily(fam, field, v)
	}
	value, ok := numberText(v)
	if !ok {
		return metricFamily{}, false
	}
	if v.CanUint() && !strings.HasSuffix(field, "Bytes") {
		fam = asCounter(fam)
	}
	fam.samples = []sample{{value: value}}
	return fam, true
}

func asCounter(fam metricFamily) metricFamily {
	fam.kind = "counter"
	if !strings.HasSuffix(fam.name, "_total") {
		fam.name += "_total"
	}
	return fam
}

// mapFamily renders a map[string]<number> field as a labelled counter.
func mapFamily(fam metricFamily, field string, v reflect.Value) (metricFamily, bool) {
	if v.Type().Key().Kind() != reflect.String {
		return metricFamily{}, false
	}
	labelName := mapLabel[field]
	if labelName == "" {
		labelName = "key"
	}
	values := map[string]string{}
	if labelName == "code" {
		for _, c := range wire.AllErrorCodes() {
			values[c.String()] = "0"
		}
	}
	for it := v.MapRange(); it.Next(); {
		n, ok := numberText(it.Value())
		if !ok {
			return metricFamily{}, false
		}
		values[it.Key().String()] = n
	}
	fam = asCounter(fam)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fam.samples = append(fam.samples, sample{labels: []label{{labelName, k}}, value: values[k]})
	}
	return fam, true
}

func numberText(v reflect.Value) (string, bool) {
	switch {
	case v.CanInt():
		return strconv.FormatInt(v.Int(), 10), true
	case v.CanUint():
		return strconv.FormatUint(v.Uint(), 10), true
	case v.CanFloat():
		return strconv.FormatFloat(v.Float(), 'g', -1, 64), true
	}
	return "", false
}

// snakeCase maps a Go field name to a metric name part: ActiveCalls is
// active_calls, and an initialism stays one word (HTTPCalls is http_calls).
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// writeMetrics renders families in the text exposition format.
func writeMetrics(w io.Writer, fams []metricFamily) error {
	var b bytes.Buffer
	for _, f := range fams {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.kind)
		for _, s := range f.samples {
			b.WriteString(f.name)
			if len(s.labels) > 0 {
				pairs := make([]string, len(s.labels))
				for i, l := range s.labels {
					pairs[i] = l.name + `="` + escapeLabel(l.value) + `"`
				}
				b.WriteString("{" + strings.Join(pairs, ",") + "}")
			}
			b.WriteString(" " + s.value + "\n")
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func escapeHelp(s string) string {
	return helpEscaper.Replace(s)
}

func escapeLabel(s string) string {
	return labelEscaper.Replace(s)
}

// metricsServer serves /metrics, /details (router.Details as JSON) and
// /debug/pprof/ for one router.
type metricsServer struct {
	srv *http.Server
	ln  net.Listener
}

// serveMetrics serves the router's figures on ln, which serve binds before
// it creates the router: a taken port then fails the start before anything
// exists to clean up.
func serveMetrics(ln net.Listener, r *router.Router, logger *slog.Logger) *metricsServer {
	routerID, storeID := r.RouterID().String(), r.StoreID().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", metricsContentType)
		if err := writeMetrics(w, statsFamilies(r.Stats(), routerID, storeID)); err != nil {
			logger.Debug("metrics write failed", "err", err)
		}
	})
	mux.HandleFunc("/details", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(r.Details()); err != nil {
			logger.Debug("details write failed", "err", err)
		}
	})
	// Mounted on our own mux: the default one is never served.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m := &metricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}}
	go func() {
		if err := m.srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			logger.Error("metrics server stopped", "err", err)
		}
	}()
	return m
}

// Addr is the bound address (the real port when asked for port 0).
func (m *metricsServer) Addr() string { return m.ln.Addr().String() }

// Close stops the server, letting requests in flight finish until ctx ends.
func (m *metricsServer) Close(ctx context.Context) error {
	if err := m.srv.Shutdown(ctx); err != nil {
		return m.srv.Close()
	}
	return nil
}
