package compare

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/perf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The embedded server's limits: max_payload raised from 1 MiB so that a
// 1,228,800-byte frame fits, and the per-connection outbound buffer
// (max_pending) at the server's default.
const (
	natsMaxPayload = 8 << 20
	natsMaxPending = 64 << 20
)

// NATSConfig chooses what RunNATS measures.
type NATSConfig struct {
	Seconds float64
	// Agents is the number of request-reply services the producer calls
	// with the frame every frame, as the perf harness's agents (0: none).
	Agents int
	// PendingMsgs and PendingBytes are the subscribers' nats.go pending
	// limits; 0 keeps nats.go's defaults (500,000 messages, 64 MiB).
	PendingMsgs, PendingBytes int
}

// natsServerChild runs the embedded server until its standard input
// closes. It prints "ready URL" once it accepts clients and answers each
// "varz" line with the server's counters as one JSON line.
func natsServerChild() error {
	payload, pending, err := childLimits(os.Getenv(natsLimitsEnv))
	if err != nil {
		return err
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, MaxPayload: payload, MaxPending: pending,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		return err
	}
	s.Start()
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	if !s.ReadyForConnections(10 * time.Second) {
		return errors.New("server not ready within 10 s")
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "ready %s\n", s.ClientURL())
	if err := out.Flush(); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if strings.TrimSpace(in.Text()) != "varz" {
			continue
		}
		v, err := s.Varz(nil)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(ServerFigures{InMsgs: v.InMsgs, OutMsgs: v.OutMsgs, InBytes: v.InBytes,
			OutBytes: v.OutBytes, SlowConsumers: v.SlowConsumers})
		out.Write(append(b, '\n'))
		if err := out.Flush(); err != nil {
			return err
		}
	}
	return in.Err()
}

// natsChild is the parent's handle on the server process.
type natsChild struct {
	pid   int
	url   string
	stdin io.WriteCloser
	out   *bufio.Reader
	wait  func() error
}

// natsLimitsEnv carries the server child's max_payload and max_pending,
// "PAYLOAD,PENDING", when a run needs other than the defaults (the
// sweep's 4K frames do).
const natsLimitsEnv = "FLYBUS_COMPARE_NATS_LIMITS"

// childLimits parses natsLimitsEnv's value; empty means the defaults.
func childLimits(v string) (int32, int64, error) {
	if v == "" {
		return natsMaxPayload, natsMaxPending, nil
	}
	var payload int32
	var pending int64
	if _, err := fmt.Sscanf(v, "%d,%d", &payload, &pending); err != nil || payload <= 0 || pending <= 0 {
		return 0, 0, fmt.Errorf("%s=%q is not PAYLOAD,PENDING", natsLimitsEnv, v)
	}
	return payload, pending, nil
}

func startNATSChild() (*natsChild, error) { return startNATSChildWith(natsMaxPayload, natsMaxPending) }

// startNATSChildWith starts the server child with the given max_payload
// and max_pending.
func startNATSChildWith(payload int32, pending int64) (*natsChild, error) {
	cmd, err := childCommand("nats-server", fmt.Sprintf("%s=%d,%d", natsLimitsEnv, payload, pending))
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &natsChild{pid: cmd.Process.Pid, stdin: stdin, out: bufio.NewReader(stdout), wait: cmd.Wait}
	line, err := c.out.ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if err != nil || !ok {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("nats server child: no ready line (%q, %v)", line, err)
	}
	c.url = url
	return c, nil
}

func (c *natsChild) varz() (ServerFigures, error) {
	var v ServerFigures
	if _, err := io.WriteString(c.stdin, "varz\n"); err != nil {
		return v, err
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		return v, err
	}
	return v, json.Unmarshal([]byte(line), &v)
}

func (c *natsChild) stop() error {
	c.stdin.Close()
	io.Copy(io.Discard, c.out)
	return c.wait()
}

// natsConsumer is one subscriber and its counts.
type natsConsumer struct {
	slow bool
	nc   *nats.Conn
	sub  *nats.Subscription

	seen     atomic.Int64
	lastSeq  atomic.Int64
	lastDone atomic.Int64 // UnixNano of the last message handled
}

// RunNATS runs the schedule through an embedded NATS server in a child
// process and returns its figures.
func RunNATS(ctx context.Context, cfg NATSConfig) (*Result, error) {
	r := newResult("nats", cfg.Seconds, cfg.Agents)
	r.Settings.MaxPayload, r.Settings.MaxPending = natsMaxPayload, natsMaxPending
	r.Settings.PendingMsgsLimit, r.Settings.PendingBytesLimit = nats.DefaultSubPendingMsgsLimit, nats.DefaultSubPendingBytesLimit
	if cfg.PendingMsgs != 0 {
		r.Settings.PendingMsgsLimit = cfg.PendingMsgs
	}
	if cfg.PendingBytes != 0 {
		r.Settings.PendingBytesLimit = cfg.PendingBytes
	}
	r.Publish = &perf.Hist{}
	if cfg.Agents > 0 {
		r.RPC = &perf.Hist{}
	}
	var errs perf.ErrorLog
	defer func() { r.Errors = errorList(&errs) }()

	child, err := startNATSChild()
	if err != nil {
		return nil, err
	}
	r.Settings.URL = child.url
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
		if err := child.stop(); err != nil {
			errs.Add("nats server child", err)
		}
	}()
	connect := func(name string) (*nats.Conn, error) {
		nc, err := nats.Connect(child.url, nats.Name(name), nats.MaxReconnects(0),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if !errors.Is(err, nats.ErrSlowConsumer) { // counted by Subscription.Dropped
					errs.Add(name, err)
				}
			}))
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}

	const subject = "compare.frames"
	prod, err := connect("producer")
	if err != nil {
		return nil, err
	}
	cons := make([]*natsConsumer, Consumers)
	for i := range cons {
		c := &natsConsumer{slow: i == Consumers-1}
		if c.nc, err = connect(fmt.Sprintf("consumer%d", i+1)); err != nil {
			return nil, err
		}
		c.sub, err = c.nc.Subscribe(subject, func(m *nats.Msg) { r.consumeNATS(c, m, &errs) })
		if err != nil {
			return nil, err
		}
		if err := c.sub.SetPendingLimits(r.Settings.PendingMsgsLimit, r.Settings.PendingBytesLimit); err != nil {
			return nil, err
		}
		if err := c.nc.Flush(); err != nil {
			return nil, err
		}
		cons[i] = c
	}
	agents := make([]string, cfg.Agents)
	for i := range agents {
		agents[i] = fmt.Sprintf("compare.agent.%d", i+1)
		nc, err := connect(fmt.Sprintf("agent%d", i+1))
		if err != nil {
			return nil, err
		}
		if _, err := nc.Subscribe(agents[i], func(m *nats.Msg) {
			sinkByte.Add(uint32(perf.Touch(m.Data)))
			if err := m.Respond([]byte(`{"ok":true}`)); err != nil {
				errs.Add("agent reply", err)
			}
		}); err != nil {
			return nil, err
		}
		if err := nc.Flush(); err != nil {
			return nil, err
		}
	}

	// The measured interval: the server's CPU and memory around the
	// schedule, from the first tick to every consumer drained.
	v0, vErr := child.varz()
	m := r.startMeter(child.pid, "nats-server child process", func() (time.Duration, error) { return perf.ProcessCPU(child.pid) },
		"nats.go clients (this process)", perf.SelfCPU)

	frame := perf.FramePattern()
	last := 0
	r.paced(ctx, &errs, func(seq int) {
		binary.LittleEndian.PutUint64(frame[0:], uint64(seq))
		tp := time.Now()
		binary.LittleEndian.PutUint64(frame[8:], uint64(tp.UnixNano()))
		if err := prod.Publish(subject, frame); err != nil {
			errs.Add("publish", err)
		} else {
			r.Publish.Add(time.Since(tp))
			r.Frames++
			last = seq
		}
		var wg sync.WaitGroup
		for _, subj := range agents {
			wg.Go(func() {
				t0 := time.Now()
				if _, err := prod.Request(subj, frame, 10*time.Second); err != nil {
					errs.Add("request", err)
					return
				}
				r.RPC.Add(time.Since(t0))
			})
		}
		wg.Wait()
	})
	if err := prod.Flush(); err != nil {
		errs.Add("flush", err)
	}
	r.Drained = drainNATS(ctx, cons, int64(last))
	m.stop()
	v1, vErr1 := child.varz()

	if err := errors.Join(vErr, vErr1); err != nil {
		errs.Add("varz", err)
	} else {
		r.Server = &ServerFigures{InMsgs: v1.InMsgs - v0.InMsgs, OutMsgs: v1.OutMsgs - v0.OutMsgs,
			InBytes: v1.InBytes - v0.InBytes, OutBytes: v1.OutBytes - v0.OutBytes,
			SlowConsumers: v1.SlowConsumers - v0.SlowConsumers}
	}
	if m, err := perf.ReadMemory(os.Getpid()); err == nil {
		r.ClientMemory = &m
	}
	for _, c := range cons {
		dropped, _ := c.sub.Dropped()
		seen := int(c.seen.Load())
		r.Consumers = append(r.Consumers, ConsumerFigures{Slow: c.slow, Seen: seen, Dropped: dropped,
			Missing: max(0, r.Frames-seen)})
	}
	if !r.Drained {
		errs.Add("drain", errors.New("consumers did not drain within the timeout"))
	}
	return r, nil
}

// consumeNATS is a subscriber's handler: read the first byte, touch every
// line, and for the slow consumer sleep 40 ms.
func (r *Result) consumeNATS(c *natsConsumer, m *nats.Msg, errs *perf.ErrorLog) {
	if len(m.Data) != FrameBytes {
		errs.Add("consumer", fmt.Errorf("message of %d bytes, want %d", len(m.Data), FrameBytes))
		return
	}
	sum := m.Data[0]
	first := time.Now()
	seq := int64(binary.LittleEndian.Uint64(m.Data[0:]))
	t := int64(binary.LittleEndian.Uint64(m.Data[8:]))
	sum += perf.Touch(m.Data[TouchStride:])
	sinkByte.Add(uint32(sum))
	lat := time.Duration(first.UnixNano() - t)
	if c.slow {
		r.DeliverySlow.Add(lat)
		time.Sleep(SlowConsumerDelay)
	} else {
		r.DeliveryFast.Add(lat)
	}
	c.seen.Add(1)
	if seq > c.lastSeq.Load() {
		c.lastSeq.Store(seq)
	}
	c.lastDone.Store(time.Now().UnixNano())
}

// drainTimeout bounds the wait for the consumers after the last frame.
const drainTimeout = 60 * time.Second

// drainNATS waits until every consumer handled the last frame, or has
// nothing pending and has been idle for half a second (its last frame was
// dropped).
func drainNATS(ctx context.Context, cons []*natsConsumer, last int64) bool {
	deadline := time.Now().Add(drainTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		done := true
		for _, c := range cons {
			if c.lastSeq.Load() >= last {
				continue
			}
			msgs, _, err := c.sub.Pending()
			idle := time.Since(time.Unix(0, c.lastDone.Load()))
			if err != nil || msgs > 0 || idle < 500*time.Millisecond {
				done = false
			}
		}
		if done {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// sinkByte receives touch sums nobody needs, so the reads stay.
var sinkByte atomic.Uint32
