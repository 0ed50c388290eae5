package router_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// byClient keys a client's details by its client id.
func byClient(x router.ClientDetail) string { return x.ID }

// detailsOf finds one entry of a Details list by key.
func detailsOf[T any](t *testing.T, list []T, key func(T) string, want string) T {
	t.Helper()
	for _, x := range list {
		if key(x) == want {
			return x
		}
	}
	t.Fatalf("no %q in %+v", want, list)
	var zero T
	return zero
}

func subDetail(t *testing.T, h *harness, topic string) router.SubscriptionDetail {
	return detailsOf(t, h.r.Details().Subscriptions, func(s router.SubscriptionDetail) string { return s.Topic }, topic)
}

// Details names what each topic, subscription, service and client holds:
// a slow latest subscriber shows what it coalesced and how long its queued
// frame has waited, a full bounded one the publications it refused, a
// full service queue its queued and in-flight calls, and a client near its
// owner budget how near.
func TestDetailsShowWhoHoldsWhat(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxOwnersPerClient: 8, ReservedOwnersPerClient: 2}), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod, slow, full, svcc, caller := h.dial("det-prod"), h.dial("det-slow"), h.dial("det-full"), h.dial("det-svc"), h.dial("det-caller")
		mustDeclare(t, prod, "det.frames", wire.RetainLatest)
		mustDeclare(t, prod, "det.events", wire.RetainNone)

		// A latest subscriber that never reads: the first frame is in
		// flight, the last one queued, the ones between coalesced.
		latest := mustSubscribe(t, ctx, slow, "det.frames", client.InFlight(1))
		defer latest.Close()
		data := frameBytes(7, 4096)
		for i := range 5 {
			publishFrame(t, prod, "det.frames", tick{N: i}, data)
			if i == 0 {
				waitFor(t, "the first frame delivered", func() bool { return subDetail(t, h, "det.frames").Delivered == 1 })
			}
		}
		waitFor(t, "the slow subscriber's age", func() bool { return subDetail(t, h, "det.frames").OldestQueuedAge > 0 })
		sd := subDetail(t, h, "det.frames")
		if sd.Client != "det-slow" || sd.Mode != "latest" || sd.Delivered != 1 || sd.InFlight != 1 || sd.Queued != 1 ||
			sd.Coalesced != 3 || sd.RefusedPublications != 0 {
			t.Fatalf("slow latest subscriber: %+v", sd)
		}

		// A bounded subscriber with room for one in flight and two queued:
		// the fourth publication is refused because of it.
		bounded := mustSubscribe(t, ctx, full, "det.events", client.Bounded(), client.Queued(2), client.InFlight(1))
		defer bounded.Close()
		for i := range 3 {
			if _, err := prod.Publish(ctx, "det.events", tick{N: i}); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				waitFor(t, "the first event delivered", func() bool { return subDetail(t, h, "det.events").Delivered == 1 })
			}
		}
		if _, err := prod.Publish(ctx, "det.events", tick{N: 3}); code(t, err) != wire.ErrBackpressure {
			t.Fatalf("a fourth publication to a full subscriber: %v", err)
		}
		sd = subDetail(t, h, "det.events")
		if sd.Mode != "bounded" || sd.Delivered != 1 || sd.InFlight != 1 || sd.Queued != 2 || sd.RefusedPublications != 1 {
			t.Fatalf("full bounded subscriber: %+v", sd)
		}

		d := h.r.Details()
		byName := func(x router.TopicDetail) string { return x.Name }
		if td := detailsOf(t, d.Topics, byName, "det.frames"); td.Retained != "latest" || td.Publications != 5 ||
			td.LastSequence != 5 || td.Subscribers != 1 || td.RetainedBytes != uint64(len(data)) {
			t.Fatalf("det.frames: %+v", td)
		}
		if td := detailsOf(t, d.Topics, byName, "det.events"); td.Retained != "none" || td.Publications != 3 ||
			td.LastSequence != 3 || td.Subscribers != 1 || td.RetainedBytes != 0 {
			t.Fatalf("det.events: %+v", td)
		}

		// A service with one call in flight (its request not yet closed)
		// and one queued; a request closed without a reply fails its call.
		svc := mustRegister(t, ctx, svcc, "det.svc", client.Queued(1), client.InFlight(1))
		defer svc.Close()
		first := mustCall(t, ctx, caller, "det.svc", 0, "M", tick{N: 1})
		req := nextRequest(t, ctx, svc)
		second := mustCall(t, ctx, caller, "det.svc", 0, "M", tick{N: 2})
		if _, err := caller.Call(ctx, "det.svc", "M", tick{N: 3}); code(t, err) != wire.ErrBackpressure {
			t.Fatalf("a call to a full service queue: %v", err)
		}
		byService := func(x router.ServiceDetail) string { return x.Name }
		waitFor(t, "the second call queued", func() bool {
			return detailsOf(t, h.r.Details().Services, byService, "det.svc").Queued == 1
		})
		if sv := detailsOf(t, h.r.Details().Services, byService, "det.svc"); sv.Client != "det-svc" || sv.InFlight != 1 ||
			sv.Calls != 2 || sv.FailedCalls != 0 || sv.Incarnation != svc.Incarnation().String() {
			t.Fatalf("det.svc: %+v", sv)
		}
		req.Close() // no reply: the call fails
		if _, err := first.Result(ctx); code(t, err) != wire.ErrCallGone {
			t.Fatalf("the first call after its request closed unanswered: %v", err)
		}
		waitFor(t, "the failed call counted", func() bool {
			sv := detailsOf(t, h.r.Details().Services, byService, "det.svc")
			return sv.FailedCalls == 1 && sv.InFlight == 1 && sv.Queued == 0
		})
		if _, err := nextRequest(t, ctx, svc).Reply(ctx, tick{N: 20}); err != nil {
			t.Fatal(err)
		}
		mustResult(t, ctx, second).Close()

		// A client holding six artifacts of a budget of eight.
		holder := h.dial("det-holder")
		var held []*client.Artifact
		for range 6 {
			held = append(held, produce(t, holder, data[:100]))
		}
		cd := detailsOf(t, h.r.Details().Clients, byClient, "det-holder")
		if cd.Owners != 6 || cd.OwnerBudget != 8 || cd.ActiveCalls != 0 || cd.Connection == "" || cd.Incarnation == "" {
			t.Fatalf("det-holder: %+v", cd)
		}
		if cd.FramesRead == 0 || cd.FramesWritten == 0 || cd.BytesRead <= cd.FramesRead*4 || cd.BytesWritten <= cd.FramesWritten*4 {
			t.Fatalf("det-holder's traffic: %+v", cd)
		}
		for _, a := range held {
			a.Close()
		}
		cs := detailsOf(t, h.r.Details().Clients, byClient, "det-slow")
		if cs.Owners != 1 { // the delivery in flight
			t.Fatalf("det-slow: %+v", cs)
		}

		st := h.r.Details().Store
		if st.Mode != h.mode.String() || st.LeaseSeals == 0 || st.CopySeals != 0 {
			t.Fatalf("store: %+v", st)
		}
		if h.mode.String() == "pool" && st.Slots == 0 {
			t.Fatalf("pool store without slots: %+v", st)
		}
	})
}

func TestRatesBetweenSnapshots(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := router.Details{Taken: t0,
		Topics: []router.TopicDetail{{Name: "a", Incarnation: "top-1", Publications: 100}, {Name: "b", Incarnation: "top-2", Publications: 50},
			{Name: "gone", Incarnation: "top-3", Publications: 7}},
		Subscriptions: []router.SubscriptionDetail{{ID: "sub-1", Delivered: 10}}}
	cur := router.Details{Taken: t0.Add(2 * time.Second),
		Topics: []router.TopicDetail{{Name: "a", Incarnation: "top-1", Publications: 220}, {Name: "b", Incarnation: "top-9", Publications: 6},
			{Name: "new", Incarnation: "top-10", Publications: 4}},
		Subscriptions: []router.SubscriptionDetail{{ID: "sub-1", Delivered: 70}, {ID: "sub-2", Delivered: 8}}}
	r := cur.RatesSince(prev)
	want := map[string]float64{"a": 60, "b": 3, "new": 2}
	if r.Interval != 2*time.Second || len(r.Publications) != len(want) {
		t.Fatalf("rates %+v", r)
	}
	for k, v := range want {
		if r.Publications[k] != v {
			t.Errorf("publications/s of %s: %v, want %v", k, r.Publications[k], v)
		}
	}
	if r.Deliveries["sub-1"] != 30 || r.Deliveries["sub-2"] != 4 || len(r.Deliveries) != 2 {
		t.Errorf("deliveries/s: %v", r.Deliveries)
	}
	if z := cur.RatesSince(cur); len(z.Publications) != 0 || z.Interval != 0 {
		t.Errorf("rates over no time: %+v", z)
	}
}

// Every command is timed through admission, and a frame that waited behind
// a stalled reader's writes shows a lane wait at least as long as the
// stall: the frame was readied before the stall began (its publication was
// answered) and its write could begin only after the reader resumed.
func TestLatenciesTimeAdmissionAndLaneWait(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, r := h.rawBoundedSubscriber("lat-pub", "lat-slow", "lat")
		l := wire.DefaultLimits()
		admitted := h.r.Latencies().Admission.Count
		if admitted < 4 { // two hellos, a declare, a subscribe
			t.Fatalf("%d commands timed, want at least 4", admitted)
		}
		// Deliveries of about 60 KB: more than either transport buffers,
		// so the subscriber's writes block until it reads.
		fill := strings.Repeat("x", 60000)
		n := l.MaxBoundedInFlight
		for i := range n {
			if _, err := pub.Publish(ctx, "lat", wire.RawJSON(`{"i":`+strconv.Itoa(i)+`,"fill":"`+fill+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
		if got := h.r.Latencies().Admission.Count - admitted; got < uint64(n) {
			t.Errorf("%d commands timed during %d publications", got, n)
		}
		const stall = 20 * time.Millisecond
		time.Sleep(stall) // the stall itself, not a wait for something to happen
		for i := range n {
			if err := r.next(); err != nil || r.env.Op != wire.OpTopicMessage {
				t.Fatalf("delivery %d: %v %s", i, err, r.env.Op)
			}
		}
		// A wait of at least the stall (20 ms) lands above the 16.384 ms
		// bucket; the longest bound says which bucket the longest wait is in.
		lw := h.r.Latencies().LaneWait
		if lw.Count == 0 || lw.Quantile(1) < 32768*time.Microsecond {
			t.Fatalf("lane wait: %d batches, the longest at most %v; want one above %v", lw.Count, lw.Quantile(1), router.BucketBound(14))
		}
		if d := h.r.Details().Latencies; d.Admission.Count < admitted+uint64(n) || d.LaneWait.Count < lw.Count {
			t.Errorf("Details carries admission %d, lane wait %d", d.Admission.Count, d.LaneWait.Count)
		}
	})
}
