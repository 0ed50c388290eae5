package perf

import (
	"encoding/json"
	"io"
	"time"

	"github.com/flybus/flybus/router"
)

// Report is everything one run measured. Durations are nanoseconds in
// JSON; histograms carry every raw sample.
type Report struct {
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	Store    StoreFS   `json:"store"`
	Router   Router    `json:"router"`
	Settings Settings  `json:"settings"`
	// Baselines are measured first, in the same run.
	Baselines *Baselines `json:"baselines"`
	// SamplingCPU is the CPU (in cores) the router, or in embedded mode the
	// whole process, spends on nothing but the harness's stats sampling
	// every 10 ms, measured on the idle router before the first schedule.
	SamplingCPU float64     `json:"samplingCpuCores"`
	Schedules   []*Schedule `json:"schedules"`
	// Isolation is the stalled-subscriber comparison (Config.StalledSubscriber).
	Isolation *Isolation `json:"isolation,omitempty"`
	// Recorder is the recorder comparison (Config.Recorder).
	Recorder *RecorderComparison `json:"recorder,omitempty"`
	// Errors are failures outside any schedule (starting or stopping the
	// router, for one).
	Errors []string `json:"errors,omitempty"`
}

// Router says how the router ran.
type Router struct {
	Mode      string `json:"mode"`      // "process" or "embedded"
	StoreMode string `json:"storeMode"` // "files" or "pool"
	Binary    string `json:"binary,omitempty"`
	Found     string `json:"binaryFrom,omitempty"` // how the binary was found
	PID       int    `json:"pid"`
	RouterID  string `json:"routerId"`
	StoreDir  string `json:"storeDir"`
	Socket    string `json:"socket"`
	Metrics   string `json:"metrics,omitempty"` // process mode: host:port of /metrics
	// ExitStatus is the router process's exit status after SIGTERM; -1
	// until it exited, and in embedded mode.
	ExitStatus int `json:"exitStatus"`
}

// Settings are the schedule's fixed dimensions and the run's choices.
type Settings struct {
	Width        int     `json:"width"`
	Height       int     `json:"height"`
	FrameBytes   int     `json:"frameBytes"`
	Rate         int     `json:"rate"`
	Seconds      float64 `json:"secondsPerSchedule"`
	Frames       int     `json:"framesPerSchedule"`
	Agents       []int   `json:"agents"`
	Consumers    int     `json:"consumers"`
	SlowDelayNs  int64   `json:"slowConsumerDelayNs"`
	Fill         Fill    `json:"fill"`
	TouchStride  int     `json:"touchStrideBytes"`
	SampleEvery  int64   `json:"statsSampleEveryNs"`
	ProfileFiles bool    `json:"cpuProfile"`
}

// Schedule is one agent count's figures.
type Schedule struct {
	Agents int `json:"agents"`
	// Planned frames; Frames produced (published); Late frames, whose
	// work overran their 1/60 s slot; the worst overrun.
	Planned      int           `json:"planned"`
	Frames       int           `json:"frames"`
	Late         int           `json:"late"`
	MaxOverrunNs time.Duration `json:"maxOverrunNs"`
	// Wall is the measured interval: first tick to drained store.
	WallNs time.Duration `json:"wallNs"`

	// Latencies, every sample kept.
	RPC          *Hist `json:"rpcRoundTrip"`          // Call to Result, agent's work included
	RPCNet       *Hist `json:"rpcNetOfHandler"`       // the same less the agent's own handler time
	Allocate     *Hist `json:"allocate"`              // Allocate round trip
	Fill         *Hist `json:"fill"`                  // Write, or Bytes and copy
	Seal         *Hist `json:"seal"`                  // Seal round trip
	Publish      *Hist `json:"publishAdmission"`      // Publish to its receipt
	DeliveryFast *Hist `json:"deliveryFastConsumers"` // before Publish to first byte read, consumers 1 and 2
	DeliverySlow *Hist `json:"deliverySlowConsumer"`  // the same for the slow consumer
	Access       *Hist `json:"consumerAccess"`        // View, touch every line, close view, artifact, message
	View         *Hist `json:"consumerView"`          // the View call alone: artifact.open round trip, open, mmap
	AgentAccess  *Hist `json:"agentAccess"`           // the agents' View, touch, close
	// RPCByAgent is RPC split by the agent called, in agent order.
	RPCByAgent []*Hist `json:"rpcByAgent"`
	// CriticalPath runs from Allocate returning to Publish returning: the
	// fill, the seal and the publish, what the producer waits for per frame.
	CriticalPath *Hist `json:"producerCriticalPath"`
	// FrameLatency runs from the producer starting to fill a frame (Allocate
	// just returned) to a fast consumer having touched every line of it:
	// one sample per frame and fast consumer.
	FrameLatency *Hist `json:"frameLatencyFastConsumers"`
	// ProducerPath lists the requests the producer sent after its fill, in
	// order, each answered before the next was sent ("seal", "publish"):
	// the frame budget counts its round trips from it.
	ProducerPath []string `json:"producerPath"`
	// FrameBudget is the sum of baselines FrameLatency is printed beside.
	FrameBudget FrameBudget `json:"frameLatencyBudget"`
	// Side is the isolation passes' side traffic; nil in other schedules.
	Side *SideTraffic `json:"sideTraffic,omitempty"`
	// Recorder is the `flybus record` beside the consumers in the recorder
	// comparison's second pass; nil in other schedules.
	Recorder *RecorderRun `json:"recorder,omitempty"`

	// Counter deltas over the schedule, from the router's stats.
	Seals        uint64 `json:"seals"`
	LeaseSeals   uint64 `json:"leaseSeals"`
	CopySeals    uint64 `json:"copySeals"`
	Publications uint64 `json:"publications"`
	Collected    uint64 `json:"collected"`
	PoolHits     uint64 `json:"poolHits"`
	PoolMisses   uint64 `json:"poolMisses"`
	Refusals     uint64 `json:"refusals"`
	// The router's store opens, fallocates and unlinks, and the consumers'
	// artifact.open round trips and mmap/munmap calls, over the schedule.
	StoreOpens, StoreFallocates, StoreUnlinks   uint64
	ConsumerOpens, ConsumerMaps, ConsumerUnmaps uint64

	RouterCPU  CPU `json:"routerCpu"`  // the router process; embedded: the whole process
	HarnessCPU CPU `json:"harnessCpu"` // this process (the clients, and the router if embedded)
	// NATSRouterCPUPerFrameUs is an embedded NATS server's CPU per frame
	// on the same schedule, measured by bench/compare and passed in; nil
	// when not measured.
	NATSRouterCPUPerFrameUs *float64 `json:"natsRouterCpuPerFrameUs"`

	Memory MemoryFigures `json:"routerMemory"`

	// Gauges sampled every 10 ms, and their values once drained (with
	// every client still connected).
	StoreBytesPeak uint64 `json:"storeBytesPeak"`
	StoreBytesLive uint64 `json:"storeBytesLive"`
	RootsPeak      int64  `json:"rootsPeak"`
	RootsLive      int64  `json:"rootsLive"`
	QueuedPeak     int64  `json:"queuedPeak"`
	QueuedLive     int64  `json:"queuedLive"`
	ArtifactsPeak  int64  `json:"artifactsPeak"`
	ArtifactsLive  int64  `json:"artifactsLive"`
	// PreparedLive is how many of the live artifacts are the producer's
	// allocations prepared ahead (AllocateAhead), held until it closes.
	PreparedLive int64 `json:"preparedLive"`
	StatsSamples int   `json:"statsSamples"`
	StatsErrors  int   `json:"statsErrors"`

	// CollectionLag runs from the last holder of the last frame letting go
	// to the router tracking no artifact; Drained is false when that did
	// not happen within the drain timeout.
	CollectionLagNs time.Duration `json:"collectionLagNs"`
	Drained         bool          `json:"drained"`

	Consumers []ConsumerFigures `json:"consumers"`
	// Subscriptions is the router's operator snapshot of the schedule's
	// subscriptions (router.Details) as the last frame was produced.
	Subscriptions []router.SubscriptionDetail `json:"subscriptions,omitempty"`
	// Latencies is what the router timed of itself during the schedule:
	// admission and lane wait (router.Latencies), from the first frame to
	// the last.
	Latencies *router.Latencies `json:"latencies,omitempty"`
	Targets   []Target          `json:"targets"`
	Profile   string            `json:"cpuProfile,omitempty"`

	ErrorCount int      `json:"errorCount"`
	Errors     []string `json:"errors,omitempty"` // the first few
}

// CPU is one process's CPU over a schedule. The net figures take off
// what the harness's stats sampling alone costs (router CPU only).
type CPU struct {
	What          string  `json:"what"`
	Seconds       float64 `json:"cpuSeconds"`
	Cores         float64 `json:"cores"` // CPU seconds per wall second
	PerFrameUs    float64 `json:"perFrameUs"`
	NetCores      float64 `json:"netCores"`
	NetPerFrameUs float64 `json:"netPerFrameUs"`
	Err           string  `json:"error,omitempty"`
}

// MemoryFigures are the router's resident set before and after a schedule.
// PeakReset says whether VmHWM was reset to VmRSS before the schedule, so
// that the after-HWM is this schedule's own peak.
type MemoryFigures struct {
	What      string `json:"what"`
	Before    Memory `json:"before"`
	After     Memory `json:"after"`
	PeakReset bool   `json:"peakReset"`
	Err       string `json:"error,omitempty"`
}

// ConsumerFigures are one subscriber's counts.
type ConsumerFigures struct {
	Slow      bool   `json:"slow"`
	Seen      int    `json:"seen"`
	Coalesced uint64 `json:"coalesced"` // the sum of Message.Replaced
}

// Failed reports whether any schedule or the run recorded errors.
func (r *Report) Failed() bool {
	if len(r.Errors) > 0 {
		return true
	}
	for _, s := range r.allSchedules() {
		if s.ErrorCount > 0 || !s.Drained {
			return true
		}
	}
	return false
}

// allSchedules is every schedule the run measured, the comparisons'
// passes last.
func (r *Report) allSchedules() []*Schedule {
	all := append([]*Schedule(nil), r.Schedules...)
	for _, p := range r.passes() {
		all = append(all, p.s)
	}
	return all
}

// namedPass is a comparison's pass, named for the report.
type namedPass struct {
	name string
	s    *Schedule
}

// passes are the comparisons' passes, in the order they ran.
func (r *Report) passes() []namedPass {
	var out []namedPass
	if iso := r.Isolation; iso != nil {
		for _, s := range []*Schedule{iso.Without, iso.With} {
			out = append(out, namedPass{"isolation pass " + isolationPassName(s), s})
		}
	}
	if rc := r.Recorder; rc != nil {
		out = append(out, namedPass{"recorder pass without the recorder", rc.Without},
			namedPass{"recorder pass with the recorder", rc.With})
	}
	return out
}

// WriteJSON writes the report, raw histograms included, as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
