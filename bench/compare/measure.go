package compare

import (
	"context"
	"errors"
	"time"

	"github.com/flybus/flybus/perf"
)

// The producer's schedule and what is measured around it, alike for
// every peer.

// paced calls frame for seq 1 to r.Planned, one a tick of the 60 Hz
// schedule, until ctx ends, and counts the frames that overran their slot.
func (r *Result) paced(ctx context.Context, errs *perf.ErrorLog, frame func(seq int)) {
	tk := time.NewTicker(framePeriod)
	defer tk.Stop()
	for seq := 1; seq <= r.Planned; seq++ {
		var tick time.Time
		select {
		case tick = <-tk.C:
		case <-ctx.Done():
			errs.Add("producer", ctx.Err())
			return
		}
		frame(seq)
		if over := time.Since(tick) - framePeriod; over > 0 {
			r.Late++
			r.MaxOverrunNs = max(r.MaxOverrunNs, over)
		}
	}
}

// meter measures a run's interval, from the schedule's first tick to its
// end: the CPU of the process under test and of the other side, and the
// memory of the process under test, whose peak it resets first.
type meter struct {
	r                *Result
	pid              int
	what, clientWhat string
	cpu, clientCPU   func() (time.Duration, error)
	start            time.Time
	c0, k0           time.Duration
	cErr, kErr       error
	memErr           error
}

// startMeter starts measuring r: pid is the process under test (what),
// whose CPU cpu reads; clientCPU reads the other side's (clientWhat).
func (r *Result) startMeter(pid int, what string, cpu func() (time.Duration, error), clientWhat string, clientCPU func() (time.Duration, error)) *meter {
	m := &meter{r: r, pid: pid, what: what, clientWhat: clientWhat, cpu: cpu, clientCPU: clientCPU}
	r.Memory.What, r.Memory.PeakReset = what, perf.ResetPeakRSS(pid) == nil
	r.Memory.Before, m.memErr = perf.ReadMemory(pid)
	m.c0, m.cErr = cpu()
	m.k0, m.kErr = clientCPU()
	m.start = time.Now()
	return m
}

// stop ends the interval and sets the run's wall time, CPU and memory
// figures; the frames counted so far are the ones CPU is shared among.
func (m *meter) stop() {
	r := m.r
	wall := time.Since(m.start)
	c1, cErr := m.cpu()
	k1, kErr := m.clientCPU()
	after, memErr := perf.ReadMemory(m.pid)
	r.WallNs = wall
	r.CPU = cpuFigure(m.what, c1-m.c0, wall, r.Frames, errors.Join(m.cErr, cErr))
	r.ClientCPU = cpuFigure(m.clientWhat, k1-m.k0, wall, r.Frames, errors.Join(m.kErr, kErr))
	r.Memory.After = after
	if err := errors.Join(m.memErr, memErr); err != nil {
		r.Memory.Err = err.Error()
	}
}

// cpuFigure turns CPU used over wall into cores and µs per frame.
func cpuFigure(what string, used, wall time.Duration, frames int, err error) perf.CPU {
	c := perf.CPU{What: what}
	if err != nil {
		c.Err = err.Error()
		return c
	}
	c.Seconds = used.Seconds()
	if wall > 0 {
		c.Cores = c.Seconds / wall.Seconds()
	}
	if frames > 0 {
		c.PerFrameUs = c.Seconds * 1e6 / float64(frames)
	}
	// No stats sampling runs here, so net and gross are the same.
	c.NetCores, c.NetPerFrameUs = c.Cores, c.PerFrameUs
	return c
}
