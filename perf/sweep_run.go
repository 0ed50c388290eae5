package perf

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"
)

// RunSweep measures the baselines, finds or builds the NATS peer, starts a
// router process and measures every point of the grid on flybus and then
// on NATS, one after the other, so that both meet the same drift of a
// shared machine. The report is returned whenever anything was measured;
// the error is for a sweep that could not proceed. Failures inside a point
// are counted in its result.
func RunSweep(ctx context.Context, cfg SweepConfig) (*SweepReport, error) {
	cfg = cfg.withDefaults()
	pts, err := cfg.Grid.Points(cfg.Seconds)
	if err != nil {
		return nil, err
	}
	if err := (Config{Seconds: 1, Flybus: cfg.Flybus, RouterEnv: cfg.RouterEnv}).withDefaults().validate(); err != nil {
		return nil, err
	}
	prog := startProgress(cfg.Progress)
	defer prog.stop()

	rep := &SweepReport{Started: time.Now().UTC(), Machine: describeMachine(), Seconds: cfg.Seconds}
	root, tmp, scratch, cleanup, err := workDirs(cfg.Store, "sweep")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep.Store = describeStore(root)
	rounds := defaultSweepRounds
	if cfg.rounds != nil {
		rounds = *cfg.rounds
	}
	rep.Baselines, err = sweepBaselines(ctx, scratch, frameSizes(pts), rounds, func(s string) { prog.phase("baseline: %s", s) })
	if rmErr := os.RemoveAll(scratch); err == nil {
		err = rmErr
	}
	if err != nil {
		return rep, err
	}

	compare := ""
	if cfg.NoNATS {
		rep.NATS = "not run (--no-nats)"
	} else {
		prog.phase("finding the NATS peer (bench/compare)")
		bin, how, err := locateCompare(ctx, cfg.Compare, tmp)
		if err != nil {
			rep.NATS = "not measured: " + err.Error()
			rep.Errors = append(rep.Errors, "NATS peer: "+err.Error())
		} else {
			compare = bin
			rep.NATS = fmt.Sprintf("an embedded NATS server in a child process, nats.go clients over loopback "+
				"(bench/compare sweep-point, %s)", how)
		}
	}

	prog.phase("starting the router")
	host, err := startRouter(ctx, Config{Flybus: cfg.Flybus, StoreMode: cfg.StoreMode, RouterEnv: cfg.RouterEnv}, root, tmp, &rep.Router)
	if err != nil {
		return rep, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := host.stop(sctx); err != nil {
			rep.Errors = append(rep.Errors, "stopping the router: "+err.Error())
		}
		rep.Router.ExitStatus = host.info().ExitStatus
	}()

	for i, p := range pts {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		e := &SweepEntry{Point: p}
		prog.phase("point %d/%d, %s: %s on flybus", i+1, len(pts), p.Set, p.Label())
		e.Flybus = runFlybusPoint(ctx, host, root, i+1, p)
		e.FlybusVerdict = judgePoint(p, e.Flybus, runtime.NumCPU())
		if compare != "" && ctx.Err() == nil {
			prog.phase("point %d/%d, %s: %s on NATS", i+1, len(pts), p.Set, p.Label())
			r, err := runPeerPoint(ctx, compare, p)
			if err != nil {
				r = &PointResult{Peer: "nats", ErrorCount: 1, Errors: []string{err.Error()}}
			}
			e.NATS, e.NATSVerdict = r, judgePoint(p, r, runtime.NumCPU())
		}
		rep.Entries = append(rep.Entries, e)
	}
	return rep, ctx.Err()
}

// sweepBaselines measures the cross-process ping-pong and, per frame size,
// a copy and a map+touch+unmap of a frame; dir is in the store's
// filesystem.
func sweepBaselines(ctx context.Context, dir string, sizes []int, n sweepRounds, phase func(string)) (*SweepBaselines, error) {
	b := &SweepBaselines{}
	phase("ping-pong with another process")
	pp, err := pingPongBaseline(ctx, dir, func(path string) (func() error, error) { return echoProcess(ctx, path) },
		baselineRounds{pingPong: n.pingPong, paced: n.paced})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		b.CrossProcessErr = err.Error()
	}
	b.CrossProcess = pp
	for _, size := range slices.Sorted(slices.Values(sizes)) {
		frame := PatternOf(size)
		r := n.forSize(size)
		sb := SizeBaseline{Bytes: size}
		phase(fmt.Sprintf("copy of %s bytes", thousands(int64(size))))
		if sb.Copy, err = copyBaseline(ctx, frame, r); err != nil {
			return nil, err
		}
		phase(fmt.Sprintf("map+touch+unmap of %s bytes", thousands(int64(size))))
		if sb.MapTouch, err = mapTouchBaseline(ctx, dir, frame, r); err != nil {
			return nil, fmt.Errorf("map+touch+unmap baseline: %w", err)
		}
		b.Sizes = append(b.Sizes, sb)
	}
	return b, nil
}
