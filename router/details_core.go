package router

import "github.com/flybus/flybus/wire"

// rawDetails is what Details reads from the core's tables under the lock:
// typed ids and counts only, so that the lock is held for copying, not
// for formatting or sorting (the shell does both after it lets go).
type rawDetails struct {
	topics   []rawTopic
	subs     []rawSub
	services []rawService
	clients  []rawClient
	conns    []*conn // each client's connection, for the shell's traffic counters
	storeB   uint64
	budget   int
}

type rawTopic struct {
	name                 string
	inc                  wire.TopicInc
	retained             wire.Retention
	pubs, seq, retainedB uint64
	subscribers          int
}

type rawSub struct {
	id                          wire.SubID
	client, topic               string
	mode                        wire.Mode
	queued, inflight            int
	delivered, coalesced, refus uint64
	oldest                      int64 // admission time of the oldest queued message, 0 if none
}

type rawService struct {
	name             string
	inc              wire.ServiceInc
	client           string
	queued, inflight int
	calls, failed    uint64
}

type rawClient struct {
	ident                           wire.Identity
	conn                            wire.ConnID
	owners, control, queuedB, calls int
}

// details copies the core's tables into d, reusing its slices.
func (k *core) details(d *rawDetails) {
	d.topics, d.subs, d.services, d.clients, d.conns = d.topics[:0], d.subs[:0], d.services[:0], d.clients[:0], d.conns[:0]
	for _, t := range k.topics {
		rt := rawTopic{name: t.name, inc: t.inc, retained: t.retained, pubs: t.pubs, seq: t.seq, subscribers: len(t.subs)}
		if t.latest != nil {
			rt.retainedB = artifactBytes(t.latest.arts)
		}
		d.topics = append(d.topics, rt)
	}
	for _, c := range k.conns {
		for _, s := range c.subs {
			rs := rawSub{id: s.id, client: s.conn.ident.ClientID, topic: s.name, mode: s.mode,
				queued: len(s.queue), inflight: s.inflight, delivered: s.delivered, coalesced: s.coalesced, refus: s.refusedPubs}
			if len(s.queue) > 0 {
				rs.oldest = s.queue[0].at
			}
			d.subs = append(d.subs, rs)
		}
		if c.helloDone && !c.gone {
			d.clients = append(d.clients, rawClient{ident: c.ident, conn: c.id, owners: c.owners(),
				control: len(c.control) - c.ctrlHead, queuedB: c.queuedBytes, calls: len(c.calls)})
			d.conns = append(d.conns, c)
		}
	}
	for _, s := range k.services {
		d.services = append(d.services, rawService{name: s.name, inc: s.inc, client: s.conn.ident.ClientID,
			queued: len(s.queue), inflight: s.inflight, calls: s.calls, failed: s.failed})
	}
	d.storeB, d.budget = k.storeBytes, k.limits.MaxOwnersPerClient
}
