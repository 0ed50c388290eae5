package fastpath

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestApplyRouterProcsHonoursTheEnvironment(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	if n := ApplyRouterProcs(); n != RouterProcs() {
		t.Fatalf("GOMAXPROCS %d without the variable, want %d", n, RouterProcs())
	}
	t.Setenv("GOMAXPROCS", "3")
	runtime.GOMAXPROCS(3)
	if n := ApplyRouterProcs(); n != 3 {
		t.Fatalf("GOMAXPROCS %d with GOMAXPROCS=3 set", n)
	}
	t.Setenv("GOMAXPROCS", "nonsense")
	if n := ApplyRouterProcs(); n != RouterProcs() {
		t.Fatalf("GOMAXPROCS %d with an invalid variable, want %d", n, RouterProcs())
	}
}

// socketPair is a connected pair of Unix stream sockets as net.Conns, so
// that reads park in the runtime's poller as the router's do.
func socketPair(b *testing.B) (net.Conn, net.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		b.Fatal(err)
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		if cs[i], err = net.FileConn(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
		b.Cleanup(func() { cs[i].Close() })
	}
	return cs[0], cs[1]
}

// cpuTime is this process's user and system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHandoff is the router's hand-off in its barest form: a
// goroutine that reads a Unix socket wakes another that writes the answer,
// as a connection's reader and a peer's writer did before a step wrote
// its frames itself. It reports the process's CPU per round trip at
// GOMAXPROCS 1 and 2, paced (one round trip per 1/60 s tick, as the
// schedule meets it) and back to back.
func BenchmarkHandoff(b *testing.B) {
	for _, procs := range []int{1, 2} {
		for _, paced := range []bool{false, true} {
			b.Run(fmt.Sprintf("procs=%d/paced=%v", procs, paced), func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				a, c := socketPair(b)
				wake := make(chan struct{})
				done := make(chan struct{})
				go func() { // the "writer": woken by the reader, answers
					buf := []byte{1}
					for range wake {
						if _, err := c.Write(buf); err != nil {
							break
						}
					}
					close(done)
				}()
				buf := make([]byte, 1)
				tick := time.NewTicker(time.Second / 60)
				defer tick.Stop()
				b.ReportAllocs()
				cpu0 := cpuTime(b)
				b.ResetTimer()
				for range b.N {
					if paced {
						<-tick.C
					}
					wake <- struct{}{}
					if _, err := a.Read(buf); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
				close(wake)
				<-done
			})
		}
	}
}
