package leakcheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// waitLimit bounds WaitGoroutines. Goroutines that were told to stop usually
// exit within microseconds; several seconds absorbs a loaded CI machine
// without hiding a real leak.
const waitLimit = 5 * time.Second

// Goroutines returns the number of goroutines that exist now.
func Goroutines() int { return runtime.NumGoroutine() }

// WaitGoroutines waits until no more than baseline goroutines exist, and
// fails t with a dump of every goroutine's stack if that does not happen
// within a few seconds. It polls, yielding first and then backing off, so a
// goroutine that is merely slow to observe its stop signal does not fail the
// test and a fast one costs no fixed delay.
func WaitGoroutines(t testing.TB, baseline int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	backoff := 100 * time.Microsecond
	for {
		n := runtime.NumGoroutine()
		if n <= baseline {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("leakcheck: %d goroutines remain, want at most %d:\n%s", n, baseline, buf)
		}
		runtime.Gosched()
		time.Sleep(backoff)
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}

// FDs returns the number of open file descriptors of this process, not
// counting the one it opens to read /proc/self/fd nor the Go runtime's
// own (cgroup files, the network poller).
func FDs() (int, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		// The Go runtime opens some descriptors of its own lazily, which may
		// be mid-test, and keeps them: the cgroup CPU limit files it
		// follows, and the network poller's epoll and eventfd. They are not
		// the program's.
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil &&
			(strings.HasPrefix(t, "/sys/fs/cgroup/") || t == "anon_inode:[eventpoll]" || t == "anon_inode:[eventfd]") {
			continue
		}
		n++
	}
	return n - 1, nil // the directory ReadDir itself had open
}

// Mappings returns the number of memory mappings in /proc/self/maps whose
// path contains substr. A mapping of an unlinked file still counts; the
// kernel shows it with a " (deleted)" suffix.
func Mappings(substr string) (int, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode [path]; the path may hold spaces.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		if strings.Contains(strings.Join(fields[5:], " "), substr) {
			n++
		}
	}
	return n, sc.Err()
}

// Files returns the number of regular files under dir, at any depth.
// Symbolic links are not followed and not counted.
func Files(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n, err
}
