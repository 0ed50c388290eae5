package perf

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/flybus/flybus/store"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// processRouter is `flybus serve` in its own process.
type processRouter struct {
	cmd     *exec.Cmd
	pid     int
	inf     Router
	metrics metricsStats
	http    *http.Client // for profiles: no overall timeout

	exited chan struct{} // closed once Wait returned
	status int           // exit status, valid after exited
	tail   *lineTail     // the end of its log, for error messages
}

// readyTimeout bounds the wait for the ready line and the metrics address.
const readyTimeout = 15 * time.Second

// readyLine is what `flybus serve` prints on stdout once every socket
// listens. Metrics is read when a future serve prints it; today the
// address comes from the "metrics listening" log line.
type readyLine struct {
	Ready    bool     `json:"ready"`
	RouterID string   `json:"routerId"`
	StoreID  string   `json:"storeId"`
	Sockets  []string `json:"sockets"`
	Metrics  string   `json:"metrics"`
}

// logLine is the part of serve's JSON log lines the harness reads.
type logLine struct {
	Msg      string `json:"msg"`
	Addr     string `json:"addr"`
	StoreDir string `json:"storeDir"`
}

func startProcess(ctx context.Context, binary, storeRoot string, mode store.Mode, sock string, env []string) (*processRouter, error) {
	cmd := exec.Command(binary, "serve", "--open", "--store", storeRoot, "--store-mode", mode.String(), "--listen", sock,
		"--metrics", "127.0.0.1:0", "--pprof", "--log-format", "json", // --pprof: --cpuprofile fetches the router's profile
		"--limit", "maxClients=256") // the sweep's 64 consumers and their producer pass the default 64
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// Its own process group, so a terminal's ^C reaches only the harness,
	// which then stops the router in order; and SIGTERM if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p := &processRouter{cmd: cmd, exited: make(chan struct{}), status: -1, tail: &lineTail{max: 20}}
	ready := make(chan readyLine, 1)
	badReady := make(chan string, 1)
	metricsAddr := make(chan string, 1)
	storeDir := make(chan string, 1)

	readStdout := func(stdout io.Reader) {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if !first {
				continue // serve prints one line; drain anything else
			}
			first = false
			var rl readyLine
			if err := json.Unmarshal(sc.Bytes(), &rl); err != nil || !rl.Ready {
				badReady <- sc.Text()
				continue
			}
			ready <- rl
		}
	}
	readStderr := func(stderr io.Reader) {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			p.tail.add(sc.Text())
			var l logLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			switch {
			case l.Msg == "metrics listening" && l.Addr != "":
				select {
				case metricsAddr <- l.Addr:
				default:
				}
			case l.StoreDir != "":
				select {
				case storeDir <- l.StoreDir:
				default:
				}
			}
		}
	}
	err := startReading(cmd, readStdout, readStderr, func(err error) {
		var ee *exec.ExitError
		switch {
		case err == nil:
			p.status = 0
		case errors.As(err, &ee):
			p.status = ee.ExitCode()
		}
		close(p.exited)
	})
	if err != nil {
		return nil, err
	}
	p.pid = cmd.Process.Pid

	fail := func(err error) (*processRouter, error) {
		kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.stop(kctx)
		return nil, fmt.Errorf("%w%s", err, p.tail.text())
	}
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	var rl readyLine
	select {
	case rl = <-ready:
	case line := <-badReady:
		return fail(fmt.Errorf("%s serve printed %q, not a ready line", binary, line))
	case <-p.exited:
		return fail(fmt.Errorf("%s serve exited with status %d before it was ready", binary, p.status))
	case <-timer.C:
		return fail(fmt.Errorf("%s serve printed no ready line within %v", binary, readyTimeout))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	addr := rl.Metrics
	if addr == "" {
		select {
		case addr = <-metricsAddr:
		case <-p.exited:
			return fail(fmt.Errorf("%s serve exited with status %d", binary, p.status))
		case <-timer.C:
			return fail(errors.New("the router logged no \"metrics listening\" line with its address"))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	p.inf = Router{Mode: "process", Binary: binary, PID: p.pid, RouterID: rl.RouterID, Socket: sock,
		Metrics: addr, ExitStatus: -1}
	select {
	case p.inf.StoreDir = <-storeDir:
	case <-time.After(time.Second): // only informative
		p.inf.StoreDir = filepath.Join(storeRoot, rl.StoreID)
	}
	p.metrics = metricsStats{url: "http://" + addr + "/metrics", client: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}}}
	p.http = &http.Client{Transport: &http.Transport{DisableCompression: true}}
	return p, nil
}

// startReading starts cmd with its stdout and stderr read by readStdout
// and readStderr, a goroutine each, and whatever they leave discarded, so
// that the child never blocks on a full pipe. Once both pipes are read to
// the end (Wait must follow the last read of the pipes) it calls exited
// with Wait's error.
func startReading(cmd *exec.Cmd, readStdout, readStderr func(io.Reader), exited func(error)) error {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var readers sync.WaitGroup
	for _, pipe := range []struct {
		r    io.Reader
		read func(io.Reader)
	}{{stdout, readStdout}, {stderr, readStderr}} {
		readers.Go(func() {
			pipe.read(pipe.r)
			io.Copy(io.Discard, pipe.r)
		})
	}
	go func() {
		readers.Wait()
		exited(cmd.Wait())
	}()
	return nil
}

// awaitExit waits until exited is closed; if ctx ends first, it kills
// cmd's process, waits still and reports false.
func awaitExit(ctx context.Context, cmd *exec.Cmd, exited <-chan struct{}) bool {
	select {
	case <-exited:
		return true
	case <-ctx.Done():
		cmd.Process.Kill()
		<-exited
		return false
	}
}

func (p *processRouter) info() Router {
	inf := p.inf
	select {
	case <-p.exited:
		inf.ExitStatus = p.status
	default:
	}
	return inf
}

func (p *processRouter) stats() statsSource          { return p.metrics }
func (p *processRouter) cpu() (time.Duration, error) { return ProcessCPU(p.pid) }
func (p *processRouter) what() string                { return "router process" }
func (p *processRouter) memory() (Memory, error)     { return ReadMemory(p.pid) }
func (p *processRouter) resetPeak() error            { return ResetPeakRSS(p.pid) }

// profile fetches /debug/pprof/profile?seconds=N from the router's
// metrics endpoint in the background.
func (p *processRouter) profile(ctx context.Context, seconds int, file string) (func() error, error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.inf.Metrics, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		f.Close()
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		resp, err := p.http.Do(req)
		if err != nil {
			done <- errors.Join(err, f.Close())
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			done <- errors.Join(fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(msg))), f.Close())
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return func() error { return <-done }, nil
}

// stop sends SIGTERM and waits for a clean exit (status 0: sockets and
// store directory removed); after ctx ends it kills the process.
func (p *processRouter) stop(ctx context.Context) error {
	select {
	case <-p.exited:
	default:
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return err
		}
		if !awaitExit(ctx, p.cmd, p.exited) {
			return fmt.Errorf("the router did not stop after SIGTERM; killed%s", p.tail.text())
		}
	}
	if p.status != 0 {
		return fmt.Errorf("the router exited with status %d%s", p.status, p.tail.text())
	}
	return nil
}

// lineTail keeps the last lines of a log.
type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		t.lines = append(t.lines[:0], t.lines[1:]...)
	}
	t.lines = append(t.lines, s)
}

// text is the tail as an indented block after a newline, or "".
func (t *lineTail) text() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return "; its log ends:\n  " + strings.Join(t.lines, "\n  ")
}

// givenExecutable is a path a flag gave, made absolute and checked to be
// an executable file.
func givenExecutable(given string) (string, error) {
	abs, err := filepath.Abs(given)
	if err != nil {
		return "", err
	}
	if err := executable(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// locateFlybus finds the flybus executable for process mode: the given
// path; else this executable when it is flybus (`flybus perf`); else a
// flybus beside this executable; else one built from the module that
// holds the working directory into dir.
func locateFlybus(ctx context.Context, given, dir string) (path, how string, err error) {
	if given != "" {
		abs, err := givenExecutable(given)
		if err != nil {
			return "", "", err
		}
		return abs, "--flybus", nil
	}
	if exe, err := os.Executable(); err == nil {
		if filepath.Base(exe) == "flybus" {
			return exe, "this executable", nil
		}
		beside := filepath.Join(filepath.Dir(exe), "flybus")
		if executable(beside) == nil {
			return beside, "beside this executable", nil
		}
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", "", fmt.Errorf("no flybus executable found and cannot build one (%w); pass --flybus PATH", err)
	}
	out := filepath.Join(dir, "flybus")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/flybus")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/flybus in %s: %v\n%s(pass --flybus PATH)", root, err, msg)
	}
	return out, "go build ./cmd/flybus", nil
}

func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// moduleRoot is the directory of the flybus module holding the working
// directory, asked of the go command.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("the working directory is not inside a Go module")
	}
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if strings.TrimSpace(first) != "module github.com/flybus/flybus" {
		return "", fmt.Errorf("%s is not the flybus module", gomod)
	}
	return filepath.Dir(gomod), nil
}
