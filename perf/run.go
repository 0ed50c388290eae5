package perf

import (
	"context"
	"errors"
	"fmt"
	"github.com/flybus/flybus/store"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Run measures the baselines, starts a router, runs one schedule per
// agent count and stops the router. The report is returned whenever
// anything was measured, even with an error; the error is reserved for a
// run that could not proceed (bad configuration, no router, no store).
// Failures inside a schedule are counted in its figures instead.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	prog := startProgress(cfg.Progress)
	defer prog.stop()

	rep := &Report{Started: time.Now().UTC(), Machine: describeMachine(), Settings: Settings{
		Width: FrameWidth, Height: FrameHeight, FrameBytes: FrameBytes, Rate: FrameRate, Seconds: cfg.Seconds,
		Frames: frames(cfg.Seconds), Agents: cfg.Agents, Consumers: Consumers, SlowDelayNs: int64(SlowConsumerDelay),
		Fill: cfg.Fill, TouchStride: TouchStride, SampleEvery: int64(sampleEvery), ProfileFiles: cfg.CPUProfile != ""}}

	root, tmp, scratch, cleanup, err := workDirs(cfg.Store, "perf")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep.Store = describeStore(root)
	frame := FramePattern()
	rounds := defaultRounds
	if cfg.rounds != nil {
		rounds = *cfg.rounds
	}
	rep.Baselines, err = measureBaselines(ctx, scratch, frame, rounds, func(name string) {
		prog.phase("baseline: %s", name)
	})
	if rmErr := os.RemoveAll(scratch); err == nil {
		err = rmErr
	}
	if err != nil {
		return rep, err
	}

	prog.phase("starting the router")
	host, err := startRouter(ctx, cfg, root, tmp, &rep.Router)
	if err != nil {
		return rep, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := host.stop(sctx); err != nil {
			rep.Errors = append(rep.Errors, "stopping the router: "+err.Error())
		}
		inf := host.info()
		rep.Router.ExitStatus = inf.ExitStatus
		if _, err := os.Lstat(inf.StoreDir); inf.StoreDir != "" && !errors.Is(err, os.ErrNotExist) {
			rep.Errors = append(rep.Errors, fmt.Sprintf("the router's store directory %s is still there after shutdown", inf.StoreDir))
		}
	}()

	prog.phase("measuring what 10 ms stats sampling costs the idle router")
	rep.SamplingCPU, err = samplingCost(ctx, host, cfg.samplingWindow)
	if err != nil {
		rep.Errors = append(rep.Errors, "sampling cost: "+err.Error())
	}

	var recorder *recorderPlan
	if cfg.Recorder {
		prog.phase("finding flybus for the recorder")
		if recorder, err = findRecorder(ctx, cfg, tmp, rep.Router); err != nil {
			return rep, err
		}
	}

	for i, n := range cfg.Agents {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		env := scheduleEnv{host: host, sock: host.info().Socket, storeRoot: root, fill: cfg.Fill, path: pathOf(cfg),
			seconds: cfg.Seconds, index: i + 1, frame: frame, progress: prog, samplingCPU: rep.SamplingCPU}
		if cfg.CPUProfile != "" {
			env.profile = profileFile(cfg.CPUProfile, n, len(cfg.Agents) > 1)
		}
		if us, ok := cfg.NATSRouterCPUPerFrameUs[n]; ok {
			env.natsUs = &us
		}
		s := runSchedule(ctx, env, n)
		judge(rep.Baselines, s, cfg)
		rep.Schedules = append(rep.Schedules, s)
	}
	// The comparisons' passes: the one-agent schedule, numbered on after
	// the schedules.
	passEnv := scheduleEnv{host: host, sock: host.info().Socket, storeRoot: root, fill: cfg.Fill, path: pathOf(cfg),
		seconds: cfg.Seconds, frame: frame, progress: prog, samplingCPU: rep.SamplingCPU}
	next := len(cfg.Agents) + 1
	if cfg.StalledSubscriber && ctx.Err() == nil {
		if rep.Isolation = runIsolation(ctx, passEnv, next); rep.Isolation != nil {
			judge(rep.Baselines, rep.Isolation.Without, cfg)
			judge(rep.Baselines, rep.Isolation.With, cfg)
		}
		next += 2
	}
	if cfg.Recorder && ctx.Err() == nil {
		if rep.Recorder = runRecorderPasses(ctx, passEnv, next, recorder); rep.Recorder != nil {
			judge(rep.Baselines, rep.Recorder.Without, cfg)
			judge(rep.Baselines, rep.Recorder.With, cfg)
		}
	}
	return rep, ctx.Err()
}

// judge adds what is computed from a schedule's figures and the run's
// baselines: its targets and its frame-latency budget.
func judge(b *Baselines, s *Schedule, cfg Config) {
	pool := cfg.StoreMode == store.ModePool
	s.Targets = checkTargetsFor(b, s, cfg.Fill, cfg.Embedded, pool)
	s.FrameBudget = frameBudget(b, s, cfg.Embedded, pool)
}

// storeRoot prepares the store root: the given directory (created if
// missing, kept), or /dev/shm/flybus-perf-<pid> (removed afterwards).
func storeRoot(dir string) (string, func(), error) {
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", nil, err
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return "", nil, err
		}
		return abs, func() {}, nil
	}
	def := fmt.Sprintf("/dev/shm/flybus-perf-%d", os.Getpid())
	if err := os.Mkdir(def, 0o700); err != nil {
		return "", nil, fmt.Errorf("default store root: %w (choose one with --store DIR)", err)
	}
	return def, func() { os.RemoveAll(def) }, nil
}

// startRouter starts the router the configuration asks for and fills in
// what the report says about it.
func startRouter(ctx context.Context, cfg Config, root, tmp string, inf *Router) (routerHost, error) {
	sock := filepath.Join(tmp, "bus.sock")
	if cfg.Embedded {
		e, err := startEmbedded(root, cfg.StoreMode, sock)
		if err != nil {
			return nil, fmt.Errorf("embedded router: %w", err)
		}
		*inf = e.info()
		inf.StoreMode = cfg.StoreMode.String()
		return e, nil
	}
	bin, how, err := locateFlybus(ctx, cfg.Flybus, tmp)
	if err != nil {
		return nil, err
	}
	p, err := startProcess(ctx, bin, root, cfg.StoreMode, sock, cfg.RouterEnv)
	if err != nil {
		return nil, err
	}
	*inf = p.info()
	inf.Found = how
	inf.StoreMode = cfg.StoreMode.String()
	return p, nil
}

// samplingCost measures the CPU the router (embedded: the process) spends
// while the harness samples its stats every 10 ms and nothing else runs.
func samplingCost(ctx context.Context, host routerHost, seconds float64) (float64, error) {
	c0, err := host.cpu()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	smp := startSampler(ctx, host.stats())
	select {
	case <-time.After(time.Duration(seconds * float64(time.Second))):
	case <-ctx.Done():
	}
	_, _, errs, last := smp.stop()
	c1, err := host.cpu()
	if err != nil {
		return 0, err
	}
	if errs > 0 {
		return 0, fmt.Errorf("%d failed reads, the last: %w", errs, last)
	}
	return (c1 - c0).Seconds() / time.Since(t0).Seconds(), nil
}

// profileFile names a schedule's profile: file itself for a single
// schedule, else with ".agentsN" before the extension.
func profileFile(file string, agents int, several bool) string {
	if !several {
		return file
	}
	ext := filepath.Ext(file)
	return fmt.Sprintf("%s.agents%d%s", strings.TrimSuffix(file, ext), agents, ext)
}

// workDirs makes a run's directories: the store root, a temporary
// directory for sockets and the built binaries, and the baselines' scratch
// directory, which is in the store's filesystem so that pwrite and
// map+touch+unmap pay what staging and views pay. cleanup removes what
// was made here.
func workDirs(store, name string) (root, tmp, scratch string, cleanup func(), err error) {
	root, removeRoot, err := storeRoot(store)
	if err != nil {
		return "", "", "", nil, err
	}
	if tmp, err = os.MkdirTemp("", "flybus-"+name+"-"); err != nil {
		removeRoot()
		return "", "", "", nil, err
	}
	if scratch, err = os.MkdirTemp(root, name+"-baseline-"); err != nil {
		os.RemoveAll(tmp)
		removeRoot()
		return "", "", "", nil, err
	}
	return root, tmp, scratch, func() { os.RemoveAll(tmp); removeRoot() }, nil
}
