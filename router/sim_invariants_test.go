package router

// The simulation's checks after every step: the core's registries, lost
// wake-ups and each quiet client's view. See sim_test.go.

import (
	"fmt"
	"slices"

	"github.com/flybus/flybus/wire"
)

// checkInvariants walks every registry of the core and counts what it finds
// independently of the core's own counters:
//
//   - every artifact's roots equal the queue entries, deliveries, admitted
//     results, holds and retained values naming it; no sealed artifact
//     without roots survives; nothing names a collected artifact;
//   - every hold, delivery, capability, call, service and subscription
//     belongs to a live connection and both sides of each link agree;
//   - owners, queued bytes, store bytes, retained bytes, queues, credits and
//     registries stay within their limits and equal their sums;
//   - a closing connection holds nothing;
//   - the store holds exactly the files live artifacts name;
//   - the stats snapshot agrees with the walk.
func (s *sim) checkInvariants() {
	k, lim := s.k, s.lim
	roots := map[*artifact]int{}
	root := func(where string, arts []*artifact) {
		for i, a := range arts {
			if slices.Index(arts, a) != i {
				s.fail("roots", "%s names %s twice in one root", where, a.id)
			}
			roots[a]++
		}
	}
	svcInflight := map[*service]int{}
	subInflight := map[*subscription]int{}
	var want simGauges
	want.Connections, want.Topics, want.Artifacts = len(k.conns), len(k.topics), len(k.artifacts)
	want.StoreBytes, want.RetainedBytes, want.ConnectionsTotal = k.storeBytes, k.retainedBytes, s.accepted

	// Closing connections count against no limit: an evicted one must not
	// keep a prompt client out while its goodbye is written.
	closingConns := 0
	for _, c := range k.conns {
		closingConns += simBtoi(c.closing)
	}
	if closingConns != k.closingConns {
		s.fail("conns", "%d closing connections registered, the core counts %d", closingConns, k.closingConns)
	}
	if len(k.conns)-closingConns > lim.MaxClients {
		s.fail("conns", "%d connections (%d closing), maxClients %d", len(k.conns), closingConns, lim.MaxClients)
	}
	subCount := 0
	for id, c := range k.conns {
		name := s.names[c]
		if c.id != id || c.gone {
			s.fail("conns", "%s registered as %s, gone=%v", name, id, c.gone)
		}
		if !c.helloDone && !c.closing {
			want.PendingHello++
		}
		if c.helloDone && !c.closing {
			if rec := k.clients[c.ident.ClientID]; rec == nil || rec.live != c {
				s.fail("conns", "%s is live but not its client's live connection", name)
			}
		}
		// The control lane.
		bytes := 0
		for _, it := range c.control[c.ctrlHead:] {
			bytes += len(it.body) + controlOverhead
		}
		if bytes != c.controlBytes {
			s.fail("control", "%s: control lane holds %d bytes, counted %d", name, bytes, c.controlBytes)
		}
		if n := len(c.control) - c.ctrlHead; n > lim.MaxControlFrames+1 {
			s.fail("control", "%s: %d control frames queued, maxControlFrames %d", name, n, lim.MaxControlFrames)
		}
		want.Queued += len(c.control) - c.ctrlHead + len(c.results)
		if c.closing {
			if len(c.services)+len(c.subs)+len(c.calls)+len(c.results)+len(c.dlvs)+len(c.caps)+len(c.holds) != 0 || c.queuedBytes != 0 {
				s.fail("closing-empty", "%s is closing but holds %d services, %d subscriptions, %d calls, %d results, %d deliveries, %d capabilities, %d holds, %d queued bytes",
					name, len(c.services), len(c.subs), len(c.calls), len(c.results), len(c.dlvs), len(c.caps), len(c.holds), c.queuedBytes)
			}
		}
		// Owners, counted here rather than by c.owners().
		held := len(c.dlvs) + len(c.caps) + len(c.holds)
		if held > lim.MaxOwnersPerClient {
			s.fail("owners", "%s holds %d owners (%d deliveries, %d capabilities, %d holds), maxOwnersPerClient %d",
				name, held, len(c.dlvs), len(c.caps), len(c.holds), lim.MaxOwnersPerClient)
		}
		if held+len(c.results) > lim.MaxOwnersPerClient {
			s.fail("owners-results", "%s holds %d owners and %d admitted results, maxOwnersPerClient %d",
				name, held, len(c.results), lim.MaxOwnersPerClient)
		}
		want.Owners += c.owners() // the core's own definition
		want.ReplyCapabilities += len(c.caps)
		// Deliveries.
		for d, ref := range c.dlvs {
			where := fmt.Sprintf("%s %s", name, d)
			if d == 0 || uint64(d) >= c.dlvNext {
				s.fail("deliveries", "%s was never issued (next %d)", where, c.dlvNext)
			}
			if (ref.sub != nil) == (ref.call != nil) {
				s.fail("deliveries", "%s roots a subscription and a call, or neither", where)
				continue
			}
			root(where, ref.arts)
			if sub := ref.sub; sub != nil {
				if sub.conn != c || ref.msg == nil || !slices.Equal(ref.arts, ref.msg.arts) {
					s.fail("deliveries", "%s: message delivery of %s disagrees with it", where, sub.id)
				}
				subInflight[sub]++
				continue
			}
			cl := ref.call
			if ref.result {
				if cl.resDlv != d || cl.caller != c || c.calls[cl.id] != cl || cl.state != callReplied || !slices.Equal(ref.arts, cl.resArts) {
					s.fail("calls", "%s: result delivery of %s disagrees with its call (caller %s, state %d)", where, cl.id, s.names[cl.caller], cl.state)
				}
			} else {
				if cl.reqDlv != d || cl.svc.conn != c || cl.state < callDispatched || !slices.Equal(ref.arts, cl.arts) {
					s.fail("calls", "%s: request delivery of %s disagrees with its call (state %d)", where, cl.id, cl.state)
				}
				svcInflight[cl.svc]++
			}
		}
		for d, cl := range c.caps {
			if d == 0 || uint64(d) >= c.dlvNext || cl.reqDlv != d || cl.svc.conn != c || cl.state != callDispatched {
				s.fail("calls", "%s: capability %s of %s disagrees with its call (state %d)", name, d, cl.id, cl.state)
			}
			if cl.caller == nil {
				want.Calls++
			}
		}
		// Calls as a caller.
		if len(c.calls) > lim.MaxActiveCallsPerClient {
			s.fail("calls", "%s has %d active calls, maxActiveCallsPerClient %d", name, len(c.calls), lim.MaxActiveCallsPerClient)
		}
		want.Calls += len(c.calls)
		want.ActiveCalls += len(c.calls)
		for id, cl := range c.calls {
			if cl.id != id || cl.caller != c {
				s.fail("calls", "%s: call %s is filed as %s with caller %s", name, cl.id, id, s.names[cl.caller])
			}
			switch cl.state {
			case callQueued:
				if n := simCount(cl.svc.queue, cl); n != 1 || k.services[cl.svc.name] != cl.svc {
					s.fail("calls", "%s: queued %s is %d times in the queue of %s %s (registered: %v)",
						name, id, n, cl.svc.name, cl.svc.inc, k.services[cl.svc.name] == cl.svc)
				}
			case callDispatched:
				if cl.svc.conn.caps[cl.reqDlv] != cl {
					s.fail("calls", "%s: dispatched %s has no reply capability on %s: it can never end",
						name, id, s.names[cl.svc.conn])
				}
			case callReplied:
				inResults := simCount(c.results, cl)
				ref, delivered := c.dlvs[cl.resDlv]
				delivered = delivered && ref.call == cl && ref.result
				if inResults+simBtoi(delivered) != 1 {
					s.fail("calls", "%s: replied %s is %d times among results, delivered %v", name, id, inResults, delivered)
				}
			default:
				s.fail("calls", "%s: call %s in state %d", name, id, cl.state)
			}
		}
		for _, cl := range c.results {
			if cl.caller != c || cl.state != callReplied || c.calls[cl.id] != cl {
				s.fail("calls", "%s: admitted result of %s disagrees with its call", name, cl.id)
			}
			root(fmt.Sprintf("%s result of %s", name, cl.id), cl.resArts)
		}
		// Holds.
		for id, h := range c.holds {
			if h.id != id || h.conn != c || uint64(id) > c.holdNext {
				s.fail("holds", "%s: hold %s filed as %s on %s (next %d)", name, h.id, id, s.names[h.conn], c.holdNext)
			}
			a := h.art
			if h.writer {
				// In pool mode an artifact has no id, and is filed
				// nowhere, until the store hands it a slot.
				filed := k.artifacts[a.id] == a || k.pool && a.id == 0 && a.relPath == "" && !a.dead
				if a.writer != h || !filed || (a.state != artStaging && a.state != artSealing) {
					s.fail("holds", "%s: writer %s of %s disagrees with it (state %d)", name, id, a.id, a.state)
				}
				continue
			}
			roots[a]++
		}
		// Subscriptions and their byte budget.
		if len(c.subs) > lim.MaxSubscriptionsPerClient {
			s.fail("subs", "%s has %d subscriptions, maxSubscriptionsPerClient %d", name, len(c.subs), lim.MaxSubscriptionsPerClient)
		}
		queued := 0
		for _, sub := range c.subs {
			subCount++
			switch t := sub.topic; {
			case sub.conn != c || sub.closed:
				s.fail("subs", "%s: %s disagrees with its connection", name, sub.id)
			case t == nil && (!sub.await || k.topics[sub.name] != nil || simCount(k.waiting[sub.name], sub) != 1):
				s.fail("await", "%s: %s has no topic but is not one awaiting %s (await %v)", name, sub.id, sub.name, sub.await)
			case t != nil && (t.name != sub.name || k.topics[t.name] != t || simCount(t.subs, sub) != 1):
				s.fail("subs", "%s: %s disagrees with its topic", name, sub.id)
			}
			limit := sub.maxQueued
			if sub.mode == wire.ModeLatest {
				limit = 1
			}
			if len(sub.queue) > limit {
				s.fail("subs", "%s: %s queues %d, maxQueued %d", name, sub.id, len(sub.queue), sub.maxQueued)
			}
			for _, m := range sub.queue {
				root(fmt.Sprintf("%s queue of %s", name, sub.id), m.arts)
				if sub.mode == wire.ModeBounded {
					queued += m.size
				}
			}
			want.Queued += len(sub.queue)
		}
		if queued != c.queuedBytes {
			s.fail("queued-bytes", "%s: bounded queues hold %d bytes, counted %d", name, queued, c.queuedBytes)
		}
		if uint64(c.queuedBytes) > lim.MaxQueuedBytesPerClient {
			s.fail("queued-bytes", "%s: %d queued bytes, maxQueuedBytesPerClient %d", name, c.queuedBytes, lim.MaxQueuedBytesPerClient)
		}
		want.QueuedBytes += uint64(c.queuedBytes)
		for _, sv := range c.services {
			if k.services[sv.name] != sv || sv.conn != c {
				s.fail("services", "%s lists %s %s, which the registry does not", name, sv.name, sv.inc)
			}
		}
	}
	if subCount != k.subCount {
		s.fail("subs", "connections hold %d subscriptions, counted %d", subCount, k.subCount)
	}
	if k.subCount > lim.MaxSubscriptions {
		s.fail("subs", "%d subscriptions, maxSubscriptions %d", k.subCount, lim.MaxSubscriptions)
	}
	want.Subscriptions = subCount
	if want.PendingHello != k.pending {
		s.fail("conns", "%d connections await hello, counted %d", want.PendingHello, k.pending)
	}
	for id, rec := range k.clients {
		if c := rec.live; c != nil && (k.conns[c.id] != c || c.ident.ClientID != id || !c.helloDone || c.closing) {
			s.fail("conns", "client %s's live connection %s is not live", id, s.names[c])
		}
	}
	// Services.
	if len(k.services) > lim.MaxServices {
		s.fail("services", "%d services, maxServices %d", len(k.services), lim.MaxServices)
	}
	want.Services = len(k.services)
	for name, sv := range k.services {
		if sv.name != name || sv.removed || k.conns[sv.conn.id] != sv.conn || sv.conn.closing || simCount(sv.conn.services, sv) != 1 {
			s.fail("services", "%s %s disagrees with its connection %s", name, sv.inc, s.names[sv.conn])
		}
		if sv.inflight > sv.maxInFlight || len(sv.queue)+sv.inflight > sv.maxQueued+sv.maxInFlight {
			s.fail("inflight", "%s %s: %d queued and %d in flight, maxQueued %d maxInFlight %d",
				name, sv.inc, len(sv.queue), sv.inflight, sv.maxQueued, sv.maxInFlight)
		}
		for _, cl := range sv.queue {
			if cl.state != callQueued || cl.svc != sv || cl.caller == nil || cl.caller.calls[cl.id] != cl {
				s.fail("calls", "%s %s queues %s (state %d), which its caller does not hold", name, sv.inc, cl.id, cl.state)
				continue
			}
			root(fmt.Sprintf("queue of %s", name), cl.arts)
		}
		want.Queued += len(sv.queue)
		if _, ok := svcInflight[sv]; !ok {
			svcInflight[sv] = 0
		}
	}
	for sv, n := range svcInflight {
		if sv.inflight != n {
			s.fail("inflight", "%s %s counts %d in flight; %d request deliveries exist", sv.name, sv.inc, sv.inflight, n)
		}
	}
	for _, c := range k.conns {
		for _, sub := range c.subs {
			if _, ok := subInflight[sub]; !ok {
				subInflight[sub] = 0
			}
		}
	}
	for sub, n := range subInflight {
		if sub.inflight != n || n > sub.maxInFlight {
			s.fail("inflight", "%s counts %d in flight; %d deliveries exist, maxInFlight %d", sub.id, sub.inflight, n, sub.maxInFlight)
		}
	}
	// Topics and retained values.
	if len(k.topics) > lim.MaxTopics {
		s.fail("topics", "%d topics, maxTopics %d", len(k.topics), lim.MaxTopics)
	}
	var retained uint64
	topicSubs := 0
	for name, t := range k.topics {
		if t.name != name {
			s.fail("topics", "topic %s filed as %s", t.name, name)
		}
		topicSubs += len(t.subs)
		for _, sub := range t.subs {
			if sub.topic != t || k.conns[sub.conn.id] != sub.conn || simCount(sub.conn.subs, sub) != 1 {
				s.fail("subs", "topic %s lists %s, which its connection does not", name, sub.id)
			}
		}
		if m := t.latest; m != nil {
			if t.retained != wire.RetainLatest || m.seq > t.seq {
				s.fail("topics", "topic %s (retained %s, seq %d) retains seq %d", name, t.retained, t.seq, m.seq)
			}
			root("retained value of "+name, m.arts)
			retained += artifactBytes(m.arts)
		}
	}
	// Subscriptions awaiting a declaration: only names no topic has.
	for name, subs := range k.waiting {
		if len(subs) == 0 || k.topics[name] != nil {
			s.fail("await", "%d subscriptions await %s, declared: %v", len(subs), name, k.topics[name] != nil)
		}
		topicSubs += len(subs)
		for _, sub := range subs {
			if sub.topic != nil || !sub.await || sub.name != name || k.conns[sub.conn.id] != sub.conn || simCount(sub.conn.subs, sub) != 1 {
				s.fail("await", "%s awaits %s, which its connection or topic does not say", sub.id, name)
			}
		}
	}
	if topicSubs != k.subCount {
		s.fail("subs", "topics list %d subscriptions, counted %d", topicSubs, k.subCount)
	}
	// Presence: a topic's publishers are open connections, each once, and
	// each connection lists the live topics it published on.
	for name, t := range k.topics {
		for _, c := range t.publishers {
			if k.conns[c.id] != c || c.closing || simCount(t.publishers, c) != 1 || simCount(c.published, t) != 1 {
				s.fail("presence", "topic %s counts %s, which is not an open publisher of it", name, s.names[c])
			}
		}
		if t.lastPub != nil && simCount(t.publishers, t.lastPub) != 1 {
			s.fail("presence", "topic %s's last publisher %s is not one of its publishers", name, s.names[t.lastPub])
		}
	}
	for _, c := range k.conns {
		for _, t := range c.published {
			if k.topics[t.name] != t || simCount(t.publishers, c) != 1 {
				s.fail("presence", "%s lists topic %s %s, which does not count it", s.names[c], t.name, t.inc)
			}
		}
	}
	if retained != k.retainedBytes || retained > lim.MaxRetainedBytes {
		s.fail("retained-bytes", "retained values pin %d bytes, counted %d, maxRetainedBytes %d", retained, k.retainedBytes, lim.MaxRetainedBytes)
	}
	// Artifacts, their roots and the store.
	var store uint64
	if k.pool {
		for _, c := range k.conns {
			for _, h := range c.holds {
				if h.writer && h.art.id == 0 && !h.art.dead {
					store += h.art.size // being staged: reserved, not yet filed
				}
			}
		}
	}
	for id, a := range k.artifacts {
		if a.id != id {
			s.fail("roots", "%s filed as %s", a.id, id)
		}
		store += a.size
		if a.copyReserve {
			store += a.size
			if a.state != artSealing {
				s.fail("store-bytes", "%s reserves a seal copy in state %d", id, a.state)
			}
		}
		want.ArtifactRoots += a.roots
		switch a.state {
		case artSealed:
			want.SealedArtifacts++
			if a.roots <= 0 {
				s.fail("collected", "sealed %s has %d roots and was not collected", id, a.roots)
			}
			if a.roots != roots[a] {
				s.fail("roots", "%s counts %d roots; %d exist", id, a.roots, roots[a])
			}
			if a.writer != nil {
				s.fail("holds", "sealed %s still has a writer", id)
			}
			if s.files[a.relPath] != simSealed {
				s.fail("files", "sealed %s names %q, which is no sealed file", id, a.relPath)
			}
		case artStaging, artSealing:
			if a.roots != 0 || roots[a] != 0 {
				s.fail("roots", "unsealed %s (state %d) has %d roots, %d found", id, a.state, a.roots, roots[a])
			}
			if w := a.writer; w != nil && (k.conns[w.conn.id] != w.conn || w.conn.holds[w.id] != w) {
				s.fail("holds", "writer %s of %s is not held by a live connection", w.id, id)
			}
			if a.state == artStaging && a.writer == nil {
				s.fail("holds", "staging %s has no writer and was not abandoned", id)
			}
			if a.state == artSealing && !a.copyReserve {
				s.fail("store-bytes", "sealing %s reserves no copy", id)
			}
			if a.relPath != "" && s.files[a.relPath] != simStaging {
				s.fail("files", "unsealed %s names %q, which is no staging file", id, a.relPath)
			}
		default:
			s.fail("roots", "%s in state %d", id, a.state)
		}
	}
	for a, n := range roots {
		if k.artifacts[a.id] != a {
			s.fail("roots", "%s is named by %d roots but was collected or abandoned", a.id, n)
		}
	}
	if store != k.storeBytes || store > lim.MaxStoreBytes {
		s.fail("store-bytes", "artifacts and reservations take %d bytes, counted %d, maxStoreBytes %d", store, k.storeBytes, lim.MaxStoreBytes)
	}
	named := map[string]bool{}
	for _, a := range k.artifacts {
		if a.relPath != "" {
			named[a.relPath] = true
		}
	}
	for path, f := range s.files {
		if f.holdsArtifact() && !named[path] {
			s.fail("files", "%s is in the store but no artifact names it", path)
		}
	}
	if s.pool {
		// No slot is free, or handed to a writer, while a root of its
		// current generation exists: every live artifact names its slot at
		// the slot's current generation, in the state the artifact is in.
		for id, a := range k.artifacts {
			if a.relPath == "" {
				continue
			}
			if loc := s.slotLoc(a.relPath); loc.slot != uint64(id) || loc.gen != a.gen {
				s.fail("slots", "%s generation %d names %s, which is at generation %d", id, a.gen, a.relPath, loc.gen)
			}
		}
	}
	if got := simGaugesOf(k.snapshot()); got != want {
		s.fail("snapshot", "snapshot %+v, walk %+v", got, want)
	}
}

// simGauges are the snapshot's figures the walk recomputes.
type simGauges struct {
	Connections, PendingHello, Services, Topics, Subscriptions, Calls, ActiveCalls int
	Artifacts, SealedArtifacts, ArtifactRoots, Owners, ReplyCapabilities, Queued   int
	StoreBytes, RetainedBytes, QueuedBytes, ConnectionsTotal                       uint64
}

func simGaugesOf(st Stats) simGauges {
	return simGauges{st.Connections, st.PendingHello, st.Services, st.Topics, st.Subscriptions, st.Calls, st.ActiveCalls,
		st.Artifacts, st.SealedArtifacts, st.ArtifactRoots, st.Owners, st.ReplyCapabilities, st.Queued,
		st.StoreBytes, st.RetainedBytes, st.QueuedBytes, st.ConnectionsTotal}
}

func simCount[T comparable](xs []T, x T) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

func simBtoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkWakeups probes every parked writer: one with output it was never
// woken for would wait forever.
func (s *sim) checkWakeups() {
	for _, ss := range s.sessions {
		if !ss.parked {
			continue
		}
		if fr := s.pull(ss, 1); len(fr) > 0 {
			s.fail("wakeup", "%s's writer is parked without a wake-up while %s %s waits", ss.name, fr[0].hdr.Kind, fr[0].hdr.Op)
		}
	}
}

// idKeys lists the keys of a map keyed by a wire id, for comparing id sets.
func idKeys[M ~map[K]V, K ~uint64, V any](m M) []uint64 {
	var out []uint64
	for id := range m {
		out = append(out, uint64(id))
	}
	return out
}

// checkView compares what a quiet client knows of its own resources with
// the core: deliveries, capabilities, calls, subscriptions, services and
// holds. Quiet means every command was answered and the control lane is
// drained, so nothing that changed them is still in flight.
func (s *sim) checkView(ss *simSession) {
	c := ss.c
	if !ss.ready || c.closing || len(ss.pending) > 0 || c.ctrlHead != len(c.control) {
		return
	}
	diff := func(what string, view, core []uint64) {
		slices.Sort(view)
		slices.Sort(core)
		if !slices.Equal(view, core) {
			s.fail("client-view", "%s: the client holds %s %v, the core %v", ss.name, what, view, core)
		}
	}
	diff("deliveries", idKeys(ss.dlvs), idKeys(c.dlvs))
	diff("capabilities", idKeys(ss.caps), idKeys(c.caps))
	var v, k []uint64
	for id, cl := range ss.calls {
		if cl.accepted {
			v = append(v, uint64(id))
		}
	}
	diff("calls", v, idKeys(c.calls))
	for _, sub := range c.subs {
		k = append(k, uint64(sub.id))
	}
	diff("subscriptions", idKeys(ss.subs), k)
	// What the notices told the client of each subscription's topic and
	// publishers is the core's now.
	for _, sub := range c.subs {
		v := ss.subs[sub.id]
		if v == nil {
			continue
		}
		inc, pubs := wire.TopicInc(0), 0
		if sub.topic != nil {
			inc, pubs = sub.topic.inc, len(sub.topic.publishers)
		}
		if v.inc != inc {
			s.fail("await", "%s: the client has %s on %s %s, the core %s", ss.name, sub.id, sub.name, v.inc, inc)
		}
		if ss.presence && v.publishers != pubs {
			s.fail("presence", "%s: the client counts %d publishers of %s for %s, the core %d", ss.name, v.publishers, sub.name, sub.id, pubs)
		}
	}
	v, k = v[:0], k[:0]
	for _, inc := range ss.services {
		v = append(v, uint64(inc))
	}
	for _, sv := range c.services {
		k = append(k, uint64(sv.inc))
	}
	diff("services", v, k)
	v, k = v[:0], k[:0]
	for own, h := range ss.holds {
		v = append(v, own<<1|uint64(simBtoi(h.writer)))
	}
	for id, h := range c.holds {
		k = append(k, uint64(id)<<1|uint64(simBtoi(h.writer)))
	}
	diff("holds (own<<1|writer)", v, k)
}
