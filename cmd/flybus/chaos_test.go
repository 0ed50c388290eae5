package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/shmtest"
)

// Chaos with real processes: client processes (internal/chaosclient) do
// artifact work against a `flybus serve` process (producers allocate,
// write, seal with the digest and publish; consumers map and check every
// byte against the digest in the payload; a service checks and answers
// calls, sometimes with an artifact of its own; callers attach artifacts)
// and are killed with SIGKILL at the points they announce: after
// allocating, mid-write into the staging file, between the seal and the
// publication, holding a view, with a request dispatched to them, mid-call.
// A kill lands exactly on the marker (the client waits for the test at
// each one), a random moment after it, or during start-up. Two consumers
// are never killed; they keep views open across the churn and check them
// again when they let go. Afterwards the router must hold nothing (roots,
// owners, calls, staging and sealed files), and its descriptors and
// goroutines must be back to where they were before the first client.
//
// The seed of the random choices is logged; -chaos.seed replays them (the
// interleaving is still the scheduler's).

var (
	chaosKills = flag.Int("chaos.kills", 1000, "SIGKILL this many client processes in TestChaosKills")
	chaosSeed  = flag.Uint64("chaos.seed", 0, "seed TestChaosKills's choices (default: from the clock)")
)

// chaosPhases are the markers each role announces.
var chaosPhases = map[string][]string{
	"producer": {"allocated", "mid-write", "sealed", "published"},
	"consumer": {"received", "viewing"},
	"service":  {"request", "serving", "allocated", "mid-write", "sealed"},
	"caller":   {"allocated", "mid-write", "sealed", "called", "result"},
}

// chaosVictims is how many killable processes of each role run at once.
var chaosVictims = []struct {
	role string
	n    int
}{{"producer", 2}, {"consumer", 2}, {"service", 2}, {"caller", 2}}

// chaosClientBinary builds the helper without the race detector: it is
// the router under test, not the client.
func chaosClientBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chaosclient")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/flybus/flybus/internal/chaosclient").CombinedOutput()
	if err != nil {
		t.Fatalf("go build chaosclient: %v\n%s", err, out)
	}
	return bin
}

type chaosRun struct {
	bin          string
	sock, root   string
	target       int64
	kills, lives atomic.Int64
	verified     atomic.Int64
	done         chan struct{} // closed once target kills are reached
	doneOnce     sync.Once

	mu     sync.Mutex
	points map[string]int // kills by where they landed
	notes  map[string]int
	bad    []string
	live   map[*exec.Cmd]bool
}

func (r *chaosRun) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *chaosRun) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) < 30 {
		r.bad = append(r.bad, fmt.Sprintf(format, args...))
	}
}

// killLive kills every victim still running.
func (r *chaosRun) killLive() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for cmd := range r.live {
		cmd.Process.Kill()
	}
}

// chaosChild is one client process and its pipes.
type chaosChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr bytes.Buffer
	last   []string // the last lines, for a report
}

func (r *chaosRun) start(role string, args ...string) (*chaosChild, error) {
	ch := &chaosChild{}
	ch.cmd = exec.Command(r.bin, append([]string{"-socket", r.sock, "-store", r.root, "-role", role}, args...)...)
	ch.cmd.Stderr = &ch.stderr
	var err error
	if ch.stdin, err = ch.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := ch.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	ch.lines = bufio.NewScanner(out)
	if err := ch.cmd.Start(); err != nil {
		return nil, err
	}
	return ch, nil
}

// line reads the next line, keeping the last few and handling the lines
// every role prints. It returns false at the end of the output.
func (r *chaosRun) line(ch *chaosChild, who string) (string, bool) {
	if !ch.lines.Scan() {
		return "", false
	}
	l := ch.lines.Text()
	if len(ch.last) == 8 {
		ch.last = ch.last[1:]
	}
	ch.last = append(ch.last, l)
	switch {
	case strings.HasPrefix(l, "mismatch "), strings.HasPrefix(l, "error "):
		r.fail("%s: %s", who, l)
	case strings.HasPrefix(l, "note "):
		r.mu.Lock()
		r.notes[strings.TrimPrefix(l, "note ")]++
		r.mu.Unlock()
	}
	return l, true
}

// victim runs one killable client process and kills it at a point chosen
// from rng: exactly at a marker, a random moment after one, or during
// start-up. index is its place among its role's processes (services
// register chaos.svc.<index>).
func (r *chaosRun) victim(role string, slot, index, life int, rng *rand.Rand) {
	phases := chaosPhases[role]
	phase, nth := phases[rng.IntN(len(phases))], 1+rng.IntN(3)
	style := rng.IntN(20) // 0..11 exactly at the marker, 12..17 after it, 18..19 at start-up
	delay := time.Duration(rng.IntN(3000)) * time.Microsecond
	who := fmt.Sprintf("%s-%d-%d", role, slot, life)
	ch, err := r.start(role, "-id", "chaos-"+who, "-slot", strconv.Itoa(index), "-seed", strconv.FormatUint(rng.Uint64(), 10))
	if err != nil {
		r.fail("%s: start: %v", who, err)
		return
	}
	r.lives.Add(1)
	r.mu.Lock()
	r.live[ch.cmd] = true
	r.mu.Unlock()
	var once sync.Once
	point := ""
	kill := func(where string) {
		once.Do(func() {
			point = where
			ch.cmd.Process.Kill()
		})
	}
	if r.finished() {
		// Started as the final sweep ran: it may never reach its marker.
		kill(role + " at the end")
	}
	if style >= 18 {
		time.AfterFunc(delay*3, func() { kill(role + " during start-up") })
	}
	seen := 0
	for {
		l, ok := r.line(ch, who)
		if !ok {
			break
		}
		name, isPhase := strings.CutPrefix(l, "phase ")
		if !isPhase {
			continue
		}
		if name == phase && style < 18 {
			if seen++; seen == nth {
				if style < 12 {
					kill(role + " at " + name) // it waits at the marker: never answered
					continue
				}
				time.AfterFunc(delay, func() { kill(role + " after " + name) })
			}
		}
		io.WriteString(ch.stdin, "go\n") // fails once it is dead: nothing to do
	}
	err = ch.cmd.Wait()
	r.mu.Lock()
	delete(r.live, ch.cmd)
	r.mu.Unlock()
	ws, _ := ch.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		r.fail("%s exited by itself (%v) before its kill at %s #%d; last lines %q; stderr:\n%s",
			who, err, phase, nth, ch.last, ch.stderr.String())
		return
	}
	// Whichever kill came first set point; Do orders this read after it.
	once.Do(func() { point = role + " at the end" }) // the final sweep
	r.mu.Lock()
	r.points[point]++
	r.mu.Unlock()
	if r.kills.Add(1) >= r.target {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// survivor runs a consumer that is never killed, answering every marker,
// until stdin is closed; it reports its summary.
func (r *chaosRun) survivor(ch *chaosChild, who string, summary chan<- string) {
	var last string
	for {
		l, ok := r.line(ch, who)
		if !ok {
			break
		}
		if strings.HasPrefix(l, "phase ") {
			io.WriteString(ch.stdin, "go\n")
		}
		if strings.HasPrefix(l, "summary ") {
			last = l
		}
	}
	if err := ch.cmd.Wait(); err != nil {
		r.fail("surviving %s: %v; last lines %q; stderr:\n%s", who, err, ch.last, ch.stderr.String())
	}
	summary <- last
}

// chaosMetrics scrapes the router's unlabelled samples.
func chaosMetrics(addr string) (map[string]float64, error) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// chaosGoroutines reads the first line of the goroutine profile:
// "goroutine profile: total N".
func chaosGoroutines(addr string) (int, error) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, ok := strings.CutPrefix(strings.TrimSpace(first), "goroutine profile: total ")
	if !ok {
		return 0, fmt.Errorf("goroutine profile starts with %q", first)
	}
	return strconv.Atoi(n)
}

// procFDs lists the router process's descriptors and what they point at.
func procFDs(pid int) ([]string, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		out = append(out, e.Name()+"->"+target)
	}
	return out, nil
}

// chaosPoll polls cond until it holds or the bound passes, returning the
// last description cond gave.
func chaosPoll(bound time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(bound)
	for {
		ok, desc := cond()
		if ok || time.Now().After(deadline) {
			return ok, desc
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChaosKills runs the chaos against a router of each store mode,
// half of the kills each.
func TestChaosKills(t *testing.T) {
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("%d kills with seed %d (replay the choices with -chaos.seed %d)", *chaosKills, seed, seed)
	bin := chaosClientBinary(t)
	for i, mode := range []string{"files", "pool"} {
		t.Run(mode, func(t *testing.T) {
			chaos(t, bin, mode, int64((*chaosKills+1-i)/2), seed+uint64(i))
		})
	}
}

func chaos(t *testing.T, bin, mode string, kills int64, seed uint64) {
	dir := shortDir(t)
	// The store on tmpfs, as in production (serve refuses a root behind a
	// symlink: shmtest.Dir resolves /dev/shm).
	root := shmtest.Dir(t, "flybus-chaos-")
	sock := filepath.Join(dir, "bus.sock")
	p := startFlybus(t, "serve", "--open", "--store", root, "--store-mode", mode, "--listen", sock, "--metrics", ":0", "--pprof", "--log-format", "json")
	ready := p.ready(t)
	addr := p.logValue(t, "metrics listening", "addr")
	pid := p.cmd.Process.Pid

	// Baselines, after one scrape of each endpoint has set up whatever the
	// HTTP server sets up lazily.
	if _, err := chaosMetrics(addr); err != nil {
		t.Fatal(err)
	}
	g0, err := chaosGoroutines(addr)
	if err != nil {
		t.Fatal(err)
	}
	fd0, err := procFDs(pid)
	if err != nil {
		t.Fatal(err)
	}

	r := &chaosRun{bin: bin, sock: sock, root: root, target: kills, done: make(chan struct{}),
		points: map[string]int{}, notes: map[string]int{}, live: map[*exec.Cmd]bool{}}
	started := time.Now()

	// The survivors first, so they see the whole run.
	summaries := make(chan string, 2)
	var survivors []*chaosChild
	for i, args := range [][]string{{"-mode", "latest", "-hold", "1"}, {"-mode", "bounded", "-hold", "3"}} {
		who := fmt.Sprintf("survivor-%d", i)
		ch, err := r.start("consumer", append([]string{"-id", "chaos-" + who, "-seed", strconv.Itoa(i + 1)}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		survivors = append(survivors, ch)
		go r.survivor(ch, who, summaries)
	}

	var wg sync.WaitGroup
	// Whatever ends the test, no client process outlives it.
	t.Cleanup(func() {
		r.doneOnce.Do(func() { close(r.done) })
		r.killLive()
		for _, ch := range survivors {
			ch.cmd.Process.Kill()
		}
		wg.Wait()
	})
	slot := 0
	for _, v := range chaosVictims {
		for index := range v.n {
			wg.Add(1)
			go func(role string, slot, index int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(slot)))
				for life := 0; !r.finished(); life++ {
					r.victim(role, slot, index, life, rng)
				}
			}(v.role, slot, index)
			slot++
		}
	}
	// Once enough have died, the processes still alive die too, wherever
	// they are (some wait for messages nobody will publish any more).
	select {
	case <-r.done:
	case <-time.After(10 * time.Minute):
		t.Errorf("only %d kills within 10 minutes", r.kills.Load())
		r.doneOnce.Do(func() { close(r.done) })
	}
	r.killLive()
	wg.Wait()
	for _, ch := range survivors {
		ch.stdin.Close()
	}
	for range survivors {
		select {
		case s := <-summaries:
			t.Logf("survivor: %s", s)
			var verified, mismatches int
			if _, err := fmt.Sscanf(s, "summary verified=%d mismatches=%d", &verified, &mismatches); err != nil || verified == 0 || mismatches != 0 {
				t.Errorf("a surviving consumer reported %q", s)
			}
			r.verified.Add(int64(verified))
		case <-time.After(testTimeout):
			t.Fatal("a surviving consumer did not finish")
		}
	}
	elapsed := time.Since(started)

	// The retained value is the router's by design: clear it and delete the
	// topic, then nothing may be left.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	admin, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "chaos-admin", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ClearTopic(ctx, "chaos.frames"); err != nil {
		t.Errorf("clear: %v", err)
	}
	if _, err := admin.DeleteTopic(ctx, "chaos.frames"); err != nil {
		t.Errorf("delete: %v", err)
	}
	admin.Close()

	zero := []string{"connections", "pending_hello", "services", "topics", "subscriptions", "calls", "active_calls",
		"artifacts", "sealed_artifacts", "artifact_roots", "owners", "reply_capabilities", "queued", "store_bytes",
		"retained_bytes", "queued_bytes", "store_files"}
	var final map[string]float64
	if ok, desc := chaosPoll(20*time.Second, func() (bool, string) {
		m, err := chaosMetrics(addr)
		if err != nil {
			return false, err.Error()
		}
		final = m
		var left []string
		for _, name := range zero {
			v, ok := m["flybus_"+name]
			if !ok || v != 0 {
				left = append(left, fmt.Sprintf("%s=%v", name, v))
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	}); !ok {
		t.Errorf("the router still holds state: %s", desc)
	}
	storeDir := filepath.Join(root, ready.StoreID)
	ents, err := os.ReadDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		name := e.Name()
		// A pooled store keeps its slots; a slot holding a sealed
		// generation is read-only.
		if strings.HasPrefix(name, "sealed-") || strings.HasPrefix(name, "copy-") {
			t.Errorf("left in the store: %s", name)
		} else if fi, err := e.Info(); err == nil && strings.HasPrefix(name, "slot-") && fi.Mode().Perm() == 0o444 {
			t.Errorf("a slot still holds a sealed generation: %s", name)
		}
	}
	// The router keeps a descriptor on each slot of a pooled store. What a
	// killed client held was retired as its connection ended, and free
	// slots go after 5 s unused: within 15 s no slot file and no
	// descriptor on one may be left, and no other descriptor either.
	if ok, desc := chaosPoll(15*time.Second, func() (bool, string) {
		fds, err := procFDs(pid)
		if err != nil {
			return false, err.Error()
		}
		var other []string
		slots := 0
		for _, fd := range fds {
			if strings.Contains(fd, storeDir+"/slot-") {
				slots++
			} else {
				other = append(other, fd)
			}
		}
		files := 0
		if ents, err := os.ReadDir(storeDir); err == nil {
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "slot-") {
					files++
				}
			}
		}
		return len(other) <= len(fd0) && slots == 0 && files == 0,
			fmt.Sprintf("%d descriptors before; after, %d on slot files, %d slot files and %d others: %v",
				len(fd0), slots, files, len(other), other)
	}); !ok {
		t.Errorf("descriptors or slot files left: %s (before: %v)", desc, fd0)
	}
	if ok, desc := chaosPoll(10*time.Second, func() (bool, string) {
		n, err := chaosGoroutines(addr)
		return err == nil && n <= g0, fmt.Sprintf("%d goroutines before, %d after (%v)", g0, n, err)
	}); !ok {
		t.Errorf("goroutines grew: %s", desc)
	}

	var points []string
	for k, n := range r.points {
		points = append(points, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(points)
	t.Logf("%d kills of %d client processes in %v (%.0f kills/s); %d artifacts verified by survivors; "+
		"router: %v connections, %v seals, %v collected, %v slots (%v free, %v quarantined); notes %v",
		r.kills.Load(), r.lives.Load(), elapsed.Round(time.Millisecond), float64(r.kills.Load())/elapsed.Seconds(),
		r.verified.Load(), final["flybus_connections_total"], final["flybus_seals_total"], final["flybus_collected_total"],
		final["flybus_slots"], final["flybus_free_slots"], final["flybus_quarantined_slots"], r.notes)
	t.Logf("kills by point:\n  %s", strings.Join(points, "\n  "))
	for _, b := range r.bad {
		t.Error(b)
	}
	if len(r.points) < 10 {
		t.Errorf("kills landed at only %d kinds of point", len(r.points))
	}
}

// TestChaosServiceOutwaitsAHeldName checks the chaos service's answer to
// a name its slot's killed predecessor still holds in the router: it
// retries the register, noting each CONFLICT, and serves once the name is
// free. Here a client of the test holds the name until the first note.
func TestChaosServiceOutwaitsAHeldName(t *testing.T) {
	bin := chaosClientBinary(t)
	root := shmtest.Dir(t, "flybus-chaos-")
	sock := filepath.Join(shortDir(t), "bus.sock")
	startFlybus(t, "serve", "--open", "--store", root, "--listen", sock).ready(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "holder", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	held, err := holder.Register(ctx, "chaos.svc.0")
	if err != nil {
		t.Fatal(err)
	}

	r := &chaosRun{notes: map[string]int{}, bin: bin, sock: sock, root: root}
	ch, err := r.start("service", "-id", "chaos-late", "-slot", "0", "-seed", "1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.cmd.Process.Kill() })
	// The reader answers every marker and tells the test what it reached:
	// "retried" at the first CONFLICT note, then "registered"; the lines
	// once the output ends.
	reached := make(chan string, 2)
	lines := make(chan []string, 1)
	go func() {
		var all []string
		retried := false
		for {
			l, ok := r.line(ch, "service")
			if !ok {
				lines <- all
				return
			}
			all = append(all, l)
			switch {
			case strings.HasPrefix(l, "note register: CONFLICT") && !retried:
				retried = true
				reached <- "retried"
			case strings.HasPrefix(l, "registered "):
				reached <- "registered"
			case strings.HasPrefix(l, "phase "):
				io.WriteString(ch.stdin, "go\n")
			}
		}
	}()
	for _, want := range []string{"retried", "registered"} {
		select {
		case got := <-reached:
			if got != want {
				t.Fatalf("the service reached %q before %q", got, want)
			}
		case all := <-lines:
			t.Fatalf("the service ended before it %s: lines %q; stderr:\n%s", want, all, ch.stderr.String())
		}
		if want == "retried" {
			if err := held.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// One call with a checked attachment, answered by the late service.
	data := bytes.Repeat([]byte("chaos"), 1000)
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	w, err := holder.Allocate(ctx, int64(len(data)), "application/x-chaos")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	a, err := w.Seal(ctx, client.Digest(digest))
	if err != nil {
		t.Fatal(err)
	}
	res, err := holder.CallAndWait(ctx, "chaos.svc.0", "Chaos.Check", map[string]any{"digest": digest, "size": len(data)}, client.Attach("in", a))
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	res.Close()

	ch.stdin.Close()
	all := <-lines
	if err := ch.cmd.Wait(); err != nil {
		t.Fatalf("service: %v; lines %q; stderr:\n%s", err, all, ch.stderr.String())
	}
	if len(r.bad) > 0 || !slices.Contains(all, "summary verified=1 mismatches=0") {
		t.Errorf("service: %v; lines %q", r.bad, all)
	}
}
