package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
)

// sealBytes allocates, fills and seals data, with its digest if withDigest.
func sealBytes(t testing.TB, ctx context.Context, c *Client, data []byte, withDigest bool) *Artifact {
	t.Helper()
	w, err := c.Allocate(ctx, int64(len(data)), "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	var a *Artifact
	if withDigest {
		sum := sha256.Sum256(data)
		a, err = w.Seal(ctx, Digest(hex.EncodeToString(sum[:])))
	} else {
		a, err = w.Seal(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tamper changes byte off of a's sealed file the way its owning user could:
// make the 0444 file writable again and write through a new descriptor.
func tamper(t *testing.T, ctx context.Context, r *router.Router, a *Artifact, off int64) {
	t.Helper()
	f, loc, err := a.openFile(ctx, a.Ref())
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	path := filepath.Join(r.StoreDir(), loc.RelativePath)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o444 {
		t.Fatalf("sealed file %s has mode %v, want 0444", path, fi.Mode().Perm())
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte{0xA5}, off); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// frameData is size deterministic bytes, none of them 0xA5 at off, so a
// tamper always changes them.
func frameData(size int) []byte {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
		if data[i] == 0xA5 {
			data[i] = 0
		}
	}
	return data
}

var verifyModes = []store.Mode{store.ModeFiles, store.ModePool}

// A view of an artifact sealed with a digest verifies until its file is
// changed behind the router's back; then the same view, and a new one,
// fail with ErrDigestMismatch naming the artifact and both digests.
func TestViewVerifyCatchesATamperedArtifact(t *testing.T) {
	for _, mode := range verifyModes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testCtx(t, 10*time.Second)
			r, c := routerClient(t, mode, Config{})
			data := frameData(64 << 10)
			a := sealBytes(t, ctx, c, data, true)
			defer a.Close()
			v, err := a.View(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if err := v.Verify(); err != nil {
				t.Fatalf("Verify of an untouched artifact: %v", err)
			}

			tamper(t, ctx, r, a, 1000)
			if got := v.Bytes()[1000]; got != 0xA5 {
				t.Fatalf("the view shows %#x at the tampered offset: the test changed another file", got)
			}
			err = v.Verify()
			if !errors.Is(err, ErrDigestMismatch) || errors.Is(err, ErrNoDigest) {
				t.Fatalf("Verify after tampering: %v, want ErrDigestMismatch", err)

			}
			want := hex.EncodeToString(func() []byte { s := sha256.Sum256(data); return s[:] }())
			got := hex.EncodeToString(func() []byte { s := sha256.Sum256(v.Bytes()); return s[:] }())
			for _, s := range []string{a.Ref().ArtifactID.String(), want, got} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %s", err, s)
				}
			}

			w, err := a.View(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Verify(); !errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("Verify of a new view: %v, want ErrDigestMismatch", err)
			}
		})
	}
}

// An artifact sealed without a digest has nothing to verify against: the
// error says so, and is not a mismatch.
func TestViewVerifyWithoutDigest(t *testing.T) {
	for _, mode := range verifyModes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testCtx(t, 10*time.Second)
			_, c := routerClient(t, mode, Config{})
			a := sealBytes(t, ctx, c, frameData(4096), false)
			defer a.Close()
			if a.Ref().Digest.Valid {
				t.Fatal("the router gave a digest to an artifact sealed without one")
			}
			v, err := a.View(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			err = v.Verify()
			if !errors.Is(err, ErrNoDigest) || errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("Verify: %v, want ErrNoDigest", err)
			}
			if !strings.Contains(err.Error(), "sealed without a digest") || !strings.Contains(err.Error(), a.Ref().ArtifactID.String()) {
				t.Fatalf("error %q does not say which artifact lacks a digest", err)
			}
			v.Close()
			if err := v.Verify(); !errors.Is(err, ErrHandleClosed) {
				t.Fatalf("Verify after Close: %v, want ErrHandleClosed", err)
			}
		})
	}
}

// With Config.VerifyReads every View and ReadAll is checked: a changed
// artifact, or one without a digest, yields no view or bytes, and a failed
// view keeps no hold on its owner.
func TestVerifyReadsConfig(t *testing.T) {
	for _, mode := range verifyModes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testCtx(t, 10*time.Second)
			r, c := routerClient(t, mode, Config{VerifyReads: true})
			data := frameData(8192)
			a := sealBytes(t, ctx, c, data, true)
			v, err := a.View(ctx)
			if err != nil {
				t.Fatalf("View of an untouched artifact: %v", err)
			}
			if !bytes.Equal(v.Bytes(), data) {
				t.Fatal("the view shows other bytes")
			}
			v.Close()
			if got, err := a.ReadAll(ctx); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ReadAll of an untouched artifact: %v", err)
			}

			tamper(t, ctx, r, a, 0)
			if v, err := a.View(ctx); !errors.Is(err, ErrDigestMismatch) || v != nil {
				t.Fatalf("View of a changed artifact: view %t, %v; want no view and ErrDigestMismatch", v != nil, err)
			}
			if got, err := a.ReadAll(ctx); !errors.Is(err, ErrDigestMismatch) || got != nil {
				t.Fatalf("ReadAll of a changed artifact: %d bytes, %v; want none and ErrDigestMismatch", len(got), err)
			}
			b := sealBytes(t, ctx, c, data, false)
			if v, err := b.View(ctx); !errors.Is(err, ErrNoDigest) || v != nil {
				t.Fatalf("View of an artifact without a digest: view %t, %v; want no view and ErrNoDigest", v != nil, err)
			}
			if got, err := b.ReadAll(ctx); !errors.Is(err, ErrNoDigest) || got != nil {
				t.Fatalf("ReadAll of an artifact without a digest: %d bytes, %v; want none and ErrNoDigest", len(got), err)
			}
			// The failed views were closed: only the two artifacts are
			// open, and closing them releases everything.
			if n := c.cur.handles.open.Load(); n != 2 {
				t.Fatalf("%d handles open, want the 2 artifacts", n)
			}
			a.Close()
			b.Close()
			waitReleased(t, ctx, r, c)
			if n := c.Stats().Leaked; n != 0 {
				t.Fatalf("%d handles released by the safety net", n)
			}
		})
	}
}

// BenchmarkViewVerify is the cost of the check on a 640x480 RGBA frame:
// View and Close of a slot this connection keeps mapped (pool mode, the
// default), without and with Verify; the difference is the SHA-256 of the
// frame.
func BenchmarkViewVerify(b *testing.B) {
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: shmtest.BenchDir(b, "flybus-client-")})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	nc, err := r.ConnectInMemory()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c, err := Connect(ctx, nc, Config{ClientID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	a := sealBytes(b, ctx, c, frameData(shmtest.FrameSize), true)
	defer a.Close()
	for _, verify := range []bool{false, true} {
		name := "view"
		if verify {
			name = "view+verify"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(shmtest.FrameSize)
			for b.Loop() {
				v, err := a.View(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if verify {
					err = v.Verify()
				}
				v.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
