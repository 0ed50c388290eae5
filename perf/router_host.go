package perf

import (
	"context"
	"time"
)

// routerHost is a running router the harness measures: its own process,
// or embedded in this one.
type routerHost interface {
	info() Router
	stats() statsSource
	// cpu is the router's CPU time (embedded: the whole process's).
	cpu() (time.Duration, error)
	// what names the process cpu and memory measure.
	what() string
	// memory is the router's resident set (embedded: the whole process's).
	memory() (Memory, error)
	// resetPeak resets the router's VmHWM to its VmRSS.
	resetPeak() error
	// profile starts a CPU profile of seconds into file; wait blocks
	// until it is written.
	profile(ctx context.Context, seconds int, file string) (wait func() error, err error)
	// stop shuts the router down and reports a shutdown that was not clean.
	stop(ctx context.Context) error
}
