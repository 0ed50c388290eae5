package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/flybus/flybus/fastpath"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

var serveCmd = &command{
	name:    "serve",
	summary: "run a router on Unix sockets until SIGTERM, SIGINT or SIGHUP",
	run:     runServe,
	usage:   serveUsage,
}

func serveFlags(o *serveOptions) *flag.FlagSet {
	set := newFlagSet("serve")
	set.StringVar(&o.store, "store", "", "store root `DIR`: the router keeps its artifacts in DIR/<storeId>/\n(a tmpfs, e.g. /dev/shm/flybus); created if missing")
	set.StringVar(&o.storeMode, "store-mode", "pool", "`MODE` of the artifact store: pool (slot files reused across generations: no\nfile created, mapped or unlinked per frame; consumers keep each slot mapped) or\nfiles (a file per artifact, unlinked after its last owner); see below")
	set.Var(&o.listen, "listen", "a Unix socket to listen on, `PATH[=CLIENT_ID]` (repeatable): with =CLIENT_ID only\nthat client may connect there; a bare PATH is unbound and needs --open")
	set.BoolVar(&o.open, "open", false, "open policy: any client id with every grant, self-asserted (trusted deployments only)")
	set.StringVar(&o.config, "config", "", "read the JSON configuration `FILE` (see below); flags override it")
	durationVar(set, &o.helloTimeout, "hello-timeout", 5*time.Second, "a new connection must complete bus.hello within `D`")
	// The goodbye's bound: clients get connection.closing and this long to
	// go before their transports are closed under them.
	durationVar(set, &o.shutdown, "shutdown-timeout", 10*time.Second, "at shutdown, clients get `D` to go before their connections are closed")
	set.StringVar(&o.logFormat, "log-format", "text", "`FORMAT` of the log on stderr: text or json")
	set.StringVar(&o.metrics, "metrics", "", "serve Prometheus /metrics and the /details snapshot over HTTP on `ADDR`:\nHOST:PORT or http://HOST:PORT (\"9100\" or \":9100\" means 127.0.0.1:9100; a host\nthat is not loopback needs --metrics-public), or unix:PATH, a socket only\nthis user may connect to (see below)")
	set.IntVar(&o.metricsLabelCap, "metrics-label-cap", defaultLabelCap, "with --metrics: at most `N` topics, subscriptions, services and clients get\nseries of their own; the rest are summed under the label value (other)")
	set.BoolVar(&o.pprof, "pprof", false, "with --metrics: also serve Go's profiler at /debug/pprof/ (without it: 404)")
	set.BoolVar(&o.metricsPublic, "metrics-public", false, "with --metrics: allow a HOST that is not loopback, e.g. 0.0.0.0, so the\nnetwork reaches the endpoint (logged as a warning)")
	set.Var(&o.limits, "limit", "set one limit by its hello name, `NAME=VALUE` (repeatable), e.g. maxClients=128")
	return set
}

func serveUsage() string {
	var names []string
	for _, n := range wire.LimitNames() {
		if err := (&wire.Limits{}).Set(n, 1); err == nil {
			names = append(names, n)
		}
	}
	notes := `Prints one JSON line to stdout once every socket listens:
  {"ready":true,"routerId":"router-…","storeId":"store-…","sockets":[…]}
Logs go to stderr. SIGTERM, SIGINT or SIGHUP sends connection.closing to every
client, removes the sockets and the store directory, and exits 0; a further
signal during that shutdown is logged and changes nothing. A socket file left
by a dead router is replaced; a live router's socket is left alone (exit 1).
Bad flags or configuration exit 2 before anything is created; a start that
fails later (metrics port taken, socket directory missing, a listen refused)
exits 1 and removes what it created. A store root that is not a tmpfs works
but is logged as a warning: every artifact byte would also go to a disk.
Relative paths are relative to the working directory.

Store modes. pool is the default because a steady stream of artifacts of a few
sizes (frames) costs no file creation, mapping or unlink per artifact: on the
60 Hz frame schedule it cuts publish-to-verified latency and router CPU per
frame (see docs/design.md for the figures). A view still open when its client
ends keeps its bytes in both modes (pool retires such a slot instead of
reusing it). Choose files when artifacts come in many different sizes (each
size keeps slots of its own until idle for 5 s, so the tmpfs holds more), or
when programs that are not flybus clients read artifact files directly and
keep them mapped after their owner lets go (a pool slot shows its later
generations; a removed file keeps its bytes).

Metrics. Whoever can connect to --metrics reads /metrics and /details, which
name every client id, topic and service, and with --pprof profiles the
router: on loopback that is every local user, with --metrics-public the
network too (refused without it: exit 2). unix:PATH limits it to this user:
the socket is created 0600, a stale one is replaced as the bus sockets are,
and it is removed at exit. HTTP may hold at most min(64, RLIMIT_NOFILE/8)
connections (at least 4), leaving the other descriptors to the bus; past
that a new one displaces the oldest idle one, or is closed if all are in a
request. Idle connections close after 30 s; request headers must arrive
within 5 s and a response be taken within 30 s (a profile or trace gets
its ?seconds on top).

Without a policy (no --open, no "policy" in the file), each CLIENT_ID bound
with --listen is admitted with every grant.

The --config file (unknown keys are refused):
  {"store": DIR, "storeMode": "files" or "pool",
   "listen": [{"path": PATH, "client": CLIENT_ID or null}],
   "policy": {"open": BOOL, "default": GRANTS or null, "clients": {CLIENT_ID: GRANTS}},
   "limits": {NAME: VALUE}}
  GRANTS is {"register", "call", "publish", "subscribe", "manageTopics": [PATTERN]};
  a PATTERN is "*", "prefix.*" or an exact service or topic name; a call
  PATTERN may add "/METHOD" ("svc/status", "svc/Admin.*", "svc/*") to admit
  only those methods. Byte-size limits may be numbers or U64 strings
  ("1073741824").

Limits: ` + wrapWords(strings.Join(names, ", "), 68, "  ") + "\n"
	return usageText("flybus serve --store DIR [--listen PATH[=CLIENT_ID]]... [--open] [--config FILE] [FLAGS]",
		"Run a router on Unix sockets until SIGTERM, SIGINT or SIGHUP.", serveFlags(&serveOptions{}), notes,
		walkExample("serve"))
}

// wrapWords wraps text at width, indenting continuation lines.
func wrapWords(text string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n" + indent)
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

func runServe(c *command, args []string, stdout, stderr io.Writer) int {
	o := &serveOptions{}
	fset := serveFlags(o)
	pos, code, ok := parse(c, fset, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, stderr, "unexpected argument "+pos[0])
	}
	o.set = map[string]bool{}
	fset.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	cfg, err := resolveServe(o, os.ReadFile)
	if err != nil {
		return usageError(c, stderr, err.Error())
	}
	log := newLogger(cfg.LogFormat, stderr)
	log.Info("threads running Go code (override with the GOMAXPROCS environment variable)", "gomaxprocs", fastpath.ApplyRouterProcs())
	// Installed until the process exits, never stopped: a second signal
	// during a slow shutdown would otherwise kill the router with the
	// default action and leave its store behind. SIGHUP (the terminal
	// went away) asks for the same clean stop.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		log.Info("stopping on a signal", "signal", (<-sigs).String())
		stop()
		for s := range sigs {
			log.Info("already shutting down; signal ignored", "signal", s.String())
		}
	}()
	return serve(ctx, cfg, log, stdout)
}

func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// readyLine is the one line serve prints to stdout, for launchers.
type readyLine struct {
	Ready    bool     `json:"ready"`
	RouterID string   `json:"routerId"`
	StoreID  string   `json:"storeId"`
	Sockets  []string `json:"sockets"`
}

// serve runs the validated configuration until ctx ends.
func serve(ctx context.Context, cfg *serveConfig, log *slog.Logger, stdout io.Writer) int {
	paths := make([]string, len(cfg.Listen))
	for i, l := range cfg.Listen {
		paths[i] = l.Path
	}
	// Sockets and the metrics port are checked before the router opens
	// its store, so refusing to start (next to a live router, on a taken
	// port) leaves nothing behind.
	sockets := paths
	if path, ok := metricsSocket(cfg.Metrics); ok {
		sockets = append(sockets[:len(sockets):len(sockets)], path)
	}
	if err := checkSocketDirs(sockets); err != nil {
		log.Error("refusing to start", "err", err)
		return exitFailure
	}
	removed, err := clearStaleSockets(sockets)
	for _, p := range removed {
		log.Info("removed a stale socket", "socket", p)
	}
	if err != nil {
		log.Error("refusing to start", "err", err)
		return exitFailure
	}
	var metricsLn net.Listener
	if cfg.Metrics != "" {
		if metricsLn, err = listenMetrics(cfg.Metrics); err != nil {
			log.Error("cannot serve metrics", "addr", cfg.Metrics, "err", err)
			return exitFailure
		}
		// A name such as localhost was taken for loopback unresolved.
		if a, ok := metricsLn.Addr().(*net.TCPAddr); ok && !cfg.MetricsPublic && !a.IP.IsLoopback() {
			metricsLn.Close()
			log.Error("refusing to start: --metrics is not a loopback address; give --metrics-public to allow that", "addr", cfg.Metrics, "bound", a.String())
			return exitUsage
		}
	}
	created := missingDirs(cfg.Store)

	r, err := router.New(router.Config{StoreRoot: cfg.Store, StoreMode: cfg.StoreMode, Limits: cfg.Limits, Policy: cfg.Policy(),
		HelloTimeout: cfg.HelloTimeout, Logger: log})
	if err != nil {
		if metricsLn != nil {
			metricsLn.Close()
		}
		removeCreated(created)
		log.Error("cannot start the router", "err", err)
		if errors.Is(err, store.ErrUnsafeRoot) {
			return exitUsage // the configuration must change, as for a bad flag
		}
		return exitFailure
	}
	var metrics *metricsServer
	stopAll := func() int {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.Shutdown)
		defer cancel()
		err := r.Shutdown(sctx)
		if metrics != nil {
			err = errors.Join(err, metrics.Close(sctx))
		}
		if err != nil {
			log.Warn("shutdown was not clean", "err", err)
		}
		if _, statErr := os.Lstat(r.StoreDir()); !errors.Is(statErr, fs.ErrNotExist) {
			log.Error("the store directory is still there", "dir", r.StoreDir(), "err", statErr)
			return exitFailure
		}
		return exitOK
	}

	if tmpfs, fsType, err := isTmpfs(cfg.Store); err == nil && !tmpfs {
		log.Warn("the store root is not a tmpfs: artifacts will be written through to a disk; use one such as /dev/shm",
			"root", cfg.Store, "fsType", fmt.Sprintf("0x%x", fsType))
	}
	if metricsLn != nil {
		lim := defaultMetricsLimits()
		metrics = serveMetrics(metricsLn, r, cfg.MetricsLabelCap, cfg.Pprof, lim, log)
		log.Info("metrics listening", "addr", metrics.Addr(), "pprof", cfg.Pprof, "maxConns", lim.maxConns)
		if a, ok := metricsLn.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
			log.Warn("the metrics endpoint is open to the network (--metrics-public): anyone who can connect reads "+
				"/metrics and /details, which name every client id, topic and service; firewall the port, or use 127.0.0.1:PORT or unix:PATH",
				"addr", metrics.Addr(), "pprof", cfg.Pprof)
		}
	}
	for _, l := range cfg.Listen {
		if l.Client == "" {
			_, err = r.ListenUnix(l.Path)
		} else {
			_, err = r.ListenUnixAs(l.Path, l.Client)
		}
		if err != nil {
			log.Error("cannot listen", "socket", l.Path, "err", err)
			// Shutdown closes the sockets already listening and removes
			// the store directory; the root goes too if this start made it.
			stopAll()
			removeCreated(created)
			return exitFailure
		}
	}

	if ctx.Err() != nil {
		// Stopped while starting: a ready line now would only mislead.
		return stopAll()
	}
	line, _ := json.Marshal(readyLine{Ready: true, RouterID: r.RouterID().String(),
		StoreID: r.StoreID().String(), Sockets: paths})
	fmt.Fprintf(stdout, "%s\n", line)
	log.Info("router ready", "routerId", r.RouterID().String(), "storeDir", r.StoreDir(), "storeMode", cfg.StoreMode.String(), "sockets", paths)

	<-ctx.Done()
	log.Info("shutting down")
	code := stopAll()
	if code == exitOK {
		log.Info("stopped")
	}
	return code
}
