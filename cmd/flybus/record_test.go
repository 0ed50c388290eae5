package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/flybus/flybus/record"
)

func TestParseRecSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512K": 512 << 10, "64M": 64 << 20, "2G": 2 << 30, "2GiB": 2 << 30, "3MB": 3 << 20} {
		if got, err := parseRecSize(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1.5G", "9999999999T"} {
		if _, err := parseRecSize(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRecordAndPlayCheck(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"record", "s"}, "want SOCKET TOPIC..., got 1"},
		{[]string{"record", "s", "t"}, "-o FILE.mcap is required"},
		{[]string{"record", "s", "t", "t", "-o", "x.mcap"}, "topic t is named twice"},
		{[]string{"record", "s", "t", "-o", "x.mcap", "--latest", "--bounded"}, "exclude each other"},
		{[]string{"record", "s", "t", "-o", "x.mcap", "--compression", "lz4"}, `--compression "lz4": want none or zstd`},
		{[]string{"record", "s", "t", "-o", "x.mcap", "--split-size", "lots"}, "not a size"},
		{[]string{"record", "info"}, "record info wants FILE..."},
		{[]string{"play", "x.mcap"}, "want FILE.mcap... SOCKET, got 1"},
		{[]string{"play", "x.mcap", "s", "--remap", "a"}, `--remap "a": want OLD=NEW`},
		{[]string{"play", "x.mcap", "s", "--speed", "-1"}, "--speed must not be negative"},
		{[]string{"play", "x.mcap", "s", "--start", "2s", "--end", "1s"}, "--end must come after --start"},
		{[]string{"play", "x.mcap", "s", "--topics", "A"}, "is not a topic name"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want exit 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestRecordInfoPlay records two topics with the command, split by size,
// ends it with SIGINT, describes the parts, plays the directory of parts
// into another router and checks that a subscriber there saves the
// recorded bytes.
func TestRecordInfoPlay(t *testing.T) {
	src := startOpenRouter(t)
	src.declare(t, "cam.frames")
	dir := filepath.Join(t.TempDir(), "rec")
	out := filepath.Join(dir, "run.mcap")
	rec := startFlybus(t, "record", src.sock, "cam.frames", "tel", "-o", out, "--store", src.store, "--bounded",
		"--split-size", "300K", "--compression", "zstd", "--count", "6")
	rec.waitOutput(t, rec.stderr, "the recording line", func(s string) bool { return strings.Contains(s, "\n") })
	if line := rec.stderr.String(); line != "recording cam.frames,tel to "+out+" (bounded, zstd)\n" {
		t.Fatalf("record's first line %q", line)
	}
	// Any start order: tel is declared after the recorder subscribed, and
	// its retention is learnt at its first publication.
	src.declare(t, "tel", "--retained", "latest")
	var frames [][]byte
	for i := range 3 {
		file, data := testFile(t, 200_000+i)
		frames = append(frames, data)
		src.pub(t, fmt.Sprintf("published cam.frames #%d to 1 subscriber(s), 0 replaced", i+1), "cam.frames", fmt.Sprintf(`{"i":%d}`, i),
			"--artifact", "image="+file, "--content-type", "image=image/x-raw", "--store", src.store)
		src.pub(t, fmt.Sprintf("published tel #%d to 1 subscriber(s), 0 replaced", i+1), "tel", fmt.Sprintf(`{"v":%d}`, i))
	}
	// Bounded, the recorder misses nothing: it stops at --count 6.
	if code := rec.wait(t); code != 0 {
		t.Fatalf("record exit %d", code)
	}
	if !regexp.MustCompile(`\nrecorded 6 publications \(3 artifacts, 585\.9 KiB of them; .* written\) in .* to .*run-0001\.mcap .*run-0002\.mcap`).MatchString(rec.stderr.String()) {
		t.Fatalf("record's last line:\n%s", rec.stderr)
	}

	parts, _ := filepath.Glob(filepath.Join(dir, "run-*.mcap"))
	stdout, stderr, code := runFlybus(t, append([]string{"record", "info", "--json"}, parts...)...)
	if code != 0 {
		t.Fatalf("info: exit %d, %s", code, stderr)
	}
	pubs := map[string]uint64{}
	dec := json.NewDecoder(strings.NewReader(stdout))
	for dec.More() {
		var fi record.FileInfo
		if err := dec.Decode(&fi); err != nil {
			t.Fatal(err)
		}
		if !fi.Complete || fi.Compression != "zstd" || fi.Mode != "bounded" {
			t.Fatalf("info %+v", fi)
		}
		for _, tp := range fi.Topics {
			pubs[tp.Topic+"/"+tp.Retention] += tp.Publications
		}
	}
	if fmt.Sprint(pubs) != "map[cam.frames/none:3 tel/latest:3]" {
		t.Fatalf("info counts %v", pubs)
	}
	stdout, _, code = runFlybus(t, "record", "info", dir)
	if code != 0 || !strings.Contains(stdout, "cam.frames") || !strings.Contains(stdout, "image (image/x-raw)") {
		t.Fatalf("info text: exit %d\n%s", code, stdout)
	}

	dst := startOpenRouter(t)
	dst.declare(t, "replay.frames")
	saved := filepath.Join(t.TempDir(), "saved")
	sub := startSub(t, dst.sock, "replay.frames", "--bounded", "--count", "3", "--save-artifacts", saved, "--store", dst.store)
	_, stderr, code = runFlybus(t, "play", dir, dst.sock, "--store", dst.store, "--speed", "0", "--remap", "cam.frames=replay.frames")
	if code != 0 || !strings.Contains(stderr, "played 6 publications (3 artifacts") {
		t.Fatalf("play: exit %d, %s", code, stderr)
	}
	if code := sub.wait(t); code != 0 {
		t.Fatalf("sub exit %d", code)
	}
	for i, want := range frames {
		got, err := os.ReadFile(filepath.Join(saved, fmt.Sprintf("%d-image", i+1)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %d bytes, %v", i, len(got), err)
		}
	}

	// A file cut short plays what it can and then names the file and the
	// offset where it stops.
	b, _ := os.ReadFile(parts[0])
	cut := filepath.Join(t.TempDir(), "cut.mcap")
	os.WriteFile(cut, b[:len(b)/2], 0o644)
	_, stderr, code = runFlybus(t, "play", cut, dst.sock, "--store", dst.store, "--speed", "0", "--topics", "tel")
	if code != 1 || !regexp.MustCompile(regexp.QuoteMeta(cut)+`: offset \d+: truncated MCAP file`).MatchString(stderr) {
		t.Fatalf("cut file: exit %d, %s", code, stderr)
	}
}

// SIGINT ends a recording with a complete file.
func TestRecordInterrupted(t *testing.T) {
	src := startOpenRouter(t)
	src.declare(t, "tel")
	out := filepath.Join(t.TempDir(), "int.mcap")
	rec := startFlybus(t, "record", src.sock, "tel", "-o", out)
	rec.waitOutput(t, rec.stderr, "the recording line", func(s string) bool { return strings.Contains(s, "\n") })
	src.pub(t, "published tel #1 to 1 subscriber(s), 0 replaced", "tel", `{"v":1}`)
	rec.signal(t, syscall.SIGINT)
	if code := rec.wait(t); code != 0 {
		t.Fatalf("record exit %d", code)
	}
	fi, err := record.Info(out)
	if err != nil || !fi.Complete || fi.Publications > 1 || fi.Mode != "latest" {
		t.Fatalf("info of an interrupted recording: %+v %v", fi, err)
	}
}

// The recorder lowers every thread's CPU priority by --nice, so that the
// consumers beside it get the CPU first.
func TestRecordNice(t *testing.T) {
	src := startOpenRouter(t)
	out := filepath.Join(t.TempDir(), "run.mcap")
	rec := startFlybus(t, "record", src.sock, "t", "-o", out, "--nice", "7")
	rec.waitOutput(t, rec.stderr, "the recording line", func(s string) bool { return strings.Contains(s, "recording ") })
	pid := rec.cmd.Process.Pid
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // ended meanwhile
		}
		// Fields after the command's closing parenthesis: state is the
		// first, nice the 17th.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if f[16] != "7" {
			t.Errorf("thread %s runs at nice %s, want 7", task.Name(), f[16])
		}
	}
	rec.signal(t, syscall.SIGTERM)
	if code := rec.wait(t); code != 0 {
		t.Fatalf("record exit %d", code)
	}
	if _, stderr, code := runFlybus(t, "record", "s", "t", "-o", out, "--nice", "20"); code != exitUsage || !strings.Contains(stderr, "--nice 20: want 0 to 19") {
		t.Fatalf("--nice 20: exit %d, %s", code, stderr)
	}
}
