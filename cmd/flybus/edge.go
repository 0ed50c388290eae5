package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/edge"
	"github.com/flybus/flybus/router"
)

var edgeCmd = &command{
	name:    "edge",
	summary: "serve topics to browsers over WebSockets, with a live viewer",
	run:     runEdge,
	usage:   edgeUsage,
}

type edgeOptions struct {
	store         string
	listen        string
	topics        listFlag
	client        string
	origins       listFlag
	tokenFile     string
	maxClients    int
	writeTimeout  time.Duration
	routerMetrics string
	metrics       string
	metricsPublic bool
	logFormat     string
	check         bool
	timeout       time.Duration
}

// defaultEdgeListen is loopback: the edge reaches the network only when
// told to.
const defaultEdgeListen = "127.0.0.1:8090"

func edgeFlags(o *edgeOptions) *flag.FlagSet {
	set := newFlagSet("edge")
	set.StringVar(&o.store, "store", "", "the router's store root `DIR`, as given to serve --store (required: the edge\nmaps the artifacts there)")
	set.Var(&o.topics, "topic", "a `TOPIC` to serve (repeatable, at least one); browsers get no other")
	set.StringVar(&o.listen, "listen", defaultEdgeListen, "serve the viewer and the WebSocket on `ADDR`: HOST:PORT or PORT (127.0.0.1);\na host that is not loopback reaches the network and is logged as a warning")
	set.StringVar(&o.client, "client", "", clientFlagUsage)
	set.Var(&o.origins, "allow-origin", "also admit WebSockets from pages of `ORIGIN` (scheme://host[:port], repeatable;\n\"*\" admits any page, which lets every site you visit read the feed)")
	set.StringVar(&o.tokenFile, "token-file", "", "require the bearer token in `FILE` (its first line) of every WebSocket: in an\nAuthorization header, or in hello (the viewer asks for it, or reads #token=)")
	set.IntVar(&o.maxClients, "max-clients", 16, "serve at most `N` WebSockets at once (those before hello included); more\nare refused with 503")
	durationVar(set, &o.writeTimeout, "write-timeout", 10*time.Second, "disconnect a browser that takes longer than `D` to take one message")
	set.StringVar(&o.routerMetrics, "router-metrics", "", "the router's metrics `ADDR` (serve --metrics): the viewer then shows its\nlive view, what flybus top shows")
	set.StringVar(&o.metrics, "metrics", "", "serve the edge's own Prometheus /metrics on `ADDR`: HOST:PORT, PORT\n(127.0.0.1) or unix:PATH; a host that is not loopback needs --metrics-public")
	set.BoolVar(&o.metricsPublic, "metrics-public", false, "with --metrics: allow a HOST that is not loopback (logged as a warning)")
	set.StringVar(&o.logFormat, "log-format", "text", "`FORMAT` of the log on stderr: text or json")
	set.BoolVar(&o.check, "check", false, "connect, subscribe to every --topic once, say what was found and exit (0 if\nall is well, 1 if not) without serving")
	durationVar(set, &o.timeout, "timeout", 10*time.Second, "with --check: give up after `D`")
	return set
}

func edgeUsage() string {
	notes := `Keeps one subscription per topic on the router at SOCKET (latest, one in
flight, replay), however many browsers watch, and serves at ADDR:
  /     a viewer: the topics and their rates; a topic's frames drawn live
        (image/x-rgba and other raw pixel types), its payload, fps, latency
        from publish to draw, bytes per second and frames skipped; with
        --router-metrics, the router's live view
  /ws   the WebSocket (subprotocol flybus-edge.v1): a browser names topics
        and, per topic, the attachments it wants, and gets each publication
        as one binary message, a JSON header then the attachments' bytes
        written from the artifact's mapping (docs/edge.md)
A browser that reads slowly skips publications, counted in the next header
it gets; it never slows the bus or another browser. When the router goes
away the edge says so to every browser ("feed down") and connects again,
waiting longer each time up to 2 s; a topic not declared yet is awaited.

Prints one JSON line to stdout once listening:
  {"ready":true,"url":"http://127.0.0.1:8090/","metrics":…}
Logs go to stderr. SIGTERM, SIGINT or SIGHUP closes every WebSocket (going
away), unsubscribes and exits 0. Bad flags exit 2; a taken port exits 1.

Security. Pages of other origins are refused (403) unless --allow-origin
names them; on loopback, requests must name a loopback host (a page whose
DNS name was rebound to 127.0.0.1 gets 403). Requests from browsers are
small (4 KiB) and strict JSON; --max-clients bounds the WebSockets. The
edge only subscribes: it never publishes, calls or declares. Anyone who
can reach ADDR sees the topics served: on another address, give
--token-file.

Metrics (--metrics): flybus_edge_clients, flybus_edge_bus_connected,
flybus_edge_bus_lost_total, flybus_edge_frames_sent_total{topic},
flybus_edge_frames_skipped_total{topic}, flybus_edge_decode_failures_total,
flybus_edge_refusals_total{reason}, and more (docs/edge.md).
`
	example := walkExample("edge")
	if example == "" {
		example = "  flybus edge /tmp/flybus.sock --store /dev/shm/flybus --topic cam.frames --check\n"
	}
	example += "  flybus edge /tmp/flybus.sock --store /dev/shm/flybus --topic cam.frames \\\n" +
		"      --router-metrics 127.0.0.1:9100 --metrics 127.0.0.1:9102 &   # then open http://127.0.0.1:8090/\n"
	return usageText("flybus edge SOCKET --store DIR --topic TOPIC... [--listen ADDR] [--allow-origin ORIGIN]... [--token-file FILE] [FLAGS]",
		"Serve topics to browsers over WebSockets, with a live viewer.", edgeFlags(&edgeOptions{}), notes, example)
}

// edgeConfig is a checked command line.
type edgeConfig struct {
	socket, listen, metrics, routerMetrics string
	token                                  string
}

func (o *edgeOptions) resolve(pos []string) (*edgeConfig, error) {
	if len(pos) != 1 {
		return nil, fmt.Errorf("want SOCKET, got %d arguments", len(pos))
	}
	cfg := &edgeConfig{socket: pos[0]}
	if o.store == "" {
		return nil, errors.New("--store DIR is required: the router's store root (as given to flybus serve --store), where the edge maps artifacts")
	}
	if len(o.topics) == 0 {
		return nil, errors.New("--topic TOPIC is required (repeatable): the edge serves only the topics named")
	}
	seen := map[string]bool{}
	for _, t := range o.topics {
		if err := checkName("topic", t); err != nil {
			return nil, err
		}
		if seen[t] {
			return nil, fmt.Errorf("--topic %s given twice", t)
		}
		seen[t] = true
	}
	if msg := checkClientFlags(o.client, o.timeout); msg != "" {
		return nil, errors.New(msg)
	}
	switch {
	case o.maxClients <= 0:
		return nil, errors.New("--max-clients must be positive")
	case o.writeTimeout <= 0:
		return nil, errors.New("--write-timeout must be positive")
	case o.logFormat != "text" && o.logFormat != "json":
		return nil, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	listen, err := metricsAddr(o.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen: %v", strings.TrimPrefix(err.Error(), "metrics "))
	}
	if _, ok := metricsSocket(listen); ok {
		return nil, errors.New("--listen takes HOST:PORT: browsers do not dial Unix sockets")
	}
	cfg.listen = listen
	for _, orig := range o.origins {
		if orig != "*" && !validOrigin(orig) {
			return nil, fmt.Errorf("--allow-origin %q: want scheme://host[:port], e.g. https://dash.example:8443, or *", orig)
		}
	}
	if o.metrics != "" {
		if cfg.metrics, err = metricsAddr(o.metrics); err != nil {
			return nil, err
		}
	}
	if o.routerMetrics != "" {
		if cfg.routerMetrics, err = metricsAddr(o.routerMetrics); err != nil {
			return nil, fmt.Errorf("--router-metrics: %v", err)
		}
	}
	if o.tokenFile != "" {
		data, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %v", err)
		}
		line, _, _ := strings.Cut(string(data), "\n")
		cfg.token = strings.TrimSpace(line)
		switch {
		case cfg.token == "":
			return nil, fmt.Errorf("--token-file %s: the first line is empty", o.tokenFile)
		case len(cfg.token) > edge.MaxTokenBytes:
			return nil, fmt.Errorf("--token-file %s: a token holds at most %d bytes", o.tokenFile, edge.MaxTokenBytes)
		}
	}
	return cfg, nil
}

func validOrigin(s string) bool {
	scheme, rest, ok := strings.Cut(s, "://")
	return ok && (scheme == "http" || scheme == "https") && rest != "" && !strings.ContainsAny(rest, "/?#@")
}

func runEdge(c *command, args []string, stdout, stderr io.Writer) int {
	o := &edgeOptions{}
	pos, code, ok := parse(c, edgeFlags(o), args, stdout, stderr)
	if !ok {
		return code
	}
	cfg, err := o.resolve(pos)
	if err != nil {
		return usageError(c, stderr, err.Error())
	}
	log := newLogger(o.logFormat, stderr)
	if o.check {
		return edgeCheck(stdout, stderr, o, cfg)
	}

	// Installed for the process's life: a second signal during the
	// shutdown is logged, not fatal.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for first := true; ; first = false {
			select {
			case s := <-sigs:
				if first {
					log.Info("stopping on a signal", "signal", s.String())
					stop()
				} else {
					log.Info("already shutting down; signal ignored", "signal", s.String())
				}
			case <-done:
				return
			}
		}
	}()
	return serveEdge(ctx, o, cfg, log, stdout)
}

// edgeDialer makes the edge's reconnecting client, as the tool's client id
// (a bound socket's own id when --client is not given).
func edgeDialer(o *edgeOptions, socket string) edge.Dialer {
	return func(ctx context.Context) (*client.Client, error) {
		bus, _, err := dialTool(ctx, socket, "edge", o.client, client.Config{StoreRoot: o.store})
		return bus, err
	}
}

func serveEdge(ctx context.Context, o *edgeOptions, cfg *edgeConfig, log *slog.Logger, stdout io.Writer) int {
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		log.Error("cannot listen", "addr", cfg.listen, "err", err)
		return exitFailure
	}
	addr := ln.Addr().(*net.TCPAddr)
	loopback := addr.IP.IsLoopback()
	if !loopback {
		log.Warn("the edge is open to the network: anyone who can connect sees the topics served; firewall the port or give --token-file",
			"addr", addr.String(), "token", cfg.token != "")
	}
	for _, orig := range o.origins {
		if orig == "*" {
			log.Warn("--allow-origin * admits WebSockets from any page: every site a browser here visits can read the feed")
		}
	}
	var metricsLn net.Listener
	if cfg.metrics != "" {
		if metricsLn, err = listenMetrics(cfg.metrics); err != nil {
			ln.Close()
			log.Error("cannot serve metrics", "addr", cfg.metrics, "err", err)
			return exitFailure
		}
		if a, ok := metricsLn.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
			if !o.metricsPublic {
				metricsLn.Close()
				ln.Close()
				log.Error("refusing to start: --metrics is not a loopback address; give --metrics-public to allow that", "addr", cfg.metrics)
				return exitUsage
			}
			log.Warn("the edge's metrics endpoint is open to the network (--metrics-public)", "addr", a.String())
		}
	}

	ecfg := edge.Config{Topics: o.topics, Feed: edge.Follow(edgeDialer(o, cfg.socket)), Logger: log,
		AllowedOrigins: o.origins, LoopbackHosts: loopback, Token: cfg.token, MaxClients: o.maxClients, WriteTimeout: o.writeTimeout}
	if cfg.routerMetrics != "" {
		addr := cfg.routerMetrics
		ecfg.RouterAddr = addr
		ecfg.RouterDetails = func(ctx context.Context) (router.Details, error) { return fetchDetails(ctx, addr) }
	}
	e, err := edge.New(ecfg)
	if err != nil {
		ln.Close()
		if metricsLn != nil {
			metricsLn.Close()
		}
		log.Error("cannot start", "err", err)
		return exitUsage
	}
	srv := &http.Server{Handler: e.Handler(), ConnContext: edge.ConnContext, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second,
		MaxHeaderBytes: edge.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("the edge's server stopped", "err", err)
		}
	}()
	var msrv *http.Server
	metricsAt := ""
	if metricsLn != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(e.Collector())
		mux := http.NewServeMux()
		mux.Handle("/metrics", registryHandler(reg, log))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() {
			if err := msrv.Serve(metricsLn); err != nil && err != http.ErrServerClosed {
				log.Error("the edge's metrics server stopped", "err", err)
			}
		}()
		metricsAt = metricsLn.Addr().String()
		if ua, ok := metricsLn.Addr().(*net.UnixAddr); ok {
			metricsAt = "unix:" + ua.Name
		}
	}

	runDone := make(chan error, 1)
	go func() { runDone <- e.Run(ctx) }()
	url := "http://" + addr.String() + "/"
	line, _ := json.Marshal(struct {
		Ready   bool     `json:"ready"`
		URL     string   `json:"url"`
		Metrics string   `json:"metrics,omitempty"`
		Topics  []string `json:"topics"`
	}{true, url, metricsAt, e.Topics()})
	fmt.Fprintf(stdout, "%s\n", line)
	log.Info("edge ready", "url", url, "socket", cfg.socket, "topics", e.Topics(), "metrics", metricsAt)

	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := []error{srv.Shutdown(sctx), e.Close(sctx), <-runDone}
	if msrv != nil {
		errs = append(errs, msrv.Shutdown(sctx))
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("shutdown was not clean", "err", err)
		return exitFailure
	}
	log.Info("stopped")
	return exitOK
}

// edgeCheck connects once and tries every topic, as the edge would.
func edgeCheck(stdout, stderr io.Writer, o *edgeOptions, cfg *edgeConfig) int {
	ctx, cancel := toolContext(o.timeout, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if _, err := os.Stat(o.store); err != nil {
		fmt.Fprintf(stderr, "flybus edge: --store: %v\n", err)
		return exitFailure
	}
	bus, id, err := connectTool(ctx, cfg.socket, "edge", o.client, client.Config{StoreRoot: o.store})
	if err != nil {
		return connectFailed(stderr, "edge", id, o.timeout, err)
	}
	defer bus.Close()
	fmt.Fprintf(stdout, "connected to %s as %s\n", bus.Info().RouterID, id)
	code := exitOK
	for _, t := range o.topics {
		sub, err := bus.Subscribe(ctx, t, client.InFlight(1), client.Replay())
		if err != nil {
			fmt.Fprintf(stdout, "%s: %v\n", t, err)
			code = exitFailure
			continue
		}
		sub.Close()
		fmt.Fprintf(stdout, "%s: subscribed\n", t)
	}
	if cfg.routerMetrics != "" {
		d, err := fetchDetails(ctx, cfg.routerMetrics)
		if err != nil {
			fmt.Fprintf(stdout, "router metrics %s: %v\n", cfg.routerMetrics, err)
			code = exitFailure
		} else {
			fmt.Fprintf(stdout, "router metrics %s: %d topics, %d clients\n", cfg.routerMetrics, len(d.Topics), len(d.Clients))
		}
	}
	return code
}
