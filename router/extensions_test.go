package router_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Protocol 1.1: extensions negotiated at bus.hello (await-topic and
// presence), and the router's store id in the hello reply. Raw clients, so
// that every frame, and its order, is the test's to check.

// helloWith says hello asking for exts and returns the reply.
func (r *raw) helloWith(id string, exts ...string) wire.HelloOK {
	r.t.Helper()
	r.command(wire.OpHello, &wire.Hello{ClientID: id, ClientIncarnation: "inc-" + id, SupportedMajors: []uint32{1}, Extensions: exts})
	var ok wire.HelloOK
	if be := r.reply(&ok); be != nil {
		r.t.Fatalf("hello refused: %v", be)
	}
	return ok
}

// expect reads the next frame, which must be op, into body.
func (r *raw) expect(op wire.Op, body wire.Body) {
	r.t.Helper()
	if err := r.next(); err != nil {
		r.t.Fatalf("want %s: %v", op, err)
	}
	if r.env.Op != op || r.env.Kind == wire.KindReply {
		r.t.Fatalf("want %s, got %s %s", op, r.env.Kind, r.env.Op)
	}
	if err := r.env.DecodeBody(body); err != nil {
		r.t.Fatal(err)
	}
}

// ok sends a command and decodes its reply, failing on a refusal.
func (r *raw) ok(op wire.Op, body, reply wire.Body) {
	r.t.Helper()
	rawOK(r.t, r, op, body, reply)
}

// refused sends a command that must be refused with want.
func (r *raw) refused(op wire.Op, body wire.Body, want wire.ErrorCode) *wire.BusError {
	r.t.Helper()
	r.command(op, body)
	var v wire.Released // any value type: a refusal decodes none
	be := r.reply(&v)
	if be == nil || be.Code != want {
		r.t.Fatalf("%s: got %v, want %s", op, be, want)
	}
	return be
}

// topicNotice reads a subscription.topic notice for sub.
func (r *raw) topicNotice(sub wire.SubID, topic string, inc wire.Opt[wire.TopicInc]) {
	r.t.Helper()
	var n wire.SubscriptionTopic
	r.expect(wire.OpSubscriptionTopic, &n)
	if n.SubscriptionID != sub || n.Topic != topic || n.TopicIncarnation != inc {
		r.t.Fatalf("subscription.topic %+v, want %s %s %s", n, sub, topic, inc)
	}
}

// publishers reads a subscription.publishers notice for sub.
func (r *raw) publishers(sub wire.SubID, want uint32) {
	r.t.Helper()
	var n wire.SubscriptionPublishers
	r.expect(wire.OpSubscriptionPublishers, &n)
	if n.SubscriptionID != sub || n.Publishers != want {
		r.t.Fatalf("subscription.publishers %+v, want %s %d", n, sub, want)
	}
}

// message reads a topic.message of sub, checks its incarnation and
// sequence, and returns its delivery id.
func (r *raw) message(sub wire.SubID, inc wire.TopicInc, seq uint64) wire.DeliveryID {
	r.t.Helper()
	var m wire.TopicMessage
	r.expect(wire.OpTopicMessage, &m)
	if m.SubscriptionID != sub || m.TopicIncarnation != inc || m.TopicSequence != seq {
		r.t.Fatalf("topic.message %s %s seq %d, want %s %s seq %d", m.SubscriptionID, m.TopicIncarnation, m.TopicSequence, sub, inc, seq)
	}
	return m.DeliveryID
}

// quiet sends a command and checks its reply is the next frame: nothing
// (no notice the test did not expect) was queued before it.
func (r *raw) quiet() {
	r.t.Helper()
	r.ok(wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: 1 << 40}, &wire.Removed{})
}

func awaitSub(topic string) *wire.Subscribe {
	return &wire.Subscribe{Topic: topic, Mode: wire.ModeBounded, MaxQueued: 64, MaxInFlight: 16, AwaitTopic: wire.Some(true)}
}

// Row 5.2: the hello reply grants the known extensions asked for, in the
// hello's order, and names the store, whose directory is under the store
// root; a hello without extensions is a 1.0 client's and still accepted.
func TestHelloNegotiatesExtensions(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		old := newRaw(t, h.conn(""))
		ok := old.helloWith("old")
		if len(ok.Extensions) != 0 || ok.SelectedMajor != 1 || ok.SelectedMinor != wire.Minor || ok.StoreID != h.r.StoreID() {
			t.Fatalf("hello without extensions: %+v", ok)
		}
		if fi, err := os.Stat(filepath.Join(h.root, ok.StoreID.String())); err != nil || !fi.IsDir() {
			t.Fatalf("storeId %s names no directory under the store root: %v", ok.StoreID, err)
		}
		// A 1.0 client's envelopes (minor 0) are still accepted after hello;
		// a later minor is not.
		old.sendBytes(frameOf(`{"protocol":"flybus","major":1,"minor":0,"id":"msg-5","replyTo":null,"kind":"command","op":"topic.declare","body":{"name":"t.v10","retained":"none"},"attachments":[]}`))
		var d wire.DeclareOK
		if be := old.reply(&d); be != nil || !d.Declared {
			t.Fatalf("a 1.0 envelope after hello: %v %+v", be, d)
		}
		old.sendBytes(frameOf(`{"protocol":"flybus","major":1,"minor":3,"id":"msg-6","replyTo":null,"kind":"command","op":"topic.clear","body":{"name":"t.v10"},"attachments":[]}`))
		old.expectClosed(wire.ErrInvalidEnvelope)

		r := newRaw(t, h.conn(""))
		// Listing an extension twice is a malformed hello: refused, and the
		// connection still waits for a good one.
		r.command(wire.OpHello, &wire.Hello{ClientID: "new", ClientIncarnation: "inc-new", SupportedMajors: []uint32{1},
			Extensions: []string{wire.ExtPresence, wire.ExtPresence}})
		if be := r.reply(&wire.HelloOK{}); be == nil || be.Code != wire.ErrInvalidEnvelope {
			t.Fatalf("duplicate extension: %v", be)
		}
		ok = r.helloWith("new", wire.ExtPresence, "x-later.2", wire.ExtAwaitTopic)
		if want := []string{wire.ExtPresence, wire.ExtAwaitTopic}; !slices.Equal(ok.Extensions, want) || ok.StoreID != h.r.StoreID() {
			t.Fatalf("granted %v (store %s), want %v", ok.Extensions, ok.StoreID, want)
		}
	})
}

// Row 7.3 (await-topic): a member of an extension the connection did not
// ask for is an unknown member, and no subscription is made.
func TestExtensionMemberNeedsNegotiation(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.helloWith("plain", wire.ExtPresence)
		r.ok(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone}, &wire.DeclareOK{})
		for _, await := range []bool{true, false} {
			s := awaitSub("t")
			s.AwaitTopic = wire.Some(await)
			if be := r.refused(wire.OpSubscribe, s, wire.ErrInvalidEnvelope); !strings.Contains(be.Message, wire.ExtAwaitTopic) {
				t.Fatalf("the refusal does not name the extension: %v", be)
			}
		}
		if n := h.r.Stats().Subscriptions; n != 0 {
			t.Fatalf("%d subscriptions after refusals", n)
		}
		// Without the member, subscribing to an undeclared topic is NO_TOPIC
		// as in 1.0, also for a connection that has the extension.
		r.refused(wire.OpSubscribe, &wire.Subscribe{Topic: "nobody", Mode: wire.ModeLatest, MaxQueued: 1, MaxInFlight: 1}, wire.ErrNoTopic)
		w := newRaw(t, h.conn(""))
		w.helloWith("awaiter", wire.ExtAwaitTopic)
		w.refused(wire.OpSubscribe, &wire.Subscribe{Topic: "nobody", Mode: wire.ModeLatest, MaxQueued: 1, MaxInFlight: 1, AwaitTopic: wire.Some(false)}, wire.ErrNoTopic)
		r.quiet()
	})
}

// Row 7.3 (await-topic): a subscription made before the topic is declared
// receives every publication after the declaration, in order, and counts
// against the subscription limits while it waits.
func TestAwaitTopicSubscribeBeforeDeclare(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxSubscriptionsPerClient: 1}), func(t *testing.T, h *harness) {
		sub := newRaw(t, h.conn(""))
		sub.helloWith("sub", wire.ExtAwaitTopic)
		var ok wire.SubscribeOK
		sub.ok(wire.OpSubscribe, awaitSub("frames"), &ok)
		if ok.TopicIncarnation.Valid {
			t.Fatalf("an awaiting subscription has incarnation %s", ok.TopicIncarnation)
		}
		if s := h.r.Stats(); s.Subscriptions != 1 || s.Topics != 0 {
			t.Fatalf("while waiting: %d subscriptions, %d topics", s.Subscriptions, s.Topics)
		}
		sub.refused(wire.OpSubscribe, awaitSub("other"), wire.ErrQuotaExceeded)

		pub := newRaw(t, h.conn(""))
		pub.hello("pub")
		var d wire.DeclareOK
		pub.ok(wire.OpTopicDeclare, &wire.Declare{Name: "frames", Retained: wire.RetainNone}, &d)
		// More than the subscription's credits: the rest wait in its queue.
		const n = 48
		for i := range n {
			var p wire.PublishOK
			pub.ok(wire.OpPublish, &wire.Publish{Topic: "frames", Payload: wire.RawJSON(fmt.Sprintf(`{"i":%d}`, i))}, &p)
			if p.Subscribers != 1 {
				t.Fatalf("publication %d reached %d subscriptions", i+1, p.Subscribers)
			}
		}
		sub.topicNotice(ok.SubscriptionID, "frames", wire.Some(d.TopicIncarnation))
		var held []wire.DeliveryID
		for seq := uint64(1); seq <= n; seq++ {
			held = append(held, sub.message(ok.SubscriptionID, d.TopicIncarnation, seq))
			if len(held) == 16 {
				// The reply comes first (control lane), then the next messages.
				sub.ok(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: held}, &wire.Released{})
				held = held[:0]
			}
		}
		sub.quiet()
	})
}

// Row 7.3 (await-topic): deleting a topic leaves its awaiting
// subscriptions waiting (a plain one still refuses the deletion), and the
// next declaration resumes them with the new incarnation. Router shutdown
// closes a waiting subscription with a null incarnation.
func TestAwaitTopicAcrossDeleteAndRedeclare(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		sub := newRaw(t, h.conn(""))
		sub.helloWith("sub", wire.ExtAwaitTopic)
		mgr := newRaw(t, h.conn(""))
		mgr.hello("mgr")
		var d1, d2 wire.DeclareOK
		mgr.ok(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainLatest}, &d1)
		mgr.ok(wire.OpPublish, &wire.Publish{Topic: "t", Payload: wire.RawJSON(`{"n":0}`)}, &wire.PublishOK{})

		// Declared already: an awaiting subscription is an ordinary one,
		// with its replay.
		s := awaitSub("t")
		s.ReplayLatest = true
		var ok wire.SubscribeOK
		sub.ok(wire.OpSubscribe, s, &ok)
		if ok.TopicIncarnation != wire.Some(d1.TopicIncarnation) {
			t.Fatalf("subscribe on a declared topic: %+v", ok)
		}
		sub.message(ok.SubscriptionID, d1.TopicIncarnation, 1)

		plain := newRaw(t, h.conn(""))
		plain.hello("plain")
		var pok wire.SubscribeOK
		plain.ok(wire.OpSubscribe, &wire.Subscribe{Topic: "t", Mode: wire.ModeLatest, MaxQueued: 1, MaxInFlight: 1}, &pok)
		mgr.refused(wire.OpTopicDelete, &wire.TopicName{Name: "t"}, wire.ErrConflict)
		plain.ok(wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: pok.SubscriptionID}, &wire.Removed{})

		for round := range 2 {
			var del wire.Deleted
			mgr.ok(wire.OpTopicDelete, &wire.TopicName{Name: "t"}, &del)
			if !del.Deleted {
				t.Fatal("delete with only an awaiting subscription did not delete")
			}
			sub.topicNotice(ok.SubscriptionID, "t", wire.Opt[wire.TopicInc]{})
			if s := h.r.Stats(); s.Subscriptions != 1 || s.Topics != 0 {
				t.Fatalf("after delete: %d subscriptions, %d topics", s.Subscriptions, s.Topics)
			}
			if round == 1 {
				break
			}
			mgr.ok(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone}, &d2)
			if d2.TopicIncarnation == d1.TopicIncarnation {
				t.Fatal("redeclared with the same incarnation")
			}
			sub.topicNotice(ok.SubscriptionID, "t", wire.Some(d2.TopicIncarnation))
			mgr.ok(wire.OpPublish, &wire.Publish{Topic: "t", Payload: wire.RawJSON(`{"n":1}`)}, &wire.PublishOK{})
			sub.message(ok.SubscriptionID, d2.TopicIncarnation, 1)
		}
		sub.quiet()

		// Shutdown: subscription.closed with no incarnation, then closing.
		done := make(chan error, 1)
		go func() { done <- h.r.Shutdown(context.Background()) }()
		var closed wire.SubscriptionClosed
		sub.expect(wire.OpSubscriptionClosed, &closed)
		if closed.SubscriptionID != ok.SubscriptionID || closed.Topic != "t" || closed.TopicIncarnation.Valid || closed.Reason != "router-shutdown" {
			t.Fatalf("subscription.closed %+v", closed)
		}
		sub.expectClosed(wire.ErrRouterLost)
		for _, r := range []*raw{mgr, plain} {
			r.expectClosed(wire.ErrRouterLost)
		}
		sub.nc.Close()
		mgr.nc.Close()
		plain.nc.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// Row 9 (presence): a subscription hears its topic's count of live
// publishers right after its subscribe reply and on every change: a
// connection's first publication on the incarnation, its close. A
// connection that did not ask for presence hears nothing of it.
func TestPresenceCountsPublishers(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		sub := newRaw(t, h.conn(""))
		sub.helloWith("sub", wire.ExtPresence)
		other := newRaw(t, h.conn(""))
		other.hello("other")
		p1 := newRaw(t, h.conn(""))
		p1.hello("p1")
		p2 := newRaw(t, h.conn(""))
		p2.hello("p2")
		var d wire.DeclareOK
		p1.ok(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone}, &d)
		publish := func(p *raw) {
			p.ok(wire.OpPublish, &wire.Publish{Topic: "t", Payload: wire.RawJSON(`{}`)}, &wire.PublishOK{})
		}
		// p2 published before anyone subscribed: it counts.
		publish(p2)

		var ok, ook wire.SubscribeOK
		sub.ok(wire.OpSubscribe, &wire.Subscribe{Topic: "t", Mode: wire.ModeBounded, MaxQueued: 64, MaxInFlight: 16}, &ok)
		sub.publishers(ok.SubscriptionID, 1)
		other.ok(wire.OpSubscribe, &wire.Subscribe{Topic: "t", Mode: wire.ModeBounded, MaxQueued: 64, MaxInFlight: 16}, &ook)

		publish(p1)
		sub.publishers(ok.SubscriptionID, 2)
		sub.message(ok.SubscriptionID, d.TopicIncarnation, 2)
		publish(p1) // not a new publisher
		publish(p2)
		sub.message(ok.SubscriptionID, d.TopicIncarnation, 3)
		sub.message(ok.SubscriptionID, d.TopicIncarnation, 4)
		sub.quiet()

		p1.nc.Close()
		sub.publishers(ok.SubscriptionID, 1)
		p2.nc.Close()
		sub.publishers(ok.SubscriptionID, 0)
		if _, err := h.r.Await(ctxT(t), func(s router.Stats) bool { return s.Connections == 2 }); err != nil {
			t.Fatal(err)
		}
		sub.quiet()

		// The subscriber without presence got its messages and no notice.
		for seq := uint64(2); seq <= 4; seq++ {
			other.message(ook.SubscriptionID, d.TopicIncarnation, seq)
		}
		other.quiet()
	})
}

// Row 7.3 (await-topic): awaiting is no way around the subscribe grant.
func TestAwaitTopicChecksGrants(t *testing.T) {
	policy := router.ClosedPolicy().Client("sub", router.Grants{Subscribe: []router.Pattern{router.Exact("allowed")}})
	forEachTransport(t, router.Config{Policy: policy}, func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn("sub"))
		r.helloWith("sub", wire.ExtAwaitTopic)
		r.refused(wire.OpSubscribe, awaitSub("denied"), wire.ErrNotAuthorized)
		var ok wire.SubscribeOK
		r.ok(wire.OpSubscribe, awaitSub("allowed"), &ok)
		if ok.TopicIncarnation.Valid || h.r.Stats().Subscriptions != 1 {
			t.Fatalf("awaiting an allowed topic: %+v", ok)
		}
	})
}

// commandIn sends a command written in minor m.
func (r *raw) commandIn(m uint32, op wire.Op, body wire.Body) {
	r.t.Helper()
	r.id++
	b, err := wire.AppendFrame(nil, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: op, Minor: wire.Some(m)}, body, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sendBytes(b)
}

// Row 14.1: a hello is answered in the minor it was written in, with that
// minor's contract digest, and every later envelope to the connection is
// written in it: a client built against 1.1 (or 1.0) finds the version and
// digest it checks, and a hello of a later minor is answered in 1.2. A 1.1
// hello is not granted 1.2's quiet-consume.
func TestHelloAnswersInTheClientsMinor(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		d11, _ := wire.ContractDigestFor(1)
		for _, m := range []uint32{0, 1, 2, 3} {
			r := newRaw(t, h.conn(""))
			id := fmt.Sprintf("minor%d", m)
			r.commandIn(m, wire.OpHello, &wire.Hello{ClientID: id, ClientIncarnation: "inc-" + id, SupportedMajors: []uint32{1},
				Extensions: []string{wire.ExtPresence, wire.ExtQuietConsume}})
			var ok wire.HelloOK
			if be := r.reply(&ok); be != nil {
				t.Fatalf("minor %d: %v", m, be)
			}
			want, digest, exts := uint32(1), d11, "[presence]"
			if m >= 2 { // a hello in a later minor is answered in this router's
				want, digest, exts = 2, wire.ContractDigestValue(), "[presence quiet-consume]"
			}
			if r.env.Minor != want || ok.SelectedMinor != want || ok.ContractDigest != digest || fmt.Sprint(ok.Extensions) != exts {
				t.Fatalf("hello in minor %d: envelope minor %d, %+v", m, r.env.Minor, ok)
			}
			r.commandIn(want, wire.OpTopicDeclare, &wire.Declare{Name: "t." + id, Retained: wire.RetainNone})
			if be := r.reply(&wire.DeclareOK{}); be != nil || r.env.Minor != want {
				t.Fatalf("minor %d: declare %v in an envelope of minor %d", m, be, r.env.Minor)
			}
		}
	})
}

// Row 14.6: with quiet-consume, an accepted delivery.consumed has no
// reply (the next frame answers the next command) and still returns the
// credit (the next message is delivered); a refused one is answered with
// its error. Without it, consumed is answered as in 1.1.
func TestQuietConsume(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		pub := h.dial("pub")
		for _, quiet := range []bool{true, false} {
			r := newRaw(t, h.conn(""))
			id := fmt.Sprintf("quiet-%v", quiet)
			var exts []string
			if quiet {
				exts = []string{wire.ExtQuietConsume}
			}
			r.helloWith(id, exts...)
			topic := "t." + id
			r.command(wire.OpTopicDeclare, &wire.Declare{Name: topic, Retained: wire.RetainNone})
			if be := r.reply(&wire.DeclareOK{}); be != nil {
				t.Fatal(be)
			}
			r.command(wire.OpSubscribe, &wire.Subscribe{Topic: topic, Mode: wire.ModeLatest, MaxQueued: 1, MaxInFlight: 1})
			if be := r.reply(&wire.SubscribeOK{}); be != nil {
				t.Fatal(be)
			}
			var m wire.TopicMessage
			for n := 1; n <= 2; n++ {
				if _, err := pub.Publish(ctxT(t), topic, map[string]int{"n": n}); err != nil {
					t.Fatal(err)
				}
				r.expect(wire.OpTopicMessage, &m)
				r.command(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: []wire.DeliveryID{m.DeliveryID}})
				if !quiet {
					var rel wire.Released
					if be := r.reply(&rel); be != nil || rel.Released != 1 {
						t.Fatalf("consumed without quiet-consume: %v %+v", be, rel)
					}
				}
			}
			// The next frame answers this command: nothing answered the
			// quiet consumes before it.
			r.command(wire.OpTopicClear, &wire.TopicName{Name: topic})
			if be := r.reply(&wire.Cleared{}); be != nil || r.env.Op != wire.OpTopicClear {
				t.Fatalf("quiet %v: %v, op %s", quiet, be, r.env.Op)
			}
			// A consume of a delivery never issued is refused, quiet or not.
			r.command(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: []wire.DeliveryID{m.DeliveryID + 100}})
			if be := r.reply(&wire.Released{}); be == nil || be.Code != wire.ErrOwnerInvalid {
				t.Fatalf("quiet %v: a consume of a delivery never issued: %v", quiet, be)
			}
		}
	})
}
