package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/scrape"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// End-to-end tests of the metrics endpoint and the operator's tools
// against a running `flybus serve`.

// busUnderTest is a router with a service socket (agent-a, serving
// agent.echo), a caller socket and a CLI socket, and its metrics address.
type busUnderTest struct {
	p                    *proc
	svcSock, callerSock  string
	cliSock, metricsAddr string
}

func startBus(t *testing.T) *busUnderTest {
	t.Helper()
	dir := shortDir(t)
	b := &busUnderTest{svcSock: filepath.Join(dir, "svc.sock"), callerSock: filepath.Join(dir, "caller.sock"),
		cliSock: filepath.Join(dir, "cli.sock")}
	// ":0" also exercises the 127.0.0.1 default for a bare port.
	b.p = startFlybus(t, "serve", "--store", filepath.Join(t.TempDir(), "s"), "--log-format", "json",
		"--metrics", ":0", "--pprof", "--listen", b.svcSock+"=agent-a", "--listen", b.callerSock+"=caller",
		"--listen", b.cliSock+"=flybus-cli")
	b.p.ready(t)
	b.metricsAddr = b.p.logValue(t, "metrics listening", "addr")
	if !strings.HasPrefix(b.metricsAddr, "127.0.0.1:") {
		t.Fatalf("metrics address %q should default to 127.0.0.1", b.metricsAddr)
	}
	serveEcho(t, connect(t, b.svcSock, "agent-a"), "agent.echo")
	return b
}

// scrape fetches /metrics and returns each sample by its rendered name.
func (b *busUnderTest) scrape(t *testing.T) map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + b.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("/metrics: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	samples, err := scrape.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range samples {
		key := s.Name
		for _, l := range s.Labels {
			key += "{" + l.Name + "=" + l.Value + "}"
		}
		out[key] = s.Value
	}
	return out
}

func TestMetricsMoveWithTraffic(t *testing.T) {
	b := startBus(t)
	before := b.scrape(t)
	if before["flybus_services"] != "1" || before["flybus_calls_total"] != "0" {
		t.Fatalf("before any call: services %s, calls_total %s", before["flybus_services"], before["flybus_calls_total"])
	}

	caller := connect(t, b.callerSock, "caller")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res, err := caller.CallAndWait(ctx, "agent.echo", "Echo", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	res.Close()
	if _, err := caller.CallAndWait(ctx, "agent.nobody", "Echo", nil); !errors.Is(err, wire.ErrNoService) {
		t.Fatalf("call to a missing service: %v", err)
	}

	after := b.scrape(t)
	for name, want := range map[string]string{
		"flybus_calls_total":                       "1",
		"flybus_connections":                       "2",
		"flybus_connections_total":                 "2",
		"flybus_refusals_total{code=NO_SERVICE}":   "1",
		"flybus_refusals_total{code=BACKPRESSURE}": "0",
		"flybus_services":                          "1",
		"flybus_active_calls":                      "0",
	} {
		if after[name] != want {
			t.Errorf("%s = %q, want %s", name, after[name], want)
		}
	}

	resp, err := http.Get("http://" + b.metricsAddr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("/debug/pprof/: %s\n%.200s", resp.Status, body)
	}
}

func TestCallCommand(t *testing.T) {
	b := startBus(t)

	// Flags may follow the positional arguments.
	stdout, stderr, code := runFlybus(t, "call", b.cliSock, "agent.echo", "Echo", `{"n":7}`, "--timeout", "20s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Method string
		Echo   struct{ N int }
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.Method != "Echo" || got.Echo.N != 7 {
		t.Fatalf("outcome %q (%v)", stdout, err)
	}

	_, stderr, code = runFlybus(t, "call", b.cliSock, "agent.nobody", "Echo", `{}`)
	if code != 1 || !regexp.MustCompile(`^NO_SERVICE: .*[^)]\n$`).MatchString(stderr) {
		t.Errorf("missing service: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = runFlybus(t, "call", "--client", "caller", b.cliSock, "agent.echo", "Echo", `{}`)
	if code != 1 || !strings.HasPrefix(stderr, "NOT_AUTHORIZED: ") {
		t.Errorf("wrong client id: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = runFlybus(t, "call", b.cliSock, "agent.echo", "Echo", `[1]`)
	if code != 2 || !strings.Contains(stderr, "JSON object") {
		t.Errorf("bad payload: exit %d, stderr %q", code, stderr)
	}
}

func TestStatsCommand(t *testing.T) {
	b := startBus(t)
	// With --client, the default id's one refused hello (NOT_AUTHORIZED,
	// naming the bound id) does not show among the refusals counted here.
	if _, stderr, code := runFlybus(t, "call", b.cliSock, "agent.echo", "Echo", `{}`, "--client", "flybus-cli"); code != 0 {
		t.Fatalf("call: %s", stderr)
	}
	if _, _, code := runFlybus(t, "call", b.cliSock, "agent.nobody", "Echo", `{}`, "--client", "flybus-cli"); code != 1 {
		t.Fatalf("call to a missing service: exit %d", code)
	}

	stdout, stderr, code := runFlybus(t, "stats", "--metrics", b.metricsAddr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`(?m)^router router-[0-9a-f]{16}$`,
		`(?m)^calls_total +1$`,
		`(?m)^services +1$`,
		`(?m)^refusals_total +1$`,
		`(?m)^  NO_SERVICE +1$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("stats output lacks %s:\n%s", re, stdout)
		}
	}
	if strings.Contains(stdout, "CONFLICT") {
		t.Errorf("zero refusal codes should be left out:\n%s", stdout)
	}
}

// flybus top --once and flybus stats --json against a running serve: a
// latest subscriber that never reads shows its coalesced count and the age
// of its queued message; the service and both clients show.
func TestTopAndStatsJSON(t *testing.T) {
	b := startBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	prod, slow := connect(t, b.cliSock, "flybus-cli"), connect(t, b.callerSock, "caller")
	if _, err := prod.DeclareTopic(ctx, "top.frames", wire.RetainNone); err != nil {
		t.Fatal(err)
	}
	sub, err := slow.Subscribe(ctx, "top.frames", client.InFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// The first publication is delivered (and never consumed); of the
	// next four, three are replaced and one waits.
	stats := func() router.Details {
		stdout, stderr, code := runFlybus(t, "stats", "--metrics", b.metricsAddr, "--json")
		if code != 0 {
			t.Fatalf("stats --json: exit %d: %s", code, stderr)
		}
		var d router.Details
		if err := json.Unmarshal([]byte(stdout), &d); err != nil {
			t.Fatalf("stats --json printed %q: %v", stdout, err)
		}
		return d
	}
	for i := range 5 {
		if _, err := prod.Publish(ctx, "top.frames", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
		for i == 0 {
			if d := stats(); len(d.Subscriptions) == 1 && d.Subscriptions[0].Delivered == 1 {
				break
			}
			time.Sleep(time.Millisecond) // polling a condition: the first delivery
		}
	}
	d := stats()
	if len(d.Subscriptions) != 1 || d.Subscriptions[0].Coalesced != 3 || d.Subscriptions[0].Queued != 1 ||
		d.Subscriptions[0].Client != "caller" || d.Subscriptions[0].OldestQueuedAge <= 0 {
		t.Fatalf("stats --json subscriptions: %+v", d.Subscriptions)
	}
	if len(d.Services) != 1 || d.Services[0].Name != "agent.echo" || d.Services[0].Client != "agent-a" {
		t.Fatalf("stats --json services: %+v", d.Services)
	}
	if len(d.Topics) != 1 || d.Topics[0].Publications != 5 || d.Store.Mode != "pool" {
		t.Fatalf("stats --json topics %+v, store %+v", d.Topics, d.Store)
	}

	stdout, stderr, code := runFlybus(t, "top", "--metrics", b.metricsAddr, "--once", "--interval", "100ms")
	if code != 0 {
		t.Fatalf("top --once: exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`(?m)^flybus top  127\.0\.0\.1:\d+  \d\d:\d\d:\d\d  rates over 0\.1s  store pool: slots \d+ \(free \d+, quarantined \d+\)`,
		`(?m)^TOPIC +PUB/S +LAST SEQ +SUBS +RETAINED$`,
		`(?m)^top\.frames +0\.0 +5 +1 +0 B$`,
		`(?m)^sub-1 +caller +top\.frames +latest +0\.0 +1 +1 +3 +0 +\d`,
		`(?m)^agent\.echo +agent-a +0 +0 +0 +0$`,
		`(?m)^caller +conn-\d+ +1/\d+ `,
		`(?m)^flybus-cli +conn-\d+ `,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("top --once output lacks %s:\n%s", re, stdout)
		}
	}
}

// A live flybus top started before its router waits for it, and goes on
// through the router's restart: one line per interval while it is down,
// then views again.
func TestTopWaitsAndOutlivesARestart(t *testing.T) {
	serve := func(metrics string) *proc {
		p := startFlybus(t, "serve", "--store", filepath.Join(t.TempDir(), "s"), "--log-format", "json",
			"--metrics", metrics, "--open", "--listen", filepath.Join(shortDir(t), "bus.sock"))
		p.ready(t)
		return p
	}
	stop := func(p *proc) {
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Fatalf("serve exited with %d", code)
		}
	}
	first := serve("127.0.0.1:0")
	addr := first.logValue(t, "metrics listening", "addr")
	stop(first) // its address is free now, and top's router is not up

	top := startFlybus(t, "top", "--metrics", addr, "--interval", "20ms")
	views := func(s string) int { return strings.Count(s, "flybus top  "+addr) }
	waiting := func(s string) int { return strings.Count(s, "(retrying every 20ms)") }
	top.waitOutput(t, top.stdout, "top to wait for its router", func(s string) bool { return waiting(s) > 0 && views(s) == 0 })
	second := serve(addr)
	out := top.waitOutput(t, top.stdout, "a view of the router", func(s string) bool { return views(s) > 0 })
	if !strings.Contains(out, "TOPIC") {
		t.Fatalf("the first view lacks its tables:\n%s", out)
	}
	stop(second)
	down := waiting(top.waitOutput(t, top.stdout, "top to see the router go", func(s string) bool {
		return strings.LastIndex(s, "(retrying every") > strings.LastIndex(s, "flybus top  "+addr)
	}))
	serve(addr)
	top.waitOutput(t, top.stdout, "a view of the restarted router", func(s string) bool {
		return waiting(s) >= down && strings.LastIndex(s, "flybus top  "+addr) > strings.LastIndex(s, "(retrying every")
	})
	top.signal(t, syscall.SIGTERM)
	if code := top.wait(t); code != 0 {
		t.Fatalf("top exited with %d", code)
	}
}
