package bustest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildOut  []byte
)

// Main runs a test binary's tests, then removes the flybus that
// FlybusBinary built, if it built one: a package that calls FlybusBinary
// has func TestMain(m *testing.M) { bustest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// FlybusBinary builds cmd/flybus once per test binary and returns its
// path, for tests that need a router in a process of its own (to kill it).
// The package's TestMain removes it at the end (Main).
func FlybusBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "flybus-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "flybus")
		buildOut, buildErr = exec.Command(goTool, "build", "-o", builtBin, "github.com/flybus/flybus/cmd/flybus").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build flybus: %v\n%s", buildErr, buildOut)
	}
	return builtBin
}

// Serve starts `flybus serve --open --store root --listen sock` and the
// extra flags, waits for its ready line and returns the process and its
// store id. The process is killed at cleanup if the test has not reaped it.
func Serve(t *testing.T, bin, root, sock string, flags ...string) (*exec.Cmd, string) {
	t.Helper()
	return StartServe(t, exec.Command(bin, append([]string{"serve", "--open", "--store", root, "--listen", sock}, flags...)...))
}

// StartServe starts cmd, a flybus serve however launched, and waits for
// its ready line.
func StartServe(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, string) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, &stderr
	err = cmd.Start()
	pw.Close() // the child has its own copy
	if err != nil {
		pr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		pr.Close()
		if t.Failed() {
			t.Logf("flybus serve stderr:\n%s", stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		for sc.Scan() { // never let the child block on stdout
		}
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(20 * time.Second):
		t.Fatal("flybus serve printed no ready line")
	}
	var ready struct {
		Ready   bool   `json:"ready"`
		StoreID string `json:"storeId"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || !ready.Ready || ready.StoreID == "" {
		t.Fatalf("ready line %q: %v", line, err)
	}
	return cmd, ready.StoreID
}
