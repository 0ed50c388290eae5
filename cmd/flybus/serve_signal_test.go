package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// Signals and failed starts of `flybus serve`, run as a child process.

// stallConn is a client transport that stops reading when told to, as a
// subscriber that no longer reads: the router's writer then blocks once
// the socket buffer is full.
type stallConn struct {
	net.Conn
	stall     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *stallConn) Read(p []byte) (int, error) {
	select {
	case <-c.stall:
		<-c.closed
		return 0, net.ErrClosed
	default:
	}
	return c.Conn.Read(p)
}

func (c *stallConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// stalledSubscriber subscribes to topic, stops reading and has the router
// queue more bytes to it than a socket holds, so its writer is stuck until
// the shutdown's grace ends.
func stalledSubscriber(t *testing.T, sock, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	sc := &stallConn{Conn: nc, stall: make(chan struct{}), closed: make(chan struct{})}
	c, err := client.Connect(ctx, sc, client.Config{ClientID: "stalled"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.DeclareTopic(ctx, topic, wire.RetainNone); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, topic, client.Bounded()); err != nil {
		t.Fatal(err)
	}
	close(sc.stall)

	pub := connect(t, sock, "publisher")
	payload := wire.RawJSON(`{"pad":"` + strings.Repeat("x", 60_000) + `"}`)
	// 8 x 60 kB in flight (the subscription allows 16) is twice what a
	// Unix socket buffers by default.
	for range 8 {
		if _, err := pub.Publish(ctx, topic, payload); err != nil {
			t.Fatal(err)
		}
	}
}

func TestServeSecondSIGTERMStillCleansUp(t *testing.T) {
	sock := filepath.Join(shortDir(t), "bus.sock")
	store := filepath.Join(t.TempDir(), "store")
	p := startFlybus(t, "serve", "--open", "--store", store, "--listen", sock, "--log-format", "json", "--shutdown-timeout", "2s")
	r := p.ready(t)
	stalledSubscriber(t, sock, "frames")

	p.signal(t, syscall.SIGTERM)
	p.logValue(t, "shutting down", "msg")
	// The shutdown now waits for the stalled subscriber: a second signal
	// arrives while it is under way.
	p.signal(t, syscall.SIGTERM)
	if got := p.logValue(t, "already shutting down; signal ignored", "signal"); got != "terminated" {
		t.Errorf("the second signal was logged as %q", got)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after two SIGTERMs, want 0", code)
	}
	mustNotExist(t, sock)
	mustNotExist(t, filepath.Join(store, r.StoreID))
}

func TestServeSIGHUPIsAShutdown(t *testing.T) {
	sock := filepath.Join(shortDir(t), "bus.sock")
	store := filepath.Join(t.TempDir(), "store")
	p := startFlybus(t, "serve", "--store", store, "--listen", sock+"=agent-a")
	r := p.ready(t)
	c := connect(t, sock, "agent-a")

	p.signal(t, syscall.SIGHUP)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGHUP, want 0", code)
	}
	<-c.Done()
	mustNotExist(t, sock)
	mustNotExist(t, filepath.Join(store, r.StoreID))
}

func TestServeFailedStartRemovesWhatItCreated(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name   string
		listen func(dir string) []string
		extra  []string
		want   string
	}{
		{name: "MetricsPortBusy", listen: func(dir string) []string { return []string{filepath.Join(dir, "a.sock") + "=agent-a"} },
			extra: []string{"--metrics", busy.Addr().String()}, want: "address already in use"},
		{name: "SocketDirectoryMissing", listen: func(dir string) []string {
			return []string{filepath.Join(dir, "a.sock") + "=agent-a", filepath.Join(dir, "missing", "b.sock") + "=agent-b"}
		}, want: "does not exist"},
		// Binding in /proc fails after the first socket listens.
		{name: "SecondListenFails", listen: func(dir string) []string {
			return []string{filepath.Join(dir, "a.sock") + "=agent-a", "/proc/flybus-" + filepath.Base(dir) + ".sock=agent-b"}
		}, want: "cannot listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			// Two levels serve must create, and so remove.
			parent := filepath.Join(t.TempDir(), "new")
			store := filepath.Join(parent, "store")
			args := []string{"serve", "--store", store}
			for _, l := range tc.listen(dir) {
				args = append(args, "--listen", l)
			}
			_, stderr, code := runFlybus(t, append(args, tc.extra...)...)
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr, tc.want)
			}
			mustNotExist(t, parent)
			if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
				t.Errorf("the socket directory holds %v (%v)", entries, err)
			}
		})
	}
}

func TestServeWarnsWhenTheStoreIsNotTmpfs(t *testing.T) {
	const warning = "the store root is not a tmpfs: artifacts will be written through to a disk; use one such as /dev/shm"
	warned := func(t *testing.T, store string) bool {
		t.Helper()
		sock := filepath.Join(shortDir(t), "bus.sock")
		p := startFlybus(t, "serve", "--store", store, "--listen", sock+"=agent-a", "--log-format", "json")
		p.ready(t)
		// Logged before "router ready", by the same goroutine.
		logs := p.waitOutput(t, p.stderr, "router ready", func(s string) bool { return strings.Contains(s, `"router ready"`) })
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		sc := bufio.NewScanner(strings.NewReader(logs))
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == warning {
				if rec["level"] != "WARN" || rec["root"] != store {
					t.Errorf("warning record %v", rec)
				}
				return true
			}
		}
		return false
	}
	disk := t.TempDir()
	if ok, _, err := isTmpfs(disk); err != nil || ok {
		t.Skipf("%s is a tmpfs here (%v)", disk, err)
	}
	if !warned(t, filepath.Join(disk, "store")) {
		t.Error("no warning for a store root on a disk")
	}
	if ok, _, err := isTmpfs("/dev/shm"); err != nil || !ok {
		t.Skipf("/dev/shm is not a tmpfs here (%v)", err)
	}
	shm, err := os.MkdirTemp("/dev/shm", "flybus-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(shm)
	if warned(t, filepath.Join(shm, "store")) {
		t.Error("a warning for a store root on a tmpfs")
	}
}
