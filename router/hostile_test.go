package router_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/internal/wiretest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// A full router tells a refused client why, on both transports: the
// in-memory connect fails with the code, and a socket gets
// connection.closing before it is closed, even when the client has already
// sent its hello (and its write may fail because the router closed first).
func TestFullRouterRefusalSaysWhy(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxClients: 1}), func(t *testing.T, h *harness) {
		h.dial("first")
		if !h.unix {
			_, err := h.r.ConnectInMemory()
			if err == nil || code(t, err) != wire.ErrQuotaExceeded || !strings.Contains(err.Error(), "maxClients") {
				t.Fatalf("second connection: %v, want QUOTA_EXCEEDED naming maxClients", err)
			}
			return
		}
		r := newRaw(t, h.conn(""))
		_ = wire.WriteFull(r.nc, frameOf(helloJSON))
		if err := r.next(); err != nil || r.env.Op != wire.OpConnectionClosing {
			t.Fatalf("the refused socket read %v %v, want connection.closing", r.env.Op, err)
		}
		var cc wire.ConnectionClosing
		if err := r.env.DecodeBody(&cc); err != nil || cc.Code != wire.ErrQuotaExceeded || !strings.Contains(cc.Message, "maxClients") {
			t.Fatalf("closing notice %+v (%v), want QUOTA_EXCEEDED naming maxClients", cc, err)
		}
	})
}

// A flood of connections that never say hello cannot keep out a client
// that does: pending connections have their own bound, and past it the
// oldest is closed (with connection.closing) to make room. Established
// clients are never touched.
func TestSilentFloodCannotLockOutPromptClients(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxClients = 8
	cfg := router.Config{Policy: router.OpenPolicy(), Limits: l, MaxPendingHello: 2, HelloTimeout: time.Minute}
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		var established []*client.Client
		for _, id := range []string{"a", "b", "c"} {
			established = append(established, h.dial(id))
		}
		const floodSize = 20
		var flood []net.Conn
		for range floodSize {
			if h.unix {
				flood = append(flood, h.conn(""))
				continue
			}
			// In memory a connect the router refuses fails at once.
			if nc, err := h.r.ConnectInMemory(); err == nil {
				flood = append(flood, nc)
			}
		}
		// All but two were closed and told why, not left to hold a slot
		// until the hello timeout. Which two are left depends on how the
		// router interleaved them, so every one is read at once.
		closed := make(chan wire.ErrorCode, len(flood))
		for _, nc := range flood {
			t.Cleanup(func() { nc.Close() })
			go func() { closed <- closingCode(nc) }()
		}
		for range len(flood) - 2 {
			if c := <-closed; c != wire.ErrQuotaExceeded {
				t.Fatalf("a silent connection was closed with %v, want QUOTA_EXCEEDED", c)
			}
		}
		settle(t, h, "the flood trimmed to the pending bound", func(s router.Stats) bool {
			return s.PendingHello == 2 && s.Connections == 3+2
		})

		prompt := h.dial("prompt")
		if prompt.Err() != nil {
			t.Fatal(prompt.Err())
		}
		for _, c := range append(established, prompt) {
			barrier(t, c)
		}
		// The prompt client took the place of the oldest silent one.
		settle(t, h, "the prompt client in the place of a silent one", func(s router.Stats) bool {
			return s.Connections == 4+1 && s.PendingHello == 1
		})
	})
}

// closingCode reads nc to its end and returns the code of the
// connection.closing notice it carried, or 0.
func closingCode(nc net.Conn) wire.ErrorCode {
	var code wire.ErrorCode
	for env, err := range wiretest.NewReader(nc).Envelopes() {
		if err == nil && env.Op == wire.OpConnectionClosing {
			var cc wire.ConnectionClosing
			if env.DecodeBody(&cc) == nil {
				code = cc.Code
			}
		}
	}
	return code
}

// A frame whose first byte has arrived must be complete within
// FrameTimeout: the connection is closed with connection.closing, as a
// protocol violation. This holds for a cut length prefix and a cut body.
func TestHalfSentFrameIsClosed(t *testing.T) {
	cfg := router.Config{Policy: router.OpenPolicy(), FrameTimeout: 50 * time.Millisecond, HelloTimeout: time.Minute}
	frame := frameOf(`{"protocol":"flybus","major":1,"minor":0,"id":"msg-2","replyTo":null,"kind":"command","op":"topic.declare","body":{"name":"t","retained":"none"},"attachments":[]}`)
	for name, part := range map[string][]byte{
		"LengthPrefix": frame[:2],
		"Body":         frame[:len(frame)/2],
	} {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, cfg, func(t *testing.T, h *harness) {
				r := newRaw(t, h.conn(""))
				r.hello("half")
				r.sendBytes(part)
				r.expectClosed(wire.ErrInvalidEnvelope)
				if s := h.r.Stats(); s.ProtocolCloses != 1 {
					t.Fatalf("protocol closes: %+v", s)
				}
			})
		})
	}
}

// Between frames a connection may stay idle for much longer than
// FrameTimeout, even after a frame that arrived in pieces armed the bound,
// and it works afterwards.
func TestIdleConnectionOutlivesFrameTimeout(t *testing.T) {
	const bound = 250 * time.Millisecond
	cfg := router.Config{Policy: router.OpenPolicy(), FrameTimeout: bound, HelloTimeout: time.Minute}
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("idle")
		declare := func(topic string, split bool) {
			t.Helper()
			r.id++
			b, err := wire.AppendFrame(nil, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpTopicDeclare},
				&wire.Declare{Name: topic, Retained: wire.RetainNone}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if split {
				// Two writes a moment apart, well within the bound, so the
				// router most likely reads the frame in two pieces and arms
				// the deadline (this cannot be observed; either way the
				// frame must be accepted).
				r.sendBytes(b[:7])
				time.Sleep(5 * time.Millisecond)
				b = b[7:]
			}
			r.sendBytes(b)
			if be := r.reply(&wire.DeclareOK{}); be != nil {
				t.Fatal(be)
			}
		}
		declare("first", true)
		// Idle for several bounds: what is under test is that time passing
		// between frames closes nothing, so the test has to let it pass.
		<-time.After(4 * bound)
		declare("second", false)
		<-time.After(4 * bound)
		declare("third", true)
		if s := h.r.Stats(); s.ProtocolCloses != 0 || s.Connections != 1 {
			t.Fatalf("the idle connection was closed: %+v", s)
		}
	})
}

// logRecorder is a slog handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records)
}

// find returns the attributes of the first record with msg whose
// attributes include every pair of want, among those after the first skip.
func (l *logRecorder) find(skip int, level slog.Level, msg string, want map[string]string) (map[string]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records[min(skip, len(l.records)):] {
		if r.Level != level || r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		ok := true
		for k, v := range want {
			ok = ok && attrs[k] == v
		}
		if ok {
			return attrs, true
		}
	}
	return nil, false
}

// Closing a client for a protocol violation is logged at info with the
// reason and the connection's and client's ids, for envelope-level errors
// the core finds and frame-level ones the reader finds.
func TestProtocolViolationIsLogged(t *testing.T) {
	rec := &logRecorder{}
	cfg := router.Config{Policy: router.OpenPolicy(), Logger: slog.New(rec)}
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		tr := "memory"
		if h.unix {
			tr = "unix"
		}
		cases := []struct {
			name, reason string
			send         func(r *raw)
		}{
			{"IDsMustIncrease", "command ids must increase", func(r *raw) {
				r.id-- // reuse the hello's id
				r.command(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone})
			}},
			{"ZeroLengthFrame", "", func(r *raw) { r.sendBytes([]byte{0, 0, 0, 0}) }},
		}
		for _, c := range cases {
			id := strings.ToLower("log-" + tr + "-" + c.name)
			r := newRaw(t, h.conn(""))
			r.hello(id)
			c.send(r)
			r.expectClosed(wire.ErrInvalidEnvelope)
			var attrs map[string]string
			waitFor(t, "the violation's log line", func() bool {
				var ok bool
				attrs, ok = rec.find(0, slog.LevelInfo, "closing a client for a protocol violation", map[string]string{"clientId": id})
				return ok
			})
			if !strings.Contains(attrs["reason"], c.reason) || attrs["reason"] == "" || !strings.HasPrefix(attrs["connectionId"], "conn-") {
				t.Errorf("%s: log attributes %v", c.name, attrs)
			}
		}
		// Before hello there is no client id yet; the connection id says
		// which one it was.
		skip := rec.len()
		r := newRaw(t, h.conn(""))
		r.sendBytes(binary.LittleEndian.AppendUint32(nil, wire.MaxEnvelopeBytes+1))
		r.expectClosed(wire.ErrInvalidEnvelope)
		waitFor(t, "the pre-hello violation's log line", func() bool {
			attrs, ok := rec.find(skip, slog.LevelInfo, "closing a client for a protocol violation", map[string]string{"clientId": ""})
			return ok && strings.HasPrefix(attrs["connectionId"], "conn-")
		})
	})
}

// A staging file the producer replaced before the seal (a hard link to a
// file elsewhere, a rename over it) is not sealed: another file's bytes
// never become an artifact. The seal fails with STORE_FAILURE, nothing is
// published or left behind, the other file is untouched, and the router
// goes on working.
func TestSealOfReplacedStagingFileFails(t *testing.T) {
	for _, c := range []struct {
		name    string
		replace func(staging, other string) error
	}{
		{"HardLinkToOtherFile", func(staging, other string) error {
			if err := os.Remove(staging); err != nil {
				return err
			}
			return os.Link(other, staging)
		}},
		{"RenameOver", func(staging, other string) error { return os.Rename(other, staging) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			forEachTransport(t, open(), func(t *testing.T, h *harness) {
				r := newRaw(t, h.conn(""))
				r.hello("replacer")
				alloc := rawAllocate(t, r, 4096)
				writeLocation(t, h, alloc.WriteLocation, frameBytes(1, 4096))
				// Beside the store directory, so on the same filesystem.
				other := filepath.Join(h.root, "other")
				secret := bytes.Repeat([]byte("secret!\n"), 512)
				if err := os.WriteFile(other, secret, 0o600); err != nil {
					t.Fatal(err)
				}
				staging := filepath.Join(h.r.StoreDir(), alloc.WriteLocation.RelativePath)
				if err := c.replace(staging, other); err != nil {
					t.Fatal(err)
				}
				r.command(wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID}})
				if be := r.reply(&wire.SealOK{}); be == nil || be.Code != wire.ErrStoreFailure {
					t.Fatalf("seal of a replaced staging file: %v, want STORE_FAILURE", be)
				}
				settle(t, h, "nothing left", bustest.Drained)
				if s := h.r.Stats(); s.Seals != 0 || s.SealedArtifacts != 0 || s.StoreFiles != 0 {
					t.Fatalf("published: %+v", s)
				}
				if n := sealedFiles(t, h); n != 0 {
					t.Fatalf("%d sealed files", n)
				}
				if _, err := os.Lstat(staging); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("the staging name is still there: %v", err)
				}
				if c.name == "HardLinkToOtherFile" {
					if got, err := os.ReadFile(other); err != nil || !bytes.Equal(got, secret) {
						t.Fatalf("the other file: %v", err)
					}
				}
				// The router still seals honest artifacts.
				alloc = rawAllocate(t, r, 4096)
				var ok wire.SealOK
				rawOK(t, r, wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID}}, &ok)
				r.command(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
				r.reply(&wire.Released{})
				settle(t, h, "the honest artifact collected", bustest.Drained)
			})
		})
	}
}

// A prompt client that arrives right behind a burst of silent connections
// is admitted: the ones the router evicted to stay within the pending bound
// stop counting against maxClients as they are evicted, not once their
// goodbye has been written and their transport dropped.
func TestPromptClientBehindABurstIsAdmitted(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxClients = 8
	cfg := router.Config{Policy: router.OpenPolicy(), Limits: l, MaxPendingHello: 2, HelloTimeout: time.Minute}
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		for _, id := range []string{"a", "b", "c"} {
			h.dial(id)
		}
		const burst = 100
		for range burst {
			var nc net.Conn
			if h.unix {
				nc = h.conn("")
			} else {
				var err error
				if nc, err = h.r.ConnectInMemory(); err != nil {
					t.Fatalf("a connection of the burst was refused: %v", err)
				}
			}
			t.Cleanup(func() { nc.Close() })
		}
		// At once, while most of the evicted are still registered.
		prompt, err := client.Connect(ctxT(t), h.conn(""), client.Config{ClientID: "prompt", StoreRoot: h.root})
		if err != nil {
			t.Fatalf("the prompt client behind the burst: %v", err)
		}
		h.track(prompt)
		barrier(t, prompt)
		prompt.Close()
	})
}
