package router

// A deterministic simulation of the routing core.
//
// A seeded generator plays a handful of clients against one core with no
// shell in between. Every command is encoded with wire.AppendEnvelope and
// decoded by a wire.Decoder, so handle receives exactly what a connection's
// reader would give it; every frame a writer pulls is encoded the way the
// writer encodes it and decoded by the client that receives it, which learns
// its delivery ids, requests, results, messages and attachments from those
// frames alone. The store is a model: staging and seal effects complete at
// random later steps, in random order, sometimes failing; unlinks apply at
// once and must name a file that exists.
//
// The core is driven the way the shell drives it: commands through handle,
// writers through pull (one fastpath.WriteBatch at a time, only when woken), store
// completions through staged and sealed, transports through drop and
// closeConn, with the core's settle after each step where Router.step
// runs one. After every step the test walks the core's registries
// (checkInvariants), probes parked writers for lost wake-ups
// (checkWakeups) and compares each quiet client's view of its own
// resources with the core (checkView). At the end everyone disconnects and
// nothing may remain (teardown).
//
// The simulation is split by role: sim_driver_test.go (the sim, its step
// loop, transports and teardown), sim_commands_test.go (what clients send),
// sim_client_test.go (the client model and the frames it reads),
// sim_store_test.go (the model store), sim_invariants_test.go (the checks
// after every step) and sim_scenarios_test.go (the testdata/sim
// interpreter). This file holds the tests and their flags.
//
//	go test ./router -run 'TestSim$'                  the fixed CI seeds
//	go test ./router -run 'TestSim$' -sim.seed=17     replay one seed
//	go test ./router -run 'TestSim$' -sim.seeds=5000  5000 more seeds
//	go test ./router -run TestSimScenarios            testdata/sim scripts
//
// A failure names the broken invariant: await, closing-empty, calls, client-view,
// collected, conns, control, deliveries, files, frames, holds, inflight,
// owners, owners-results, presence, queued-bytes, refusals, retained-bytes, roots,
// services, slots, snapshot, store-bytes, subs, teardown, topics, views or
// wakeup (panic when the core panics). views is pool mode's promise: no
// slot a program may still map (what a session owned when its connection
// ended, what a live one owns) is free or at a later generation. -sim.skip=name[,name] stops enforcing some, to
// look past a known bug for the next one.

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	simSeedFlag  = flag.Int64("sim.seed", 0, "replay this one simulation seed")
	simSeedsFlag = flag.Int("sim.seeds", 0, "run this many seeds beyond the fixed set, from -sim.base")
	simBaseFlag  = flag.Int64("sim.base", 0, "first seed of -sim.seeds (0: from the clock, logged)")
	simStepsFlag = flag.Int("sim.steps", 2000, "steps per seed")
	simTraceFlag = flag.Int("sim.trace", 60, "steps of trace printed with a failure")
	simSkipFlag  = flag.String("sim.skip", "", "invariants not to enforce, comma separated")
	simLogFlag   = flag.Bool("sim.log", false, "log the whole trace of every seed")
)

// simFixedSeeds is the set CI runs.
const simFixedSeeds = 30

func TestSim(t *testing.T) {
	skip := map[string]bool{}
	for _, name := range strings.Split(*simSkipFlag, ",") {
		if name = strings.TrimSpace(name); name != "" {
			skip[name] = true
		}
	}
	if *simSeedFlag != 0 {
		runSim(t, *simSeedFlag, *simStepsFlag, skip)
		return
	}
	var seeds []int64
	for i := int64(1); i <= simFixedSeeds; i++ {
		seeds = append(seeds, i)
	}
	if n := *simSeedsFlag; n > 0 {
		base := *simBaseFlag
		if base == 0 {
			base = time.Now().UnixNano()%1e9 + 1000
			t.Logf("-sim.seeds=%d starts at -sim.base=%d", n, base)
		}
		for i := range int64(n) {
			seeds = append(seeds, base+i)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runSim(t, seed, *simStepsFlag, skip)
		})
		t.Run(fmt.Sprintf("seed=%d/pool", seed), func(t *testing.T) {
			t.Parallel()
			runSimPool(t, seed, *simStepsFlag, skip)
		})
	}
}

// TestSimReplays runs seeds twice, with each store, and compares their
// verdicts and traces line by line, unsorted: the core releases what a
// connection held in an order its inputs decide, so every frame, bus id,
// store unlink and slot a later allocation gets replays exactly.
func TestSimReplays(t *testing.T) {
	for _, seed := range []int64{3, 11, 13, 19, -3, -11, -13, -19} {
		var traces [2][]string
		var verdicts [2]string
		for i := range traces {
			s := newSim(max(seed, -seed), nil)
			if seed < 0 {
				s.usePool()
			}
			s.full = &traces[i]
			if err := s.run(1000); err != nil {
				verdicts[i], _, _ = strings.Cut(err.Error(), "\n")
			}
		}
		if verdicts[0] != verdicts[1] {
			t.Fatalf("seed %d: verdicts differ:\n  %s\n  %s", seed, verdicts[0], verdicts[1])
		}
		a, b := traces[0], traces[1]
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("seed %d (negative: pool) diverges:\n  first:  %s\n  second: %s", seed, a[i], b[i])
			}
		}
		if len(a) != len(b) {
			t.Fatalf("seed %d: %d and %d trace lines", seed, len(a), len(b))
		}
	}
}

func runSim(t *testing.T, seed int64, steps int, skip map[string]bool) {
	runSimWith(t, newSim(seed, skip), seed, steps)
}

// runSimPool runs a seed against a pooled store.
func runSimPool(t *testing.T, seed int64, steps int, skip map[string]bool) {
	s := newSim(seed, skip)
	s.usePool()
	runSimWith(t, s, seed, steps)
}

func runSimWith(t *testing.T, s *sim, seed int64, steps int) {
	if *simLogFlag {
		s.echo = func(line string) { t.Log(line) }
	}
	if err := s.run(steps); err != nil {
		t.Fatal(err)
	}
	if len(s.skipped) > 0 {
		t.Logf("seed %d: violations not enforced: %v", seed, s.skipped)
	}
	if testing.Verbose() {
		t.Logf("seed %d: %d clients, %d steps, outcomes: %s", seed, len(s.clients), steps, s.outcomeSummary())
	}
}

var simRewrite = flag.Bool("sim.rewrite", false, "rewrite the expected output of the testdata/sim scenarios")

// TestSimScenarios runs the scripts in testdata/sim/*.txt through the same
// simulator. A script is a list of blocks:
//
//	# comments
//	<command>
//	----
//	<what the command made happen, one trace line each>
//	<blank line>
//
// Commands name clients; the trace shows replies, deliveries and notices
// when a client's writer is pulled, store I/O, closings and unlinks.
// Invariants are checked after every command; a broken one ends the
// script. -sim.rewrite regenerates the expected output.
//
//	limits <hello name>=<n>...     before the first connect
//	connect <client>...            accept, say hello and read the HelloOK
//	pull <client>                  the writer takes one batch; the client reads it
//	drop|close <client>            transport gone; the router closes it
//	finish <client>                the writer wrote connection.closing and drops it
//	register <client> <svc> [q=n] [f=n]   unregister <client> <svc>
//	call <client> <svc> [size=n] [att=<ref>]...
//	reply <client> <dlv> [att=<ref>]...   respond-release <client> <dlv>
//	cancel <client> <call>
//	declare <client> <topic> [latest]     clear|delete <client> <topic>
//	subscribe <client> <topic> latest|bounded [q=n] [f=n] [replay]
//	unsubscribe <client> <sub>
//	publish <client> <topic> [size=n] [att=<ref>]...
//	consume <client> <dlv>...
//	allocate <client> <bytes>      seal <client> <own>
//	open|retain <client> <ref>     release <client> <own>...
//	io [fail|mismatch]             finish the oldest staging or seal
//	shutdown
//	end                            everyone leaves; nothing may remain
//
// A <ref> is own-<n> (a sealed hold) or dlv-<n>[.<i>] (the i-th attachment
// of a delivery).
func TestSimScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/sim/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			simRunScenario(t, file)
		})
	}
}
