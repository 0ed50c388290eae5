package perf

import (
	"bytes"
	"github.com/flybus/flybus/store"
	"strings"
	"testing"
)

func TestMainHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		if code := Main([]string{arg}, &out, &errOut); code != exitOK {
			t.Fatalf("%s: exit %d", arg, code)
		}
		if !strings.HasPrefix(out.String(), "Usage: flybus perf") || errOut.Len() != 0 {
			t.Fatalf("%s: stdout %q, stderr %q", arg, out.String(), errOut.String())
		}
		for _, flag := range []string{"--seconds", "--agents", "--fill", "--embedded", "--flybus", "--store", "--json", "--cpuprofile", "--stalled-subscriber", "--recorder"} {
			if !strings.Contains(out.String(), flag) {
				t.Errorf("help does not describe %s", flag)
			}
		}
	}
}

func TestMainUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"UnknownFlag":     {"--frobnicate"},
		"Positional":      {"extra"},
		"BadAgents":       {"--agents", "1,two"},
		"NegativeAgents":  {"--agents", "-1"},
		"TooManyAgents":   {"--agents", "1000"},
		"BadFill":         {"--fill", "paint"},
		"ZeroSeconds":     {"--seconds", "0"},
		"TooShort":        {"--seconds", "0.001"},
		"EmbeddedWithBin": {"--embedded", "--flybus", "/bin/true"},
		"BadNATS":         {"--nats-us-per-frame", "1:20"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(args, &out, &errOut); code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %s", code, exitUsage, errOut.String())
			}
			if out.Len() != 0 || !strings.HasPrefix(errOut.String(), "flybus perf: ") {
				t.Fatalf("stdout %q, stderr %q", out.String(), errOut.String())
			}
		})
	}
}

func TestOptionsConfig(t *testing.T) {
	o := &options{seconds: 2, agents: "1, 3", fill: "map", nats: "1=120.5,3=300", storeMode: "pool", stalled: true, recorder: true}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Seconds != 2 || len(cfg.Agents) != 2 || cfg.Agents[1] != 3 || cfg.Fill != FillMap || cfg.StoreMode != store.ModePool ||
		!cfg.StalledSubscriber || !cfg.Recorder ||
		cfg.NATSRouterCPUPerFrameUs[1] != 120.5 || cfg.NATSRouterCPUPerFrameUs[3] != 300 {
		t.Fatalf("%+v", cfg)
	}
	// Embedded, a flybus executable is the recorder's.
	rec := &options{seconds: 2, agents: "1", fill: "write", storeMode: "pool", embedded: true, flybus: "/bin/true", recorder: true}
	if _, err := rec.config(); err != nil {
		t.Errorf("--embedded --flybus with --recorder: %v", err)
	}
	if d := (Config{}).withDefaults(); d.Seconds != 5 || len(d.Agents) != 3 || d.Fill != FillWrite {
		t.Fatalf("defaults %+v", d)
	}
	if frames(5) != 300 || frames(2) != 120 || frames(0.5) != 30 {
		t.Fatal("frames per schedule")
	}
}
