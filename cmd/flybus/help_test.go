package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/flybus/flybus/wire"
)

// The help's walk-through, --version and the small usability rules.

// walkCommands splits the walk-through into shell command lines, joining
// continuation lines and dropping comment lines.
func walkCommands(text string) []string {
	var out []string
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur += s
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	return out
}

// startShell runs line with sh, flybus found on PATH, as a proc.
func startShell(t *testing.T, env []string, line string) *proc {
	t.Helper()
	// exec: signals reach flybus itself, as `kill %1` does in a shell.
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Env = env
	return startProc(t, cmd, []string{line}, line)
}

func TestHelpIsOneWalkThrough(t *testing.T) {
	var top bytes.Buffer
	run([]string{"--help"}, &top, &top)
	for _, c := range commands {
		var help bytes.Buffer
		run([]string{"help", c.name}, &help, &help)
		if strings.Contains(help.String(), "/run/user") {
			t.Errorf("%s's help names /run/user, which a machine without a login session lacks", c.name)
		}
		if c.name == "perf" {
			continue // a benchmark, not a step
		}
		ex := walkExample(c.name)
		if ex == "" || !strings.Contains(help.String(), "\nExample:\n"+ex) {
			t.Errorf("%s's help does not show its walk-through step %q", c.name, ex)
		}
		for _, line := range strings.Split(strings.TrimSuffix(ex, "\n"), "\n") {
			if line != "  ..." && !strings.Contains(top.String(), line+"\n") {
				t.Errorf("%s's step %q is not in the top-level walk-through", c.name, line)
			}
		}
	}
	if strings.Contains(top.String(), "/run/user") {
		t.Error("the top-level help names /run/user")
	}
}

// TestHelpWalkThroughRuns pastes the walk-through into sh, line by line, in
// its order, against the built binary. Its paths are moved into the test's
// directories; a background line is waited for until it is ready, as the
// person pasting would see it be.
func TestHelpWalkThroughRuns(t *testing.T) {
	if _, err := os.Stat("/etc/os-release"); err != nil {
		t.Skip("the walk-through attaches /etc/os-release")
	}
	bin := flybusBinary(t)
	env := append(childEnv(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	dir, store := shortDir(t), filepath.Join(t.TempDir(), "store")
	paths := strings.NewReplacer("/dev/shm/flybus", store, "/tmp/flybus", filepath.Join(dir, "flybus"))
	metrics := ""
	var serve, sub *proc
	var ready readyLine
	lines := walkCommands(walkThrough())
	if len(lines) < 10 {
		t.Fatalf("the walk-through has %d commands:\n%s", len(lines), walkThrough())
	}
	for _, line := range lines {
		line = paths.Replace(line)
		if metrics != "" {
			line = strings.ReplaceAll(line, "127.0.0.1:9100", metrics)
		}
		t.Logf("$ %s", line)
		switch {
		case strings.HasPrefix(line, "kill %1"):
			serve.signal(t, syscall.SIGTERM)
			if code := serve.wait(t); code != 0 {
				t.Fatalf("serve exit %d", code)
			}
			for _, s := range ready.Sockets {
				mustNotExist(t, s)
			}
			mustNotExist(t, filepath.Join(store, ready.StoreID))
		case strings.HasPrefix(line, "flybus serve") && strings.HasSuffix(line, "&"):
			// Port 9100 may be taken: any free port, read back from the log.
			line = strings.Replace(strings.TrimSuffix(line, "&"), "--metrics 9100", "--metrics 127.0.0.1:0 --log-format json", 1)
			serve = startShell(t, env, line)
			ready = serve.ready(t)
			metrics = serve.logValue(t, "metrics listening", "addr")
		case strings.HasPrefix(line, "flybus sub") && strings.HasSuffix(line, "&"):
			sub = startShell(t, env, strings.TrimSuffix(line, "&"))
			sub.waitOutput(t, sub.stderr, "subscribed", func(s string) bool { return strings.HasPrefix(s, "subscribed to ") })
		default:
			p := startShell(t, env, line)
			code := p.wait(t)
			want := 0
			if strings.HasPrefix(line, "flybus call") {
				// Nothing registered agent.echo; NO_SERVICE (not
				// NOT_AUTHORIZED) shows call got in as the socket's id.
				want = 1
				if !strings.HasPrefix(p.stderr.String(), "NO_SERVICE: ") {
					t.Errorf("%s: stderr %q, want NO_SERVICE", line, p.stderr)
				}
			}
			if code != want {
				t.Fatalf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", line, code, want, p.stdout, p.stderr)
			}
			if strings.HasPrefix(line, "flybus pub") {
				if code := sub.wait(t); code != 0 {
					t.Fatalf("sub exit %d", code)
				}
			}
		}
	}
	if serve == nil || sub == nil || serve.code != 0 {
		t.Fatal("the walk-through did not start and stop serve and sub")
	}
	want, _ := os.ReadFile("/etc/os-release")
	got, err := os.ReadFile(filepath.Join(dir, "flybus-frames", "1-note"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("sub saved %q (%v), want /etc/os-release's bytes", got, err)
	}
}

func TestVersion(t *testing.T) {
	var a, b, errb bytes.Buffer
	if code := run([]string{"--version"}, &a, &errb); code != 0 {
		t.Fatalf("--version: exit %d, %s", code, errb.String())
	}
	if code := run([]string{"version"}, &b, &errb); code != 0 || a.String() != b.String() {
		t.Fatalf("version: exit %d, output differs from --version:\n%s\n%s", code, a.String(), b.String())
	}
	for _, want := range []string{"flybus ", "\nwire 1.2\n", "\ncontractDigest " + wire.ContractDigest() + "\n"} {
		if !strings.Contains("\n"+a.String(), "\n"+strings.TrimPrefix(want, "\n")) {
			t.Errorf("version output lacks %q:\n%s", want, a.String())
		}
	}

	stamped := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/flybus/flybus", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := versionText(stamped, true)
	if !strings.HasPrefix(got, "flybus v1.2.3\nrevision abc123 2026-01-02T03:04:05Z modified\ngo go1.26.0 ") {
		t.Errorf("stamped build:\n%s", got)
	}
	for _, bi := range []*debug.BuildInfo{nil, {Main: debug.Module{Version: "(devel)"}}} {
		if got := versionText(bi, bi != nil); !strings.HasPrefix(got, "flybus devel\ngo ") {
			t.Errorf("unstamped build:\n%s", got)
		}
	}
}

func TestDurationFlagsSuggestAUnit(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--hello-timeout", "5"}, `flybus serve: invalid value "5" for flag --hello-timeout: a duration needs a unit; did you mean 5s?`},
		{[]string{"call", "s", "svc", "M", "{}", "--timeout", "1.5"}, "did you mean 1.5s?"},
		{[]string{"stats", "--timeout", "soon"}, "not a duration; write it like 500ms, 10s or 2m"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

func TestMetricsAddrTakesAURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:9100": "127.0.0.1:9100", "http://127.0.0.1:9100/": "127.0.0.1:9100",
		"http://127.0.0.1:9100/metrics": "127.0.0.1:9100", "http://[::1]:9": "[::1]:9", "http://:9100": "127.0.0.1:9100",
	} {
		if got, err := metricsAddr(in); err != nil || got != want {
			t.Errorf("metricsAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"https://127.0.0.1:9100":    "speaks plain http, not https",
		"http://":                   "want http://HOST:PORT",
		"http://127.0.0.1:9100/x/y": "want http://HOST:PORT",
	} {
		if _, err := metricsAddr(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("metricsAddr(%q): %v, want %q", in, err, want)
		}
	}
}
