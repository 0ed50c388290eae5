package perf

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/flybus/flybus/store"
)

// The kinds of sweep point.
const (
	// PointFrames: one producer publishes file-backed frames at a fixed
	// rate to latest-mode consumers (InFlight 1) that each view and touch
	// every frame.
	PointFrames = "frames"
	// PointPubSub: publishers send small messages as fast as each publish
	// is answered, to one bounded subscriber.
	PointPubSub = "pubsub"
	// PointRPC: callers call one service as fast as each result arrives.
	PointRPC = "rpc"
)

// The sweep's sets: each varies one dimension, the others fixed.
const (
	SetConsumers = "consumers"
	SetRate      = "rate"
	SetSize      = "size"
	SetSmall     = "small"
)

// sweepSets lists the sets in the order they run and are reported.
var sweepSets = []string{SetConsumers, SetRate, SetSize, SetSmall}

// SmallPayloadBytes is the payload of a small message, a call and its
// reply in the sweep's small-message points.
const SmallPayloadBytes = 256

// SweepPoint is one measurement of the sweep, run alike on flybus and on
// the NATS peer (bench/compare reads it as JSON).
type SweepPoint struct {
	Set  string `json:"set"`
	Kind string `json:"kind"`
	// Frames points.
	Consumers  int `json:"consumers,omitempty"`
	RateHz     int `json:"rateHz,omitempty"`
	FrameBytes int `json:"frameBytes,omitempty"`
	// Small-message points: publishers or callers, each on its own
	// connection, and the payload size.
	Senders      int `json:"senders,omitempty"`
	PayloadBytes int `json:"payloadBytes,omitempty"`
	// Seconds is how long the producer, publishers or callers run.
	Seconds float64 `json:"seconds"`
}

// Label names the point in tables and progress lines.
func (p SweepPoint) Label() string {
	switch p.Kind {
	case PointFrames:
		return fmt.Sprintf("%s B x %d Hz x %s", thousands(int64(p.FrameBytes)), p.RateHz, plural(p.Consumers, "consumer"))
	case PointPubSub:
		return "pub/sub, " + plural(p.Senders, "publisher")
	case PointRPC:
		return "RPC, " + plural(p.Senders, "caller")
	}
	return p.Kind
}

// plural is "1 consumer", "4 consumers".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// planned is the number of frames a frames point publishes on schedule.
func (p SweepPoint) planned() int { return max(1, int(p.Seconds*float64(p.RateHz)+0.5)) }

// Validate checks a point's dimensions.
func (p SweepPoint) Validate() error {
	if p.Seconds <= 0 || p.Seconds > 600 {
		return fmt.Errorf("point %s: seconds %g outside (0, 600]", p.Label(), p.Seconds)
	}
	switch p.Kind {
	case PointFrames:
		if p.Consumers < 1 || p.Consumers > maxSweepConsumers || p.RateHz < 1 || p.RateHz > 10000 ||
			p.FrameBytes < minSweepFrame || p.FrameBytes > maxSweepFrame {
			return fmt.Errorf("frames point wants 1..%d consumers, 1..10000 Hz and %d..%d bytes, not %d, %d, %d",
				maxSweepConsumers, minSweepFrame, maxSweepFrame, p.Consumers, p.RateHz, p.FrameBytes)
		}
	case PointPubSub, PointRPC:
		if p.Senders < 1 || p.Senders > maxSweepSenders || p.PayloadBytes < minSmallPayload || p.PayloadBytes > 1<<20 {
			return fmt.Errorf("%s point wants 1..%d senders and %d..%d payload bytes, not %d and %d",
				p.Kind, maxSweepSenders, minSmallPayload, 1<<20, p.Senders, p.PayloadBytes)
		}
	default:
		return fmt.Errorf("unknown point kind %q", p.Kind)
	}
	return nil
}

// Bounds of a point: a frame holds the 16-byte stamp; 64 MiB is under the
// router's default artifact limit (128 MiB) and NATS's payload ceiling.
const (
	maxSweepConsumers = 256
	maxSweepSenders   = 64
	minSweepFrame     = 64
	maxSweepFrame     = 64 << 20
	minSmallPayload   = 64
)

// Latency is the summary of one latency a point measured.
type Latency struct {
	Count int   `json:"count"`
	P50Ns int64 `json:"p50Ns"`
	P99Ns int64 `json:"p99Ns"`
	MaxNs int64 `json:"maxNs"`
}

// LatencyOf summarizes a histogram.
func LatencyOf(h *Hist) Latency {
	s := h.Summary()
	return Latency{Count: s.Count, P50Ns: int64(s.P50), P99Ns: int64(s.P99), MaxNs: int64(s.Max)}
}

// PointResult is what one peer measured at a point. Frames points count
// frames; small-message points count messages (pub/sub) or completed
// calls (RPC).
type PointResult struct {
	Peer string `json:"peer"` // "flybus" or "nats"
	// Mover names the process whose CPU is measured: the router, or the
	// NATS server.
	Mover string `json:"mover"`
	// Planned frames (frames points); Sent the frames published, messages
	// admitted or calls completed.
	Planned      int           `json:"planned,omitempty"`
	Sent         int           `json:"sent"`
	Late         int           `json:"late,omitempty"`
	MaxOverrunNs time.Duration `json:"maxOverrunNs,omitempty"`
	// SendNs is how long the sending ran; WallNs the measured interval,
	// from the first send to every consumer drained.
	SendNs time.Duration `json:"sendNs"`
	WallNs time.Duration `json:"wallNs"`
	// Deliveries are frames or messages handed to consumers, summed.
	Deliveries uint64 `json:"deliveries"`
	// Coalesced: frames a latest subscription replaced before delivery
	// (flybus). Dropped: frames or messages the transport dropped, or
	// never delivered to a consumer that was sent them (NATS: slow
	// consumers). Refused: publishes refused (flybus BACKPRESSURE), retried.
	Coalesced uint64 `json:"coalesced"`
	Dropped   uint64 `json:"dropped"`
	Refused   uint64 `json:"refused"`
	// MoverCPU and ClientCPU are CPU seconds over WallNs, of the mover and
	// of the process holding the clients (the harness, or bench/compare).
	MoverCPU  float64 `json:"moverCpuSeconds"`
	ClientCPU float64 `json:"clientCpuSeconds"`
	CPUErr    string  `json:"cpuError,omitempty"`
	// Latency: frames, from just before the publish to the first byte
	// read by a consumer; pub/sub, from just before the publish to the
	// subscriber's receipt; RPC, the call's round trip.
	Latency Latency `json:"latency"`
	// RoundTrip is the publisher's wait per message (pub/sub: flybus's
	// publish answered, NATS's publish and flush); empty elsewhere.
	RoundTrip Latency `json:"roundTrip"`
	// Fill and Touch (flybus frames points only): the producer's write of
	// a frame's bytes, without allocate, seal or publish; a consumer's
	// read of every line of its view, from having the view.
	Fill  Latency `json:"fill,omitzero"`
	Touch Latency `json:"touch,omitzero"`
	// Faults (flybus frames points only): page faults over WallNs.
	Faults     *PointFaults `json:"pageFaults,omitempty"`
	ErrorCount int          `json:"errorCount"`
	Errors     []string     `json:"errors,omitempty"`
}

// PointFaults are the page faults of the router process and of the
// harness (the producer and the consumers) over a point's measured
// interval, in all and per frame sent.
type PointFaults struct {
	Router  FaultRate `json:"router"`
	Harness FaultRate `json:"harness"`
	Err     string    `json:"error,omitempty"`
}

// FaultRate is a process's page faults over an interval and per frame.
type FaultRate struct {
	Faults
	MinorPerFrame float64 `json:"minorPerFrame"`
	MajorPerFrame float64 `json:"majorPerFrame"`
}

// faultsOver is the faults between two readings of one process, per
// frame of sent.
func faultsOver(before, after Faults, sent int) (FaultRate, error) {
	if after.Minor < before.Minor || after.Major < before.Major {
		return FaultRate{}, fmt.Errorf("page faults went down from %+v to %+v: not the same process", before, after)
	}
	r := FaultRate{Faults: Faults{Minor: after.Minor - before.Minor, Major: after.Major - before.Major}}
	if sent > 0 {
		r.MinorPerFrame = float64(r.Minor) / float64(sent)
		r.MajorPerFrame = float64(r.Major) / float64(sent)
	}
	return r, nil
}

// PerSentUs is the mover's CPU per frame, message or call, in µs.
func (r *PointResult) PerSentUs() float64 {
	if r == nil || r.Sent == 0 || r.CPUErr != "" {
		return 0
	}
	return r.MoverCPU * 1e6 / float64(r.Sent)
}

// PerDeliveryUs is the mover's CPU per delivery, in µs.
func (r *PointResult) PerDeliveryUs() float64 {
	if r == nil || r.Deliveries == 0 || r.CPUErr != "" {
		return 0
	}
	return r.MoverCPU * 1e6 / float64(r.Deliveries)
}

// Cores is the mover's CPU over the measured interval.
func (r *PointResult) Cores() float64 {
	if r == nil || r.WallNs <= 0 {
		return 0
	}
	return r.MoverCPU / r.WallNs.Seconds()
}

// ClientCores is the clients' CPU over the measured interval.
func (r *PointResult) ClientCores() float64 {
	if r == nil || r.WallNs <= 0 {
		return 0
	}
	return r.ClientCPU / r.WallNs.Seconds()
}

// SentPerSecond is the rate achieved while sending.
func (r *PointResult) SentPerSecond() float64 {
	if r == nil || r.SendNs <= 0 {
		return 0
	}
	return float64(r.Sent) / r.SendNs.Seconds()
}

// Verdict says whether a peer kept up with a frames point, or what bound a
// small-message point.
type Verdict struct {
	// KeepsUp: every criterion held (frames points only).
	KeepsUp bool `json:"keepsUp"`
	// Misses lists the criteria that failed.
	Misses []string `json:"misses,omitempty"`
	// Bound names what was at its limit: "mover" (the router or NATS
	// server used at least saturatedCores), "machine" (the mover and the
	// clients together used nearly every core), or "" (neither).
	Bound string `json:"bound,omitempty"`
}

// The keep-up criteria of a frames point.
const (
	// minRateShare: the producer published at least this share of the
	// frames its clock asked for (late frames make the ticker skip ticks).
	minRateShare = 0.95
	// maxLossShare: at most this share of the deliveries the consumers
	// were owed was coalesced or dropped.
	maxLossShare = 0.01
	// saturatedCores: a mover using this much CPU is at its limit, since
	// `flybus serve` runs its Go code on one thread.
	saturatedCores = 0.9
	// machineShare: the mover and the clients together used this share of
	// every core: the machine, not the mover, is the limit.
	machineShare = 0.9
)

// judgePoint applies the keep-up criteria to one peer's result: the rate
// held, nothing lost, p99 latency under one frame period. It also names
// the resource at its limit.
func judgePoint(p SweepPoint, r *PointResult, cores int) Verdict {
	var v Verdict
	if r == nil {
		return v
	}
	switch {
	case r.CPUErr == "" && r.Cores() >= saturatedCores:
		v.Bound = "mover"
	case r.CPUErr == "" && r.Cores()+r.ClientCores() >= machineShare*float64(cores):
		v.Bound = "machine"
	}
	if p.Kind != PointFrames {
		return v
	}
	if r.Sent < int(minRateShare*float64(r.Planned)) || r.SentPerSecond() < minRateShare*float64(p.RateHz) {
		v.Misses = append(v.Misses, fmt.Sprintf("rate %.0f Hz of %d", r.SentPerSecond(), p.RateHz))
	}
	owed := uint64(r.Sent) * uint64(p.Consumers)
	if lost := r.Coalesced + r.Dropped; owed == 0 || float64(lost) > maxLossShare*float64(owed) {
		v.Misses = append(v.Misses, fmt.Sprintf("%s of %s deliveries lost", thousands(int64(lost)), thousands(int64(owed))))
	}
	period := time.Second / time.Duration(p.RateHz)
	if r.Latency.Count == 0 || time.Duration(r.Latency.P99Ns) >= period {
		v.Misses = append(v.Misses, fmt.Sprintf("p99 %.2f ms over the %.2f ms period", ms(time.Duration(r.Latency.P99Ns)), ms(period)))
	}
	if r.ErrorCount > 0 {
		v.Misses = append(v.Misses, fmt.Sprintf("%d errors", r.ErrorCount))
	}
	v.KeepsUp = len(v.Misses) == 0
	return v
}

// SweepEntry is one point and what each peer measured there.
type SweepEntry struct {
	Point         SweepPoint   `json:"point"`
	Flybus        *PointResult `json:"flybus,omitempty"`
	NATS          *PointResult `json:"nats,omitempty"`
	FlybusVerdict Verdict      `json:"flybusVerdict"`
	NATSVerdict   Verdict      `json:"natsVerdict"`
}

// SizeBaseline is the floor of the work a consumer does with a frame of
// one size: copying it, and mapping, touching and unmapping it.
type SizeBaseline struct {
	Bytes    int      `json:"bytes"`
	Copy     Baseline `json:"copy"`
	MapTouch Baseline `json:"mapTouchUnmap"`
}

// SweepBaselines are measured first in the run: the cross-process
// ping-pong (the floor of a small message's round trip through a router
// process) and the per-size floors.
type SweepBaselines struct {
	CrossProcess    *PingPong      `json:"pingPongCrossProcess,omitempty"`
	CrossProcessErr string         `json:"pingPongCrossProcessError,omitempty"`
	Sizes           []SizeBaseline `json:"sizes"`
}

// SweepReport is everything one sweep measured.
type SweepReport struct {
	Started time.Time `json:"started"`
	Machine Machine   `json:"machine"`
	Store   StoreFS   `json:"store"`
	Router  Router    `json:"router"`
	Seconds float64   `json:"secondsPerPoint"`
	// NATS says how the NATS peer ran, or why it did not.
	NATS      string          `json:"nats"`
	Baselines *SweepBaselines `json:"baselines"`
	Entries   []*SweepEntry   `json:"entries"`
	Errors    []string        `json:"errors,omitempty"`
}

// Failed reports whether anything in the sweep recorded an error.
func (r *SweepReport) Failed() bool {
	if len(r.Errors) > 0 {
		return true
	}
	for _, e := range r.Entries {
		for _, x := range []*PointResult{e.Flybus, e.NATS} {
			if x != nil && x.ErrorCount > 0 {
				return true
			}
		}
	}
	return false
}

// SweepGrid is the sweep's dimensions; the zero value is the default grid.
type SweepGrid struct {
	// Sets to run, in the order of sweepSets. Default all.
	Sets []string
	// Consumers for the consumers set (ConsumersRate Hz, ConsumersBytes).
	Consumers      []int
	ConsumersRate  int
	ConsumersBytes int
	// Rates for the rate set (RateConsumers consumers, RateBytes).
	Rates         []int
	RateConsumers int
	RateBytes     int
	// Sizes for the size set, each at every rate of SizeRates, to
	// SizeConsumers consumers.
	Sizes         []int
	SizeRates     []int
	SizeConsumers int
	// Senders: publishers and callers of the small set.
	Senders []int
}

// Frame sizes of the sweep: the real feed (160x144 RGBA), the 60 Hz
// harness's frame (640x480 RGBA) and 4K (3840x2160 RGBA).
const (
	FeedFrameBytes = 160 * 144 * 4
	UHDFrameBytes  = 3840 * 2160 * 4
)

func (g SweepGrid) withDefaults() SweepGrid {
	def := func(v *[]int, d ...int) {
		if len(*v) == 0 {
			*v = d
		}
		*v = slices.Clone(*v)
	}
	one := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if len(g.Sets) == 0 {
		g.Sets = sweepSets
	}
	g.Sets = slices.Clone(g.Sets)
	def(&g.Consumers, 1, 4, 16, 64)
	one(&g.ConsumersRate, 60)
	one(&g.ConsumersBytes, FrameBytes)
	def(&g.Rates, 60, 240, 1000)
	one(&g.RateConsumers, 4)
	one(&g.RateBytes, FeedFrameBytes)
	def(&g.Sizes, FeedFrameBytes, FrameBytes, UHDFrameBytes)
	def(&g.SizeRates, 60, 30)
	one(&g.SizeConsumers, 3)
	def(&g.Senders, 1, 8)
	return g
}

// Points expands the grid into points of seconds each, set by set.
func (g SweepGrid) Points(seconds float64) ([]SweepPoint, error) {
	g = g.withDefaults()
	var pts []SweepPoint
	frames := func(set string, consumers, rate, bytes int) {
		pts = append(pts, SweepPoint{Set: set, Kind: PointFrames, Consumers: consumers, RateHz: rate, FrameBytes: bytes, Seconds: seconds})
	}
	for _, set := range sweepSets {
		if !slices.Contains(g.Sets, set) {
			continue
		}
		switch set {
		case SetConsumers:
			for _, n := range g.Consumers {
				frames(set, n, g.ConsumersRate, g.ConsumersBytes)
			}
		case SetRate:
			for _, hz := range g.Rates {
				frames(set, g.RateConsumers, hz, g.RateBytes)
			}
		case SetSize:
			for _, hz := range g.SizeRates {
				for _, b := range g.Sizes {
					frames(set, g.SizeConsumers, hz, b)
				}
			}
		case SetSmall:
			for _, kind := range []string{PointPubSub, PointRPC} {
				for _, n := range g.Senders {
					pts = append(pts, SweepPoint{Set: set, Kind: kind, Senders: n, PayloadBytes: SmallPayloadBytes, Seconds: seconds})
				}
			}
		}
	}
	var errs []error
	for _, s := range g.Sets {
		if !slices.Contains(sweepSets, s) {
			errs = append(errs, fmt.Errorf("unknown sweep set %q (want %s)", s, strings.Join(sweepSets, ", ")))
		}
	}
	for _, p := range pts {
		errs = append(errs, p.Validate())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(pts) == 0 {
		return nil, errors.New("the sweep has no points")
	}
	return pts, nil
}

// frameSizes lists the distinct frame sizes of points, ascending.
func frameSizes(pts []SweepPoint) []int {
	var out []int
	for _, p := range pts {
		if p.Kind == PointFrames && !slices.Contains(out, p.FrameBytes) {
			out = append(out, p.FrameBytes)
		}
	}
	slices.Sort(out)
	return out
}

// SweepConfig chooses what RunSweep measures.
type SweepConfig struct {
	// Seconds each point sends for. Default 3.
	Seconds float64
	Grid    SweepGrid
	// Flybus, Store, StoreMode and RouterEnv are as in Config; the router
	// always runs as its own process, since its CPU is the figure.
	Flybus    string
	Store     string
	StoreMode store.Mode
	RouterEnv []string
	// NoNATS skips the NATS peer. Compare is bench/compare's executable;
	// empty: built from the module into a temporary directory.
	NoNATS  bool
	Compare string
	// Progress receives progress lines; nil for none.
	Progress io.Writer

	// rounds overrides the baselines' iteration counts (tests).
	rounds *sweepRounds
}

// sweepRounds are the baselines' iterations: per size (scaled down for big
// frames) and for the ping-pong.
type sweepRounds struct {
	frameBytes int // a frame this size gets hot rounds; bigger ones fewer
	hot        int
	pingPong   int
	paced      int
}

var defaultSweepRounds = sweepRounds{frameBytes: FrameBytes, hot: 200, pingPong: 2000, paced: 30}

// forSize scales the hot rounds down for frames bigger than frameBytes,
// so that a 4K frame's baselines take about as long as a 640x480 one's.
func (n sweepRounds) forSize(size int) baselineRounds {
	hot := n.hot
	if size > n.frameBytes {
		hot = max(10, n.hot*n.frameBytes/size)
	}
	return baselineRounds{copy: hot, mapTouch: hot, paced: n.paced, pingPong: n.pingPong}
}

func (c SweepConfig) withDefaults() SweepConfig {
	if c.Seconds == 0 {
		c.Seconds = 3
	}
	c.Grid = c.Grid.withDefaults()
	c.RouterEnv = slices.Clone(c.RouterEnv)
	return c
}
