package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "bridge.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const cfg = `{"nats": {"urls": ["nats://127.0.0.1:4222"]},
 "local": {"socket": "/tmp/fb.sock", "clientId": "bridge", "storeRoot": "/dev/shm/flybus"},
 "exports": [{"topic": "cam.frames", "subject": "site.cam", "mode": "latest"}]}`

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"flybus-bridge check CONFIG", "History.Get", "\"exports\"", "-log-format"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	if errb.Len() != 0 || strings.Count(out.String(), "Usage:") != 1 {
		t.Errorf("help printed once, to stdout only: stderr %q, %d usages", errb.String(), strings.Count(out.String(), "Usage:"))
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"--bogus"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "see flybus-bridge --help") {
		t.Errorf("an unknown flag: exit %d, stderr %q", code, errb.String())
	}
}

func TestCheck(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"check", write(t, cfg)}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "export cam.frames -> site.cam.<seq> (latest)") {
		t.Fatalf("check printed %q", out.String())
	}
}

// A bad config exits 2 with a message naming the problem, whether checked
// or run.
func TestBadConfigExits2(t *testing.T) {
	bad := write(t, strings.Replace(cfg, `"mode": "latest"`, `"mode": "latest", "strem": {}`, 1))
	for _, args := range [][]string{{"check", bad}, {bad}, {"check", "/nonexistent.json"}, {}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != exitUsage {
			t.Fatalf("%v: exit %d", args, code)
		}
		if len(args) == 2 && args[1] == bad && !strings.Contains(errb.String(), `unknown field "strem"`) {
			t.Fatalf("message: %s", errb.String())
		}
	}
}
