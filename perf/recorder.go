package perf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// recorderLimit bounds the fast consumers' frame-latency p99 with a
// recorder beside them over their p99 without it. It is the noise bound
// the isolation comparison allows too (isolationLimit): two passes of the
// same schedule, one after the other, differ by that much with nothing
// changed between them.
const recorderLimit = isolationLimit

// recorderStopTimeout bounds the recorder's exit after SIGTERM: it
// finishes the frame in hand and writes the file's summary and indexes.
const recorderStopTimeout = 15 * time.Second

// recorderPlan asks a schedule for a `flybus record` of its frame topic.
type recorderPlan struct {
	binary string // the flybus executable
	found  string // how it was found
}

// findRecorder picks the flybus executable the recorder runs: the
// router's own in process mode; in embedded mode the one process mode
// would use (locateFlybus), built into dir if need be.
func findRecorder(ctx context.Context, cfg Config, dir string, router Router) (*recorderPlan, error) {
	if router.Binary != "" {
		return &recorderPlan{binary: router.Binary, found: router.Found}, nil
	}
	bin, how, err := locateFlybus(ctx, cfg.Flybus, dir)
	if err != nil {
		return nil, fmt.Errorf("the recorder needs a flybus executable: %w", err)
	}
	return &recorderPlan{binary: bin, found: how}, nil
}

// RecorderRun is the `flybus record` process of the recorder
// comparison's second pass.
type RecorderRun struct {
	Binary string   `json:"binary"`
	Found  string   `json:"binaryFrom"`
	Args   []string `json:"args"`
	PID    int      `json:"pid"`
	// File is the recording, on the store's filesystem; FileBytes its size
	// when the recorder had exited, and Removed whether it is gone since.
	File      string `json:"file"`
	FileBytes int64  `json:"fileBytes"`
	Removed   bool   `json:"fileRemoved"`
	// Ready: it printed its "recording" line (subscribed) before the
	// producer's first frame.
	Ready bool `json:"ready"`
	// Publications is what it says it recorded, in its last line.
	Publications uint64 `json:"publications"`
	LastLine     string `json:"lastLine,omitempty"`
	// CPU is its time on a CPU (ProcessCPU) just before SIGTERM; StartCPU the same once
	// it was recording (start-up, connecting, subscribing, opening the
	// file). CPUPerFrameUs is the difference per frame produced: what
	// recording cost, without what starting cost.
	CPUNs         time.Duration `json:"cpuNs"`
	StartCPUNs    time.Duration `json:"startCpuNs"`
	CPUPerFrameUs float64       `json:"cpuPerFrameUs"`
	CPUErr        string        `json:"cpuError,omitempty"`
	// ExitStatus after SIGTERM: 0 is a clean stop; -1 until it exited, or
	// when a signal ended it. Ended says how it ended, in words.
	ExitStatus int    `json:"exitStatus"`
	Ended      string `json:"ended,omitempty"`
}

// recorderProc is a running `flybus record`.
type recorderProc struct {
	cmd    *exec.Cmd
	out    *RecorderRun
	dir    string        // holds out.File; removed by stop
	exited chan struct{} // closed once Wait returned and both pipes are read
	status int           // exit status, valid after exited; -1 when killed by a signal
	state  string        // how it ended ("exit status 1", "signal: killed"), valid after exited
	tail   *lineTail     // the end of its stderr
}

// recordedLine is flybus record's last line on stderr, printed once the
// file is complete: "recorded 300 publications (300 artifacts, 351.6 MiB
// of them; 351.6 MiB written) in 5.1s to FILE".
var recordedLine = regexp.MustCompile(`^recorded (\d+) publications \((\d+) artifacts, [^;]* of them; [^)]* written\) in \S+ to (.+)$`)

// parseRecorded reads the publication count and the file out of flybus
// record's last line.
func parseRecorded(line string) (publications uint64, file string, err error) {
	m := recordedLine.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return 0, "", fmt.Errorf("the recorder's last line %q does not read \"recorded N publications (...) in D to FILE\"", line)
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("the recorder's last line %q: publication count: %w", line, err)
	}
	return n, m[3], nil
}

// startRecorder starts `flybus record` on the schedule's frame topic in
// latest mode (its default), writing to a file in a fresh directory under
// the store root, so that its writes land on the store's filesystem, and
// returns once it said it is recording. On failure nothing is left: the
// process is reaped and the directory removed.
func (s *schedule) startRecorder(ctx context.Context) (*recorderProc, error) {
	plan := s.env.recorder
	dir, err := os.MkdirTemp(s.env.storeRoot, "perf-recorder-")
	if err != nil {
		return nil, fmt.Errorf("a directory for the recording: %w", err)
	}
	file := filepath.Join(dir, "frames.mcap")
	args := []string{"record", s.env.sock, s.topic, "--store", s.env.storeRoot, "-o", file,
		// Named like the harness's clients, so that the router's snapshot tells it apart.
		"--client", fmt.Sprintf("perf-s%d-recorder", s.env.index)}
	out := &RecorderRun{Binary: plan.binary, Found: plan.found, Args: args, File: file, ExitStatus: -1}
	s.out.Recorder = out
	p := &recorderProc{cmd: exec.Command(plan.binary, args...), out: out, dir: dir, exited: make(chan struct{}),
		status: -1, tail: &lineTail{max: 20}}
	// Its own process group, so that a terminal's ^C reaches only the
	// harness, which then stops it in order; and SIGTERM if we die.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	ready := make(chan struct{}, 1)
	readStderr := func(r io.Reader) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			p.tail.add(sc.Text())
			if strings.HasPrefix(sc.Text(), "recording ") {
				select {
				case ready <- struct{}{}:
				default:
				}
			}
		}
	}
	err = startReading(p.cmd, func(io.Reader) {}, readStderr, func(err error) {
		var ee *exec.ExitError
		switch {
		case err == nil:
			p.status, p.state = 0, "exit status 0"
		case errors.As(err, &ee):
			p.status, p.state = ee.ExitCode(), ee.ProcessState.String()
		default:
			p.state = err.Error()
		}
		close(p.exited)
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s record: %w", plan.binary, err)
	}
	out.PID = p.cmd.Process.Pid

	timer := time.NewTimer(setupTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		out.Ready = true
		if cpu, err := ProcessCPU(out.PID); err == nil {
			out.StartCPUNs = cpu
		} else {
			out.CPUErr = err.Error()
		}
		return p, nil
	case <-p.exited:
		err = fmt.Errorf("%s record ended (%s) before it was recording", plan.binary, p.state)
	case <-timer.C:
		err = fmt.Errorf("%s record printed no \"recording\" line within %v", plan.binary, setupTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if serr := p.stop(0); serr != nil {
		return nil, fmt.Errorf("%w; stopping it: %w", err, serr) // serr ends with its stderr
	}
	return nil, fmt.Errorf("%w%s", err, p.tail.text())
}

// stop reads the recorder's CPU, sends it SIGTERM, waits for it to exit
// (killing it after recorderStopTimeout), reads its last line and removes
// the recording. frames is what the producer published, for the CPU per
// frame. Every step runs whatever the earlier ones returned, so that
// nothing outlives the pass.
func (p *recorderProc) stop(frames int) error {
	out := p.out
	var errs []string // one line in the report, so not errors.Join
	select {
	case <-p.exited:
		if out.Ready {
			errs = append(errs, fmt.Sprintf("the recorder ended (%s) during the pass", p.state))
		}
	default:
		if out.Ready {
			cpu, err := ProcessCPU(out.PID)
			if err != nil {
				out.CPUErr = err.Error()
			} else {
				out.CPUNs = cpu
				if out.CPUErr == "" && frames > 0 { // the start reading too
					out.CPUPerFrameUs = float64(cpu-out.StartCPUNs) / float64(time.Microsecond) / float64(frames)
				}
			}
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Sprintf("SIGTERM to the recorder: %v", err))
		}
		ctx, cancel := context.WithTimeout(context.Background(), recorderStopTimeout)
		if !awaitExit(ctx, p.cmd, p.exited) {
			errs = append(errs, fmt.Sprintf("the recorder did not exit within %v of SIGTERM; killed", recorderStopTimeout))
		} else if p.status != 0 {
			errs = append(errs, fmt.Sprintf("the recorder ended (%s) after SIGTERM, not with status 0", p.state))
		}
		cancel()
	}
	out.ExitStatus, out.Ended = p.status, p.state
	if out.Ready {
		out.LastLine = p.tail.last()
		n, file, err := parseRecorded(out.LastLine)
		switch {
		case err != nil:
			errs = append(errs, err.Error())
		case file != out.File:
			errs = append(errs, fmt.Sprintf("the recorder says it recorded to %s, not %s", file, out.File))
		default:
			out.Publications = n
		}
	}
	if st, err := os.Stat(out.File); err == nil {
		out.FileBytes = st.Size()
	}
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, fmt.Sprintf("remove the recording: %v", err))
	} else {
		out.Removed = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s%s", strings.Join(errs, "; "), p.tail.text())
	}
	return nil
}

// last is the last line kept, or "".
func (t *lineTail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return t.lines[len(t.lines)-1]
}

// stopRecorder stops the schedule's recorder after its last frame and the
// drain, counting what went wrong in the schedule's errors.
func (s *schedule) stopRecorder(p *recorderProc) {
	s.mu.Lock()
	frames := s.out.Frames
	s.mu.Unlock()
	if err := p.stop(frames); err != nil {
		s.errs.Add("recorder", err)
	}
}

// RecorderComparison is the recorder comparison: two one-agent passes run
// one after the other, identical but for a `flybus record` of the frame
// topic in the second.
type RecorderComparison struct {
	Without *Schedule     `json:"without"`
	With    *Schedule     `json:"with"`
	Rows    []RecorderRow `json:"rows"`
}

// RecorderRow is one figure's p50 and p99 in both passes and the ratios
// with ÷ without. A row with a Limit is the target (the fast consumers'
// frame latency, judged on the p99); the others are for comparison. The
// target is measured only when the recorder recorded something: a
// recorder that never started, or took nothing, loaded nobody.
type RecorderRow struct {
	Figure       string  `json:"figure"`
	WithoutP50Ns int64   `json:"withoutP50Ns"`
	WithoutP99Ns int64   `json:"withoutP99Ns"`
	WithP50Ns    int64   `json:"withP50Ns"`
	WithP99Ns    int64   `json:"withP99Ns"`
	P50Ratio     float64 `json:"p50Ratio"`
	P99Ratio     float64 `json:"p99Ratio"`
	Limit        float64 `json:"limit,omitempty"`
	Measured     bool    `json:"measured"`
	Met          bool    `json:"met,omitempty"`
}

// Met reports whether every target row was measured and met.
func (rc *RecorderComparison) Met() bool {
	for _, r := range rc.Rows {
		if r.Limit > 0 && (!r.Measured || !r.Met) {
			return false
		}
	}
	return true
}

// compareRecorder builds the rows from the two passes.
func compareRecorder(without, with *Schedule) *RecorderComparison {
	rc := &RecorderComparison{Without: without, With: with}
	recorded := with.Recorder != nil && with.Recorder.Ready && with.Recorder.Publications > 0
	row := func(name string, limit float64, a, b *Hist) {
		r := RecorderRow{Figure: name, Limit: limit}
		x, y := a.Summary(), b.Summary()
		r.WithoutP50Ns, r.WithoutP99Ns = int64(x.P50), int64(x.P99)
		r.WithP50Ns, r.WithP99Ns = int64(y.P50), int64(y.P99)
		if x.Count > 0 && y.Count > 0 && x.P50 > 0 && x.P99 > 0 && (limit == 0 || recorded) {
			r.Measured = true
			r.P50Ratio, r.P99Ratio = float64(y.P50)/float64(x.P50), float64(y.P99)/float64(x.P99)
			r.Met = limit > 0 && r.P99Ratio <= limit
		}
		rc.Rows = append(rc.Rows, r)
	}
	row("fast consumers: frame latency, fill start to every line touched", recorderLimit, without.FrameLatency, with.FrameLatency)
	row("fast consumers: delivery, before Publish to first byte", 0, without.DeliveryFast, with.DeliveryFast)
	row("producer: publish admission of frames", 0, without.Publish, with.Publish)
	for i := range min(len(without.RPCByAgent), len(with.RPCByAgent)) {
		row(fmt.Sprintf("producer → agent %d: RPC round trip", i+1), 0, without.RPCByAgent[i], with.RPCByAgent[i])
	}
	return rc
}

// runRecorderPasses runs the two passes of the one-agent schedule, the
// second with the recorder; first is the index of the first pass in the
// run (for unique names).
func runRecorderPasses(ctx context.Context, env scheduleEnv, first int, plan *recorderPlan) *RecorderComparison {
	var passes [2]*Schedule
	for i, recording := range []bool{false, true} {
		e := env
		e.index = first + i
		e.label = "recorder comparison, without the recorder"
		if recording {
			e.recorder = plan
			e.label = "recorder comparison, with flybus record"
		}
		passes[i] = runSchedule(ctx, e, 1)
		if ctx.Err() != nil {
			break
		}
	}
	if passes[1] == nil {
		return nil
	}
	return compareRecorder(passes[0], passes[1])
}
