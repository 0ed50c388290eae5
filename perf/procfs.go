package perf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// procStat is what the harness reads from /proc/PID/stat.
type procStat struct {
	MinFlt     uint64 // field 10
	MajFlt     uint64 // field 12
	UTimeTicks uint64 // field 14
	STimeTicks uint64 // field 15
	Threads    int    // field 20
}

// parseProcStat parses the one line of /proc/PID/stat. The command name
// (field 2) is in parentheses and may itself hold spaces and parentheses,
// so the fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return procStat{}, errors.New("no ')' after the command name")
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 18 {
		return procStat{}, fmt.Errorf("%d fields after the command name, want at least 18", len(f))
	}
	var s procStat
	var err error
	if s.MinFlt, err = strconv.ParseUint(f[10-3], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("minflt: %w", err)
	}
	if s.MajFlt, err = strconv.ParseUint(f[12-3], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("majflt: %w", err)
	}
	if s.UTimeTicks, err = strconv.ParseUint(f[14-3], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("utime: %w", err)
	}
	if s.STimeTicks, err = strconv.ParseUint(f[15-3], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("stime: %w", err)
	}
	if s.Threads, err = strconv.Atoi(f[20-3]); err != nil {
		return procStat{}, fmt.Errorf("num_threads: %w", err)
	}
	return s, nil
}

// readProc reads /proc/PID/name and parses it, naming the file in a
// parse error.
func readProc[T any](pid int, name string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	path := fmt.Sprintf("/proc/%d/%s", pid, name)
	b, err := os.ReadFile(path)
	if err != nil {
		return zero, err
	}
	v, err := parse(b)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readProcStat reads /proc/PID/stat.
func readProcStat(pid int) (procStat, error) { return readProc(pid, "stat", parseProcStat) }

// Faults counts a process's page faults: minor (the page was in memory
// and only had to be mapped) and major (it had to be read in).
type Faults struct {
	Minor uint64 `json:"minor"`
	Major uint64 `json:"major"`
}

// ProcessFaults reads a process's page faults so far from /proc/PID/stat
// (minflt and majflt: every thread's, not its children's).
func ProcessFaults(pid int) (Faults, error) {
	s, err := readProcStat(pid)
	if err != nil {
		return Faults{}, err
	}
	return Faults{Minor: s.MinFlt, Major: s.MajFlt}, nil
}

// Memory is a process's resident set, in bytes, from /proc/PID/status.
type Memory struct {
	RSS uint64 `json:"vmRSS"` // VmRSS
	HWM uint64 `json:"vmHWM"` // VmHWM: the peak of VmRSS
}

// parseProcStatus reads VmRSS and VmHWM ("VmRSS:\t  11520 kB") out of
// /proc/PID/status.
func parseProcStatus(b []byte) (Memory, error) {
	var m Memory
	var haveRSS, haveHWM bool
	for line := range strings.SplitSeq(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("%s: unexpected value %q", name, rest)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("%s: %w", name, err)
		}
		if name == "VmRSS" {
			m.RSS, haveRSS = kb*1024, true
		} else {
			m.HWM, haveHWM = kb*1024, true
		}
	}
	if !haveRSS || !haveHWM {
		return Memory{}, errors.New("no VmRSS or VmHWM line (a kernel thread, or a zombie?)")
	}
	return m, nil
}

// ReadMemory reads a process's VmRSS and VmHWM from /proc/PID/status.
func ReadMemory(pid int) (Memory, error) { return readProc(pid, "status", parseProcStatus) }

// ResetPeakRSS sets a process's VmHWM back to its current VmRSS (writing 5
// to /proc/PID/clear_refs, Linux 4.0 and later), so that each schedule
// reports its own peak. It needs the same rights as ptrace.
func ResetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// atClkTck is the auxiliary vector key of the clock tick rate.
const atClkTck = 17

// parseAuxvClkTck finds AT_CLKTCK in a native-endian auxiliary vector of
// word-sized (key, value) pairs, as /proc/self/auxv holds it. This is the
// value sysconf(_SC_CLK_TCK) returns.
func parseAuxvClkTck(b []byte, word int) (uint64, bool) {
	read := func(p []byte) uint64 {
		if word == 4 {
			return uint64(binary.NativeEndian.Uint32(p))
		}
		return binary.NativeEndian.Uint64(p)
	}
	for i := 0; i+2*word <= len(b); i += 2 * word {
		key, val := read(b[i:]), read(b[i+word:])
		if key == 0 { // AT_NULL ends the vector
			break
		}
		if key == atClkTck {
			return val, true
		}
	}
	return 0, false
}

var clkTck = sync.OnceValue(func() uint64 {
	if b, err := os.ReadFile("/proc/self/auxv"); err == nil {
		if hz, ok := parseAuxvClkTck(b, strconv.IntSize/8); ok && hz > 0 {
			return hz
		}
	}
	return 100 // USER_HZ: 100 on every Linux architecture Go supports
})

// ticks converts clock ticks of /proc/PID/stat to a duration.
func ticks(n uint64) time.Duration {
	return time.Duration(n) * time.Second / time.Duration(clkTck())
}

// SelfCPU is this process's user and system CPU time, from
// getrusage (microsecond resolution, unlike the ticks of /proc).
func SelfCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, os.NewSyscallError("getrusage", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// ProcessCPU is another process's CPU time: the sum of its threads' time
// on a CPU from /proc/PID/task/*/schedstat, in nanoseconds. Where the
// kernel keeps no schedstat it is user and system time from /proc/PID/stat,
// in clock ticks (10 ms at 100 Hz), which at a few frames' worth of work
// reads 0 or a whole tick. The sum leaves out threads that have exited;
// the Go processes measured here keep theirs.
func ProcessCPU(pid int) (time.Duration, error) {
	if d, err := threadsOnCPU(pid); !errors.Is(err, errNoSchedstat) {
		return d, err
	}
	s, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return ticks(s.UTimeTicks + s.STimeTicks), nil
}

// errNoSchedstat: the kernel has no /proc/PID/task/TID/schedstat.
var errNoSchedstat = errors.New("no schedstat")

// threadsOnCPU sums the first field of every thread's schedstat. A thread
// that exits between the listing and its read is left out.
func threadsOnCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	read := 0
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		ns, err := parseSchedstat(b)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		sum += ns
		read++
	}
	if read == 0 {
		if _, err := os.Stat(dir); err != nil {
			return 0, err // the process is gone
		}
		return 0, errNoSchedstat
	}
	return sum, nil
}

// parseSchedstat reads the first of schedstat's three numbers: the
// thread's time on a CPU in nanoseconds.
func parseSchedstat(b []byte) (time.Duration, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat has %d fields, not 3", len(f))
	}
	ns, err := strconv.ParseUint(f[0], 10, 63)
	if err != nil {
		return 0, fmt.Errorf("schedstat time on CPU: %w", err)
	}
	return time.Duration(ns), nil
}
