package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flybus/flybus/wire"
)

// TestDemoPrintsEveryStep runs the demo in-process and asserts every line.
func TestDemoPrintsEveryStep(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"demo", "--store", t.TempDir()}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	want := []string{
		"router: up, policy closed: counter, camera and observer admitted",
		"clients: counter, camera and observer connected (contract " + wire.ContractDigest()[:12] + "...)",
		"counter: registered example.counter",
		"observer: Counter.Increment(1) -> total 1 (answered by counter)",
		"observer: Counter.Increment(2) -> total 3 (answered by counter)",
		"observer: Counter.Increment(3) -> total 6 (answered by counter)",
		"camera: Counter.Increment refused: NOT_AUTHORIZED (no call grant)",
		"observer: subscribed to demo.frames (latest, 1 in flight)",
		"camera: sealed a 640x480 RGBA frame, 1228800 bytes (lease, no bytes copied)",
		"camera: published frame #1 to 1 subscriber(s)",
		"observer: got frame #1, took the artifact, closed the message",
		"observer: read the held frame after its message: 1228800 bytes, digest matches",
		"router: frame collected after its last owner let go (artifacts 0, roots 0, collected 1)",
		"router: shutting down",
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got  %s\n want %s", i+1, got[i], want[i])
		}
	}
	if errb.Len() != 0 {
		t.Errorf("stderr: %s", errb.String())
	}
}
