package router

import (
	"cmp"
	"slices"
	"time"

	"github.com/flybus/flybus/store"
)

// Details is what the router holds, per topic, subscription, service and
// client, and its store, at one moment: the operator's view, where Stats
// has only totals. Every list is sorted (topics and services by name,
// subscriptions and clients by id), so two snapshots line up.
//
// Taking one costs one pass over the router's tables under its lock
// (BenchmarkDetails); cheap enough to take every second under load.
type Details struct {
	Taken         time.Time            `json:"taken"`
	Topics        []TopicDetail        `json:"topics"`
	Subscriptions []SubscriptionDetail `json:"subscriptions"`
	Services      []ServiceDetail      `json:"services"`
	Clients       []ClientDetail       `json:"clients"`
	Store         StoreDetail          `json:"store"`
	Latencies     Latencies            `json:"latencies"`
}

// TopicDetail is one declared topic.
type TopicDetail struct {
	Name          string `json:"name"`
	Incarnation   string `json:"incarnation"`
	Retained      string `json:"retained"`     // "none" or "latest"
	Publications  uint64 `json:"publications"` // accepted since it was declared
	LastSequence  uint64 `json:"lastSequence"` // the topicSequence of the latest accepted publication
	Subscribers   int    `json:"subscribers"`
	RetainedBytes uint64 `json:"retainedBytes"` // the artifact bytes its retained value holds
}

// SubscriptionDetail is one subscription and its queue.
type SubscriptionDetail struct {
	ID       string `json:"id"`
	Client   string `json:"client"` // the subscriber's client id
	Topic    string `json:"topic"`
	Mode     string `json:"mode"`     // "latest" or "bounded"
	Queued   int    `json:"queued"`   // messages waiting for a credit
	InFlight int    `json:"inFlight"` // delivered, not yet consumed
	// Cumulative: messages delivered; messages replaced before delivery
	// (latest mode); publications refused BACKPRESSURE because this
	// subscription was full.
	Delivered           uint64 `json:"delivered"`
	Coalesced           uint64 `json:"coalesced"`
	RefusedPublications uint64 `json:"refusedPublications"`
	// OldestQueuedAge is how long the oldest queued message has waited
	// (zero when none waits).
	OldestQueuedAge time.Duration `json:"oldestQueuedAgeNs"`
}

// ServiceDetail is one registered service and its queue.
type ServiceDetail struct {
	Name        string `json:"name"`
	Incarnation string `json:"incarnation"`
	Client      string `json:"client"`      // the registrant's client id
	Queued      int    `json:"queued"`      // calls waiting for dispatch
	InFlight    int    `json:"inFlight"`    // dispatched, request not yet consumed
	Calls       uint64 `json:"calls"`       // calls admitted since it registered
	FailedCalls uint64 `json:"failedCalls"` // calls that ended in call.failed (a request closed unanswered, say)
}

// ClientDetail is one connection that has said hello.
type ClientDetail struct {
	ID          string `json:"id"`
	Incarnation string `json:"incarnation"`
	Connection  string `json:"connection"`
	Owners      int    `json:"owners"`      // deliveries, holds and reply capabilities it holds
	OwnerBudget int    `json:"ownerBudget"` // maxOwnersPerClient
	// ControlDepth is the replies and notices waiting on its control lane;
	// QueuedBytes its bounded subscriptions' queued delivery bytes.
	ControlDepth int `json:"controlDepth"`
	QueuedBytes  int `json:"queuedBytes"`
	ActiveCalls  int `json:"activeCalls"` // its calls not yet answered
	// What crossed its transport, counted by the router: bytes and frames
	// written to it and read from it, and the writes that carried them
	// (FramesWritten over Writes is how many frames a write carried).
	BytesWritten  uint64 `json:"bytesWritten"`
	BytesRead     uint64 `json:"bytesRead"`
	FramesWritten uint64 `json:"framesWritten"`
	FramesRead    uint64 `json:"framesRead"`
	Writes        uint64 `json:"writes"`
}

// StoreDetail is the artifact store.
type StoreDetail struct {
	Mode string `json:"mode"` // "files" or "pool"
	// Files mode: staging and sealed files on disk. Pool mode: slot files,
	// those free, and those kept from reuse because a writer held them.
	Files            int64  `json:"files"`
	Slots            int64  `json:"slots"`
	FreeSlots        int64  `json:"freeSlots"`
	QuarantinedSlots int64  `json:"quarantinedSlots"`
	Bytes            uint64 `json:"bytes"` // reserved: staging, sealed and seal copies in progress
	LeaseSeals       uint64 `json:"leaseSeals"`
	CopySeals        uint64 `json:"copySeals"`
}

// Details takes a snapshot of what the router holds. The lock is held
// only to copy counts; formatting and sorting happen after.
func (r *Router) Details() Details {
	now := time.Now()
	var raw rawDetails
	type traffic struct{ w, r, fw, fr, writes uint64 }
	r.mu.Lock()
	r.core.details(&raw)
	io := make([]traffic, len(raw.conns))
	for i, c := range raw.conns {
		if sh := r.shells[c]; sh != nil {
			io[i] = traffic{sh.io.written.Load(), sh.io.read.Load(), sh.io.framesOut.Load(), sh.io.framesIn.Load(), sh.io.writes.Load()}
		}
	}
	r.mu.Unlock()

	d := Details{Taken: now, Topics: make([]TopicDetail, 0, len(raw.topics)),
		Subscriptions: make([]SubscriptionDetail, 0, len(raw.subs)), Services: make([]ServiceDetail, 0, len(raw.services)),
		Clients: make([]ClientDetail, 0, len(raw.clients))}
	for _, t := range raw.topics {
		d.Topics = append(d.Topics, TopicDetail{Name: t.name, Incarnation: t.inc.String(), Retained: t.retained.String(),
			Publications: t.pubs, LastSequence: t.seq, Subscribers: t.subscribers, RetainedBytes: t.retainedB})
	}
	slices.SortFunc(d.Topics, func(a, b TopicDetail) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(raw.subs, func(a, b rawSub) int { return cmp.Compare(a.id, b.id) })
	for _, s := range raw.subs {
		sd := SubscriptionDetail{ID: s.id.String(), Client: s.client, Topic: s.topic, Mode: s.mode.String(),
			Queued: s.queued, InFlight: s.inflight, Delivered: s.delivered, Coalesced: s.coalesced, RefusedPublications: s.refus}
		if s.oldest != 0 && now.UnixNano() > s.oldest {
			sd.OldestQueuedAge = time.Duration(now.UnixNano() - s.oldest)
		}
		d.Subscriptions = append(d.Subscriptions, sd)
	}
	for _, s := range raw.services {
		d.Services = append(d.Services, ServiceDetail{Name: s.name, Incarnation: s.inc.String(), Client: s.client,
			Queued: s.queued, InFlight: s.inflight, Calls: s.calls, FailedCalls: s.failed})
	}
	slices.SortFunc(d.Services, func(a, b ServiceDetail) int { return cmp.Compare(a.Name, b.Name) })
	for i, c := range raw.clients {
		d.Clients = append(d.Clients, ClientDetail{ID: c.ident.ClientID, Incarnation: c.ident.ClientIncarnation,
			Connection: c.conn.String(), Owners: c.owners, OwnerBudget: raw.budget, ControlDepth: c.control,
			QueuedBytes: c.queuedB, ActiveCalls: c.calls, BytesWritten: io[i].w, BytesRead: io[i].r,
			FramesWritten: io[i].fw, FramesRead: io[i].fr, Writes: io[i].writes})
	}
	slices.SortFunc(d.Clients, func(a, b ClientDetail) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Connection, b.Connection))
	})

	d.Latencies = r.Latencies()
	st := r.store.Stats()
	d.Store = StoreDetail{Mode: r.store.Mode().String(), Files: st.StagingFiles + st.SealedFiles,
		LeaseSeals: st.LeaseSeals, CopySeals: st.CopySeals, Bytes: raw.storeB}
	if r.store.Mode() == store.ModePool {
		d.Store.Files = 0
		d.Store.Slots, d.Store.FreeSlots, d.Store.QuarantinedSlots = int64(st.Slots), int64(st.FreeSlots), int64(st.QuarantinedSlots)
	}
	return d
}

// Rates are per-second rates between two snapshots of the same router:
// publications per topic (by name) and deliveries per subscription (by
// id). The core keeps only counts; rates come from here, outside it.
type Rates struct {
	Interval     time.Duration
	Publications map[string]float64
	Deliveries   map[string]float64
}

// RatesSince computes the rates from prev to d. A topic declared again
// (another incarnation) counts from zero; a subscription or topic absent
// from prev counts everything it has; one gone from d has no rate.
func (d Details) RatesSince(prev Details) Rates {
	r := Rates{Interval: d.Taken.Sub(prev.Taken), Publications: map[string]float64{}, Deliveries: map[string]float64{}}
	secs := r.Interval.Seconds()
	if secs <= 0 {
		return r
	}
	before := map[string]TopicDetail{}
	for _, t := range prev.Topics {
		before[t.Name] = t
	}
	for _, t := range d.Topics {
		n := t.Publications
		if p, ok := before[t.Name]; ok && p.Incarnation == t.Incarnation && p.Publications <= n {
			n -= p.Publications
		}
		r.Publications[t.Name] = float64(n) / secs
	}
	delivered := map[string]uint64{}
	for _, s := range prev.Subscriptions {
		delivered[s.ID] = s.Delivered
	}
	for _, s := range d.Subscriptions {
		n := s.Delivered
		if p, ok := delivered[s.ID]; ok && p <= n {
			n -= p
		}
		r.Deliveries[s.ID] = float64(n) / secs
	}
	return r
}
