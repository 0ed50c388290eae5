package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flybus/flybus/wire"
)

// Payloads from a file or stdin, their errors, and the envelope's limit.

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPubPayloadFromFileAndStdin(t *testing.T) {
	r := startOpenRouter(t)
	r.declare(t, "t")
	sub := startSub(t, r.sock, "t", "--count", "2", "--bounded")

	file := writeFile(t, "p.json", "{\n  \"from\": \"file\"\n}\n")
	r.pub(t, "published t #1 to 1 subscriber(s), 0 replaced", "t", "@"+file)
	stdout, stderr, code := runFlybusStdin(t, `{"from":"stdin"}`+"\n", "pub", r.sock, "t", "-")
	if code != 0 || stdout != "published t #2 to 1 subscriber(s), 0 replaced\n" {
		t.Fatalf("pub -: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code := sub.wait(t); code != 0 {
		t.Fatalf("sub exit %d", code)
	}
	if got, want := sub.stdout.String(), "#1 t {\"from\":\"file\"}\n#2 t {\"from\":\"stdin\"}\n"; got != want {
		t.Errorf("sub printed %q, want %q", got, want)
	}

	// The errors name the source and the scanner's reason.
	dup := writeFile(t, "dup.json", `{"a":1,"a":2}`)
	_, stderr, code = runFlybus(t, "pub", r.sock, "t", "@"+dup)
	if want := "flybus pub: the payload in " + dup + ` is not strict JSON: duplicate key "a" at offset 7` + "\nsee flybus pub --help\n"; code != 2 || stderr != want {
		t.Errorf("duplicate key in a file: exit %d, stderr %q, want %q", code, stderr, want)
	}
	_, stderr, code = runFlybusStdin(t, `{"a":"x`, "pub", r.sock, "t", "-")
	if code != 2 || !strings.Contains(stderr, "the payload on stdin is not strict JSON: unterminated string at offset 7\n") {
		t.Errorf("stdin: exit %d, stderr %q", code, stderr)
	}
}

func TestCallPayloadFromFileStdinAndArtifacts(t *testing.T) {
	r := startOpenRouter(t)
	svc := connect(t, r.sock, "agent-a")
	serveEcho(t, svc, "agent.echo")
	file := writeFile(t, "p.json", `{"n":7}`)
	for _, tc := range []struct{ in, arg string }{{"", "@" + file}, {`{"n":7}`, "-"}} {
		stdout, stderr, code := runFlybusStdin(t, tc.in, "call", r.sock, "agent.echo", "Echo", tc.arg)
		var got struct{ Echo struct{ N int } }
		if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.Echo.N != 7 {
			t.Errorf("call %s: exit %d, stdout %q, stderr %q", tc.arg, code, stdout, stderr)
		}
	}

	// call attaches files as pub does: a service sees them.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, err := svc.Register(ctx, "agent.files")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	go func() {
		for {
			req, err := reg.Next(ctx)
			if err != nil {
				return
			}
			sizes := map[string]uint64{}
			for _, name := range req.Attachments() {
				if a, err := req.Artifact(name); err == nil {
					sizes[name] = a.Ref().ByteLength
					a.Close()
				}
			}
			_, _ = req.Reply(ctx, sizes)
			req.Close()
		}
	}()
	blob, _ := testFile(t, 100_000)
	stdout, stderr, code := runFlybus(t, "call", r.sock, "agent.files", "Put", `{}`,
		"--artifact", "blob="+blob, "--store", r.store)
	if code != 0 || stdout != `{"blob":100000}`+"\n" {
		t.Errorf("call --artifact: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestOversizeEnvelopeSaysAttachAnArtifact(t *testing.T) {
	r := startOpenRouter(t)
	r.declare(t, "t")
	hint := "put the bytes in a file and attach it as an artifact (--artifact NAME=FILE --store DIR)"

	// Under the limit alone, over it once in an envelope: the SDK refuses.
	near := `{"pad":"` + strings.Repeat("x", wire.MaxEnvelopeBytes-40) + `"}`
	_, stderr, code := runFlybus(t, "pub", r.sock, "t", near)
	if code != 1 || !strings.HasPrefix(stderr, "INVALID_ENVELOPE: ") || !strings.Contains(stderr, hint) {
		t.Errorf("near the limit: exit %d, stderr %q", code, stderr)
	}
	// Over the limit by itself: refused before connecting.
	big := writeFile(t, "big.json", `{"pad":"`+strings.Repeat("x", 100_000)+`"}`)
	for _, args := range [][]string{{"pub", r.sock, "t", "@" + big}, {"call", r.sock, "svc", "M", "@" + big}} {
		_, stderr, code = runFlybus(t, args...)
		if code != 2 || !strings.Contains(stderr, "the payload in "+big+" is over 65,536 bytes") || !strings.Contains(stderr, hint) {
			t.Errorf("%s over the limit: exit %d, stderr %q", args[0], code, stderr)
		}
	}
}
