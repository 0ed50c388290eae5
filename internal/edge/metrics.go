package edge

import "github.com/prometheus/client_golang/prometheus"

// The edge's counters as Prometheus series, read from Stats on every
// scrape. Names are under flybus_edge_, so a dashboard or an alert tells
// them from the router's.

type metric struct {
	desc    *prometheus.Desc
	counter bool
	value   func(*Stats) float64
}

func edgeMetric(name, help string, counter bool, value func(*Stats) float64) metric {
	return metric{desc: prometheus.NewDesc("flybus_edge_"+name, help, nil, nil), counter: counter, value: value}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var edgeMetrics = []metric{
	edgeMetric("bus_connected", "1 while the edge is connected to the router, 0 while the feed is down.", false,
		func(s *Stats) float64 { return b2f(s.BusConnected) }),
	edgeMetric("bus_lost_total", "Connections to the router lost after being up.", true,
		func(s *Stats) float64 { return float64(s.BusLost) }),
	edgeMetric("bus_dial_failures_total", "Attempts to connect to the router that failed.", true,
		func(s *Stats) float64 { return float64(s.DialFailures) }),
	edgeMetric("clients", "Browsers connected (past hello).", false,
		func(s *Stats) float64 { return float64(s.Clients) }),
	edgeMetric("sockets", "WebSockets open, those before hello included (bounded by --max-clients).", false,
		func(s *Stats) float64 { return float64(s.Sockets) }),
	edgeMetric("clients_total", "Browsers admitted since the start.", true,
		func(s *Stats) float64 { return float64(s.ClientsTotal) }),
	edgeMetric("decode_failures_total", "Publications the edge could not serve (an attachment it could not hold or map).", true,
		func(s *Stats) float64 { return float64(s.DecodeFailures) }),
	edgeMetric("slow_drops_total", "Browsers disconnected because one message took longer than the write timeout.", true,
		func(s *Stats) float64 { return float64(s.SlowDrops) }),
	edgeMetric("protocol_errors_total", "WebSockets closed for a malformed or unexpected request.", true,
		func(s *Stats) float64 { return float64(s.ProtocolErrors) }),
	edgeMetric("publications_held", "Publications held now: each topic's latest and those waiting for or being written to a browser.", false,
		func(s *Stats) float64 { return float64(s.Held) }),
}

type topicMetric struct {
	desc  *prometheus.Desc
	value func(*TopicStats) float64
}

func perTopic(name, help string, value func(*TopicStats) float64) topicMetric {
	return topicMetric{desc: prometheus.NewDesc("flybus_edge_"+name, help, []string{"topic"}, nil), value: value}
}

var topicMetrics = []topicMetric{
	perTopic("publications_total", "Publications the edge received from the router.", func(t *TopicStats) float64 { return float64(t.Publications) }),
	perTopic("replaced_total", "Publications the router replaced before the edge took them (the edge itself fell behind).",
		func(t *TopicStats) float64 { return float64(t.Replaced) }),
	perTopic("frames_sent_total", "Publication messages sent to browsers.", func(t *TopicStats) float64 { return float64(t.FramesSent) }),
	perTopic("frames_skipped_total", "Publications a browser skipped because a newer one came before it took the last.",
		func(t *TopicStats) float64 { return float64(t.FramesSkipped) }),
	perTopic("bytes_sent_total", "Bytes of publication messages sent to browsers.", func(t *TopicStats) float64 { return float64(t.Bytes) }),
}

var (
	topicSubscribed = prometheus.NewDesc("flybus_edge_topic_subscribed", "1 while the edge's subscription to the topic is up.", []string{"topic"}, nil)
	refusals        = prometheus.NewDesc("flybus_edge_refusals_total", "WebSocket requests refused, by reason.", []string{"reason"}, nil)
)

type collector struct{ e *Edge }

// Collector renders the edge's counters for a Prometheus registry.
func (e *Edge) Collector() prometheus.Collector { return collector{e} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range edgeMetrics {
		ch <- m.desc
	}
	for _, m := range topicMetrics {
		ch <- m.desc
	}
	ch <- topicSubscribed
	ch <- refusals
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.Stats()
	for _, m := range edgeMetrics {
		kind := prometheus.GaugeValue
		if m.counter {
			kind = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(m.desc, kind, m.value(&s))
	}
	for _, m := range topicMetrics {
		for i := range s.Topics {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, m.value(&s.Topics[i]), s.Topics[i].Name)
		}
	}
	for _, t := range s.Topics {
		ch <- prometheus.MustNewConstMetric(topicSubscribed, prometheus.GaugeValue, b2f(t.Subscribed), t.Name)
	}
	for reason, n := range map[string]uint64{"origin": s.RefusedOrigin, "host": s.RefusedHost, "token": s.RefusedToken, "full": s.RefusedFull} {
		ch <- prometheus.MustNewConstMetric(refusals, prometheus.CounterValue, float64(n), reason)
	}
}
