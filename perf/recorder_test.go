package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRecorded(t *testing.T) {
	n, file, err := parseRecorded("recorded 300 publications (300 artifacts, 351.6 MiB of them; 351.6 MiB written) in 5.1s to /dev/shm/x/frames.mcap")
	if err != nil || n != 300 || file != "/dev/shm/x/frames.mcap" {
		t.Fatalf("got %d, %q, %v", n, file, err)
	}
	// A file name may hold spaces; nothing recorded is still a count.
	n, file, err = parseRecorded("recorded 0 publications (0 artifacts, 0 B of them; 1.2 KiB written) in 12ms to /tmp/a b.mcap\n")
	if err != nil || n != 0 || file != "/tmp/a b.mcap" {
		t.Fatalf("got %d, %q, %v", n, file, err)
	}
	for _, bad := range []string{
		"",
		"recording perf.frames.s1 to /tmp/x.mcap (latest, none)",
		// Its progress line, which says the same count with less around it.
		"recorded 12 publications, 14.1 MiB, 60.0/s, 70.3 MiB/s, 1 file(s)",
		"recorded many publications (3 artifacts, 1 B of them; 1 B written) in 1s to /tmp/x.mcap",
		"recorded 99999999999999999999999 publications (3 artifacts, 1 B of them; 1 B written) in 1s to /tmp/x.mcap",
		"recorded 3 publications (3 artifacts, 1 B of them; 1 B written) in 1s",
		"flybus record: interrupted",
	} {
		if _, _, err := parseRecorded(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestMainRecorderFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"--sweep", "--recorder"}, &out, &errOut); code != exitUsage ||
		!strings.HasPrefix(errOut.String(), "flybus perf: --recorder is for the 60 Hz schedules, not --sweep") {
		t.Errorf("--sweep --recorder: exit %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(Usage(), "  --recorder\n") {
		t.Error("help does not describe --recorder")
	}
}

func recorderPass(frameP99 time.Duration, recording bool) *Schedule {
	s := testSchedule(1)
	s.RPCByAgent = []*Hist{histOf(500 * time.Microsecond)}
	s.FrameLatency = histOf(frameP99)
	if recording {
		s.Recorder = &RecorderRun{Binary: "/tmp/flybus", Found: "--flybus", Args: []string{"record", "SOCK", "perf.frames.s6"},
			File: "/dev/shm/x/frames.mcap", FileBytes: 368640000, Removed: true, Ready: true, Publications: 298,
			CPUNs: 90 * time.Millisecond, StartCPUNs: 20 * time.Millisecond, CPUPerFrameUs: 233.3, Ended: "exit status 0"}
	}
	return s
}

func TestCompareRecorder(t *testing.T) {
	ms := time.Millisecond
	rc := compareRecorder(recorderPass(ms, false), recorderPass(1190*time.Microsecond, true))
	if len(rc.Rows) != 4 || rc.Rows[0].Limit != recorderLimit || !rc.Rows[0].Measured || !rc.Rows[0].Met || !rc.Met() {
		t.Fatalf("%+v", rc.Rows)
	}
	for _, r := range rc.Rows[1:] {
		if r.Limit != 0 || !r.Measured || r.P50Ratio != 1 || r.P99Ratio != 1 {
			t.Errorf("comparison row %+v", r)
		}
	}
	if miss := compareRecorder(recorderPass(ms, false), recorderPass(1210*time.Microsecond, true)); miss.Met() {
		t.Fatalf("1.21x is not within 1.2x: %+v", miss.Rows[0])
	}
	empty := recorderPass(ms, true)
	empty.FrameLatency = newHist(0)
	if none := compareRecorder(recorderPass(ms, false), empty); none.Met() || none.Rows[0].Measured {
		t.Fatalf("an unmeasured target row is not met: %+v", none.Rows[0])
	}
	// A recorder that recorded nothing loaded nobody: the target is not
	// measured, the rows for comparison still are.
	idle := recorderPass(ms, true)
	idle.Recorder.Publications = 0
	if none := compareRecorder(recorderPass(ms, false), idle); none.Met() || none.Rows[0].Measured || !none.Rows[1].Measured {
		t.Fatalf("a recorder that recorded nothing: %+v", none.Rows)
	}
}

func TestMarkdownRecorder(t *testing.T) {
	r := testReport("process", 1)
	r.Recorder = compareRecorder(recorderPass(time.Millisecond, false), recorderPass(1500*time.Microsecond, true))
	out := render(t, r)
	wantAll(t, out,
		"## A recorder beside the consumers (one agent, two passes)",
		"| fast consumers: frame latency, fill start to every line touched | 1.000 / 1.000 | 1.500 / 1.500 | 1.50x / 1.50x: NOT met (p99 within 1.2x) |",
		"| producer → agent 1: RPC round trip | 0.500 / 0.500 | 0.500 / 0.500 | 1.00x / 1.00x |",
		"| frames produced (late) | 300 (1) | 300 (1) | |",
		"| recorder: publications recorded of frames produced | — | 298 of 300 | |",
		"| recorder: CPU per frame produced, µs (time on a CPU, its start-up left out) | — | 233 | |",
		"The recorder: `/tmp/flybus record SOCK perf.frames.s6` (--flybus), ended: exit status 0; its file held 368.6 MB, removed.",
	)
	if r.Failed() {
		t.Error("clean recorder passes make the report fail")
	}
	r.Recorder.With.ErrorCount, r.Recorder.With.Errors = 1, []string{"recorder: the recorder ended (exit status 1) after SIGTERM, not with status 0"}
	if !r.Failed() || !strings.Contains(render(t, r), "- recorder pass with the recorder: recorder: the recorder ended (exit status 1) after SIGTERM, not with status 0") {
		t.Error("a recorder pass's errors are not reported")
	}
	r.Recorder.With.Recorder.Ready = false
	wantAll(t, render(t, r), "| recorder: publications recorded of frames produced | — | did not start | |")
}

// TestSmokeRecorder runs the harness with the recorder for real, briefly:
// a 0.5 s one-agent schedule, embedded, then the two recorder passes
// beside a flybus built for it. It checks that the second pass had a
// recorder that recorded, that its file is gone and that the report has
// the comparison; never how fast anything is. Like TestSmoke it runs with
// FLYBUS_PERF_SMOKE=1 or -tags perfsmoke.
func TestSmokeRecorder(t *testing.T) {
	if !smokeByTag && os.Getenv("FLYBUS_PERF_SMOKE") != "1" {
		t.Skip("set FLYBUS_PERF_SMOKE=1 or build with -tags perfsmoke")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, err := moduleRoot(ctx)
	if err != nil {
		t.Skipf("cannot build flybus: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "flybus")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/flybus")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build flybus quickly: %v\n%s", err, out)
	}
	store := smokeStore(t)
	cfg := Config{Embedded: true, Flybus: bin, Recorder: true, Seconds: 0.5, Agents: []int{1}, Store: store,
		rounds:         &baselineRounds{copy: 20, pingPong: 50, pwrite: 5, mapTouch: 5, paced: 5},
		samplingWindow: 0.2}
	rep, md, js := runReport(t, ctx, cfg)
	if len(rep.Errors) > 0 || rep.Failed() {
		t.Errorf("the run failed: %v", rep.Errors)
	}
	rc := rep.Recorder
	if rc == nil {
		t.Fatal("no recorder passes")
	}
	for _, s := range []*Schedule{rc.Without, rc.With} {
		checkSmokeSchedule(t, s)
	}
	if rc.Without.Recorder != nil {
		t.Errorf("a recorder in the pass without it: %+v", rc.Without.Recorder)
	}
	rec := rc.With.Recorder
	if rec == nil {
		t.Fatal("no recorder in the pass with it")
	}
	if !rec.Ready || rec.ExitStatus != 0 || rec.Publications == 0 || rec.Publications > uint64(rc.With.Frames) ||
		rec.FileBytes == 0 || rec.Found != "--flybus" {
		t.Errorf("the recorder: %+v", rec)
	}
	if _, err := os.Stat(rec.File); !os.IsNotExist(err) || !rec.Removed {
		t.Errorf("the recording %s is still there (removed %v): %v", rec.File, rec.Removed, err)
	}
	if dirs, _ := filepath.Glob(filepath.Join(store, "perf-recorder-*")); len(dirs) != 0 {
		t.Errorf("left under the store root: %v", dirs)
	}
	// The router saw it subscribed in latest mode beside the consumers.
	var subs int
	for _, sd := range rc.With.Subscriptions {
		if strings.HasSuffix(sd.Client, "-recorder") {
			subs++
			if sd.Mode != "latest" || sd.Delivered == 0 {
				t.Errorf("the recorder's subscription: %+v", sd)
			}
		}
	}
	if subs != 1 {
		t.Errorf("%d recorder subscriptions in the router's snapshot", subs)
	}
	if len(rc.Rows) != 4 || !rc.Rows[0].Measured || rc.Rows[0].Limit != recorderLimit {
		t.Errorf("recorder rows %+v", rc.Rows)
	}
	wantAll(t, md.String(), "## A recorder beside the consumers (one agent, two passes)",
		"| recorder: publications recorded of frames produced | — | ")
	var doc struct {
		Recorder *struct {
			Rows []RecorderRow `json:"rows"`
			With struct {
				Recorder *RecorderRun `json:"recorder"`
			} `json:"with"`
		} `json:"recorder"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Recorder == nil || len(doc.Recorder.Rows) != 4 || doc.Recorder.With.Recorder == nil ||
		doc.Recorder.With.Recorder.Publications != rec.Publications {
		t.Errorf("the JSON's recorder comparison: %+v", doc.Recorder)
	}
}
