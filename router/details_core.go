package router

import (
	"cmp"
	"slices"
)

// details fills a Details from the core's tables (all but the transport
// counters and the store, which the shell adds) and returns the
// connection of each client, in the same order. now is the shell's clock,
// in Unix nanoseconds, for queue ages.
func (k *core) details(now int64) (Details, []*conn) {
	var d Details
	for _, t := range k.topics {
		td := TopicDetail{Name: t.name, Incarnation: t.inc.String(), Retained: t.retained.String(),
			Publications: t.pubs, LastSequence: t.seq, Subscribers: len(t.subs)}
		if t.latest != nil {
			td.RetainedBytes = artifactBytes(t.latest.arts)
		}
		d.Topics = append(d.Topics, td)
	}
	slices.SortFunc(d.Topics, func(a, b TopicDetail) int { return cmp.Compare(a.Name, b.Name) })

	var subs []*subscription
	var clients []*conn
	for _, c := range k.conns {
		subs = append(subs, c.subs...)
		if c.helloDone && !c.gone {
			clients = append(clients, c)
		}
	}
	slices.SortFunc(subs, func(a, b *subscription) int { return cmp.Compare(a.id, b.id) })
	for _, s := range subs {
		sd := SubscriptionDetail{ID: s.id.String(), Client: s.conn.ident.ClientID, Topic: s.topic.name,
			Mode: s.mode.String(), Queued: len(s.queue), InFlight: s.inflight,
			Delivered: s.delivered, Coalesced: s.coalesced, RefusedPublications: s.refusedPubs}
		if len(s.queue) > 0 && s.queue[0].at != 0 && now > s.queue[0].at {
			sd.OldestQueuedAge = nanos(now - s.queue[0].at)
		}
		d.Subscriptions = append(d.Subscriptions, sd)
	}

	for _, s := range k.services {
		d.Services = append(d.Services, ServiceDetail{Name: s.name, Incarnation: s.inc.String(),
			Client: s.conn.ident.ClientID, Queued: len(s.queue), InFlight: s.inflight, Calls: s.calls, FailedCalls: s.failed})
	}
	slices.SortFunc(d.Services, func(a, b ServiceDetail) int { return cmp.Compare(a.Name, b.Name) })

	slices.SortFunc(clients, func(a, b *conn) int {
		return cmp.Or(cmp.Compare(a.ident.ClientID, b.ident.ClientID), cmp.Compare(a.id, b.id))
	})
	for _, c := range clients {
		d.Clients = append(d.Clients, ClientDetail{ID: c.ident.ClientID, Incarnation: c.ident.ClientIncarnation,
			Connection: c.id.String(), Owners: c.owners(), OwnerBudget: k.limits.MaxOwnersPerClient,
			ControlDepth: len(c.control) - c.ctrlHead, QueuedBytes: c.queuedBytes, ActiveCalls: len(c.calls)})
	}
	d.Store.Bytes = k.storeBytes
	return d, clients
}
