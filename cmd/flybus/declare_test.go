package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestDeclareRefusesBeforeConnecting(t *testing.T) {
	nowhere := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"Args/TooFew", []string{nowhere}, "want SOCKET TOPIC, got 1"},
		{"Args/TooMany", []string{nowhere, "t", "u"}, "want SOCKET TOPIC, got 3"},
		{"Topic/Invalid", []string{nowhere, "cam.frames."}, `"cam.frames." is not a topic name`},
		{"Retained/Unknown", []string{nowhere, "t", "--retained", "all"}, `--retained is latest or none, not "all"`},
		{"Client/Invalid", []string{nowhere, "t", "--client", "A"}, `"A" is not a valid client id`},
		{"Timeout/Negative", []string{nowhere, "t", "--timeout", "-1s"}, "--timeout must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"declare"}, tc.args...), &out, &errb)
			if code != exitUsage || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "see flybus declare --help") {
				t.Errorf("exit %d, stderr %q, want exit 2 and %q", code, errb.String(), tc.want)
			}
		})
	}
}

func TestDeclareCommand(t *testing.T) {
	r := startOpenRouter(t)
	r.declare(t, "cam.frames", "--retained", "latest")

	stdout, stderr, code := runFlybus(t, "declare", r.sock, "cam.frames", "--retained", "latest", "--client", "other")
	if code != 0 || !regexp.MustCompile(`^cam\.frames already declared \(incarnation top-\d+\)\n$`).MatchString(stdout) {
		t.Errorf("redeclare: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// The default retention is none, which conflicts with latest.
	stdout, stderr, code = runFlybus(t, "declare", r.sock, "cam.frames")
	if code != 1 || stdout != "" || !regexp.MustCompile(`^CONFLICT: .*[^)]\n$`).MatchString(stderr) {
		t.Errorf("conflicting redeclare: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	_, stderr, code = runFlybus(t, "declare", filepath.Join(shortDir(t), "none.sock"), "t")
	if code != 1 || !strings.HasPrefix(stderr, "flybus declare: ") {
		t.Errorf("no router: exit %d, stderr %q", code, stderr)
	}
}
