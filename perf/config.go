package perf

import (
	"errors"
	"fmt"
	"github.com/flybus/flybus/store"
	"io"
	"slices"
	"strings"
)

// Fill is how the producer fills a frame's staging file.
type Fill string

const (
	// FillWrite writes the frame with ArtifactWriter.Write (pwrite).
	FillWrite Fill = "write"
	// FillMap copies it into ArtifactWriter.Bytes, a writable mapping.
	FillMap Fill = "map"
)

// Config chooses what Run measures. The zero value is the default run:
// 5 s per schedule, 1, 2 and 4 agents, FillWrite, a router process built
// or found as Main describes, and a store under /dev/shm.
type Config struct {
	// Seconds is the length of each schedule; it produces Seconds x 60
	// frames (rounded). Default 5.
	Seconds float64
	// Agents lists the schedules by agent count. Default 1, 2, 4.
	Agents []int
	// Fill is the producer's fill. Default FillWrite.
	Fill Fill
	// Embedded runs router.New in this process instead of `flybus serve`.
	Embedded bool
	// Flybus is the flybus executable for process mode and for the
	// recorder (Recorder). Empty: this executable if it is flybus, else a
	// flybus beside it, else one built with `go build` into a temporary
	// directory.
	Flybus string
	// Store is the store root. Empty: /dev/shm/flybus-perf-<pid>, removed
	// afterwards. A given directory is created if missing and kept.
	Store string
	// StoreMode is the router's store backend, "files" (default) or "pool".
	StoreMode store.Mode
	// CPUProfile, when set, is where the router's CPU profile of each
	// schedule is written; with several schedules the agent count is put
	// before the extension (router.pprof becomes router.agents2.pprof).
	CPUProfile string
	// Progress receives a progress line, rewritten with \r once a second;
	// nil for none.
	Progress io.Writer
	// NATSRouterCPUPerFrameUs maps an agent count to an embedded NATS
	// server's CPU per frame on the same schedule (measured elsewhere), for
	// the "under 0.1x NATS" target. Absent counts are "not measured".
	NATSRouterCPUPerFrameUs map[int]float64
	// StalledSubscriber adds, after the schedules, two passes of the
	// one-agent schedule with side traffic, the second with a bounded
	// subscriber that never takes a message, and compares every agent's
	// RPC p99 across them (see SideTraffic). It costs two more schedules.
	StalledSubscriber bool
	// Recorder adds, after the schedules (and the isolation passes), two
	// passes of the one-agent schedule, the second with a `flybus record`
	// process recording the frame topic in latest mode, and compares the
	// consumers', the producer's and the agents' latencies across them
	// (see RecorderComparison). It costs two more schedules.
	Recorder bool
	// SealWait has the producer wait for Seal's answer before it
	// publishes; by default it seals with NoWait and publishes right
	// behind it (one round trip for both), and the seal round trip is not
	// measured apart.
	SealWait bool
	// NoAllocateAhead turns off the producer's client.Config.AllocateAhead
	// (default 1: Allocate of the frame size returns a writer prepared in
	// the background).
	NoAllocateAhead bool
	// NoOpenAhead turns off the consumers' and agents'
	// client.Config.OpenAhead (default on: a files-mode View finds its
	// read location asked for when the delivery arrived).
	NoOpenAhead bool
	// RouterEnv adds KEY=VALUE variables to the router process's
	// environment (GOMAXPROCS=1, say); process mode only.
	RouterEnv []string

	// rounds overrides the baselines' iteration counts (tests).
	rounds *baselineRounds
	// samplingWindow overrides how long the idle sampling cost is measured.
	samplingWindow float64
}

func (c Config) withDefaults() Config {
	if c.Seconds == 0 {
		c.Seconds = 5
	}
	if len(c.Agents) == 0 {
		c.Agents = []int{1, 2, 4}
	}
	c.Agents = slices.Clone(c.Agents)
	if c.Fill == "" {
		c.Fill = FillWrite
	}
	if c.samplingWindow == 0 {
		c.samplingWindow = 2
	}
	return c
}

// maxAgents bounds one schedule's agent count: every agent is a client
// connection and a call per frame.
const maxAgents = 32

func (c Config) validate() error {
	var errs []error
	if c.Seconds <= 0 || c.Seconds > 3600 {
		errs = append(errs, fmt.Errorf("seconds must be in (0, 3600], not %g", c.Seconds))
	} else if frames(c.Seconds) < 1 {
		errs = append(errs, fmt.Errorf("%g s is less than one frame at %d Hz", c.Seconds, FrameRate))
	}
	for _, n := range c.Agents {
		if n < 0 || n > maxAgents {
			errs = append(errs, fmt.Errorf("agent count %d is outside 0..%d", n, maxAgents))
		}
	}
	if c.Fill != FillWrite && c.Fill != FillMap {
		errs = append(errs, fmt.Errorf("fill must be %q or %q, not %q", FillWrite, FillMap, c.Fill))
	}
	for _, kv := range c.RouterEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("router environment %q is not KEY=VALUE", kv))
		}
	}
	if c.Embedded && len(c.RouterEnv) > 0 {
		errs = append(errs, errors.New("a router environment is for process mode; it makes no sense with embedded"))
	}
	if c.Embedded && c.Flybus != "" && !c.Recorder {
		errs = append(errs, errors.New("a flybus binary is for process mode or the recorder; it makes no sense with embedded alone"))
	}
	return errors.Join(errs...)
}

// frames is the number of frames a schedule of s seconds produces.
func frames(s float64) int { return int(s*FrameRate + 0.5) }
