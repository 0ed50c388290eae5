package perf

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/flybus/flybus/internal/scrape"
	"github.com/flybus/flybus/router"
)

// routerSample is the part of the router's figures the harness follows,
// whichever way it was read: router.Stats in embedded mode, the /metrics
// text of `flybus serve --metrics` in process mode.
type routerSample struct {
	Artifacts     int64
	ArtifactRoots int64
	Queued        int64
	StoreBytes    uint64
	StoreFiles    int64
	Owners        int64
	Publications  uint64
	Seals         uint64
	LeaseSeals    uint64
	CopySeals     uint64
	Collected     uint64
	PoolHits      uint64
	PoolMisses    uint64
	// The store's file system calls, for the per-frame cost of each mode.
	StoreOpens, StoreFallocates, StoreUnlinks uint64
	Refusals                                  uint64 // every refusal, whatever its code
}

// statsSource reads the router's figures, and its operator's snapshot.
type statsSource interface {
	sample(ctx context.Context) (routerSample, error)
	details(ctx context.Context) (router.Details, error)
}

// embeddedStats reads an in-process router.
type embeddedStats struct{ r *router.Router }

func (e embeddedStats) sample(context.Context) (routerSample, error) {
	s := e.r.Stats()
	out := routerSample{Artifacts: int64(s.Artifacts), ArtifactRoots: int64(s.ArtifactRoots), Queued: int64(s.Queued),
		StoreBytes: s.StoreBytes, StoreFiles: s.StoreFiles, Owners: int64(s.Owners), Publications: s.Publications,
		Seals: s.Seals, LeaseSeals: s.LeaseSeals, CopySeals: s.CopySeals, Collected: s.Collected,
		PoolHits: s.PoolHits, PoolMisses: s.PoolMisses,
		StoreOpens: s.StoreOpens, StoreFallocates: s.StoreFallocates, StoreUnlinks: s.StoreUnlinks}
	for _, n := range s.Refusals {
		out.Refusals += n
	}
	return out, nil
}

func (e embeddedStats) details(context.Context) (router.Details, error) { return e.r.Details(), nil }

// metricsStats scrapes a router's /metrics endpoint over one kept-alive
// HTTP connection.
type metricsStats struct {
	url    string
	client *http.Client
}

func (m metricsStats) sample(ctx context.Context) (routerSample, error) {
	samples, err := scrape.Metrics(ctx, m.client, m.url)
	if err != nil {
		return routerSample{}, err
	}
	values, err := seriesValues(samples)
	if err != nil {
		return routerSample{}, fmt.Errorf("GET %s: %w", m.url, err)
	}
	return sampleFromMetrics(values)
}

// parseMetrics reads the Prometheus text exposition format into a map
// from the series (name plus its label set as written) to its value.
func parseMetrics(b []byte) (map[string]float64, error) {
	samples, err := scrape.Parse(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return seriesValues(samples)
}

func seriesValues(samples []scrape.Sample) (map[string]float64, error) {
	out := make(map[string]float64, len(samples))
	for _, s := range samples {
		v, err := strconv.ParseFloat(s.Value, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Series(), err)
		}
		out[s.Series()] = v
	}
	return out, nil
}

// sampleFromMetrics picks the harness's figures out of parsed metrics,
// named as `flybus serve` exports router.Stats; a missing one is an error,
// so a renamed metric cannot silently read as zero.
func sampleFromMetrics(v map[string]float64) (routerSample, error) {
	var missing []string
	get := func(name string) float64 {
		x, ok := v[name]
		if !ok {
			missing = append(missing, name)
		}
		return x
	}
	u := func(name string) uint64 { return uint64(math.Max(0, get(name))) }
	i := func(name string) int64 { return int64(get(name)) }
	s := routerSample{
		Artifacts: i("flybus_artifacts"), ArtifactRoots: i("flybus_artifact_roots"), Queued: i("flybus_queued"),
		StoreBytes: u("flybus_store_bytes"), StoreFiles: i("flybus_store_files"), Owners: i("flybus_owners"),
		Publications: u("flybus_publications_total"), Seals: u("flybus_seals_total"),
		LeaseSeals: u("flybus_lease_seals_total"), CopySeals: u("flybus_copy_seals_total"),
		Collected: u("flybus_collected_total"), PoolHits: u("flybus_pool_hits_total"),
		PoolMisses: u("flybus_pool_misses_total"), StoreOpens: u("flybus_store_opens_total"),
		StoreFallocates: u("flybus_store_fallocates_total"), StoreUnlinks: u("flybus_store_unlinks_total"),
	}
	if len(missing) > 0 {
		return routerSample{}, fmt.Errorf("metrics lack %s", strings.Join(missing, ", "))
	}
	for series, x := range v {
		if strings.HasPrefix(series, "flybus_refusals_total{") {
			s.Refusals += uint64(x)
		}
	}
	return s, nil
}

// details reads /details, next to /metrics.
func (m metricsStats) details(ctx context.Context) (router.Details, error) {
	return scrape.Details(ctx, m.client, strings.TrimSuffix(m.url, "/metrics")+"/details")
}
