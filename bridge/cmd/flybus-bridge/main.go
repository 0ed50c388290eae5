// Command flybus-bridge bridges flybus topics through NATS: see
// `flybus-bridge --help` and the bridge package.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/flybus/flybus/bridge"
)

const (
	exitOK      = 0
	exitFailure = 1 // it ran and failed
	exitUsage   = 2 // bad arguments or configuration: nothing was done
)

const usage = `flybus-bridge: carry flybus topics and their artifacts between hosts through NATS

Usage:
  flybus-bridge [flags] CONFIG     run the bridge the JSON file CONFIG describes
  flybus-bridge check CONFIG       validate CONFIG, print what it would bridge, exit

The bridge is a client of its local router (local.socket, as local.clientId)
and of NATS (nats.urls). Each export subscribes to a local topic and
publishes every message, payload and artifacts, to SUBJECT.<topic sequence>
(inline when it fits the server's max_payload, in ordered chunks otherwise);
each import publishes complete, digest-checked frames of SUBJECT.* to a local
topic, every one in order ("mode": "bounded", the default) or the newest
("mode": "latest": a slow local router makes it skip frames, not lag). An
export with a "stream" is also stored in JetStream, and with "history" the
bridge answers History.Get {topic, sequence} and History.Range {topic,
from, count} on a local service.

A config (unknown keys are refused; durations are strings with a unit):

  {
    "origin": "sim-host",
    "nats": {"urls": ["nats://10.0.0.5:4222"], "credentials": "/etc/flybus/bridge.creds",
             "tls": {"ca": "/etc/flybus/ca.pem", "cert": "/etc/flybus/c.pem", "key": "/etc/flybus/c.key"},
             "maxReconnects": -1, "reconnectWait": "2s", "timeout": "5s"},
    "local": {"socket": "/tmp/flybus-bridge.sock", "clientId": "bridge",
              "storeRoot": "/dev/shm/flybus"},
    "exports": [{"topic": "cam.frames", "subject": "site.cam.frames", "mode": "latest",
                 "stream": {"name": "CAM_FRAMES", "maxAge": "10m", "maxBytes": 2147483648}}],
    "imports": [{"subject": "site.agent.actions", "topic": "agent.actions", "retained": "latest", "mode": "bounded"}],
    "history": {"service": "bridge.history"}
  }

Flags:
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("flybus-bridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	statsEvery := fs.Duration("stats-every", 0, "log the counters this often (0: only at exit)")
	// The flag package prints its own error line; the usage text goes to
	// stdout on --help only, once.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprint(stdout, usage)
			fs.PrintDefaults()
			return exitOK
		}
		fmt.Fprintln(stderr, "see flybus-bridge --help")
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 2 && rest[0] == "check" {
		cfg, err := bridge.LoadConfig(rest[1])
		if err != nil {
			fmt.Fprintln(stderr, "flybus-bridge:", err)
			return exitUsage
		}
		describe(stdout, cfg)
		return exitOK
	}
	if len(rest) != 1 {
		fmt.Fprintln(stderr, "flybus-bridge: give one CONFIG file (or check CONFIG); see flybus-bridge --help")
		return exitUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(stderr, "flybus-bridge: --log-level:", err)
		return exitUsage
	}
	hopts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, hopts))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, hopts))
	default:
		fmt.Fprintln(stderr, "flybus-bridge: --log-format: text or json")
		return exitUsage
	}
	cfg, err := bridge.LoadConfig(rest[0])
	if err != nil {
		fmt.Fprintln(stderr, "flybus-bridge:", err)
		return exitUsage
	}
	b, err := bridge.New(cfg, bridge.Options{Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "flybus-bridge:", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if *statsEvery > 0 {
		go func() {
			t := time.NewTicker(*statsEvery)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					logStats(log, b)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	err = b.Run(ctx)
	logStats(log, b)
	if err != nil {
		fmt.Fprintln(stderr, "flybus-bridge:", err)
		if errors.Is(err, bridge.ErrConfig) {
			return exitUsage
		}
		return exitFailure
	}
	return exitOK
}

func logStats(log *slog.Logger, b *bridge.Bridge) {
	j, _ := json.Marshal(b.Stats())
	log.Info("stats", "counters", string(j))
}

func describe(w io.Writer, c *bridge.Config) {
	fmt.Fprintf(w, "config ok: origin %s, nats %v, local %s as %s\n", c.Origin, c.NATS.URLs, c.Local.Socket, c.Local.ClientID)
	for _, e := range c.Exports {
		s := ""
		if e.Stream != nil {
			s = fmt.Sprintf(", stored in stream %s (max age %v, max bytes %d)", e.Stream.Name,
				time.Duration(e.Stream.MaxAge), e.Stream.MaxBytes)
		}
		fmt.Fprintf(w, "export %s -> %s.<seq> (%s)%s\n", e.Topic, e.Subject, e.Mode, s)
	}
	for _, im := range c.Imports {
		fmt.Fprintf(w, "import %s.* -> %s (%s, retained %s)\n", im.Subject, im.Topic, im.Mode, im.Retained)
	}
	if c.History != nil {
		fmt.Fprintf(w, "history service %s\n", c.History.Service)
	}
}
