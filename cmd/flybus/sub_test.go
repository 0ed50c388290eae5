package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
)

func TestSubCheck(t *testing.T) {
	cases := []struct {
		name string
		pos  []string
		opts func(*subOptions)
		cfg  []client.SubscribeOption // want, when err is ""
		err  string
	}{
		{name: "Default/Latest", pos: []string{"s", "t"}, opts: func(*subOptions) {}},
		{name: "Latest/Replay", pos: []string{"s", "t"}, opts: func(o *subOptions) { o.latest, o.replay = true, true },
			cfg: []client.SubscribeOption{client.Replay()}},
		{name: "Bounded", pos: []string{"s", "t"}, opts: func(o *subOptions) { o.bounded = true }, cfg: []client.SubscribeOption{client.Bounded()}},
		{name: "Save/WithStore", pos: []string{"s", "t"}, opts: func(o *subOptions) { o.saveDir, o.store = "d", "st" }},
		{name: "Args/TooFew", pos: []string{"s"}, opts: func(*subOptions) {}, err: "want SOCKET TOPIC, got 1"},
		{name: "Topic/Invalid", pos: []string{"s", "a b"}, opts: func(*subOptions) {}, err: `"a b" is not a topic name`},
		{name: "Mode/Both", pos: []string{"s", "t"}, opts: func(o *subOptions) { o.latest, o.bounded = true, true },
			err: "--latest and --bounded exclude each other"},
		{name: "Count/Negative", pos: []string{"s", "t"}, opts: func(o *subOptions) { o.count = -1 }, err: "--count must not be negative"},
		{name: "Save/NoStore", pos: []string{"s", "t"}, opts: func(o *subOptions) { o.saveDir = "d" },
			err: "--save-artifacts needs --store DIR, the router's store root"},
		{name: "Client/Invalid", pos: []string{"s", "t"}, opts: func(o *subOptions) { o.client = "x y" }, err: "not a valid client id"},
		{name: "Timeout/Zero", pos: []string{"s", "t"}, opts: func(o *subOptions) { o.timeout = 0 }, err: "--timeout must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := &subOptions{client: "flybus-sub", timeout: time.Second}
			tc.opts(o)
			socket, topic, cfg, err := o.check(tc.pos)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil || socket != tc.pos[0] || topic != tc.pos[1] || !reflect.DeepEqual(cfg, tc.cfg) {
				t.Fatalf("got %q %q %+v %v, want %+v", socket, topic, cfg, err, tc.cfg)
			}
		})
	}
}

func TestSubRefusesBeforeConnecting(t *testing.T) {
	nowhere := filepath.Join(t.TempDir(), "none.sock")
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sub", nowhere, "t", "--bounded", "--latest"}, "see flybus sub --help"},
		{[]string{"sub", nowhere, "t", "--count", "x"}, "see flybus sub --help"},
		{[]string{"sub", nowhere, "t", "--save-artifacts", notDir, "--store", "s"}, "flybus sub: --save-artifacts: "},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want exit 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// startSub starts `flybus sub` and waits until it is subscribed.
func startSub(t *testing.T, sock, topic string, args ...string) *proc {
	t.Helper()
	p := startFlybus(t, append([]string{"sub", sock, topic}, args...)...)
	p.waitOutput(t, p.stderr, "the subscribed line", func(s string) bool { return strings.Contains(s, "\n") })
	if line := p.stderr.String(); !regexp.MustCompile(`^subscribed to ` + regexp.QuoteMeta(topic) + ` \(sub-\d+\)\n$`).MatchString(line) {
		t.Fatalf("sub's first line %q", line)
	}
	return p
}

func TestPubSubWithArtifacts(t *testing.T) {
	r := startOpenRouter(t)
	r.declare(t, "cam.frames")
	saved := filepath.Join(t.TempDir(), "saved") // sub creates it
	sub := startSub(t, r.sock, "cam.frames", "--count", "2", "--save-artifacts", saved, "--store", r.store)

	// Indented JSON still prints on one line.
	r.pub(t, "published cam.frames #1 to 1 subscriber(s), 0 replaced", "cam.frames", "{\n  \"frame\": 1\n}")
	// Larger than pub's copy buffer, and not a multiple of it.
	file, data := testFile(t, 2<<20+12345)
	meta := filepath.Join(t.TempDir(), "meta.json")
	if err := os.WriteFile(meta, []byte(`{"w":160}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r.pub(t, "published cam.frames #2 to 1 subscriber(s), 0 replaced", "cam.frames", `{"frame":2}`,
		"--artifact", "image="+file, "--content-type", "image=image/x-raw", "--artifact", "meta="+meta, "--store", r.store)

	if code := sub.wait(t); code != 0 {
		t.Fatalf("sub exit %d, want 0 after --count 2", code)
	}
	want := "#1 cam.frames {\"frame\":1}\n" +
		"#2 cam.frames {\"frame\":2} [image: 2109497 bytes, meta: 9 bytes]\n"
	if got := sub.stdout.String(); got != want {
		t.Errorf("sub printed\n%s\nwant\n%s", got, want)
	}
	if n := strings.Count(sub.stderr.String(), "\n"); n != 1 {
		t.Errorf("sub's stderr has more than the subscribed line:\n%s", sub.stderr)
	}
	got, err := os.ReadFile(filepath.Join(saved, "2-image"))
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("saved image: %d bytes, equal %v, %v", len(got), bytes.Equal(got, data), err)
	}
	if got, err := os.ReadFile(filepath.Join(saved, "2-meta")); err != nil || string(got) != `{"w":160}` {
		t.Errorf("saved meta: %q, %v", got, err)
	}
	if entries, _ := os.ReadDir(saved); len(entries) != 2 {
		t.Errorf("%s holds %d entries, want the two files and no temporary ones", saved, len(entries))
	}
}

func TestSubReplaysRetainedBounded(t *testing.T) {
	r := startOpenRouter(t)
	r.declare(t, "state", "--retained", "latest")
	r.pub(t, "published state #1 to 0 subscriber(s), 0 replaced", "state", `{"v":1}`)
	file, _ := testFile(t, 100)
	r.pub(t, "published state #2 to 0 subscriber(s), 0 replaced", "state", `{"v":2}`, "--artifact", "blob="+file, "--store", r.store)

	// The retained value needs no --store to be listed, only to be saved.
	stdout, stderr, code := runFlybus(t, "sub", r.sock, "state", "--replay", "--bounded", "--count", "1")
	if code != 0 || stdout != "#2 state {\"v\":2} [blob: 100 bytes]\n" {
		t.Errorf("replay: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// Saving needs the router's store root; another one is refused at
	// connect.
	stdout, stderr, code = runFlybus(t, "sub", r.sock, "state", "--replay", "--count", "1", "--client", r.id("sub"),
		"--save-artifacts", t.TempDir(), "--store", t.TempDir())
	if code != 1 || stdout != "" || !strings.Contains(stderr, "does not hold the router's store") {
		t.Errorf("wrong store: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestSubSignalExitsCleanly(t *testing.T) {
	r := startOpenRouter(t)
	r.declare(t, "t")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			sub := startSub(t, r.sock, "t", "--client", r.id("sub"))
			sub.signal(t, sig)
			if code := sub.wait(t); code != 0 {
				t.Errorf("exit %d after %v", code, sig)
			}
			if sub.stdout.String() != "" || strings.Count(sub.stderr.String(), "\n") != 1 {
				t.Errorf("stdout %q, stderr %q", sub.stdout, sub.stderr)
			}
		})
	}
}

// A subscriber outlives its router: when flybus serve stops and starts
// again, sub reconnects, subscribes again once the topic is declared anew,
// and prints what is published from then on, up to its --count.
func TestSubOutlivesARouterRestart(t *testing.T) {
	r := startOpenRouter(t)
	r.declare(t, "t")
	sub := startSub(t, r.sock, "t", "--count", "2")
	r.pub(t, "published t #1 to 1 subscriber(s), 0 replaced", "t", `{"n":1}`)
	sub.waitOutput(t, sub.stdout, "the first message", func(s string) bool { return strings.Count(s, "\n") == 1 })

	r.p.signal(t, syscall.SIGTERM)
	if code := r.p.wait(t); code != 0 {
		t.Fatalf("serve exit %d", code)
	}
	sub.waitOutput(t, sub.stderr, "the reconnecting line", func(s string) bool { return strings.Contains(s, "reconnecting") })
	r.p = startFlybus(t, "serve", "--open", "--store", r.store, "--listen", r.sock)
	r.p.ready(t)
	sub.waitOutput(t, sub.stderr, "the reconnected line", func(s string) bool { return strings.Contains(s, "reconnected") })
	r.declare(t, "t")
	r.pub(t, "published t #1 to 1 subscriber(s), 0 replaced", "t", `{"n":2}`)
	if code := sub.wait(t); code != 0 {
		t.Errorf("sub exit %d, want 0 after its second message", code)
	}
	if got := sub.stdout.String(); !strings.Contains(got, `{"n":1}`) || !strings.Contains(got, `{"n":2}`) {
		t.Errorf("sub printed %q, want both messages", got)
	}
}

// sub may start before anyone declares its topic: it says it waits, and
// prints what is published once the topic is declared.
func TestSubBeforeTheTopicIsDeclared(t *testing.T) {
	r := startOpenRouter(t)
	sub := startFlybus(t, "sub", r.sock, "later", "--count", "1")
	sub.waitOutput(t, sub.stderr, "the subscribed line", func(s string) bool { return strings.Contains(s, "\n") })
	if line := sub.stderr.String(); !regexp.MustCompile(`^subscribed to later \(sub-\d+\), waiting for it to be declared\n$`).MatchString(line) {
		t.Fatalf("sub's first line %q", line)
	}
	r.declare(t, "later")
	r.pub(t, "published later #1 to 1 subscriber(s), 0 replaced", "later", `{"n":1}`)
	if code := sub.wait(t); code != 0 || !strings.Contains(sub.stdout.String(), `{"n":1}`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, sub.stdout, sub.stderr)
	}
}
