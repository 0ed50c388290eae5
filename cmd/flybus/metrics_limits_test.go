package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// The metrics endpoint must not cost the bus its descriptors (issue 27
// item 6): HTTP connections are capped and every one is timed.

func TestMetricsConnCapFormula(t *testing.T) {
	for nofile, want := range map[uint64]int{0: 4, 16: 4, 64: 8, 256: 32, 1024: 64, 1 << 20: 64, ^uint64(0): 64} {
		if got := connCapFor(nofile); got != want {
			t.Errorf("connCapFor(%d) = %d, want %d", nofile, got, want)
		}
	}
}

// testMetricsServer serves an open router's endpoint in-process with lim.
func testMetricsServer(t *testing.T, withPprof bool, lim metricsLimits) *metricsServer {
	t.Helper()
	r, err := router.New(router.Config{Policy: router.OpenPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := serveMetrics(ln, r, defaultLabelCap, withPprof, lim, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// longLimits keeps the timeouts out of a test about the cap.
func longLimits(maxConns int) metricsLimits {
	return metricsLimits{maxConns: maxConns, readHeader: time.Minute, read: time.Minute, write: time.Minute, idle: time.Minute}
}

// rawConn is one HTTP/1.1 keep-alive connection driven by hand.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(testTimeout))
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// get sends GET path and reads the whole response, leaving the connection
// idle (kept alive) on the server.
func (c *rawConn) get(path string) (int, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: flybus\r\n\r\n", path); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// closedByServer waits until the server ends the connection: a read
// returns EOF or a reset.
func (c *rawConn) closedByServer() error {
	c.SetReadDeadline(time.Now().Add(testTimeout))
	n, err := c.br.Read(make([]byte, 1))
	if n > 0 {
		return errors.New("the server sent bytes unasked")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return errors.New("the server kept the connection open")
	}
	return nil
}

// At the cap, a new connection displaces the connection idle the longest;
// the others stay usable.
func TestMetricsConnCapDisplacesTheOldestIdle(t *testing.T) {
	m := testMetricsServer(t, false, longLimits(3))
	// The client reads a response a moment before the server records its
	// connection idle again; the test's order of idleness is the server's
	// only once it has.
	idle := func(n int) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for idleConns(m.ln) != n {
			if time.Now().After(deadline) {
				t.Fatalf("the server never saw %d connections idle", n)
			}
			time.Sleep(time.Millisecond) // polling the server's view of its connections
		}
	}
	var conns []*rawConn
	for i := range 3 {
		conns = append(conns, dialRaw(t, m.Addr()))
		if code, err := conns[i].get("/metrics"); err != nil || code != http.StatusOK {
			t.Fatalf("connection %d: %d %v", i, code, err)
		}
		idle(i + 1)
	}
	// conns[0] is now the oldest idle one; using conns[1] again makes
	// conns[2] older than it.
	if code, err := conns[1].get("/metrics"); err != nil || code != http.StatusOK {
		t.Fatalf("connection 1 again: %d %v", code, err)
	}
	idle(3)
	extra := dialRaw(t, m.Addr())
	if code, err := extra.get("/metrics"); err != nil || code != http.StatusOK {
		t.Fatalf("the fourth connection: %d %v", code, err)
	}
	if err := conns[0].closedByServer(); err != nil {
		t.Fatalf("the oldest idle connection: %v", err)
	}
	another := dialRaw(t, m.Addr())
	if code, err := another.get("/details"); err != nil || code != http.StatusOK {
		t.Fatalf("the fifth connection: %d %v", code, err)
	}
	if err := conns[2].closedByServer(); err != nil {
		t.Fatalf("the next oldest idle connection: %v", err)
	}
	if code, err := conns[1].get("/metrics"); err != nil || code != http.StatusOK {
		t.Fatalf("the connection used most recently was dropped: %d %v", code, err)
	}
}

// When every connection is inside a request, a new one is closed at once
// and those in a request go on. (A connection still sending its request
// headers counts as new, and is displaced like an idle one.)
func TestMetricsConnCapClosesANewConnectionWhenAllAreBusy(t *testing.T) {
	m := testMetricsServer(t, true, longLimits(2))
	for range 2 {
		// A delta profile: its handler waits 30 s (or until the
		// connection closes, at the test's end).
		c := dialRaw(t, m.Addr())
		if _, err := io.WriteString(c, "GET /debug/pprof/heap?seconds=30 HTTP/1.1\r\nHost: flybus\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(testTimeout)
	for !allActive(m.ln, 2) {
		if time.Now().After(deadline) {
			t.Fatal("the server never started the two requests")
		}
		time.Sleep(time.Millisecond) // polling the server's view of its connections
	}
	refused := dialRaw(t, m.Addr())
	if err := refused.closedByServer(); err != nil {
		t.Fatalf("a connection past the cap: %v", err)
	}
	if !allActive(m.ln, 2) {
		t.Fatal("a connection in a request was displaced")
	}
}

// idleConns counts the connections the server has idle between requests.
func idleConns(l *connLimiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for c := range l.conns {
		if c.state == http.StateIdle {
			n++
		}
	}
	return n
}

func allActive(l *connLimiter, n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	active := 0
	for c := range l.conns {
		if c.state == http.StateActive {
			active++
		}
	}
	return active == n && len(l.conns) == n
}

// An idle keep-alive connection is closed after the idle timeout.
func TestMetricsIdleConnectionTimesOut(t *testing.T) {
	lim := longLimits(4)
	lim.idle = 50 * time.Millisecond
	m := testMetricsServer(t, false, lim)
	c := dialRaw(t, m.Addr())
	if code, err := c.get("/metrics"); err != nil || code != http.StatusOK {
		t.Fatalf("%d %v", code, err)
	}
	if err := c.closedByServer(); err != nil {
		t.Fatal(err)
	}
}

// A profile and a trace run for their ?seconds though that is longer than
// the server's read and write timeouts, which end every other request.
func TestMetricsProfileOutlastsTheTimeouts(t *testing.T) {
	lim := longLimits(8)
	lim.read, lim.write = 200*time.Millisecond, 200*time.Millisecond
	m := testMetricsServer(t, true, lim)
	type result struct {
		path    string
		err     error
		elapsed time.Duration
	}
	paths := []string{"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"}
	results := make(chan result, len(paths))
	for _, p := range paths {
		go func() {
			start := time.Now()
			err := fetchAll("http://" + m.Addr() + p)
			results <- result{p, err, time.Since(start)}
		}()
	}
	for range paths {
		r := <-results
		// Cut short by a deadline, the profile would end early (the read
		// deadline cancels it) or fail (the write deadline breaks it).
		if r.err != nil || r.elapsed < time.Second {
			t.Errorf("%s: %v after %v, want a whole second's profile", r.path, r.err, r.elapsed)
		}
	}
}

func fetchAll(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && (resp.StatusCode != http.StatusOK || n == 0) {
		err = fmt.Errorf("%s, %d bytes", resp.Status, n)
	}
	return err
}

// Issue 27 item 6, as the hostile trial ran it: a router with 64
// descriptors, and more idle keep-alive HTTP connections than that held
// open to its metrics port. A bus client must still connect and get
// answers, and the endpoint must still serve a new scrape.
func TestMetricsIdleConnectionsLeaveTheBusItsDescriptors(t *testing.T) {
	const nofile, held = 64, 80
	sock := filepath.Join(shortDir(t), "bus.sock")
	args := []string{"serve", "--store", filepath.Join(t.TempDir(), "s"), "--log-format", "json",
		"--metrics", "127.0.0.1:0", "--listen", sock + "=probe"}
	// ulimit -n sets the soft and the hard limit, so the router cannot
	// raise it back.
	cmd := execFlybusLimited(t, nofile, args...)
	p := startProc(t, cmd, args, fmt.Sprintf("ulimit -n %d; flybus %s", nofile, strings.Join(args, " ")))
	p.ready(t)
	addr := p.logValue(t, "metrics listening", "addr")
	if got := p.logNumber(t, "metrics listening", "maxConns"); got != float64(connCapFor(nofile)) {
		t.Errorf("maxConns %v, want %d", got, connCapFor(nofile))
	}

	// Each connection is served, then sits idle on the server (uncapped,
	// the 50th or so finds no descriptor and is never answered).
	for i := range held {
		c := dialRaw(t, addr)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if code, err := c.get("/metrics"); err != nil || code != http.StatusOK {
			t.Errorf("HTTP connection %d: %d %v", i, code, err)
			break
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "probe"})
	if err != nil {
		t.Fatalf("a bus client with %d HTTP connections held: %v", held, err)
	}
	defer c.Close()
	if _, err := c.DeclareTopic(ctx, "probe.topic", wire.RetainNone); err != nil {
		t.Fatalf("a round trip with %d HTTP connections held: %v", held, err)
	}
	if err := fetchAll("http://" + addr + "/metrics"); err != nil {
		t.Fatalf("a new scrape with %d HTTP connections held: %v", held, err)
	}
	c.Close()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// execFlybusLimited is the flybus binary run with args under ulimit -n.
func execFlybusLimited(t *testing.T, nofile int, args ...string) *exec.Cmd {
	t.Helper()
	script := fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile)
	cmd := exec.Command("sh", append([]string{"-c", script, flybusBinary(t)}, args...)...)
	cmd.Env = childEnv()
	return cmd
}

// logNumber waits for a JSON log record with msg and returns its numeric key.
func (p *proc) logNumber(t *testing.T, msg, key string) float64 {
	t.Helper()
	var value float64
	p.waitOutput(t, p.stderr, "log "+msg, func(s string) bool {
		sc := bufio.NewScanner(strings.NewReader(s))
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
				value, _ = rec[key].(float64)
				return true
			}
		}
		return false
	})
	return value
}
