package compare

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/flybus/flybus/perf"
	"golang.org/x/sys/unix"
)

// DirectConfig chooses what RunDirect measures.
type DirectConfig struct {
	Seconds float64
}

// directHeader precedes every frame on a consumer's socket: the payload's
// length, the frame's sequence number and the producer's wall clock
// (UnixNano) at the hand-off, little-endian.
const directHeader = 24

// directWriter is the producer's side of one consumer's socket. A
// goroutine writes the frames; the producer only hands them off, into a
// one-frame slot that a newer frame replaces (latest-only), so a consumer
// that does not keep up makes the producer drop frames for it, never wait.
type directWriter struct {
	conn  net.Conn
	frame []byte // the payload, shared and never written after the start

	mu      sync.Mutex
	cond    *sync.Cond
	pending *directItem // the newest frame not yet started
	busy    bool        // a frame is being written
	closed  bool
	dropped int // frames replaced in the slot before their write started
	err     error
}

type directItem struct {
	seq uint64
	t   int64
}

func newDirectWriter(conn net.Conn, frame []byte) *directWriter {
	w := &directWriter{conn: conn, frame: frame}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// offer hands a frame off without blocking.
func (w *directWriter) offer(it *directItem) {
	w.mu.Lock()
	if w.pending != nil {
		w.dropped++
	}
	w.pending = it
	w.mu.Unlock()
	w.cond.Broadcast()
}

func (w *directWriter) loop() {
	var hdr [directHeader]byte
	for {
		w.mu.Lock()
		for w.pending == nil && !w.closed {
			w.cond.Wait()
		}
		it := w.pending
		if it == nil || w.err != nil {
			w.mu.Unlock()
			return
		}
		w.pending, w.busy = nil, true
		w.mu.Unlock()

		binary.LittleEndian.PutUint64(hdr[0:], uint64(len(w.frame)))
		binary.LittleEndian.PutUint64(hdr[8:], it.seq)
		binary.LittleEndian.PutUint64(hdr[16:], uint64(it.t))
		bufs := net.Buffers{hdr[:], w.frame} // writev: no copy of the frame in user space
		_, err := bufs.WriteTo(w.conn)

		w.mu.Lock()
		w.busy = false
		if err != nil && w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
		w.cond.Broadcast()
	}
}

// drain waits until the slot is empty and no write is running.
func (w *directWriter) drain() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for (w.pending != nil || w.busy) && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}

func (w *directWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cond.Broadcast()
}

// directReport is what the consumers' child process prints when its
// sockets close.
type directReport struct {
	Consumers []directConsumerReport `json:"consumers"`
	Memory    perf.Memory            `json:"memory"`
}

type directConsumerReport struct {
	Slow      bool    `json:"slow"`
	Seen      int     `json:"seen"`
	Gaps      int     `json:"gaps"` // frames skipped between two seen
	SamplesNs []int64 `json:"samplesNs"`
	Err       string  `json:"error,omitempty"`
}

// directConsumersChild runs the three consumers on file descriptors 3, 4
// and 5 (the last one slow) and prints a directReport when all three
// sockets have closed.
func directConsumersChild() error {
	out := make([]directConsumerReport, Consumers)
	var wg sync.WaitGroup
	for i := range Consumers {
		f := os.NewFile(uintptr(3+i), fmt.Sprintf("consumer%d", i+1))
		conn, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return err
		}
		out[i].Slow = i == Consumers-1
		wg.Go(func() {
			defer conn.Close()
			if err := directConsume(bufio.NewReaderSize(conn, 256<<10), &out[i]); err != nil {
				out[i].Err = err.Error()
			}
		})
	}
	fmt.Println("ready")
	wg.Wait()
	rep := directReport{Consumers: out}
	if m, err := perf.ReadMemory(os.Getpid()); err == nil {
		rep.Memory = m
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// directConsume reads frames until EOF: the whole frame, then its first
// byte (the delivery time), then every line; the slow consumer then
// sleeps 40 ms.
func directConsume(r io.Reader, c *directConsumerReport) error {
	var hdr [directHeader]byte
	buf := make([]byte, FrameBytes)
	var lastSeq uint64
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := binary.LittleEndian.Uint64(hdr[0:])
		seq := binary.LittleEndian.Uint64(hdr[8:])
		t := int64(binary.LittleEndian.Uint64(hdr[16:]))
		if n != FrameBytes {
			return fmt.Errorf("frame of %d bytes, want %d", n, FrameBytes)
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		sum := buf[0]
		first := time.Now()
		sum += perf.Touch(buf[TouchStride:])
		sinkByte.Add(uint32(sum))
		c.SamplesNs = append(c.SamplesNs, first.UnixNano()-t)
		c.Seen++
		if lastSeq != 0 && seq > lastSeq+1 {
			c.Gaps += int(seq - lastSeq - 1)
		}
		lastSeq = seq
		if c.Slow {
			time.Sleep(SlowConsumerDelay)
		}
	}
}

// RunDirect runs the schedule with the producer (this process) writing
// every frame to each of three consumers (a child process) over its own
// Unix socket, and returns the figures.
func RunDirect(ctx context.Context, cfg DirectConfig) (*Result, error) {
	r := newResult("direct", cfg.Seconds, 0)
	r.Settings.Semantics = "latest-only: a one-frame slot per consumer, replaced when its writer is still busy; the producer never blocks"
	var errs perf.ErrorLog
	defer func() { r.Errors = errorList(&errs) }()

	cmd, err := childCommand("direct-consumers")
	if err != nil {
		return nil, err
	}
	frame := perf.FramePattern()
	var writers []*directWriter
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	for i := range Consumers {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, os.NewSyscallError("socketpair", err)
		}
		mine := os.NewFile(uintptr(fds[0]), fmt.Sprintf("producer%d", i+1))
		childEnds = append(childEnds, os.NewFile(uintptr(fds[1]), fmt.Sprintf("consumer%d", i+1)))
		conn, err := net.FileConn(mine)
		mine.Close()
		if err != nil {
			return nil, err
		}
		writers = append(writers, newDirectWriter(conn, frame))
	}
	cmd.ExtraFiles = childEnds
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for _, f := range childEnds {
		f.Close()
	}
	childEnds = nil
	pid := cmd.Process.Pid
	out := bufio.NewReader(stdout)
	closeAll := func() {
		for _, w := range writers {
			w.close()
			w.conn.Close()
		}
	}
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		closeAll()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("direct consumers child: no ready line (%q, %v)", line, err)
	}
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(w.loop)
	}

	m := r.startMeter(os.Getpid(), "direct producer (this process)", perf.SelfCPU,
		"direct consumers child process", func() (time.Duration, error) { return perf.ProcessCPU(pid) })

	r.paced(ctx, &errs, func(seq int) {
		it := &directItem{seq: uint64(seq), t: time.Now().UnixNano()}
		for _, w := range writers {
			w.offer(it)
		}
		r.Frames++
	})
	r.Drained = true
	for i, w := range writers {
		if err := w.drain(); err != nil {
			errs.Add(fmt.Sprintf("writer %d", i+1), err)
			r.Drained = false
		}
	}
	m.stop()

	closeAll()
	wg.Wait()
	var rep directReport
	if err := json.NewDecoder(out).Decode(&rep); err != nil {
		errs.Add("consumers' report", err)
	}
	if err := cmd.Wait(); err != nil {
		errs.Add("consumers child", err)
	}

	if rep.Memory.RSS > 0 {
		r.ClientMemory = &rep.Memory
	}
	for i, w := range writers {
		var c ConsumerFigures
		if i < len(rep.Consumers) {
			rc := rep.Consumers[i]
			c = ConsumerFigures{Slow: rc.Slow, Seen: rc.Seen, Missing: max(0, r.Frames-rc.Seen)}
			for _, ns := range rc.SamplesNs {
				if rc.Slow {
					r.DeliverySlow.Add(time.Duration(ns))
				} else {
					r.DeliveryFast.Add(time.Duration(ns))
				}
			}
			if rc.Err != "" {
				errs.Add(fmt.Sprintf("consumer %d", i+1), errors.New(rc.Err))
			}
		}
		w.mu.Lock()
		c.Dropped = w.dropped
		w.mu.Unlock()
		r.Consumers = append(r.Consumers, c)
	}
	return r, nil
}
