package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// The metrics endpoint exports, on every scrape, one router.Stats and one
// router.Details taken then: router-wide gauges and counters (names
// below), per-topic, per-subscription, per-service and per-client series
// labelled topic, subscription, service and client, and the router's own
// latency histograms. Nothing is kept between scrapes: counters are the
// router's, read as they stand.

// statMetric is one router.Stats field as a metric: gauges for what is
// held now, counters (named _total) for what has happened.
type statMetric struct {
	field, name, help string
	counter           bool
	value             func(*router.Stats) float64
}

func gaugeOf[T int | int64 | uint64](field, name, help string, get func(*router.Stats) T) statMetric {
	return statMetric{field: field, name: name, help: help, value: func(s *router.Stats) float64 { return float64(get(s)) }}
}

func counterOf(field, name, help string, get func(*router.Stats) uint64) statMetric {
	return statMetric{field: field, name: name, help: help, counter: true,
		value: func(s *router.Stats) float64 { return float64(get(s)) }}
}

// statMetrics lists every router.Stats field but Refusals (labelled by
// code, below); a test fails when a field is missing here.
var statMetrics = []statMetric{
	gaugeOf("Connections", "connections", "Open connections, including those still in hello.", func(s *router.Stats) int { return s.Connections }),
	gaugeOf("PendingHello", "pending_hello", "Connections that have not completed bus.hello.", func(s *router.Stats) int { return s.PendingHello }),
	gaugeOf("Services", "services", "Registered services.", func(s *router.Stats) int { return s.Services }),
	gaugeOf("Topics", "topics", "Declared topics.", func(s *router.Stats) int { return s.Topics }),
	gaugeOf("Subscriptions", "subscriptions", "Live subscriptions.", func(s *router.Stats) int { return s.Subscriptions }),
	gaugeOf("Calls", "calls", "Call correlation records, detached calls included.", func(s *router.Stats) int { return s.Calls }),
	gaugeOf("ActiveCalls", "active_calls", "Calls holding a caller's active-call slot.", func(s *router.Stats) int { return s.ActiveCalls }),
	gaugeOf("Artifacts", "artifacts", "Artifacts the router tracks, staged or sealed.", func(s *router.Stats) int { return s.Artifacts }),
	gaugeOf("SealedArtifacts", "sealed_artifacts", "Sealed artifacts.", func(s *router.Stats) int { return s.SealedArtifacts }),
	gaugeOf("ArtifactRoots", "artifact_roots", "Ownership roots held on artifacts.", func(s *router.Stats) int { return s.ArtifactRoots }),
	gaugeOf("Owners", "owners", "Ownership records: deliveries not yet consumed, holds and writers.", func(s *router.Stats) int { return s.Owners }),
	gaugeOf("ReplyCapabilities", "reply_capabilities", "Open reply capabilities of dispatched requests.", func(s *router.Stats) int { return s.ReplyCapabilities }),
	gaugeOf("ClientRecords", "client_records", "Client ids whose last incarnation the router remembers: live ones and the most recently disconnected.", func(s *router.Stats) int { return s.ClientRecords }),
	gaugeOf("Queued", "queued", "Items waiting on any lane or service queue.", func(s *router.Stats) int { return s.Queued }),
	gaugeOf("StoreBytes", "store_bytes", "Bytes reserved in the store: staging, sealed and seal copies in progress.", func(s *router.Stats) uint64 { return s.StoreBytes }),
	gaugeOf("RetainedBytes", "retained_bytes", "Bytes of artifacts retained by topics.", func(s *router.Stats) uint64 { return s.RetainedBytes }),
	gaugeOf("QueuedBytes", "queued_bytes", "Bytes of deliveries queued on bounded subscriptions.", func(s *router.Stats) uint64 { return s.QueuedBytes }),
	counterOf("ConnectionsTotal", "connections_total", "Connections accepted.", func(s *router.Stats) uint64 { return s.ConnectionsTotal }),
	counterOf("CallsTotal", "calls_total", "Calls admitted.", func(s *router.Stats) uint64 { return s.CallsTotal }),
	counterOf("ProtocolCloses", "protocol_closes_total", "Connections closed for a protocol violation.", func(s *router.Stats) uint64 { return s.ProtocolCloses }),
	counterOf("ControlOverflows", "control_overflows_total", "Connections closed because their control lane overflowed.", func(s *router.Stats) uint64 { return s.ControlOverflows }),
	counterOf("AcceptRetries", "accept_retries_total", "Failed accepts on the Unix listeners, each retried after a back-off (out of descriptors, for example).", func(s *router.Stats) uint64 { return s.AcceptRetries }),
	counterOf("DirectWrites", "direct_writes_total", "Batches a step wrote to a connection itself.", func(s *router.Stats) uint64 { return s.DirectWrites }),
	counterOf("WriterWrites", "writer_writes_total", "Batches a connection's writer goroutine wrote.", func(s *router.Stats) uint64 { return s.WriterWrites }),
	counterOf("WriterHandoffs", "writer_handoffs_total", "Writes a step could not finish without blocking and handed to the connection's writer.", func(s *router.Stats) uint64 { return s.WriterHandoffs }),
	counterOf("Publications", "publications_total", "Publications admitted.", func(s *router.Stats) uint64 { return s.Publications }),
	counterOf("Seals", "seals_total", "Artifacts sealed.", func(s *router.Stats) uint64 { return s.Seals }),
	counterOf("LeaseSeals", "lease_seals_total", "Seals that moved no bytes (the write lease was granted).", func(s *router.Stats) uint64 { return s.LeaseSeals }),
	counterOf("CopySeals", "copy_seals_total", "Seals that copied because a writer kept the file open.", func(s *router.Stats) uint64 { return s.CopySeals }),
	counterOf("Collected", "collected_total", "Artifacts collected after their last root.", func(s *router.Stats) uint64 { return s.Collected }),
	gaugeOf("StoreFiles", "store_files", "Staging and sealed files holding an artifact (pool mode: slots holding one; every slot file is counted by slots).", func(s *router.Stats) int64 { return s.StoreFiles }),
	gaugeOf("PreparedBytes", "store_prepared_bytes", "Files mode: bytes of staging files prepared ahead of allocations (at most a quarter of maxStoreBytes).", func(s *router.Stats) int64 { return s.PreparedBytes }),
	counterOf("PoolHits", "pool_hits_total", "Allocations served by a prepared staging file.", func(s *router.Stats) uint64 { return s.PoolHits }),
	counterOf("PoolMisses", "pool_misses_total", "Allocations that had to create a staging file (or, in pool mode, a slot).", func(s *router.Stats) uint64 { return s.PoolMisses }),
	gaugeOf("Slots", "slots", "Pool mode: slot files on disk, free and quarantined ones included; the store keeps a descriptor on each.", func(s *router.Stats) int64 { return s.Slots }),
	gaugeOf("FreeSlots", "free_slots", "Pool mode: slots ready for the next allocation of their size.", func(s *router.Stats) int64 { return s.FreeSlots }),
	gaugeOf("QuarantinedSlots", "quarantined_slots", "Pool mode: slots kept from reuse because a writer still held them.", func(s *router.Stats) int64 { return s.QuarantinedSlots }),
	gaugeOf("SlotBytes", "slot_bytes", "Pool mode: bytes of all slot files.", func(s *router.Stats) int64 { return s.SlotBytes }),
	counterOf("SlotsRetired", "slots_retired_total", "Pool mode: slots unlinked instead of reused because a connection that ended owned them.", func(s *router.Stats) uint64 { return s.SlotsRetired }),
	counterOf("StoreOpens", "store_opens_total", "Files the store opened or created.", func(s *router.Stats) uint64 { return s.StoreOpens }),
	counterOf("StoreFallocates", "store_fallocates_total", "fallocate calls of the store.", func(s *router.Stats) uint64 { return s.StoreFallocates }),
	counterOf("StoreUnlinks", "store_unlinks_total", "Files the store unlinked.", func(s *router.Stats) uint64 { return s.StoreUnlinks }),
}

// otherLabel stands for every entity past the label cap. Parentheses are
// in no topic name, service name or id, so it never collides with one.
const otherLabel = "(other)"

// defaultLabelCap bounds how many topics, services, subscriptions and
// clients get series of their own; a scrape then stays a few hundred
// kilobytes however many clients come and go.
const defaultLabelCap = 100

// entityMetric is one per-entity series family of router.Details.
type entityMetric[T any] struct {
	desc    *prometheus.Desc
	counter bool
	longest bool // entities sharing a series give their largest value, not their sum
	value   func(*T) float64
}

func (m entityMetric[T]) valueType() prometheus.ValueType {
	if m.counter {
		return prometheus.CounterValue
	}
	return prometheus.GaugeValue
}

func entity[T any](name, help string, labels []string, counter bool, value func(*T) float64) entityMetric[T] {
	return entityMetric[T]{desc: prometheus.NewDesc("flybus_"+name, help, labels, nil), counter: counter, value: value}
}

var (
	topicLabels = []string{"topic"}
	subLabels   = []string{"subscription", "topic", "client"}
	svcLabels   = []string{"service"}
	clientLabel = []string{"client"}
)

var topicMetrics = []entityMetric[router.TopicDetail]{
	entity("topic_publications_total", "Publications accepted on the topic since it was declared.", topicLabels, true,
		func(t *router.TopicDetail) float64 { return float64(t.Publications) }),
	entity("topic_last_sequence", "The topic sequence of its latest accepted publication.", topicLabels, false,
		func(t *router.TopicDetail) float64 { return float64(t.LastSequence) }),
	entity("topic_subscribers", "Subscriptions on the topic.", topicLabels, false,
		func(t *router.TopicDetail) float64 { return float64(t.Subscribers) }),
	entity("topic_retained_bytes", "Artifact bytes the topic's retained value holds.", topicLabels, false,
		func(t *router.TopicDetail) float64 { return float64(t.RetainedBytes) }),
}

var subMetrics = []entityMetric[router.SubscriptionDetail]{
	entity("subscription_queued", "Messages waiting for a delivery credit.", subLabels, false,
		func(s *router.SubscriptionDetail) float64 { return float64(s.Queued) }),
	entity("subscription_in_flight", "Messages delivered and not yet consumed.", subLabels, false,
		func(s *router.SubscriptionDetail) float64 { return float64(s.InFlight) }),
	entity("subscription_delivered_total", "Messages delivered.", subLabels, true,
		func(s *router.SubscriptionDetail) float64 { return float64(s.Delivered) }),
	entity("subscription_coalesced_total", "Messages a newer one replaced before delivery (latest mode).", subLabels, true,
		func(s *router.SubscriptionDetail) float64 { return float64(s.Coalesced) }),
	entity("subscription_refused_publications_total", "Publications refused BACKPRESSURE because this subscription was full.", subLabels, true,
		func(s *router.SubscriptionDetail) float64 { return float64(s.RefusedPublications) }),
	longest(entity("subscription_oldest_queued_age_seconds", "How long the oldest queued message has waited (under (other): the longest wait).", subLabels, false,
		func(s *router.SubscriptionDetail) float64 { return s.OldestQueuedAge.Seconds() })),
}

func longest[T any](m entityMetric[T]) entityMetric[T] {
	m.longest = true
	return m
}

var svcMetrics = []entityMetric[router.ServiceDetail]{
	entity("service_queued", "Calls waiting for dispatch.", svcLabels, false,
		func(s *router.ServiceDetail) float64 { return float64(s.Queued) }),
	entity("service_in_flight", "Calls dispatched whose request is not yet consumed.", svcLabels, false,
		func(s *router.ServiceDetail) float64 { return float64(s.InFlight) }),
	entity("service_calls_total", "Calls admitted since the service registered.", svcLabels, true,
		func(s *router.ServiceDetail) float64 { return float64(s.Calls) }),
	entity("service_failed_calls_total", "Calls that ended in call.failed.", svcLabels, true,
		func(s *router.ServiceDetail) float64 { return float64(s.FailedCalls) }),
}

var clientMetrics = []entityMetric[router.ClientDetail]{
	entity("client_owners", "Deliveries, holds and reply capabilities the client holds (its budget is flybus_owner_budget).", clientLabel, false,
		func(c *router.ClientDetail) float64 { return float64(c.Owners) }),
	entity("client_control_depth", "Replies and notices waiting on the client's control lane.", clientLabel, false,
		func(c *router.ClientDetail) float64 { return float64(c.ControlDepth) }),
	entity("client_queued_bytes", "Queued delivery bytes of the client's bounded subscriptions.", clientLabel, false,
		func(c *router.ClientDetail) float64 { return float64(c.QueuedBytes) }),
	entity("client_active_calls", "The client's calls not yet answered.", clientLabel, false,
		func(c *router.ClientDetail) float64 { return float64(c.ActiveCalls) }),
	entity("client_written_bytes_total", "Bytes the router wrote to the client.", clientLabel, true,
		func(c *router.ClientDetail) float64 { return float64(c.BytesWritten) }),
	entity("client_read_bytes_total", "Bytes the router read from the client.", clientLabel, true,
		func(c *router.ClientDetail) float64 { return float64(c.BytesRead) }),
	entity("client_written_frames_total", "Frames the router wrote to the client.", clientLabel, true,
		func(c *router.ClientDetail) float64 { return float64(c.FramesWritten) }),
	entity("client_read_frames_total", "Frames the router read from the client.", clientLabel, true,
		func(c *router.ClientDetail) float64 { return float64(c.FramesRead) }),
}

// routerCollector renders one router's figures for client_golang.
type routerCollector struct {
	stats    func() router.Stats
	details  func() router.Details
	labelCap int

	info, refusals, budget, admission, laneWait *prometheus.Desc
	stat                                        []*prometheus.Desc
}

func newRouterCollector(routerID, storeID string, stats func() router.Stats, details func() router.Details, labelCap int) *routerCollector {
	c := &routerCollector{stats: stats, details: details, labelCap: labelCap,
		info: prometheus.NewDesc("flybus_router_info", "The router incarnation serving these figures (always 1).", nil,
			prometheus.Labels{"router_id": routerID, "store_id": storeID}),
		refusals: prometheus.NewDesc("flybus_refusals_total", "Commands refused, by error code.", []string{"code"}, nil),
		budget:   prometheus.NewDesc("flybus_owner_budget", "Ownership records a client may hold (maxOwnersPerClient).", nil, nil),
		admission: prometheus.NewDesc("flybus_admission_seconds",
			"Time from a decoded command entering the routing core until the router lock is released, lock wait included.", nil, nil),
		laneWait: prometheus.NewDesc("flybus_lane_wait_seconds",
			"Time from the step that readied a connection's frames until the write of their batch began.", nil, nil),
	}
	for _, m := range statMetrics {
		c.stat = append(c.stat, prometheus.NewDesc("flybus_"+m.name, m.help, nil, nil))
	}
	return c
}

func (c *routerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append([]*prometheus.Desc{c.info, c.refusals, c.budget, c.admission, c.laneWait}, c.stat...) {
		ch <- d
	}
	describe(ch, topicMetrics)
	describe(ch, subMetrics)
	describe(ch, svcMetrics)
	describe(ch, clientMetrics)
}

func describe[T any](ch chan<- *prometheus.Desc, ms []entityMetric[T]) {
	for _, m := range ms {
		ch <- m.desc
	}
}

func (c *routerCollector) Collect(ch chan<- prometheus.Metric) {
	s, d := c.stats(), c.details()
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1)
	for i, m := range statMetrics {
		kind := prometheus.GaugeValue
		if m.counter {
			kind = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(c.stat[i], kind, m.value(&s))
	}
	// Every code, zero included, so a rate over one not seen yet is 0
	// rather than absent.
	for _, code := range wire.AllErrorCodes() {
		ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(s.Refusals[code.String()]), code.String())
	}
	budget := 0
	for _, cl := range d.Clients {
		budget = cl.OwnerBudget
	}
	if budget > 0 {
		ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, float64(budget))
	}
	ch <- constHistogram(c.admission, d.Latencies.Admission)
	ch <- constHistogram(c.laneWait, d.Latencies.LaneWait)

	// Past the cap, entities share the (other) series. Details lists them
	// sorted (by name or id), so which ones have their own series changes
	// only as entities come and go.
	topics := capped(d.Topics, c.labelCap, func(t *router.TopicDetail) string { return t.Name })
	clients := capped(d.Clients, c.labelCap, func(cl *router.ClientDetail) string { return cl.ID })
	collectEntities(ch, topicMetrics, d.Topics, func(t *router.TopicDetail) []string { return []string{topics.label(t.Name)} })
	subs := capped(d.Subscriptions, c.labelCap, func(s *router.SubscriptionDetail) string { return s.ID })
	collectEntities(ch, subMetrics, d.Subscriptions, func(s *router.SubscriptionDetail) []string {
		if !subs.own[s.ID] {
			return []string{otherLabel, otherLabel, otherLabel}
		}
		return []string{s.ID, topics.label(s.Topic), clients.label(s.Client)}
	})
	svcs := capped(d.Services, c.labelCap, func(s *router.ServiceDetail) string { return s.Name })
	collectEntities(ch, svcMetrics, d.Services, func(s *router.ServiceDetail) []string { return []string{svcs.label(s.Name)} })
	collectEntities(ch, clientMetrics, d.Clients, func(cl *router.ClientDetail) []string { return []string{clients.label(cl.ID)} })
}

// labelSet is which entities have series of their own.
type labelSet struct{ own map[string]bool }

func (l labelSet) label(key string) string {
	if l.own[key] {
		return key
	}
	return otherLabel
}

// capped gives the first limit distinct keys of list their own series.
func capped[T any](list []T, limit int, key func(*T) string) labelSet {
	l := labelSet{own: map[string]bool{}}
	for i := range list {
		if len(l.own) == limit {
			break
		}
		l.own[key(&list[i])] = true
	}
	return l
}

// collectEntities sums (or, for a longest metric, takes the largest of)
// each family's values by label set (two connections
// of one client id share a series, and so does everything past the cap)
// and emits one sample per set, in the list's order.
func collectEntities[T any](ch chan<- prometheus.Metric, ms []entityMetric[T], list []T, labels func(*T) []string) {
	type series struct {
		labels []string
		sums   []float64
	}
	var order []*series
	byKey := map[string]*series{}
	for i := range list {
		lv := labels(&list[i])
		key := labelKey(lv)
		sr := byKey[key]
		if sr == nil {
			sr = &series{labels: lv, sums: make([]float64, len(ms))}
			byKey[key] = sr
			order = append(order, sr)
		}
		for j, m := range ms {
			if v := m.value(&list[i]); m.longest {
				sr.sums[j] = max(sr.sums[j], v)
			} else {
				sr.sums[j] += v
			}
		}
	}
	for j, m := range ms {
		for _, sr := range order {
			ch <- prometheus.MustNewConstMetric(m.desc, m.valueType(), sr.sums[j], sr.labels...)
		}
	}
}

func labelKey(lv []string) string {
	n := 0
	for _, v := range lv {
		n += len(v) + 1
	}
	b := make([]byte, 0, n)
	for _, v := range lv {
		b = append(append(b, v...), 0)
	}
	return string(b)
}

// constHistogram converts a router histogram (per-bucket counts, bounds as
// durations) to Prometheus's (cumulative counts, bounds in seconds).
func constHistogram(desc *prometheus.Desc, h router.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Buckets))
	var cum uint64
	for _, b := range h.Buckets {
		cum += b.Count
		if b.UpperBound >= 0 {
			buckets[b.UpperBound.Seconds()] = cum
		}
	}
	return prometheus.MustNewConstHistogram(desc, h.Count, h.Sum.Seconds(), buckets)
}

// metricsHandler serves one router's /metrics.
func metricsHandler(r *router.Router, labelCap int, logger *slog.Logger) http.Handler {
	reg := prometheus.NewRegistry() // the tests use a pedantic one; it re-checks every series per scrape
	reg.MustRegister(newRouterCollector(r.RouterID().String(), r.StoreID().String(), r.Stats, r.Details, labelCap))
	return registryHandler(reg, logger)
}

func registryHandler(reg *prometheus.Registry, logger *slog.Logger) http.Handler {
	opts := promhttp.HandlerOpts{}
	if logger != nil {
		opts.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	}
	return promhttp.HandlerFor(reg, opts)
}

// metricsLimits bound what HTTP clients can hold of the router process,
// whose descriptors the bus needs: connections at once, and how long each
// may take to send a request, take a response and sit idle.
type metricsLimits struct {
	maxConns                      int
	readHeader, read, write, idle time.Duration
}

// defaultMetricsLimits fits a scrape every 15 s (its connection is kept)
// and a router with thousands of entities (a slow reader gets 30 s).
func defaultMetricsLimits() metricsLimits {
	return metricsLimits{maxConns: metricsConnCap(), readHeader: 5 * time.Second, read: 10 * time.Second,
		write: 30 * time.Second, idle: 30 * time.Second}
}

// metricsConnCap caps HTTP connections at an eighth of the descriptors
// the process may open (RLIMIT_NOFILE's soft limit, which Go raises to the
// hard one at start), between 4 and 64, so the bus keeps the rest.
func metricsConnCap() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 4
	}
	return connCapFor(rl.Cur)
}

func connCapFor(nofile uint64) int { return int(max(4, min(64, nofile/8))) }

// listenMetrics binds the metrics endpoint: host:port, or unix:PATH, a
// socket only its owner may connect to. The socket is created 0600 (via
// the umask), not chmod-ed after: there is no moment when another user
// could connect. serve binds it before anything else runs that creates
// files, so the process-wide umask change is seen by nobody else.
func listenMetrics(addr string) (net.Listener, error) {
	path, ok := metricsSocket(addr)
	if !ok {
		return net.Listen("tcp", addr)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	return ln, err // a *net.UnixListener removes its file on Close
}

// metricsServer serves /metrics, /details (router.Details as JSON) and,
// when asked for, /debug/pprof/ for one router.
type metricsServer struct {
	srv *http.Server
	ln  *connLimiter
}

// serveMetrics serves the router's figures on ln, which serve binds before
// it creates the router: a taken port then fails the start before anything
// exists to clean up.
func serveMetrics(ln net.Listener, r *router.Router, labelCap int, withPprof bool, lim metricsLimits, logger *slog.Logger) *metricsServer {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler(r, labelCap, logger))
	mux.HandleFunc("/details", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(r.Details()); err != nil {
			logger.Debug("details write failed", "err", err)
		}
	})
	if withPprof {
		// Mounted on our own mux: the default one is never served. A
		// profile or trace of ?seconds=N outlasts WriteTimeout: pprof
		// moves the write deadline N seconds on itself (and the server
		// clears the read deadline while a handler runs).
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	cl := &connLimiter{Listener: ln, max: lim.maxConns, log: logger, conns: map[*limitedConn]struct{}{}}
	m := &metricsServer{ln: cl, srv: &http.Server{Handler: mux, ConnState: cl.setState,
		ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read, WriteTimeout: lim.write, IdleTimeout: lim.idle,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}}
	go func() {
		if err := m.srv.Serve(cl); err != nil && err != http.ErrServerClosed {
			logger.Error("metrics server stopped", "err", err)
		}
	}()
	return m
}

// connLimiter caps the metrics listener's open connections. HTTP and the
// bus share one descriptor table: uncapped, idle keep-alive connections
// could take every descriptor and keep bus clients out. At the cap a new
// connection displaces the oldest one idle between requests, else the
// oldest one that has sent nothing yet; when every connection is in a
// request, the new one is closed at once.
type connLimiter struct {
	net.Listener
	max int
	log *slog.Logger

	mu       sync.Mutex
	conns    map[*limitedConn]struct{}
	seq      uint64 // orders connections by their last change of state
	refused  uint64
	lastWarn time.Time
}

type limitedConn struct {
	net.Conn
	l     *connLimiter
	once  sync.Once
	state http.ConnState // guarded by l.mu
	since uint64         // l.seq when state was set; guarded by l.mu
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// refusedLogEvery bounds the warnings of a connection flood.
const refusedLogEvery = time.Minute

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &limitedConn{Conn: nc, l: l, state: http.StateNew}
		l.mu.Lock()
		var victim *limitedConn
		if len(l.conns) >= l.max {
			if victim = l.displaceable(); victim == nil {
				l.refused++
				refused, warn := l.refused, time.Since(l.lastWarn) >= refusedLogEvery
				if warn {
					l.lastWarn = time.Now()
				}
				l.mu.Unlock()
				nc.Close()
				if warn {
					l.log.Warn("metrics connections at their cap, all in a request; closed a new one", "maxConns", l.max, "refusedTotal", refused)
				}
				continue
			}
			delete(l.conns, victim)
		}
		l.seq++
		c.since = l.seq
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		if victim != nil {
			victim.Close()
		}
		return c, nil
	}
}

// displaceable returns the connection to close for a new one, or nil.
func (l *connLimiter) displaceable() *limitedConn {
	var best *limitedConn
	for c := range l.conns {
		switch {
		case c.state != http.StateIdle && c.state != http.StateNew:
		case best == nil:
			best = c
		case (c.state == http.StateIdle) != (best.state == http.StateIdle):
			if c.state == http.StateIdle { // idle ones go first: new ones may be about to ask
				best = c
			}
		case c.since < best.since:
			best = c
		}
	}
	return best
}

// setState is the server's ConnState hook.
func (l *connLimiter) setState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	l.seq++
	c.state, c.since = s, l.seq
	l.mu.Unlock()
}

// Addr is the bound address (the real port when asked for port 0), in
// the form --metrics and flybus stats take it.
func (m *metricsServer) Addr() string {
	if a, ok := m.ln.Addr().(*net.UnixAddr); ok {
		return "unix:" + a.Name
	}
	return m.ln.Addr().String()
}

// Close stops the server, letting requests in flight finish until ctx ends.
func (m *metricsServer) Close(ctx context.Context) error {
	if err := m.srv.Shutdown(ctx); err != nil {
		return m.srv.Close()
	}
	return nil
}
