package bustest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// Ctx is a context that ends after ten seconds or with the test.
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond, yielding between checks, until it holds or the test's
// deadline passes. It is for router-internal effects that emit no frame
// (a credit returning), never a substitute for waiting on a reply.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// busError is the *wire.BusError in err, failing the test when there is
// none.
func busError(t *testing.T, err error) *wire.BusError {
	t.Helper()
	var be *wire.BusError
	if !errors.As(err, &be) {
		t.Fatalf("want a *wire.BusError, got %v", err)
	}
	return be
}

// Code and DispatchOf extract a bus error's code and dispatch, failing the
// test when err is not one.
func Code(t *testing.T, err error) wire.ErrorCode { t.Helper(); return busError(t, err).Code }

func DispatchOf(t *testing.T, err error) wire.Dispatch { t.Helper(); return busError(t, err).Dispatch }

// WantResultErr waits for p's result, which must fail with code c and
// dispatch d.
func WantResultErr(t *testing.T, ctx context.Context, what string, p *client.PendingCall, c wire.ErrorCode, d wire.Dispatch) {
	t.Helper()
	if _, err := p.Result(ctx); Code(t, err) != c || DispatchOf(t, err) != d {
		t.Fatalf("%s: got %v, want %s (%s)", what, err, c, d)
	}
}

// The helpers below run one SDK step whose error would end the test anyway,
// so that a scenario reads one line per step. Each takes the caller's
// context: a test with a longer deadline keeps it.

// OrFatal returns v, failing the test when err is set.
func OrFatal[T any](t *testing.T, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// step makes a test step of an SDK method that takes a context: it fails
// the test on an error.
func step[H, R any](method func(H, context.Context) (R, error)) func(*testing.T, context.Context, H) R {
	return func(t *testing.T, ctx context.Context, h H) R {
		t.Helper()
		r, err := method(h, ctx)
		return OrFatal(t, r, err)
	}
}

// step2 is step for a method that takes two arguments after its context.
func step2[H, A, B, R any](method func(H, context.Context, A, B) (R, error)) func(*testing.T, context.Context, H, A, B) R {
	return func(t *testing.T, ctx context.Context, h H, a A, b B) R {
		t.Helper()
		r, err := method(h, ctx, a, b)
		return OrFatal(t, r, err)
	}
}

var (
	NextMessage  = step((*client.Subscription).Next)
	NextRequest  = step((*client.Service).Next)
	MustResult   = step((*client.PendingCall).Result)
	MustMap      = step((*client.Artifact).View)
	MustAllocate = step2((*client.Client).Allocate)
)

func MustSubscribe(t *testing.T, ctx context.Context, c *client.Client, topic string, opts ...client.SubscribeOption) *client.Subscription {
	t.Helper()
	s, err := c.Subscribe(ctx, topic, opts...)
	return OrFatal(t, s, err)
}

func MustRegister(t *testing.T, ctx context.Context, c *client.Client, name string, opts ...client.ServiceOption) *client.Service {
	t.Helper()
	s, err := c.Register(ctx, name, opts...)
	return OrFatal(t, s, err)
}

// MustCall calls method of target, pinned to incarnation pin (0: any).
func MustCall(t *testing.T, ctx context.Context, c *client.Client, target string, pin wire.ServiceInc, method string, payload any, atts ...client.CallOption) *client.PendingCall {
	t.Helper()
	p, err := c.Call(ctx, target, method, payload, append([]client.CallOption{client.Pin(pin)}, atts...)...)
	return OrFatal(t, p, err)
}

// MustDeclare declares topic name through c.
func MustDeclare(t *testing.T, c *client.Client, name string, r wire.Retention) client.TopicInfo {
	t.Helper()
	info, err := c.DeclareTopic(Ctx(t), name, r)
	return OrFatal(t, info, err)
}

// DeclareAndSubscribe declares topic through pub and subscribes sub to it.
func DeclareAndSubscribe(t *testing.T, pub, sub *client.Client, topic string, r wire.Retention, opts ...client.SubscribeOption) *client.Subscription {
	t.Helper()
	MustDeclare(t, pub, topic, r)
	return MustSubscribe(t, Ctx(t), sub, topic, opts...)
}

// Barrier makes one round trip on c. Consumes and releases travel ahead of
// ordinary commands and the router handles a connection's commands in
// order, so anything c queued before is processed when this returns.
func Barrier(t *testing.T, c *client.Client) {
	t.Helper()
	MustDeclare(t, c, "test.barrier", wire.RetainNone)
}

// Attached is what carries named attachments: a message, a request or a
// result.
type Attached interface {
	Artifact(name string) (*client.Artifact, error)
}

func MustArtifact(t *testing.T, from Attached, name string) *client.Artifact {
	t.Helper()
	a, err := from.Artifact(name)
	return OrFatal(t, a, err)
}

// FrameBytes is n bytes of a pattern that seed varies.
func FrameBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// Produce allocates, fills through Write and seals.
func Produce(t *testing.T, c *client.Client, data []byte) *client.Artifact {
	t.Helper()
	ctx := Ctx(t)
	w := MustAllocate(t, ctx, c, int64(len(data)), "image/x-rgba")
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	a, err := w.Seal(ctx)
	return OrFatal(t, a, err)
}

// CheckBytes reads a's bytes, failing the test (what says which artifact)
// unless they are want.
func CheckBytes(t *testing.T, ctx context.Context, a *client.Artifact, want []byte, what string) {
	t.Helper()
	got, err := a.ReadAll(ctx)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s: %v, %d bytes, equal=%v", what, err, len(got), bytes.Equal(got, want))
	}
}

// PublishFrame publishes payload on topic with data attached as "frame",
// through an artifact that c lets go of once it is published.
func PublishFrame(t *testing.T, c *client.Client, topic string, payload any, data []byte) {
	t.Helper()
	a := Produce(t, c, data)
	defer a.Close()
	if _, err := c.Publish(Ctx(t), topic, payload, client.Attach("frame", a)); err != nil {
		t.Fatal(err)
	}
}

// ViewFrame reads a message's "frame" attachment through a view and closes
// the view, the artifact and the message.
func ViewFrame(t *testing.T, ctx context.Context, m *client.Message) []byte {
	t.Helper()
	defer m.Close()
	fa := MustArtifact(t, m, "frame")
	defer fa.Close()
	v := MustMap(t, ctx, fa)
	defer v.Close()
	return bytes.Clone(v.Bytes())
}
