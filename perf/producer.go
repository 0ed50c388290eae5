package perf

import (
	"context"
	"encoding/binary"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// produce runs the 60 Hz producer for planned frames. A frame is late
// when its work ends after its slot; the ticker then drops ticks, so the
// schedule stretches rather than bunching frames together.
func (s *schedule) produce(ctx context.Context, planned int) {
	tk := time.NewTicker(framePeriod)
	defer tk.Stop()
	var payload []byte
	for seq := 1; seq <= planned; seq++ {
		var tick time.Time
		select {
		case tick = <-tk.C:
		case <-ctx.Done():
			s.errs.Add("producer", ctx.Err())
			return
		}
		var published bool
		payload, published = s.frameOnce(ctx, seq, payload)
		over := time.Since(tick) - framePeriod
		s.mu.Lock()
		if over > 0 {
			s.out.Late++
			s.out.MaxOverrunNs = max(s.out.MaxOverrunNs, over)
		}
		if published {
			s.out.Frames++
			s.lastPublished = seq
		}
		s.mu.Unlock()
	}
}

// frameOnce produces frame seq: allocate, fill, seal, publish, call every
// agent with the frame attached and wait for every result, let go. It
// reports whether the frame was published.
func (s *schedule) frameOnce(ctx context.Context, seq int, payload []byte) ([]byte, bool) {
	out := s.out
	t0 := time.Now()
	w, err := s.producer.Allocate(ctx, FrameBytes, "image/x-rgba")
	t1 := time.Now()
	if err != nil {
		s.errs.Add("allocate", err)
		return payload, false
	}
	out.Allocate.Add(t1.Sub(t0))
	s.fills.set(seq, t1)

	frame := s.env.frame
	binary.LittleEndian.PutUint64(frame, uint64(seq))
	switch s.env.fill {
	case FillMap:
		var b []byte
		if b, err = w.Bytes(); err == nil {
			copy(b, frame)
		}
	default:
		_, err = w.Write(frame)
	}
	t2 := time.Now()
	if err != nil {
		s.errs.Add("fill", err)
		w.Close()
		return payload, false
	}
	out.Fill.Add(t2.Sub(t1))

	// Pipelined, the seal goes out and the publish right behind it: the
	// publish's answer covers both, and no seal round trip is measured.
	tp := t2
	var a *client.Artifact
	if s.env.path.sealWait {
		a, err = w.Seal(ctx)
		tp = time.Now()
		if err == nil {
			out.Seal.Add(tp.Sub(t2))
		}
	} else {
		a, err = w.Seal(ctx, client.NoWait())
	}
	if err != nil {
		s.errs.Add("seal", err)
		return payload, false
	}

	payload = append(payload[:0], `{"seq":`...)
	payload = strconv.AppendInt(payload, int64(seq), 10)
	payload = append(payload, `,"t":`...)
	payload = strconv.AppendInt(payload, tp.UnixNano(), 10)
	payload = append(payload, '}')
	_, err = s.producer.Publish(ctx, s.topic, wire.RawJSON(payload), client.Attach("frame", a))
	answered := time.Now()
	published := err == nil
	if err != nil {
		s.errs.Add("publish", err)
	} else {
		out.Publish.Add(answered.Sub(tp))
		out.CriticalPath.Add(answered.Sub(t1))
		if s.env.path.sealWait {
			s.ranPath(sealThenPublish)
		} else {
			s.ranPath(pipelinedSealPublish)
		}
	}

	// The calls are admitted one after another from this goroutine, the
	// way a single-threaded producer writes it, and their results awaited
	// together. (Concurrent Calls on one client can also reach the router
	// with their call ids out of order, which it refuses as INVALID_ENVELOPE:
	// the SDK numbers a call before it queues it.)
	var results sync.WaitGroup
	for i, ag := range s.agts {
		t0 := time.Now()
		p, err := s.call(ctx, i, ag, seq, a)
		if err != nil {
			s.errs.Add("call", err)
			continue
		}
		results.Go(func() { s.result(ctx, i, p, t0) })
	}
	results.Wait()
	a.Close()
	s.mu.Lock()
	s.lastClose = time.Now()
	s.mu.Unlock()
	return payload, published
}

// The producer's paths, as ranPath records them. sealThenPublish is
// today's: Seal, answered, then Publish. pipelinedSealPublish is a seal
// sent without waiting for its answer and the publish right behind it,
// one request as far as the frame's way is concerned; frameBudget counts
// round trips from whichever ran.
var (
	sealThenPublish      = []string{"seal", "publish"}
	pipelinedSealPublish = []string{"seal+publish"}
)

// producerPath is how the producer makes a frame (Config.SealWait,
// Config.NoAllocateAhead).
type producerPath struct {
	sealWait      bool
	allocateAhead int
	openAhead     bool // the consumers' and agents' client.Config.OpenAhead
}

func pathOf(cfg Config) producerPath {
	p := producerPath{sealWait: cfg.SealWait, allocateAhead: 1, openAhead: !cfg.NoOpenAhead}
	if cfg.NoAllocateAhead {
		p.allocateAhead = 0
	}
	return p
}

// ranPath records the requests the producer sent after its fill.
func (s *schedule) ranPath(path []string) {
	s.mu.Lock()
	if s.out.ProducerPath == nil {
		s.out.ProducerPath = slices.Clone(path)
	}
	s.mu.Unlock()
}

// fillStarts holds, per sequence number, when the producer began filling
// the frame. The producer and the consumers all run in this process, so
// the consumers read the same monotonic clock; the lock is what orders the
// write before the reads (the socket in between is invisible to the race
// detector).
type fillStarts struct {
	mu sync.Mutex
	at []time.Time // indexed by seq
}

func newFillStarts(planned int) *fillStarts { return &fillStarts{at: make([]time.Time, planned+1)} }

func (f *fillStarts) set(seq int, t time.Time) {
	f.mu.Lock()
	if seq >= 0 && seq < len(f.at) {
		f.at[seq] = t
	}
	f.mu.Unlock()
}

func (f *fillStarts) get(seq int) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq < 0 || seq >= len(f.at) || f.at[seq].IsZero() {
		return time.Time{}, false
	}
	return f.at[seq], true
}

// call admits one agent call with the frame attached.
func (s *schedule) call(ctx context.Context, i int, ag *agent, seq int, a *client.Artifact) (*client.PendingCall, error) {
	payload := strconv.AppendInt([]byte(`{"seq":`), int64(seq), 10)
	payload = append(payload, '}')
	p, err := s.producer.Call(ctx, ag.name, "Frame.Touch", wire.RawJSON(payload), client.Pin(ag.svc.Incarnation()), client.Attach("frame", a))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.agentLast[i] = seq
	s.mu.Unlock()
	return p, nil
}

// result waits for a call's result and records its round trip, from the
// start of Call (t0) to the result in hand, for agent i.
func (s *schedule) result(ctx context.Context, i int, p *client.PendingCall, t0 time.Time) {
	res, err := p.Result(ctx)
	rtt := time.Since(t0)
	if err != nil {
		s.errs.Add("call result", err)
		p.Close()
		return
	}
	defer res.Close()
	s.out.RPC.Add(rtt)
	s.out.RPCByAgent[i].Add(rtt)
	var r agentReply
	if err := res.Decode(&r); err != nil {
		s.errs.Add("call outcome", err)
		return
	}
	s.out.RPCNet.Add(rtt - time.Duration(r.HandlerNs))
}
