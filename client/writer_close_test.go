package client

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// routerClient starts an embedded router with a store of the given mode
// and connects a client with cfg to it; both end with the test.
func routerClient(t *testing.T, mode store.Mode, cfg Config) (*router.Router, *Client) {
	t.Helper()
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: shmtest.Dir(t, "flybus-client-"), StoreMode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("router shutdown: %v", err)
		}
	})
	nc, err := r.ConnectInMemory()
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientID = "writer"
	c, err := Connect(testCtx(t, 10*time.Second), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return r, c
}

// waitReleased waits until the router holds no owner and no store bytes:
// the writer's release was applied. A round trip first, because the client
// sends releases ahead of ordinary commands and the router applies a
// connection's commands in order.
func waitReleased(t *testing.T, ctx context.Context, r *router.Router, c *Client) {
	t.Helper()
	if _, err := c.DeclareTopic(ctx, "after.release", wire.RetainNone); err != nil {
		t.Fatal(err)
	}
	for {
		s := r.Stats()
		if s.Owners == 0 && s.StoreBytes == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the writer's allocation was never released: %d owners, %d store bytes", s.Owners, s.StoreBytes)
		}
		runtime.Gosched()
	}
	if n := c.Stats().ControlErrors; n != 0 {
		t.Fatalf("%d control commands refused", n)
	}
}

// failingWriter allocates a writer, fills it, maps it and closes its
// staging file's descriptor behind its back, so that the writer's own
// close of it fails.
func failingWriter(t *testing.T, ctx context.Context, r *router.Router, c *Client) *ArtifactWriter {
	t.Helper()
	w, err := c.Allocate(ctx, 4096, "x/y")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("frame")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Bytes(); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Owners != 1 || s.StoreBytes == 0 {
		t.Fatalf("after Allocate: %d owners, %d store bytes", s.Owners, s.StoreBytes)
	}
	if err := w.st.f.Close(); err != nil {
		t.Fatal(err)
	}
	return w
}

// The writer gives its allocation back however it ends, even when closing
// its staging file fails: Close and the seals return that error, the
// router gets the release, and the safety net is disarmed.
func TestWriterReleasesWhenClosingItsFileFails(t *testing.T) {
	ends := map[string]func(ctx context.Context, w *ArtifactWriter) error{
		"Close": func(ctx context.Context, w *ArtifactWriter) error { return w.Close() },
		"Seal": func(ctx context.Context, w *ArtifactWriter) error {
			a, err := w.Seal(ctx)
			if a != nil {
				a.Close()
				return errors.New("Seal returned an artifact")
			}
			return err
		},
		"SealNoWait": func(ctx context.Context, w *ArtifactWriter) error {
			a, err := w.Seal(ctx, NoWait())
			if a != nil {
				a.Close()
				return errors.New("SealNoWait returned an artifact")
			}
			return err
		},
	}
	for _, mode := range []store.Mode{store.ModeFiles, store.ModePool} {
		for name, end := range ends {
			t.Run(mode.String()+"/"+name, func(t *testing.T) {
				noLeaks(t)
				ctx := testCtx(t, 10*time.Second)
				logs := newRecordHandler()
				r, c := routerClient(t, mode, Config{Logger: slog.New(logs)})
				w := failingWriter(t, ctx, r, c)
				err := end(ctx, w)
				if !errors.Is(err, os.ErrClosed) {
					t.Fatalf("%s: %v, want the failed close's error", name, err)
				}
				waitReleased(t, ctx, r, c)
				// The handle is closed: its safety net is stopped, so it
				// cannot release (or log) anything when collected.
				if n := c.cur.handles.open.Load(); n != 0 {
					t.Fatalf("%d handles still open: the writer's safety net is armed", n)
				}
				if err := w.Close(); err != nil {
					t.Fatalf("a second Close: %v", err)
				}
				if _, err := w.Write([]byte("x")); !errors.Is(err, ErrWriterDone) || strings.Contains(err.Error(), "sealed") {
					t.Fatalf("Write after the failed end: %v, want a closed writer", err)
				}
				dropAndCollect(t, ctx, r, c)
				if r := logs.wait(t, ctx); !strings.Contains(r.Message, "garbage-collected without Close") {
					t.Fatalf("log %q", r.Message)
				}
				logs.none(t)
			})
		}
	}
}

// dropAndCollect forgets a writer on purpose once the caller has let go of
// its own (its variable is dead by now), and collects until the safety net
// has released the forgotten one: a net still armed on the caller's writer
// would fire after the same collection.
func dropAndCollect(t *testing.T, ctx context.Context, r *router.Router, c *Client) {
	t.Helper()
	forgetWriter(t, ctx, c)
	for c.Stats().Leaked == 0 {
		if ctx.Err() != nil {
			t.Fatal("the forgotten writer was never collected")
		}
		runtime.GC()
		runtime.Gosched()
	}
	waitReleased(t, ctx, r, c)
	if n := c.Stats().Leaked; n != 1 {
		t.Fatalf("%d handles released by the safety net, want only the one forgotten", n)
	}
}

//go:noinline
func forgetWriter(t *testing.T, ctx context.Context, c *Client) {
	if _, err := c.Allocate(ctx, 16, "x/y"); err != nil {
		t.Fatal(err)
	}
}
