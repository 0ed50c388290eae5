package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flybus/flybus/internal/scrape"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// filledStats gives every numeric Stats field a distinct value (its index
// plus one), so the rendering of each can be checked.
func filledStats() router.Stats {
	var s router.Stats
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		}
	}
	s.Refusals = map[string]uint64{"NO_SERVICE": 3, "BACKPRESSURE": 12}
	return s
}

func testCollector(s router.Stats, d router.Details, labelCap int) *routerCollector {
	return newRouterCollector("router-00000000000000ab", "store-00000000000000ab",
		func() router.Stats { return s }, func() router.Details { return d }, labelCap)
}

// render serves c through the same handler path serve uses and returns
// the text exposition.
func render(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	rec := httptest.NewRecorder()
	registryHandler(reg, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func TestMetricsRenderEveryStatsField(t *testing.T) {
	out := render(t, testCollector(filledStats(), router.Details{}, defaultLabelCap))
	listed := map[string]statMetric{}
	for _, m := range statMetrics {
		listed[m.field] = m
	}
	typ := reflect.TypeFor[router.Stats]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Name == "Refusals" {
			continue // checked below
		}
		m, ok := listed[f.Name]
		if !ok {
			t.Errorf("router.Stats.%s is not exported: add it to statMetrics", f.Name)
			continue
		}
		name := "flybus_" + m.name
		kind := "gauge"
		isUnsigned := f.Type.Kind() == reflect.Uint64
		if isUnsigned && !strings.HasSuffix(f.Name, "Bytes") {
			kind = "counter" // what has happened; sizes held now stay gauges
		}
		if m.counter != (kind == "counter") || m.counter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: %s is a counter: %v; counters, and only counters, end in _total", f.Name, name, m.counter)
		}
		for _, line := range []string{
			"# TYPE " + name + " " + kind + "\n",
			"\n" + name + " " + strconv.Itoa(i+1) + "\n",
		} {
			if !strings.Contains(out, line) {
				t.Errorf("field %s: no line %q", f.Name, strings.TrimSpace(line))
			}
		}
	}
	for _, line := range []string{
		"# TYPE flybus_refusals_total counter\n",
		`flybus_refusals_total{code="NO_SERVICE"} 3` + "\n",
		`flybus_refusals_total{code="BACKPRESSURE"} 12` + "\n",
		`flybus_refusals_total{code="CONFLICT"} 0` + "\n",
		`flybus_router_info{router_id="router-00000000000000ab",store_id="store-00000000000000ab"} 1` + "\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("no line %q", strings.TrimSpace(line))
		}
	}
	// Every code appears, so a rate over a code that has not happened yet
	// is zero rather than absent.
	if n := strings.Count(out, "flybus_refusals_total{"); n != len(wire.AllErrorCodes()) {
		t.Errorf("%d refusal samples, want one per code (%d)", n, len(wire.AllErrorCodes()))
	}
}

// wantSamples checks that each series (name and label text) has a sample
// line in out with the value want gives it.
func wantSamples(t *testing.T, out string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if i := strings.LastIndexByte(l, ' '); i > 0 && !strings.HasPrefix(l, "#") {
			got[l[:i]] = l[i+1:]
		}
	}
	for series, w := range want {
		if v, ok := got[series]; !ok {
			t.Errorf("no sample %s", series)
		} else if v != w {
			t.Errorf("%s = %q, want %s", series, v, w)
		}
	}
}

// Each topic, subscription, service and client has labelled series; past
// the cap the rest are summed under (other), and two connections of one
// client id share their client's series.
func TestMetricsPerEntityWithCap(t *testing.T) {
	d := router.Details{
		Topics: []router.TopicDetail{
			{Name: "a", Publications: 10, LastSequence: 10, Subscribers: 2, RetainedBytes: 100},
			{Name: "b", Publications: 20, Subscribers: 1},
			{Name: "c", Publications: 5}, {Name: "d", Publications: 7, RetainedBytes: 3},
		},
		Subscriptions: []router.SubscriptionDetail{
			{ID: "sub-1", Client: "cam", Topic: "a", Queued: 1, InFlight: 2, Delivered: 9, Coalesced: 4, OldestQueuedAge: 1500 * time.Millisecond},
			{ID: "sub-2", Client: "viewer", Topic: "d", Delivered: 3, RefusedPublications: 6},
			{ID: "sub-3", Client: "late", Topic: "a", Delivered: 1},
			{ID: "sub-4", Client: "late", Topic: "b", Delivered: 2, Queued: 5, OldestQueuedAge: 2 * time.Second},
			{ID: "sub-5", Client: "late", Topic: "b", OldestQueuedAge: time.Second},
		},
		Services: []router.ServiceDetail{{Name: "svc", Queued: 3, InFlight: 1, Calls: 40, FailedCalls: 2}},
		Clients: []router.ClientDetail{
			{ID: "cam", Owners: 7, OwnerBudget: 8, BytesWritten: 100, FramesRead: 4},
			{ID: "cam", Owners: 1, OwnerBudget: 8, BytesWritten: 50, FramesRead: 1}, // a second connection of cam
			{ID: "late", Owners: 2, OwnerBudget: 8},
			{ID: "viewer", Owners: 3, OwnerBudget: 8, ControlDepth: 9},
		},
	}
	out := render(t, testCollector(router.Stats{}, d, 2))
	wantSamples(t, out, map[string]string{
		`flybus_topic_publications_total{topic="a"}`:       "10",
		`flybus_topic_publications_total{topic="b"}`:       "20",
		`flybus_topic_publications_total{topic="(other)"}`: "12",
		`flybus_topic_retained_bytes{topic="(other)"}`:     "3",
		`flybus_topic_subscribers{topic="a"}`:              "2",
		`flybus_topic_last_sequence{topic="a"}`:            "10",
		// sub-2's topic d and client viewer are past their caps.
		`flybus_subscription_delivered_total{client="cam",subscription="sub-1",topic="a"}`:                       "9",
		`flybus_subscription_coalesced_total{client="cam",subscription="sub-1",topic="a"}`:                       "4",
		`flybus_subscription_in_flight{client="cam",subscription="sub-1",topic="a"}`:                             "2",
		`flybus_subscription_queued{client="cam",subscription="sub-1",topic="a"}`:                                "1",
		`flybus_subscription_oldest_queued_age_seconds{client="cam",subscription="sub-1",topic="a"}`:             "1.5",
		`flybus_subscription_refused_publications_total{client="(other)",subscription="sub-2",topic="(other)"}`:  "6",
		`flybus_subscription_delivered_total{client="(other)",subscription="(other)",topic="(other)"}`:           "3",
		`flybus_subscription_queued{client="(other)",subscription="(other)",topic="(other)"}`:                    "5",
		`flybus_subscription_oldest_queued_age_seconds{client="(other)",subscription="(other)",topic="(other)"}`: "2",
		`flybus_service_queued{service="svc"}`:                                                                   "3",
		`flybus_service_in_flight{service="svc"}`:                                                                "1",
		`flybus_service_calls_total{service="svc"}`:                                                              "40",
		`flybus_service_failed_calls_total{service="svc"}`:                                                       "2",
		`flybus_client_owners{client="cam"}`:                                                                     "8",
		`flybus_client_written_bytes_total{client="cam"}`:                                                        "150",
		`flybus_client_read_frames_total{client="cam"}`:                                                          "5",
		`flybus_client_owners{client="late"}`:                                                                    "2",
		`flybus_client_owners{client="(other)"}`:                                                                 "3",
		`flybus_client_control_depth{client="(other)"}`:                                                          "9",
		`flybus_owner_budget`: "8",
	})
	if n := strings.Count(out, "\nflybus_topic_publications_total{"); n != 3 {
		t.Errorf("%d topic series, want the cap (2) and (other)", n)
	}
}

// The router's histograms become Prometheus histograms: cumulative counts
// under bounds in seconds, and the unbounded bucket only in +Inf.
func TestMetricsLatencyHistograms(t *testing.T) {
	adm := router.Histogram{Count: 6, Sum: 3 * time.Millisecond, Buckets: make([]router.HistogramBucket, 22)}
	for i := range adm.Buckets {
		adm.Buckets[i].UpperBound = router.BucketBound(i)
	}
	adm.Buckets[0].Count, adm.Buckets[3].Count, adm.Buckets[21].Count = 2, 3, 1
	out := render(t, testCollector(router.Stats{}, router.Details{Latencies: router.Latencies{Admission: adm}}, 1))
	wantSamples(t, out, map[string]string{
		`flybus_admission_seconds_bucket{le="1e-06"}`:    "2",
		`flybus_admission_seconds_bucket{le="4e-06"}`:    "2",
		`flybus_admission_seconds_bucket{le="8e-06"}`:    "5",
		`flybus_admission_seconds_bucket{le="1.048576"}`: "5",
		`flybus_admission_seconds_bucket{le="+Inf"}`:     "6",
		`flybus_admission_seconds_count`:                 "6",
		`flybus_admission_seconds_sum`:                   "0.003",
		`flybus_lane_wait_seconds_count`:                 "0",
	})
}

// A real router's endpoint: a scrape takes its figures as they stand.
func TestMetricsEndpointOfARouter(t *testing.T) {
	r, err := router.New(router.Config{Policy: router.OpenPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(t.Context())
	rec := httptest.NewRecorder()
	metricsHandler(r, defaultLabelCap, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(out, "flybus_router_info{router_id=\""+r.RouterID().String()) ||
		!strings.Contains(out, "\nflybus_connections 0\n") || !strings.Contains(out, "# TYPE flybus_lane_wait_seconds histogram") {
		t.Fatalf("status %d:\n%s", rec.Code, out)
	}
}

func TestStatsTable(t *testing.T) {
	s := router.Stats{Connections: 3, CallsTotal: 12345, Refusals: map[string]uint64{"NO_SERVICE": 2, "CONFLICT": 1}}
	d := router.Details{Topics: []router.TopicDetail{{Name: "frames", Publications: 4}}}
	samples, err := scrape.Parse(strings.NewReader(render(t, testCollector(s, d, defaultLabelCap))))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeStatsTable(&out, samples); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if lines[0] != "router router-00000000000000ab" || lines[1] != "store store-00000000000000ab" {
		t.Fatalf("header:\n%s", text)
	}
	// Names left-aligned, values right-aligned: every row is as wide.
	width := len(lines[2])
	for _, l := range lines[2:] {
		if len(l) != width {
			t.Errorf("row %q is not %d wide", l, width)
		}
	}
	for _, want := range []string{"connections", "calls_total", "refusals_total", "  CONFLICT", "  NO_SERVICE", "admission_seconds_count"} {
		found := false
		for _, l := range lines[2:] {
			f := strings.Fields(l)
			if strings.HasPrefix(l, want+" ") && len(f) == 2 {
				found = true
				switch f[0] {
				case "connections":
					found = f[1] == "3"
				case "calls_total":
					found = f[1] == "12345"
				case "refusals_total":
					found = f[1] == "3"
				}
			}
		}
		if !found {
			t.Errorf("no correct row for %s:\n%s", want, text)
		}
	}
	// The refusals follow their total, and zero codes are left out; the
	// per-entity series and histogram buckets are top's, not the table's.
	for _, absent := range []string{"BACKPRESSURE", "topic_publications", "_bucket"} {
		if strings.Contains(text, absent) {
			t.Errorf("%s in the table:\n%s", absent, text)
		}
	}
	i := strings.Index(text, "refusals_total")
	if !strings.Contains(text[i:], "  CONFLICT") || !strings.Contains(text[i:], "  NO_SERVICE") {
		t.Errorf("codes should follow their total:\n%s", text)
	}
}

// BenchmarkMetricsScrape is one /metrics scrape of a busy router's figures
// (the sizes of router's BenchmarkDetails: 16 topics, 128 subscriptions, 8
// services, 64 clients), from the collector to the encoded text; taking
// the Details snapshot itself is router's BenchmarkDetails.
func BenchmarkMetricsScrape(b *testing.B) {
	var d router.Details
	for i := range 16 {
		d.Topics = append(d.Topics, router.TopicDetail{Name: "topic" + strconv.Itoa(i), Publications: 1e6, Subscribers: 8})
	}
	for i := range 64 {
		id := "client" + strconv.Itoa(i)
		d.Clients = append(d.Clients, router.ClientDetail{ID: id, Owners: 3, OwnerBudget: 1024, BytesWritten: 1 << 30})
		for j := range 2 {
			d.Subscriptions = append(d.Subscriptions, router.SubscriptionDetail{ID: "sub-" + strconv.Itoa(2*i+j), Client: id,
				Topic: "topic" + strconv.Itoa((i+j)%16), Mode: "latest", Delivered: 1e6})
		}
		if i < 8 {
			d.Services = append(d.Services, router.ServiceDetail{Name: "svc" + strconv.Itoa(i), Calls: 1e5})
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(testCollector(filledStats(), d, defaultLabelCap))
	h := registryHandler(reg, nil)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	var n int
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		n = rec.Body.Len()
	}
	b.ReportMetric(float64(n), "bytes/scrape")
}
