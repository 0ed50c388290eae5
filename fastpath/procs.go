package fastpath

import (
	"os"
	"runtime"
	"strconv"
)

// RouterProcs is the GOMAXPROCS a router process runs with when its
// environment does not set one: 1.
//
// The routing core is serialized by one lock, so a second thread buys the
// router little parallelism; what it costs is goroutines handing frames to
// each other across threads (a wake, an idle thread spinning, caches
// warmed twice). Measured with flybus perf on the 60 Hz three-consumer
// schedule, one agent, router in its own process on a 2-CPU VM, the same
// run apart from --router-env GOMAXPROCS=1: router CPU per frame fell from
// 2,833 to 2,000 µs (files store) and from 1,967 to 1,300 µs (pool), and
// the RPC round trip p50 from 4.2 to 3.4 ms and 0.56 to 0.42 ms, because
// the clients get the other CPU. BenchmarkHandoff shows the same on a bare
// round trip through a socket and a goroutine hand-off: paced at 60 Hz it
// costs 191 µs of CPU at GOMAXPROCS 1 against 301 µs at 2, and back to back
// 12 against 10 µs. Machines with more CPUs were not measured; GOMAXPROCS
// in the environment overrides the choice.
func RouterProcs() int { return 1 }

// ApplyRouterProcs sets GOMAXPROCS to RouterProcs unless the environment
// names a valid value, and returns what the process runs with.
func ApplyRouterProcs() int {
	if v, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && v > 0 {
		return runtime.GOMAXPROCS(0)
	}
	runtime.GOMAXPROCS(RouterProcs())
	return runtime.GOMAXPROCS(0)
}
