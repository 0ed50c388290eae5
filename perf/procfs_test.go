package perf

import (
	"encoding/binary"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses, as prctl allows.
	line := "4242 (a) (b c) S 1 4242 4242 0 -1 4194560 1234 0 0 0 275 31 0 0 20 0 7 0 12345 1234567 890 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	s, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.UTimeTicks != 275 || s.STimeTicks != 31 || s.Threads != 7 {
		t.Fatalf("parsed %+v, want utime 275, stime 31, 7 threads", s)
	}
}

func TestParseProcStatFaults(t *testing.T) {
	// minflt 5678 (field 10), cminflt 91 (11), majflt 3 (12), cmajflt 4
	// (13), after a command name that holds ") (" and a closing ')'.
	line := "77 (flybus (x) ) serve) R 1 77 77 0 -1 4194304 5678 91 3 4 120 40 0 0 20 0 9 0 555 2000000 1500 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	s, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.MinFlt != 5678 || s.MajFlt != 3 || s.UTimeTicks != 120 || s.STimeTicks != 40 || s.Threads != 9 {
		t.Fatalf("parsed %+v, want minflt 5678, majflt 3, utime 120, stime 40, 9 threads", s)
	}
}

func TestParseProcStatRefusesGarbage(t *testing.T) {
	for name, line := range map[string]string{
		"NoParen":   "4242 a S 1 2 3",
		"TooShort":  "4242 (a) S 1 2 3",
		"NotNumber": "1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 31 0 0 20 0 7 0 1",
		"BadMinFlt": "1 (a) S 1 1 1 0 -1 0 -5 0 0 0 2 31 0 0 20 0 7 0 1",
		"BadMajFlt": "1 (a) S 1 1 1 0 -1 0 5 0 y 0 2 31 0 0 20 0 7 0 1",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseProcStat([]byte(line)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestParseProcStatus(t *testing.T) {
	status := "Name:\tflybus\nVmPeak:\t 1300000 kB\nVmHWM:\t   14400 kB\nVmRSS:\t   11520 kB\nThreads:\t7\n"
	m, err := parseProcStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 11520*1024 || m.HWM != 14400*1024 {
		t.Fatalf("parsed %+v", m)
	}
	if _, err := parseProcStatus([]byte("Name:\tkthreadd\n")); err == nil {
		t.Fatal("a status without VmRSS was accepted")
	}
	if _, err := parseProcStatus([]byte("VmRSS:\t12 MB\nVmHWM:\t1 kB\n")); err == nil {
		t.Fatal("a unit other than kB was accepted")
	}
}

func TestParseAuxvClkTck(t *testing.T) {
	var b []byte
	for _, kv := range [][2]uint64{{6, 4096}, {17, 250}, {0, 0}, {17, 1}} {
		b = binary.NativeEndian.AppendUint64(b, kv[0])
		b = binary.NativeEndian.AppendUint64(b, kv[1])
	}
	if hz, ok := parseAuxvClkTck(b, 8); !ok || hz != 250 {
		t.Fatalf("got %d %v, want 250", hz, ok)
	}
	if _, ok := parseAuxvClkTck(b[:16], 8); ok {
		t.Fatal("found AT_CLKTCK in a vector without it")
	}
}

func TestThisProcess(t *testing.T) {
	if hz := clkTck(); hz != 100 {
		t.Logf("CLK_TCK is %d, not the usual 100", hz)
	}
	s, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.Threads < 1 {
		t.Fatalf("%+v", s)
	}
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS == 0 || m.HWM < m.RSS {
		t.Fatalf("memory %+v", m)
	}
	if err := ResetPeakRSS(os.Getpid()); err != nil && !strings.Contains(err.Error(), "permission") {
		t.Fatalf("resetting VmHWM: %v", err)
	}
	if c, err := SelfCPU(); err != nil || c <= 0 {
		t.Fatalf("SelfCPU %v %v", c, err)
	}
	if _, err := ProcessCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if f, err := ProcessFaults(os.Getpid()); err != nil || f.Minor == 0 {
		t.Fatalf("faults %+v %v: a running Go process has faulted pages in", f, err)
	}
}

func TestParseSchedstat(t *testing.T) {
	if d, err := parseSchedstat([]byte("123456789 42 7\n")); err != nil || d != 123456789 {
		t.Fatalf("%v %v", d, err)
	}
	for _, bad := range []string{"", "1 2", "x 2 3", "-1 2 3", "1 2 3 4"} {
		if _, err := parseSchedstat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// ProcessCPU of this process agrees with getrusage, which also counts
// nanoseconds on a CPU (threads of a Go process do not exit), to well
// under a clock tick; it reads a gone process as an error.
func TestProcessCPUAgreesWithGetrusage(t *testing.T) {
	var before, after, self time.Duration
	var err error
	for range 3 {
		if before, err = SelfCPU(); err != nil {
			t.Fatal(err)
		}
		if self, err = ProcessCPU(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if after, err = SelfCPU(); err != nil {
			t.Fatal(err)
		}
		// Burn a little CPU between tries, so that a tick-based figure
		// could not match by luck.
		for x := 0; x < 5_000_000; x++ {
			sink += x
		}
		if self >= before-time.Millisecond && self <= after+time.Millisecond {
			return
		}
	}
	t.Fatalf("ProcessCPU %v outside getrusage's %v..%v", self, before, after)
}

var sink int

func TestProcessCPUOfAGoneProcess(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$") // this test binary, running nothing
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := ProcessCPU(cmd.Process.Pid); err == nil {
		t.Fatal("a reaped process has a CPU time")
	}
}
