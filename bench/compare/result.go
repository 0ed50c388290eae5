package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/flybus/flybus/perf"
)

// The schedule, shared with the perf harness.
const (
	FrameBytes        = perf.FrameBytes
	FrameRate         = perf.FrameRate
	Consumers         = perf.Consumers
	SlowConsumerDelay = perf.SlowConsumerDelay
	TouchStride       = perf.TouchStride
	framePeriod       = time.Second / FrameRate
)

// Result is one peer run. Durations are nanoseconds; histograms carry every
// raw sample, encoded as perf.Hist encodes them.
type Result struct {
	Kind     string    `json:"kind"` // "nats" or "direct"
	Started  time.Time `json:"started"`
	Settings Settings  `json:"settings"`

	Planned      int           `json:"planned"`
	Frames       int           `json:"frames"` // published (nats) or handed to the writers (direct)
	Late         int           `json:"late"`   // frames whose work overran their 1/60 s slot
	MaxOverrunNs time.Duration `json:"maxOverrunNs"`
	WallNs       time.Duration `json:"wallNs"` // first tick to drained
	Drained      bool          `json:"drained"`

	// Delivery runs from just before the publish (nats) or the hand-off to
	// the writers (direct) to the first byte of a complete frame read by the
	// consumer, on the wall clock.
	DeliveryFast *perf.Hist `json:"deliveryFastConsumers"`
	DeliverySlow *perf.Hist `json:"deliverySlowConsumer"`
	// Publish is the time spent in nc.Publish (nats); nil for direct.
	Publish *perf.Hist `json:"publish,omitempty"`
	// RPC is the request round trip to the agents (nats with --agents).
	RPC *perf.Hist `json:"rpcRoundTrip,omitempty"`

	Consumers []ConsumerFigures `json:"consumers"`

	// CPU is the process the comparison is about: the NATS server's child
	// process, or the direct producer. ClientCPU is the other side: the
	// nats.go clients' process, or the direct consumers' process.
	CPU       perf.CPU           `json:"cpu"`
	ClientCPU perf.CPU           `json:"clientCpu"`
	Memory    perf.MemoryFigures `json:"memory"`
	// ClientMemory is the other process's resident set at the end.
	ClientMemory *perf.Memory `json:"clientMemory,omitempty"`

	// Server is the NATS server's own counters over the run (nats only).
	Server *ServerFigures `json:"server,omitempty"`

	Errors []string `json:"errors,omitempty"`
}

// Settings are the run's dimensions and choices.
type Settings struct {
	FrameBytes  int     `json:"frameBytes"`
	Rate        int     `json:"rate"`
	Seconds     float64 `json:"seconds"`
	Consumers   int     `json:"consumers"`
	SlowDelayNs int64   `json:"slowConsumerDelayNs"`
	Agents      int     `json:"agents"`
	TouchStride int     `json:"touchStrideBytes"`
	// NATS: the server's max_payload and per-connection max_pending, and
	// the subscribers' nats.go pending limits (messages, bytes).
	MaxPayload        int32  `json:"maxPayload,omitempty"`
	MaxPending        int64  `json:"maxPending,omitempty"`
	PendingMsgsLimit  int    `json:"pendingMsgsLimit,omitempty"`
	PendingBytesLimit int    `json:"pendingBytesLimit,omitempty"`
	URL               string `json:"url,omitempty"`
	// Direct: the producer's per-consumer hand-off.
	Semantics string `json:"semantics,omitempty"`
}

// ConsumerFigures are one consumer's counts. Dropped is what the transport
// says it dropped (nats.go's Subscription.Dropped; the direct producer's
// replaced frames); Missing is frames published and never seen.
type ConsumerFigures struct {
	Slow    bool `json:"slow"`
	Seen    int  `json:"seen"`
	Dropped int  `json:"dropped"`
	Missing int  `json:"missing"`
}

// ServerFigures are deltas of the NATS server's varz over the run.
type ServerFigures struct {
	InMsgs        int64 `json:"inMsgs"`
	OutMsgs       int64 `json:"outMsgs"`
	InBytes       int64 `json:"inBytes"`
	OutBytes      int64 `json:"outBytes"`
	SlowConsumers int64 `json:"slowConsumers"`
}

func newResult(kind string, seconds float64, agents int) *Result {
	return &Result{Kind: kind, Started: time.Now(),
		Settings: Settings{FrameBytes: FrameBytes, Rate: FrameRate, Seconds: seconds, Consumers: Consumers,
			SlowDelayNs: int64(SlowConsumerDelay), Agents: agents, TouchStride: TouchStride},
		Planned:      frames(seconds),
		DeliveryFast: &perf.Hist{}, DeliverySlow: &perf.Hist{}}
}

// frames is the number of frames a run of s seconds produces.
func frames(s float64) int { return int(s*FrameRate + 0.5) }

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadResult reads a Result written by WriteJSON.
func ReadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Kind == "" {
		return nil, fmt.Errorf("%s: no \"kind\": not a compare result", path)
	}
	return &r, nil
}

// ReadFlybus reads the perf harness's JSON report.
func ReadFlybus(path string) (*perf.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r perf.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Schedules) == 0 {
		return nil, fmt.Errorf("%s: no schedules: not a flybus perf report", path)
	}
	return &r, nil
}

// errorList is a run's errors as a Result reports them: the first few,
// then how many more there were.
func errorList(l *perf.ErrorLog) []string {
	n, out := l.Summary()
	if n > len(out) {
		out = append(out, fmt.Sprintf("... and %d more", n-len(out)))
	}
	return out
}
