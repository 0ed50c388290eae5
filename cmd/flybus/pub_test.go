package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// withContentTypes is the options of one artifact f=a with the given
// --content-type values.
func withContentTypes(types ...string) func(*pubOptions) {
	return func(o *pubOptions) {
		o.artifacts = listFlag{"f=a"}
		o.contentTypes = listFlag(types)
		o.store = "st"
	}
}

func TestPubPlan(t *testing.T) {
	valid := func(o *pubOptions) {}
	cases := []struct {
		name  string
		pos   []string
		opts  func(*pubOptions)
		files []pubFile // want, when err is ""
		err   string
	}{
		{name: "NoArtifacts", pos: []string{"s", "cam.frames", `{"n":1}`}, opts: valid},
		{name: "Artifacts/TypesGuessedAndGiven", pos: []string{"s", "cam.frames", "{}"},
			opts: func(o *pubOptions) {
				o.artifacts = listFlag{"image=shots/a.png", "raw=a.bin", "spikes=dump"}
				o.contentTypes = listFlag{"spikes=application/x-spikes"}
				o.store = "/dev/shm/fb"
			},
			files: []pubFile{{"image", "shots/a.png", "image/png"}, {"raw", "a.bin", "application/octet-stream"},
				{"spikes", "dump", "application/x-spikes"}}},
		{name: "Artifacts/PathWithEquals", pos: []string{"s", "t", "{}"},
			opts:  func(o *pubOptions) { o.artifacts = listFlag{"a=x=y"}; o.store = "st" },
			files: []pubFile{{"a", "x=y", "application/octet-stream"}}},
		{name: "Args/TooFew", pos: []string{"s", "t"}, opts: valid, err: "want SOCKET TOPIC JSON, got 2"},
		{name: "Topic/Invalid", pos: []string{"s", "Cam", "{}"}, opts: valid,
			err: `"Cam" is not a topic name (1-192 of a-z, 0-9, '.', '_', '-', in dot-separated segments none of which is empty, e.g. cam.frames)`},
		{name: "Topic/EmptySegment", pos: []string{"s", "cam..frames", "{}"}, opts: valid, err: "not a topic name"},
		{name: "Payload/Array", pos: []string{"s", "t", "[1]"}, opts: valid, err: "the payload must be a JSON object, not an array in [1]"},
		{name: "Payload/Truncated", pos: []string{"s", "t", `{"a":`}, opts: valid, err: `the payload is not strict JSON: unexpected end of document at offset 5 in {"a":`},
		{name: "Payload/DuplicateKey", pos: []string{"s", "t", `{"a":1,"a":2}`}, opts: valid,
			err: `the payload is not strict JSON: duplicate key "a" at offset 7 in {"a":1,"a":2}`},
		{name: "Payload/DuplicateNested", pos: []string{"s", "t", `{"a":1,"a":2,"b":{"c":1,"c\u0020":2,"c":3}}`}, opts: valid,
			err: `duplicate key "c" at offset 36`},
		{name: "Payload/UnterminatedString", pos: []string{"s", "t", `{"a":"x`}, opts: valid, err: "unterminated string at offset 7"},
		{name: "Payload/TrailingBytes", pos: []string{"s", "t", `{} {}`}, opts: valid, err: "trailing bytes after the document at offset 3"},
		{name: "Payload/Empty", pos: []string{"s", "t", ""}, opts: valid, err: "the payload is empty; give a JSON object such as '{}'"},
		{name: "Payload/TooLarge", pos: []string{"s", "t", `{"a":"` + strings.Repeat("x", wire.MaxEnvelopeBytes) + `"}`}, opts: valid,
			err: "the payload is over 65,536 bytes; a message's envelope holds at most 65,536 bytes in all: put the bytes in a file and attach it as an artifact (--artifact NAME=FILE --store DIR)"},
		{name: "Client/Invalid", pos: []string{"s", "t", "{}"}, opts: func(o *pubOptions) { o.client = "Me" },
			err: `"Me" is not a valid client id`},
		{name: "Timeout/Zero", pos: []string{"s", "t", "{}"}, opts: func(o *pubOptions) { o.timeout = 0 },
			err: "--timeout must be positive"},
		{name: "Artifact/NoEquals", pos: []string{"s", "t", "{}"},
			opts: func(o *pubOptions) { o.artifacts = listFlag{"frame"}; o.store = "st" }, err: `--artifact takes NAME=FILE, not "frame"`},
		{name: "Artifact/NoFile", pos: []string{"s", "t", "{}"},
			opts: func(o *pubOptions) { o.artifacts = listFlag{"frame="}; o.store = "st" }, err: "--artifact takes NAME=FILE"},
		{name: "Artifact/BadName", pos: []string{"s", "t", "{}"},
			opts: func(o *pubOptions) { o.artifacts = listFlag{"Frame=f"}; o.store = "st" }, err: `"Frame" is not an attachment name`},
		{name: "Artifact/Duplicate", pos: []string{"s", "t", "{}"},
			opts: func(o *pubOptions) { o.artifacts = listFlag{"f=a", "g=b", "f=c"}; o.store = "st" }, err: "--artifact f is given twice"},
		{name: "Artifact/TooMany", pos: []string{"s", "t", "{}"},
			opts: func(o *pubOptions) {
				for i := range wire.MaxAttachments + 1 {
					o.artifacts = append(o.artifacts, fmt.Sprintf("a%d=f", i))
				}
				o.store = "st"
			}, err: "33 artifacts; a message carries at most 32"},
		{name: "Artifact/NoStore", pos: []string{"s", "t", "{}"},
			opts: func(o *pubOptions) { o.artifacts = listFlag{"f=a"} }, err: "--artifact needs --store DIR, the router's store root"},
		{name: "ContentType/NoArtifact", pos: []string{"s", "t", "{}"},
			opts: withContentTypes("g=text/plain"), err: "--content-type g names no --artifact"},
		{name: "ContentType/Duplicate", pos: []string{"s", "t", "{}"},
			opts: withContentTypes("f=text/plain", "f=text/html"), err: "--content-type f is given twice"},
		{name: "ContentType/Control", pos: []string{"s", "t", "{}"},
			opts: withContentTypes("f=text/\tplain"), err: "is not a content type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := &pubOptions{client: "flybus-cli", timeout: time.Second}
			tc.opts(o)
			p, err := o.plan(tc.pos)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.socket != tc.pos[0] || p.topic != tc.pos[1] || string(p.payload) != tc.pos[2] {
				t.Errorf("plan %+v does not match %q", p, tc.pos)
			}
			if fmt.Sprint(p.files) != fmt.Sprint(tc.files) {
				t.Errorf("files %+v, want %+v", p.files, tc.files)
			}
		})
	}
}

func TestOpenSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.bin")
	if err := os.WriteFile(file, make([]byte, 1234), 0o600); err != nil {
		t.Fatal(err)
	}
	srcs, err := openSources([]pubFile{{name: "f", path: file}, {name: "g", path: file}})
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 2 || srcs[0].size != 1234 || srcs[1].name != "g" {
		t.Errorf("sources %+v", srcs)
	}
	closeSources(srcs)

	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "--artifact bad: open "},
		{dir, "is not a regular file"},
	} {
		if _, err := openSources([]pubFile{{name: "f", path: file}, {name: "bad", path: tc.path}}); err == nil ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.path, err, tc.want)
		}
	}
}

// TestPubRefusesBeforeConnecting runs pub in process against a socket that
// does not exist: a bad argument must be reported (exit 2) before pub
// tries it, which would fail with exit 1.
func TestPubRefusesBeforeConnecting(t *testing.T) {
	nowhere := filepath.Join(t.TempDir(), "none.sock")
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pub", nowhere, "t", "{}", "--artifact", "f=" + filepath.Join(dir, "missing"), "--store", dir},
			"flybus pub: --artifact f: open "},
		{[]string{"pub", nowhere, "t", "{}", "--artifact", "f=" + dir, "--store", dir}, "not a regular file"},
		{[]string{"pub", nowhere, "t", "{}", "--artifact", "f=x"}, "see flybus pub --help"},
		{[]string{"pub", nowhere, "t", "{}", "--client", "-x"}, "see flybus pub --help"},
		{[]string{"pub", nowhere, "t.", "{}"}, "see flybus pub --help"},
		{[]string{"pub", nowhere, "t", "{}", "--timeout", "5"}, `invalid value "5" for flag --timeout: a duration needs a unit; did you mean 5s?`},
		{[]string{"pub", nowhere, "t", "@" + filepath.Join(dir, "missing.json")}, "flybus pub: payload: open "},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) || out.Len() > 0 {
			t.Errorf("%q: exit %d, stderr %q, want exit 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"pub", nowhere, "t", "{}"}, &out, &errb); code != exitFailure {
		t.Errorf("a valid command line on a missing socket: exit %d, stderr %q", code, errb.String())
	}
}

// testFile writes n deterministic pseudo-random bytes to a new file.
func testFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	r := rand.New(rand.NewChaCha8([32]byte{7}))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "frame.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// openRouter is `flybus serve --open` on one unbound socket.
type openRouter struct {
	p           *proc
	sock, store string
	ids         int
}

// id returns a client id not used before in the test. The tools close
// their connection as they exit, but the router may notice only after the
// next tool's hello, which would be refused if it reused the id.
func (r *openRouter) id(prefix string) string {
	r.ids++
	return fmt.Sprintf("%s-%d", prefix, r.ids)
}

func startOpenRouter(t *testing.T) *openRouter {
	t.Helper()
	r := &openRouter{sock: filepath.Join(shortDir(t), "bus.sock"), store: filepath.Join(t.TempDir(), "store")}
	r.p = startFlybus(t, "serve", "--open", "--store", r.store, "--listen", r.sock)
	r.p.ready(t)
	return r
}

// declare declares topic through the command and checks its answer.
func (r *openRouter) declare(t *testing.T, topic string, args ...string) {
	t.Helper()
	stdout, stderr, code := runFlybus(t, append([]string{"declare", r.sock, topic, "--client", r.id("declare")}, args...)...)
	if code != 0 || !regexp.MustCompile(`^declared `+regexp.QuoteMeta(topic)+` \(incarnation top-\d+\)\n$`).MatchString(stdout) {
		t.Fatalf("declare %s: exit %d, stdout %q, stderr %q", topic, code, stdout, stderr)
	}
}

// pub runs `flybus pub` and wants it to succeed with the given receipt.
func (r *openRouter) pub(t *testing.T, want string, args ...string) {
	t.Helper()
	stdout, stderr, code := runFlybus(t, append([]string{"pub", r.sock, "--client", r.id("pub")}, args...)...)
	if code != 0 || stdout != want+"\n" || stderr != "" {
		t.Fatalf("pub %q: exit %d, stdout %q, stderr %q; want %q", args, code, stdout, stderr, want)
	}
}

func TestPubRefusals(t *testing.T) {
	r := startOpenRouter(t)
	_, stderr, code := runFlybus(t, "pub", r.sock, "nobody.declared.this", `{}`)
	if code != 1 || !regexp.MustCompile(`^NO_TOPIC: .*[^)]\n$`).MatchString(stderr) {
		t.Errorf("undeclared topic: exit %d, stderr %q", code, stderr)
	}

	// A bounded subscriber with one message in flight and one queued is
	// full: the next publication is refused whole.
	r.declare(t, "jobs")
	c := connect(t, r.sock, "slow-worker")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sub, err := c.Subscribe(ctx, "jobs", client.Bounded(), client.Queued(1), client.InFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	r.pub(t, "published jobs #1 to 1 subscriber(s), 0 replaced", "jobs", `{"n":1}`)
	// Holding the first message open keeps its credit: the second stays
	// queued, deterministically.
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r.pub(t, "published jobs #2 to 1 subscriber(s), 0 replaced", "jobs", `{"n":2}`)
	file, _ := testFile(t, 4096)
	stdout, stderr, code := runFlybus(t, "pub", r.sock, "jobs", `{"n":3}`, "--artifact", "f="+file, "--store", r.store, "--client", r.id("pub"))
	if code != 1 || stdout != "" || !regexp.MustCompile(`^BACKPRESSURE: .*[^)]\n$`).MatchString(stderr) {
		t.Errorf("full subscriber: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// A --store that is not the router's is refused at connect, and said.
	_, stderr, code = runFlybus(t, "pub", r.sock, "jobs", `{}`, "--artifact", "f="+file, "--store", t.TempDir(), "--client", r.id("pub"))
	if code != 1 || !regexp.MustCompile(`^flybus pub: StoreRoot \S+ does not hold the router's store store-[0-9a-f]{16}: .*--store DIR\)\n$`).MatchString(stderr) {
		t.Errorf("wrong store: exit %d, stderr %q", code, stderr)
	}

	// Two live connections cannot share a client id; the hint says what to do.
	_, stderr, code = runFlybus(t, "pub", r.sock, "jobs", `{}`, "--client", "slow-worker")
	if code != 1 || !strings.HasPrefix(stderr, "CONFLICT: ") || !strings.Contains(stderr, "pick another with --client") {
		t.Errorf("id in use: exit %d, stderr %q", code, stderr)
	}
}
