package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Baselines are the kernel's and the language's costs for the same work,
// measured in the same run before any schedule, so that ratios survive
// the drift of a shared machine.
//
// Each is measured twice. Back to back is how a benchmark loop runs:
// caches warm, every thread spinning or just parked. Paced at 60 Hz is
// how the schedule meets the same operation: once per frame slot, after
// 16.7 ms in which the threads parked and the vCPUs halted. On a shared
// VM the second costs several times the first, for the kernel's own work
// as much as for ours, so a figure is printed against both.
type Baselines struct {
	// Copy is copy() of one frame between two buffers.
	Copy Baseline `json:"copy"`
	// InProcess is the raw ping-pong with an echoing goroutine of this
	// process, the topology of an embedded router; CrossProcess with an
	// echoing child process, the topology of a router process. Nil when it
	// could not be measured (CrossProcessErr says why).
	InProcess       *PingPong `json:"pingPongInProcess"`
	CrossProcess    *PingPong `json:"pingPongCrossProcess"`
	CrossProcessErr string    `json:"pingPongCrossProcessError,omitempty"`
	// Pwrite is one pwrite of a frame into a fresh fallocated file of the
	// store (creating and fallocating it are not timed).
	Pwrite Baseline `json:"pwrite"`
	// MapTouch maps a frame-sized file of the store read-only, reads one
	// byte per 64-byte line and unmaps it: the kernel floor of a
	// consumer's access.
	MapTouch Baseline `json:"mapTouchUnmap"`
	// Touch reads one byte per 64-byte line of a frame-sized store file
	// mapped once beforehand: the floor of a view of a cached slot mapping
	// (pool mode).
	Touch Baseline `json:"touchMapped"`
}

// Baseline is one operation measured back to back and paced at 60 Hz.
type Baseline struct {
	Hot   *Hist `json:"backToBack"`
	Paced *Hist `json:"paced60Hz"`
}

// PingPong is a raw Unix-socket ping-pong of a 300-byte message, about an
// RPC envelope with a small payload. One is one round trip; Two is two in
// a row, the shape of an RPC through a router (caller to router to
// service, and back).
type PingPong struct {
	One Baseline `json:"one"`
	Two Baseline `json:"two"`
}

// matching returns the ping-pong of the router's topology: cross-process
// for a router process (when it could be measured), else in-process.
func (b *Baselines) matching(embedded bool) (*PingPong, string) {
	if b == nil {
		return &PingPong{}, "none"
	}
	if !embedded && b.CrossProcess != nil {
		return b.CrossProcess, "cross-process"
	}
	if b.InProcess == nil {
		return &PingPong{}, "none"
	}
	return b.InProcess, "in-process"
}

// baselineRounds are the timed iterations of each baseline, back to back
// and paced (each paced round costs a frame slot).
type baselineRounds struct {
	copy, pingPong, pwrite, mapTouch int
	paced                            int
}

var defaultRounds = baselineRounds{copy: 500, pingPong: 3000, pwrite: 200, mapTouch: 400, paced: 60}

// pingPongBytes is the size of the raw ping-pong message.
const pingPongBytes = 300

// measureBaselines runs every baseline; dir is a scratch directory in the
// store's filesystem. phase reports which one is running.
func measureBaselines(ctx context.Context, dir string, frame []byte, n baselineRounds, phase func(string)) (*Baselines, error) {
	b := &Baselines{}
	var err error
	phase("copy")
	if b.Copy, err = copyBaseline(ctx, frame, n); err != nil {
		return nil, err
	}
	phase("ping-pong with a goroutine")
	if b.InProcess, err = pingPongBaseline(ctx, dir, echoGoroutine, n); err != nil {
		return nil, fmt.Errorf("in-process ping-pong baseline: %w", err)
	}
	phase("ping-pong with another process")
	if b.CrossProcess, err = pingPongBaseline(ctx, dir, func(path string) (func() error, error) {
		return echoProcess(ctx, path)
	}, n); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		b.CrossProcess, b.CrossProcessErr = nil, err.Error()
	}
	phase("pwrite")
	if b.Pwrite, err = pwriteBaseline(ctx, dir, frame, n); err != nil {
		return nil, fmt.Errorf("pwrite baseline: %w", err)
	}
	phase("map+touch+unmap")
	if b.MapTouch, err = mapTouchBaseline(ctx, dir, frame, n); err != nil {
		return nil, fmt.Errorf("map+touch+unmap baseline: %w", err)
	}
	phase("touch of a mapped frame")
	if b.Touch, err = touchMappedBaseline(ctx, dir, frame, n); err != nil {
		return nil, fmt.Errorf("touch baseline: %w", err)
	}
	return b, nil
}

// series times rounds runs of op after warm-up runs, each run after gap
// when gap is positive. prepare, when set, runs untimed before the gap.
func series(ctx context.Context, rounds, warmup int, gap time.Duration, prepare func() error, op func() error) (*Hist, error) {
	h := newHist(rounds)
	for i := range warmup + rounds {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if prepare != nil {
			if err := prepare(); err != nil {
				return nil, err
			}
		}
		if gap > 0 {
			time.Sleep(gap)
		}
		t := time.Now()
		err := op()
		d := time.Since(t)
		if err != nil {
			return nil, err
		}
		if i >= warmup {
			h.Add(d)
		}
	}
	return h, nil
}

// both measures op back to back and then paced at 60 Hz.
func both(ctx context.Context, hot, paced, warmup int, prepare func() error, op func() error) (Baseline, error) {
	var b Baseline
	var err error
	if b.Hot, err = series(ctx, hot, warmup, 0, prepare, op); err != nil {
		return Baseline{}, err
	}
	if b.Paced, err = series(ctx, paced, 1, framePeriod, prepare, op); err != nil {
		return Baseline{}, err
	}
	return b, nil
}

func copyBaseline(ctx context.Context, frame []byte, n baselineRounds) (Baseline, error) {
	dst := make([]byte, len(frame))
	return both(ctx, n.copy, n.paced, 20, nil, func() error {
		copy(dst, frame)
		return nil
	})
}

// pingPongBaseline times round trips of a 300-byte message with an echo
// peer that start starts on a socket path.
func pingPongBaseline(ctx context.Context, dir string, start func(path string) (func() error, error), n baselineRounds) (pp *PingPong, err error) {
	path := filepath.Join(dir, "pp.sock")
	defer os.Remove(path)
	wait, err := start(path)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, errors.Join(err, wait())
	}
	defer func() { err = errors.Join(err, c.Close(), wait()) }()
	msg := make([]byte, pingPongBytes)
	trip := func() error {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(c, msg)
		return err
	}
	twice := func() error {
		if err := trip(); err != nil {
			return err
		}
		return trip()
	}
	pp = &PingPong{}
	if pp.One, err = both(ctx, n.pingPong, n.paced, 200, nil, trip); err != nil {
		return nil, err
	}
	if pp.Two, err = both(ctx, n.pingPong, n.paced, 20, nil, twice); err != nil {
		return nil, err
	}
	return pp, nil
}

// pwriteBaseline writes a frame into a new fallocated file each round, as
// a producer writes into a staging file the router prepared.
func pwriteBaseline(ctx context.Context, dir string, frame []byte, n baselineRounds) (b Baseline, err error) {
	var f *os.File
	discard := func() error {
		if f == nil {
			return nil
		}
		err := errors.Join(f.Close(), os.Remove(f.Name()))
		f = nil
		return err
	}
	defer func() { err = errors.Join(err, discard()) }()
	prepare := func() error {
		if err := discard(); err != nil {
			return err
		}
		var err error
		if f, err = os.CreateTemp(dir, "pwrite-"); err != nil {
			return err
		}
		if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(len(frame))); err != nil {
			return os.NewSyscallError("fallocate", err)
		}
		return nil
	}
	return both(ctx, n.pwrite, n.paced, 5, prepare, func() error {
		_, err := f.WriteAt(frame, 0)
		return err
	})
}

// mapTouchBaseline maps one frame-sized file of the store read-only,
// touches every line and unmaps it, each round.
func mapTouchBaseline(ctx context.Context, dir string, frame []byte, n baselineRounds) (Baseline, error) {
	return withFrameFile(dir, "map-", frame, func(f *os.File) (Baseline, error) {
		var sink byte
		b, err := both(ctx, n.mapTouch, n.paced, 10, nil, func() error {
			m, err := unix.Mmap(int(f.Fd()), 0, len(frame), unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				return os.NewSyscallError("mmap", err)
			}
			sink += Touch(m)
			return os.NewSyscallError("munmap", unix.Munmap(m))
		})
		sinkByte.Add(uint32(sink))
		return b, err
	})
}

// touchMappedBaseline maps one frame-sized file of the store read-only
// once and times touching every line of it, each round.
func touchMappedBaseline(ctx context.Context, dir string, frame []byte, n baselineRounds) (Baseline, error) {
	return withFrameFile(dir, "touch-", frame, func(f *os.File) (b Baseline, err error) {
		m, err := unix.Mmap(int(f.Fd()), 0, len(frame), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return Baseline{}, os.NewSyscallError("mmap", err)
		}
		defer func() { err = errors.Join(err, os.NewSyscallError("munmap", unix.Munmap(m))) }()
		var sink byte
		b, err = both(ctx, n.mapTouch, n.paced, 10, nil, func() error {
			sink += Touch(m)
			return nil
		})
		sinkByte.Add(uint32(sink))
		return b, err
	})
}

// withFrameFile measures with a new file of dir (named after pattern)
// that holds frame, and closes and removes the file afterwards.
func withFrameFile(dir, pattern string, frame []byte, measure func(f *os.File) (Baseline, error)) (b Baseline, err error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return Baseline{}, err
	}
	defer func() { err = errors.Join(err, f.Close(), os.Remove(f.Name())) }()
	if _, err := f.WriteAt(frame, 0); err != nil {
		return Baseline{}, err
	}
	return measure(f)
}
