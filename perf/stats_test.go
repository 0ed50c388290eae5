package perf

import (
	"context"
	"strings"
	"testing"

	"github.com/flybus/flybus/router"
)

// metricsSample is /metrics as `flybus serve` renders router.Stats.
const metricsSample = `# HELP flybus_router_info The router incarnation serving these figures (always 1).
# TYPE flybus_router_info gauge
flybus_router_info{router_id="router-0123456789abcdef",store_id="store-0123456789abcdef"} 1
# TYPE flybus_artifacts gauge
flybus_artifacts 3
flybus_artifact_roots 6
flybus_queued 2
flybus_owners 9
flybus_store_bytes 4915200
flybus_store_files 4
flybus_publications_total 120
flybus_seals_total 120
flybus_lease_seals_total 118
flybus_copy_seals_total 2
flybus_collected_total 117
flybus_pool_hits_total 119
flybus_pool_misses_total 1
flybus_store_opens_total 5
flybus_store_fallocates_total 2
flybus_store_unlinks_total 3
flybus_refusals_total{code="BACKPRESSURE"} 2
flybus_refusals_total{code="NO_TOPIC"} 0
flybus_refusals_total{code="QUOTA_EXCEEDED"} 1
`

func TestParseMetrics(t *testing.T) {
	v, err := parseMetrics([]byte(metricsSample))
	if err != nil {
		t.Fatal(err)
	}
	if v[`flybus_router_info{router_id="router-0123456789abcdef",store_id="store-0123456789abcdef"}`] != 1 {
		t.Fatalf("labelled series lost: %v", v)
	}
	s, err := sampleFromMetrics(v)
	if err != nil {
		t.Fatal(err)
	}
	want := routerSample{Artifacts: 3, ArtifactRoots: 6, Queued: 2, StoreBytes: 4915200, StoreFiles: 4, Owners: 9,
		Publications: 120, Seals: 120, LeaseSeals: 118, CopySeals: 2, Collected: 117, PoolHits: 119, PoolMisses: 1,
		StoreOpens: 5, StoreFallocates: 2, StoreUnlinks: 3, Refusals: 3}
	if s != want {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
}

func TestMetricsWithTimestampsAndSpacesInLabels(t *testing.T) {
	v, err := parseMetrics([]byte(`x{a="b c"} 2 1700000000000` + "\n" + "y 1.5e3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v[`x{a="b c"}`] != 2 || v["y"] != 1500 {
		t.Fatalf("%v", v)
	}
	if _, err := parseMetrics([]byte("novalue\n")); err == nil {
		t.Fatal("a series without a value was accepted")
	}
}

func TestMissingMetricIsAnError(t *testing.T) {
	v, err := parseMetrics([]byte(strings.Replace(metricsSample, "flybus_lease_seals_total", "flybus_lease_seal_total", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sampleFromMetrics(v); err == nil || !strings.Contains(err.Error(), "flybus_lease_seals_total") {
		t.Fatalf("a renamed metric read as zero: %v", err)
	}
}

func TestEmbeddedStats(t *testing.T) {
	r, err := router.New(router.Config{StoreRoot: t.TempDir(), Policy: router.OpenPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	s, err := embeddedStats{r}.sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s != (routerSample{}) {
		t.Fatalf("an idle router reports %+v", s)
	}
}
