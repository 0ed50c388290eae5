package edge

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/flybus/flybus/router"
)

// The router's live view: what flybus top shows, from the router's
// /details, as one notice a second to the browsers that asked for it.

// RouterView is the router notice ("type": "router").
type RouterView struct {
	Type          string                 `json:"type"`
	Addr          string                 `json:"addr"`
	Error         string                 `json:"error,omitempty"`
	Taken         time.Time              `json:"taken"`
	Interval      float64                `json:"interval"` // seconds the rates are over
	Store         router.StoreDetail     `json:"store"`
	Admission     LatencyView            `json:"admission"`
	LaneWait      LatencyView            `json:"laneWait"`
	Topics        []RouterTopic          `json:"topics"`
	Subscriptions []RouterSub            `json:"subscriptions"`
	Services      []router.ServiceDetail `json:"services"`
	Clients       []router.ClientDetail  `json:"clients"`
}

// LatencyView is a router latency over the interval, as bucket bounds.
type LatencyView struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50Us"`
	P99   float64 `json:"p99Us"`
}

// RouterTopic is a topic with its publication rate.
type RouterTopic struct {
	router.TopicDetail
	Rate float64 `json:"rate"`
}

// RouterSub is a subscription with its delivery rate.
type RouterSub struct {
	router.SubscriptionDetail
	Rate float64 `json:"rate"`
}

// maxRouterRows bounds each table, busiest first, so the notice stays
// small on a router with thousands of clients.
const maxRouterRows = 50

// routerView renders d with rates since prev.
func routerView(addr string, d, prev router.Details) RouterView {
	r := d.RatesSince(prev)
	v := RouterView{Type: "router", Addr: addr, Taken: d.Taken, Interval: r.Interval.Seconds(), Store: d.Store,
		Admission: latency(d.Latencies.Admission.Since(prev.Latencies.Admission)),
		LaneWait:  latency(d.Latencies.LaneWait.Since(prev.Latencies.LaneWait))}
	for _, t := range d.Topics {
		v.Topics = append(v.Topics, RouterTopic{TopicDetail: t, Rate: r.Publications[t.Name]})
	}
	slices.SortStableFunc(v.Topics, func(a, b RouterTopic) int { return cmp.Or(-cmp.Compare(a.Rate, b.Rate), cmp.Compare(a.Name, b.Name)) })
	for _, s := range d.Subscriptions {
		v.Subscriptions = append(v.Subscriptions, RouterSub{SubscriptionDetail: s, Rate: r.Deliveries[s.ID]})
	}
	slices.SortStableFunc(v.Subscriptions, func(a, b RouterSub) int {
		return cmp.Or(-cmp.Compare(a.Rate, b.Rate), -cmp.Compare(a.Coalesced, b.Coalesced), cmp.Compare(a.ID, b.ID))
	})
	v.Services = slices.Clone(d.Services)
	slices.SortStableFunc(v.Services, func(a, b router.ServiceDetail) int {
		return cmp.Or(-cmp.Compare(a.Queued+a.InFlight, b.Queued+b.InFlight), -cmp.Compare(a.Calls, b.Calls), cmp.Compare(a.Name, b.Name))
	})
	v.Clients = slices.Clone(d.Clients)
	slices.SortStableFunc(v.Clients, func(a, b router.ClientDetail) int {
		return cmp.Or(-cmp.Compare(a.BytesWritten+a.BytesRead, b.BytesWritten+b.BytesRead), cmp.Compare(a.ID, b.ID))
	})
	v.Topics = v.Topics[:min(len(v.Topics), maxRouterRows)]
	v.Subscriptions = v.Subscriptions[:min(len(v.Subscriptions), maxRouterRows)]
	v.Services = v.Services[:min(len(v.Services), maxRouterRows)]
	v.Clients = v.Clients[:min(len(v.Clients), maxRouterRows)]
	return v
}

func latency(h router.Histogram) LatencyView {
	if h.Count == 0 {
		return LatencyView{}
	}
	return LatencyView{Count: h.Count, P50: float64(h.Quantile(0.5).Microseconds()), P99: float64(h.Quantile(0.99).Microseconds())}
}

// watchRouter reads the router's snapshot every StatusInterval while a
// browser wants the view.
func (e *Edge) watchRouter(ctx context.Context) {
	tk := time.NewTicker(e.cfg.StatusInterval)
	defer tk.Stop()
	var prev router.Details
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if !e.routerWanted() {
			prev = router.Details{}
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, max(e.cfg.StatusInterval, 5*time.Second))
		d, err := e.cfg.RouterDetails(fctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var v RouterView
		if err != nil {
			v = RouterView{Type: "router", Addr: e.cfg.RouterAddr, Error: err.Error()}
			prev = router.Details{}
		} else {
			if prev.Taken.IsZero() {
				prev = d // the first view has no rates yet
			}
			v = routerView(e.cfg.RouterAddr, d, prev)
			prev = d
		}
		js := mustJSON(v)
		e.mu.Lock()
		e.routerJS = js
		for b := range e.browsers {
			b.setSlot(slotRouter, js)
		}
		e.mu.Unlock()
	}
}

func (e *Edge) routerWanted() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for b := range e.browsers {
		b.mu.Lock()
		on := b.routerView
		b.mu.Unlock()
		if on {
			return true
		}
	}
	return false
}
