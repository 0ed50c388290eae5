package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
)

// Helpers for the end-to-end tests: the flybus binary is built once per
// test process and run as a child; every wait is on a pipe, a channel or a
// process exit, bounded by testTimeout only so that a hang fails the test.

const testTimeout = 30 * time.Second

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// flybusBinary builds the command once, with -race when the tests run
// with it, and returns its path.
func flybusBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "flybus-bin"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "flybus")
		args := []string{"build", "-o", buildBin}
		if raceBuild {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// childEnv skips the race runtime's one-second sleep at exit, which would
// otherwise dominate every run of a -race binary.
func childEnv() []string { return append(os.Environ(), "GORACE=atexit_sleep_ms=0") }

// shortDir is a directory for sockets: t.TempDir() paths can exceed the
// 107 bytes a Unix socket path may hold.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// watchBuffer collects a child's output and wakes waiters on every write.
type watchBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newWatchBuffer() *watchBuffer { return &watchBuffer{changed: make(chan struct{})} }

func (b *watchBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return len(p), nil
}

// snapshot returns the output so far and a channel closed by the next write.
func (b *watchBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), b.changed
}

func (b *watchBuffer) String() string { s, _ := b.snapshot(); return s }

// proc is a running flybus child.
type proc struct {
	args           []string
	cmd            *exec.Cmd
	stdout, stderr *watchBuffer
	exited         chan struct{}
	code           int // valid once exited is closed
}

// startFlybus starts the binary; cleanup kills and reaps it if the test
// did not, and shows its stderr when the test failed.
func startFlybus(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(flybusBinary(t), args...)
	cmd.Env = childEnv()
	return startProc(t, cmd, args, "flybus "+strings.Join(args, " "))
}

// startProc starts cmd as a proc with watched output; cleanup kills and
// reaps it if the test did not, and shows its output, under label, when the
// test failed.
func startProc(t *testing.T, cmd *exec.Cmd, args []string, label string) *proc {
	t.Helper()
	p := &proc{cmd: cmd, args: args, stdout: newWatchBuffer(), stderr: newWatchBuffer(), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s\nstdout:\n%s\nstderr:\n%s", label, p.stdout, p.stderr)
		}
	})
	return p
}

// waitOutput waits until pred holds for the whole of buf's output.
func (p *proc) waitOutput(t *testing.T, buf *watchBuffer, what string, pred func(string) bool) string {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for {
		s, changed := buf.snapshot()
		if pred(s) {
			return s
		}
		select {
		case <-changed:
		case <-p.exited:
			// Wait has copied all output by now.
			if s := buf.String(); pred(s) {
				return s
			}
			t.Fatalf("flybus exited with %d before %s", p.code, what)
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// ready waits for the ready line and decodes it strictly.
func (p *proc) ready(t *testing.T) readyLine {
	t.Helper()
	out := p.waitOutput(t, p.stdout, "the ready line", func(s string) bool { return strings.Contains(s, "\n") })
	line, _, _ := strings.Cut(out, "\n")
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	var r readyLine
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("ready line %q: %v", line, err)
	}
	return r
}

// logValue waits for a JSON log record with msg and returns its key.
func (p *proc) logValue(t *testing.T, msg, key string) string {
	t.Helper()
	var value string
	p.waitOutput(t, p.stderr, "log "+msg, func(s string) bool {
		sc := bufio.NewScanner(strings.NewReader(s))
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
				value, _ = rec[key].(string)
				return true
			}
		}
		return false
	})
	return value
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the child to exit and returns its status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(testTimeout):
		t.Fatalf("flybus %v did not exit", p.args)
		return -1
	}
}

// runFlybus runs the binary to completion.
func runFlybus(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runFlybusStdin(t, "", args...)
}

// runFlybusStdin runs the binary to completion with in on its stdin.
func runFlybusStdin(t *testing.T, in string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, flybusBinary(t), args...)
	cmd.Env = childEnv()
	cmd.Stdin = strings.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("flybus %v: %v", args, ctx.Err())
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("flybus %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// connect opens an SDK client that the test's cleanup closes.
func connect(t *testing.T, socket, id string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := client.ConnectUnix(ctx, socket, client.Config{ClientID: id})
	if err != nil {
		t.Fatalf("connect %s as %s: %v", socket, id, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// serveEcho registers name on c and answers every request with its method
// and payload until the test ends.
func serveEcho(t *testing.T, c *client.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := c.Register(ctx, name)
	if err != nil {
		cancel()
		t.Fatalf("register %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			req, err := svc.Next(ctx)
			if err != nil {
				return
			}
			_, _ = req.Reply(ctx, map[string]any{"method": req.Method, "echo": json.RawMessage(req.Payload)})
			req.Close()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		svc.Close()
	})
}

// mustNotExist fails when path exists.
func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists (or cannot be checked: %v)", path, err)
	}
}
