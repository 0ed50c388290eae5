package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// next takes one message and checks its payload's n.
func nextN(t *testing.T, ctx context.Context, s *client.Subscription, want int) {
	t.Helper()
	m, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("message %d: %v", want, err)
	}
	defer m.Close()
	var p struct{ N int }
	if err := m.Decode(&p); err != nil || p.N != want {
		t.Fatalf("got %+v (%v), want n=%d", p, err, want)
	}
}

// A consumer may start before its producer: a subscription with
// AwaitTopic is made before the topic exists, receives every publication
// after the declaration (the retained value with Replay), and outlives a
// delete, awaiting the next declaration.
func TestAwaitTopicAnyStartOrder(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		cons, prod := h.Dial("cons"), h.Dial("prod")
		if _, err := cons.Subscribe(ctx, "late", client.Bounded()); bustest.Code(t, err) != wire.ErrNoTopic {
			t.Fatalf("plain subscribe to an undeclared topic: %v, want NO_TOPIC", err)
		}
		s := bustest.MustSubscribe(t, ctx, cons, "late", client.Bounded(), client.AwaitTopic(), client.Replay())
		if inc := s.TopicIncarnation(); inc != 0 {
			t.Fatalf("awaiting subscription has incarnation %v", inc)
		}
		info := bustest.MustDeclare(t, prod, "late", wire.RetainLatest)
		for n := 1; n <= 3; n++ {
			if _, err := prod.Publish(ctx, "late", map[string]int{"n": n}); err != nil {
				t.Fatal(err)
			}
		}
		for n := 1; n <= 3; n++ {
			nextN(t, ctx, s, n)
		}
		if inc := s.TopicIncarnation(); inc != info.Incarnation {
			t.Fatalf("incarnation %v after the declaration, want %v", inc, info.Incarnation)
		}
		// Deleted while subscribed: refused for a plain subscriber, but an
		// awaiting one waits for the topic to come back.
		if _, err := prod.DeleteTopic(ctx, "late"); err != nil {
			t.Fatalf("delete with only an awaiting subscriber: %v", err)
		}
		bustest.WaitFor(t, "the subscription to await again", func() bool { return s.TopicIncarnation() == 0 })
		info2 := bustest.MustDeclare(t, prod, "late", wire.RetainNone)
		if _, err := prod.Publish(ctx, "late", map[string]int{"n": 4}); err != nil {
			t.Fatal(err)
		}
		nextN(t, ctx, s, 4)
		if inc := s.TopicIncarnation(); inc != info2.Incarnation || inc == info.Incarnation {
			t.Fatalf("incarnation %v after the redeclaration, want the new %v", inc, info2.Incarnation)
		}
		s.Close()
		h.Await("the subscription to go", func(st router.Stats) bool { return st.Subscriptions == 0 })
	})
}

// A subscription knows how many live publishers its topic has, without
// polling: the count arrives after the subscribe, and changes when a
// producer first publishes and when it goes away.
func TestPresenceCountsLivePublishers(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		cons, prod := h.Dial("cons"), h.Dial("prod")
		bustest.MustDeclare(t, prod, "pres", wire.RetainNone)
		s := bustest.MustSubscribe(t, ctx, cons, "pres")
		waitPublishers(t, s, 0)
		if _, err := prod.Publish(ctx, "pres", nil); err != nil {
			t.Fatal(err)
		}
		waitPublishers(t, s, 1)
		second := h.Dial("prod2")
		if _, err := second.Publish(ctx, "pres", nil); err != nil {
			t.Fatal(err)
		}
		waitPublishers(t, s, 2)
		prod.Close()
		waitPublishers(t, s, 1)
		second.Close()
		waitPublishers(t, s, 0) // the last producer left: silence is not slowness
	})
}

func waitPublishers(t *testing.T, s *client.Subscription, want int) {
	t.Helper()
	awaitChange(t, "publishers", s.Publishers, want)
}

// A StoreRoot that does not hold the router's store is refused at
// connect, naming both, not at the first artifact.
func TestConnectChecksTheStoreRoot(t *testing.T) {
	h := bustest.LeakChecked(t, bustest.Open(), true, 5*time.Second)
	ctx := bustest.Ctx(t)
	wrong := t.TempDir()
	_, err := client.ConnectUnix(ctx, h.Socket(), client.Config{ClientID: "c", StoreRoot: wrong})
	if !errors.Is(err, client.ErrNoStoreRoot) || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), "store-") {
		t.Fatalf("connect with a wrong store root: %v", err)
	}
	c, err := client.ConnectUnix(ctx, h.Socket(), client.Config{ClientID: "c2", StoreRoot: h.Root()})
	if err != nil {
		t.Fatalf("connect with the right one: %v", err)
	}
	defer c.Close()
	if _, err := os.Stat(filepath.Join(h.Root(), c.Info().StoreID.String())); err != nil {
		t.Fatalf("Info().StoreID %v is not under the root: %v", c.Info().StoreID, err)
	}
}
