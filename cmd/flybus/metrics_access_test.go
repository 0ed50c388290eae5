package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// Who may reach the metrics endpoint (issue 27 item 7): pprof only when
// asked for, the network only when asked for, and a Unix socket for this
// user alone.

// getStatus fetches url through hc and returns the status and body.
func getStatus(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// startMetricsServe starts serve on one bound socket with --metrics and
// extra flags, and returns it and its metrics address from the log.
func startMetricsServe(t *testing.T, metrics string, extra ...string) (*proc, string) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "bus.sock")
	args := append([]string{"serve", "--store", filepath.Join(t.TempDir(), "s"), "--log-format", "json",
		"--listen", sock + "=agent-a", "--metrics", metrics}, extra...)
	p := startFlybus(t, args...)
	p.ready(t)
	return p, p.logValue(t, "metrics listening", "addr")
}

func stopServe(t *testing.T, p *proc) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestMetricsPprofOnlyWithTheFlag(t *testing.T) {
	for _, withPprof := range []bool{false, true} {
		t.Run(fmt.Sprintf("pprof=%v", withPprof), func(t *testing.T) {
			var extra []string
			want := http.StatusNotFound
			if withPprof {
				extra, want = []string{"--pprof"}, http.StatusOK
			}
			p, addr := startMetricsServe(t, "127.0.0.1:0", extra...)
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
				if code, body := getStatus(t, http.DefaultClient, "http://"+addr+path); code != want {
					t.Errorf("%s: %d, want %d\n%.200s", path, code, want, body)
				}
			}
			// The figures are served either way.
			for _, path := range []string{"/metrics", "/details"} {
				if code, body := getStatus(t, http.DefaultClient, "http://"+addr+path); code != http.StatusOK {
					t.Errorf("%s: %d\n%.200s", path, code, body)
				}
			}
			stopServe(t, p)
		})
	}
}

// resolveServe refuses what would open the endpoint wider than asked.
func TestMetricsOptionsResolve(t *testing.T) {
	base := []string{"--store", "s", "--listen", "/tmp/a.sock=agent-a"}
	for _, tc := range []struct {
		args []string
		want string // an error's text, or "" for none
	}{
		{[]string{"--metrics", "9100"}, ""},
		{[]string{"--metrics", "localhost:9100"}, ""},
		{[]string{"--metrics", "127.0.0.2:9100"}, ""},
		{[]string{"--metrics", "[::1]:9100", "--pprof"}, ""},
		{[]string{"--metrics", "http://127.0.0.1:9100/metrics"}, ""},
		{[]string{"--metrics", "0.0.0.0:9100"}, "give --metrics-public to allow that"},
		{[]string{"--metrics", "[::]:9100"}, "is not a loopback address"},
		{[]string{"--metrics", "192.0.2.1:9100"}, "is not a loopback address"},
		{[]string{"--metrics", "metrics.example:9100"}, "is not a loopback address"},
		{[]string{"--metrics", "0.0.0.0:9100", "--metrics-public"}, ""},
		{[]string{"--metrics", "metrics.example:9100", "--metrics-public", "--pprof"}, ""},
		{[]string{"--pprof"}, "need --metrics ADDR"},
		{[]string{"--metrics-public"}, "need --metrics ADDR"},
		{[]string{"--metrics", "unix:/tmp/m.sock", "--pprof"}, ""},
		{[]string{"--metrics", "unix:m.sock"}, ""},
		{[]string{"--metrics", "unix:/tmp/m.sock", "--metrics-public"}, "drop --metrics-public"},
		{[]string{"--metrics", "unix:"}, "want unix:PATH"},
		{[]string{"--metrics", "unix:///tmp/m.sock"}, "want unix:PATH"},
		{[]string{"--metrics", "unix:/tmp/" + strings.Repeat("m", 110)}, "holds at most 107"},
		{[]string{"--metrics", "unix:/tmp/./a.sock"}, "also a --listen socket"},
	} {
		c, err := resolveServe(options(t, append(base, tc.args...)...), nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.want)
		case err == nil && c.Pprof != strings.Contains(strings.Join(tc.args, " "), "--pprof"):
			t.Errorf("%q: Pprof %v", tc.args, c.Pprof)
		}
	}
}

func TestMetricsNonLoopbackNeedsTheFlag(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "bus.sock")
	store := filepath.Join(t.TempDir(), "store")
	_, stderr, code := runFlybus(t, "serve", "--store", store, "--listen", sock+"=agent-a", "--metrics", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(stderr, "--metrics 0.0.0.0:0 is not a loopback address") ||
		!strings.Contains(stderr, "give --metrics-public to allow that") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 naming --metrics-public", code, stderr)
	}
	mustNotExist(t, store)
	mustNotExist(t, sock)

	p, addr := startMetricsServe(t, "0.0.0.0:0", "--metrics-public")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	warning := logRecord(t, p, "the metrics endpoint is open to the network (--metrics-public): anyone who can connect reads "+
		"/metrics and /details, which name every client id, topic and service; firewall the port, or use 127.0.0.1:PORT or unix:PATH")
	if warning["level"] != "WARN" || warning["addr"] != addr || warning["pprof"] != false {
		t.Errorf("warning record %v", warning)
	}
	if code, _ := getStatus(t, http.DefaultClient, "http://127.0.0.1:"+port+"/metrics"); code != http.StatusOK {
		t.Errorf("/metrics on every address: %d", code)
	}
	stopServe(t, p)
}

// logRecord waits for the JSON log record with msg and returns it.
func logRecord(t *testing.T, p *proc, msg string) map[string]any {
	t.Helper()
	var found map[string]any
	p.waitOutput(t, p.stderr, "log "+msg, func(s string) bool {
		sc := bufio.NewScanner(strings.NewReader(s))
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
				found = rec
				return true
			}
		}
		return false
	})
	return found
}

// unixMetricsClient speaks HTTP over the socket at path.
func unixMetricsClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
}

// staleSocket leaves a socket file at path that nothing listens on, as a
// killed router would.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

// --metrics unix:PATH: a 0600 socket that replaces a stale one, serves
// the endpoint (stats and top read it), is left alone while live, and is
// gone after shutdown and after a failed start.
func TestMetricsUnixSocket(t *testing.T) {
	dir := shortDir(t)
	msock := filepath.Join(dir, "metrics.sock")
	staleSocket(t, msock)
	p, addr := startMetricsServe(t, "unix:"+msock, "--pprof")
	if addr != "unix:"+msock {
		t.Fatalf("metrics listening on %q, want unix:%s", addr, msock)
	}
	if rec := logRecord(t, p, "removed a stale socket"); rec["socket"] != msock {
		t.Errorf("stale socket record %v", rec)
	}
	fi, err := os.Lstat(msock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("metrics socket: %v %v, want a socket with mode 0600", fi.Mode(), err)
	}
	hc := unixMetricsClient(msock)
	if code, body := getStatus(t, hc, "http://flybus/metrics"); code != http.StatusOK || !strings.Contains(body, "\nflybus_connections ") {
		t.Errorf("/metrics: %d\n%.300s", code, body)
	}
	if code, _ := getStatus(t, hc, "http://flybus/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/ with --pprof: %d", code)
	}

	stdout, stderr, code := runFlybus(t, "stats", "--metrics", addr)
	if code != 0 || !regexp.MustCompile(`(?m)^router router-[0-9a-f]{16}$`).MatchString(stdout) ||
		!regexp.MustCompile(`(?m)^connections +0$`).MatchString(stdout) {
		t.Errorf("stats: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = runFlybus(t, "stats", "--metrics", addr, "--json")
	if code != 0 || !strings.Contains(stdout, `"store"`) {
		t.Errorf("stats --json: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = runFlybus(t, "top", "--metrics", addr, "--once", "--interval", "10ms")
	if code != 0 || !strings.HasPrefix(stdout, "flybus top  "+addr+"  ") {
		t.Errorf("top --once: exit %d\n%s%s", code, stdout, stderr)
	}

	// A second router must not take a live router's metrics socket.
	_, stderr, code = runFlybus(t, "serve", "--store", filepath.Join(t.TempDir(), "s"),
		"--listen", filepath.Join(dir, "other.sock")+"=agent-a", "--metrics", addr)
	if code != exitFailure || !strings.Contains(stderr, "a live router answers on "+msock) {
		t.Errorf("a second router on the socket: exit %d, stderr:\n%s", code, stderr)
	}
	if code, _ := getStatus(t, hc, "http://flybus/metrics"); code != http.StatusOK {
		t.Errorf("/metrics after the second router gave up: %d", code)
	}

	stopServe(t, p)
	mustNotExist(t, msock)

	// Binding in /proc fails after the metrics socket listens.
	_, stderr, code = runFlybus(t, "serve", "--store", filepath.Join(t.TempDir(), "s"), "--metrics", addr,
		"--listen", filepath.Join(dir, "a.sock")+"=agent-a", "--listen", "/proc/flybus-"+filepath.Base(dir)+".sock=agent-b")
	if code != exitFailure || !strings.Contains(stderr, "cannot listen") {
		t.Fatalf("a failed start: exit %d, stderr:\n%s", code, stderr)
	}
	mustNotExist(t, msock)
}
