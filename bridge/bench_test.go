package bridge

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// The benchmark runs each bridge and the NATS server as a child process
// (this test binary, re-executed with benchChildEnv naming the role), so
// that each one's CPU is its own getrusage; the routers, the producer and
// the consumers stay in the parent.
const benchChildEnv = "FLYBUS_BRIDGE_BENCH_CHILD"

// benchProfilesEnv, when it names a directory, makes each bridge child
// write a CPU profile of its whole run there (ORIGIN.cpu.pprof).
const benchProfilesEnv = "FLYBUS_BRIDGE_BENCH_PROFILES"

func TestMain(m *testing.M) {
	switch os.Getenv(benchChildEnv) {
	case "":
		os.Exit(m.Run())
	case "nats":
		os.Exit(natsChild())
	case "bridge":
		os.Exit(bridgeChild(os.Getenv(benchChildEnv + "_CONFIG")))
	default:
		fmt.Fprintln(os.Stderr, "unknown child role")
		os.Exit(2)
	}
}

// natsChild serves until its standard input closes; it prints "ready URL".
func natsChild() int {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, MaxPayload: 8 << 20, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		return 1
	}
	fmt.Printf("ready %s\n", s.ClientURL())
	serveCPU()
	s.Shutdown()
	s.WaitForShutdown()
	return 0
}

// bridgeChild runs a bridge until its standard input closes; it prints
// "ready" once its local session stands, and its stats as JSON at the end.
func bridgeChild(path string) int {
	cfg, err := LoadConfig(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var once sync.Once
	b, err := New(cfg, Options{Logger: quiet(), OnLocalSession: func(client.Info) { once.Do(func() { fmt.Println("ready") }) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if dir := os.Getenv(benchProfilesEnv); dir != "" {
		f, err := os.Create(filepath.Join(dir, cfg.Origin+".cpu.pprof"))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { serveCPU(); cancel() }()
	if err := b.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	j, _ := json.Marshal(b.Stats())
	fmt.Printf("stats %s\n", j)
	return 0
}

// serveCPU answers each "cpu" line on standard input with this process's
// user+system CPU time in nanoseconds (getrusage: every thread, those
// that ended included, at microsecond resolution), until stdin closes.
func serveCPU() {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "cpu" {
			var ru syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			fmt.Printf("cpu %d\n", ru.Utime.Nano()+ru.Stime.Nano())
		}
	}
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startChild(b *testing.B, role string, env ...string) (*child, string) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), benchChildEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := c.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatalf("%s child: %q %v", role, line, err)
	}
	return c, strings.TrimSpace(strings.TrimPrefix(line, "ready"))
}

func (c *child) stop() string {
	c.stdin.Close()
	rest, _ := io.ReadAll(c.out)
	c.cmd.Wait()
	return string(rest)
}

// cpu asks the child for its CPU time so far.
func (c *child) cpu(b *testing.B) time.Duration {
	if _, err := io.WriteString(c.stdin, "cpu\n"); err != nil {
		b.Fatal(err)
	}
	line, err := c.out.ReadString('\n')
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "cpu ")
	ns, perr := strconv.ParseInt(v, 10, 64)
	if err != nil || !ok || perr != nil {
		b.Fatalf("cpu: %q %v", line, err)
	}
	return time.Duration(ns)
}

// latencies collects frame latencies from several goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }

func (l *latencies) pct(p float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return float64(l.d[min(len(l.d)-1, int(p*float64(len(l.d))))].Microseconds()) / 1000
}

// BenchmarkBridge60Hz runs b.N frames of 640x480 RGBA at 60 Hz from a
// producer on router A through bridge A, NATS and bridge B to three
// consumers on router B (bridge, with the import in each mode), and the
// same frames through NATS alone to three NATS subscribers (nats-only). It
// reports end-to-end latency (producer start to consumer view), and CPU
// per frame of each bridge process and the NATS server process.
func BenchmarkBridge60Hz(b *testing.B) {
	b.Run("bridge", func(b *testing.B) {
		for _, mode := range []string{"bounded", "latest"} {
			b.Run("import="+mode, func(b *testing.B) { benchBridge(b, mode) })
		}
	})
	b.Run("nats-only", benchNATSOnly)
}

const warmup = 30

func benchBridge(b *testing.B, importMode string) {
	ns, url := startChild(b, "nats")
	defer ns.stop()
	a, h := newHost(b, "a"), newHost(b, "b")
	prod, err := client.ConnectUnix(ctxT(b), a.sock, client.Config{ClientID: "producer", StoreRoot: a.root, AllocateAhead: 1, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.DeclareTopic(ctxT(b), "cam.frames", wire.RetainNone); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfgFile := func(name string, c *Config) string {
		p := filepath.Join(dir, name+".json")
		j, _ := json.Marshal(c)
		os.WriteFile(p, j, 0o600)
		return p
	}
	natsCfg := NATSConfig{URLs: []string{url}}
	cb := &Config{Origin: "bridge-b", NATS: natsCfg, Local: LocalConfig{Socket: h.sock, ClientID: "bridge-b", StoreRoot: h.root},
		Imports: []ImportConfig{{Subject: "site.cam", Topic: "cam.frames", Mode: importMode}}}
	ca := &Config{Origin: "bridge-a", NATS: natsCfg, Local: LocalConfig{Socket: a.sock, ClientID: "bridge-a", StoreRoot: a.root},
		Exports: []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "latest"}}}
	bb, _ := startChild(b, "bridge", benchChildEnv+"_CONFIG="+cfgFile("b", cb))
	ba, _ := startChild(b, "bridge", benchChildEnv+"_CONFIG="+cfgFile("a", ca))

	lat := &latencies{}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	counts := make([]int, 3)
	bad := make(chan string, 3)
	for i := range 3 {
		c, err := client.ConnectUnix(ctxT(b), h.sock, client.Config{ClientID: fmt.Sprintf("consumer%d", i), StoreRoot: h.root,
			OpenAhead: true, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		sub := subscribe(b, c, "cam.frames")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := sub.Next(ctx)
				if err != nil {
					return
				}
				var p framePayload
				m.Decode(&p)
				art, err := m.Artifact("frame")
				if err == nil {
					if v, err := art.View(ctx); err == nil {
						if i == 0 && sum(v.Bytes()) != p.Sums["frame"] { // one consumer checks every digest
							bad <- fmt.Sprintf("frame %d: digest differs", p.N)
						}
						_ = v.Bytes()[len(v.Bytes())-1]
						if p.N > warmup {
							lat.add(time.Since(time.Unix(0, p.SentNS)))
							counts[i]++
						}
						v.Close()
					}
					art.Close()
				}
				m.Close()
			}
		}()
	}
	frame := make([]byte, frameSize)
	publish := func(n uint64) {
		start := time.Now()
		w, err := prod.Allocate(ctx, frameSize, "application/x-frame")
		if err != nil {
			b.Fatal(err)
		}
		frame[0], frame[1] = byte(n), byte(n>>8)
		w.Write(frame)
		s := sum(frame)
		art, err := w.Seal(ctx, client.Digest(s), client.NoWait())
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := jsonRaw(framePayload{N: n, Sums: map[string]string{"frame": s}, SentNS: start.UnixNano()})
		if _, err := prod.Publish(ctx, "cam.frames", raw, client.Attach("frame", art)); err != nil {
			b.Fatal(err)
		}
		art.Close()
	}
	tick := time.NewTicker(time.Second / 60)
	defer tick.Stop()
	for n := uint64(1); n <= warmup; n++ {
		<-tick.C
		publish(n)
	}
	cpuA, cpuB, cpuN := ba.cpu(b), bb.cpu(b), ns.cpu(b)
	b.ResetTimer()
	for n := uint64(warmup + 1); n <= uint64(warmup+b.N); n++ {
		<-tick.C
		publish(n)
	}
	time.Sleep(100 * time.Millisecond) // the last frame's way across, before the CPU is read
	b.StopTimer()
	dA, dB, dN := ba.cpu(b)-cpuA, bb.cpu(b)-cpuB, ns.cpu(b)-cpuN
	cancel()
	wg.Wait()
	select {
	case s := <-bad:
		b.Fatal(s)
	default:
	}
	statsA, statsB := ba.stop(), bb.stop()
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(lat.pct(0.5), "p50-ms")
	b.ReportMetric(lat.pct(0.99), "p99-ms")
	b.ReportMetric(per(dA), "bridgeA-cpu-us/frame")
	b.ReportMetric(per(dB), "bridgeB-cpu-us/frame")
	b.ReportMetric(per(dN), "nats-cpu-us/frame")
	b.ReportMetric(float64(counts[0]+counts[1]+counts[2])/3/float64(b.N), "delivered/frame")
	b.Logf("bridge A %s", strings.TrimSpace(statsA))
	b.Logf("bridge B %s", strings.TrimSpace(statsB))
}

func benchNATSOnly(b *testing.B) {
	ns, url := startChild(b, "nats")
	defer ns.stop()
	lat := &latencies{}
	counts := make([]int, 3)
	var mu sync.Mutex
	for i := range 3 {
		nc, err := nats.Connect(url)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		nc.Subscribe("site.cam", func(m *nats.Msg) {
			sent, _ := strconv.ParseInt(m.Header.Get("Sent"), 10, 64)
			n, _ := strconv.Atoi(m.Header.Get("N"))
			_ = m.Data[len(m.Data)-1]
			if n > warmup {
				lat.add(time.Since(time.Unix(0, sent)))
				mu.Lock()
				counts[i]++
				mu.Unlock()
			}
		})
		nc.Flush()
	}
	pub, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	frame := make([]byte, frameSize)
	publish := func(n int) {
		start := time.Now()
		frame[0] = byte(n)
		h := nats.Header{}
		h.Set("Sent", strconv.FormatInt(start.UnixNano(), 10))
		h.Set("N", strconv.Itoa(n))
		pub.PublishMsg(&nats.Msg{Subject: "site.cam", Header: h, Data: frame})
		pub.Flush()
	}
	tick := time.NewTicker(time.Second / 60)
	defer tick.Stop()
	for n := 1; n <= warmup; n++ {
		<-tick.C
		publish(n)
	}
	c0 := ns.cpu(b)
	b.ResetTimer()
	for n := warmup + 1; n <= warmup+b.N; n++ {
		<-tick.C
		publish(n)
	}
	time.Sleep(100 * time.Millisecond)
	b.StopTimer()
	d := ns.cpu(b) - c0
	b.ReportMetric(lat.pct(0.5), "p50-ms")
	b.ReportMetric(lat.pct(0.99), "p99-ms")
	b.ReportMetric(float64(d.Microseconds())/float64(b.N), "nats-cpu-us/frame")
	mu.Lock()
	b.ReportMetric(float64(counts[0]+counts[1]+counts[2])/3/float64(b.N), "delivered/frame")
	mu.Unlock()
}
