package client

import (
	"fmt"

	"github.com/flybus/flybus/wire"
)

// Options follow one rule. A Client is configured once, by the Config
// given to Connect. Every operation with settings takes them as a variadic
// list of options after its required arguments, and with none uses the
// defaults each option documents. An option is named for what it sets and
// is accepted by each operation it applies to: InFlight(1) bounds a
// subscription or a service alike. Attachments are options of a call, and
// the variadic tail of Publish and Reply.

// SubscribeOption configures Subscribe: Bounded, Queued, InFlight, Replay,
// AwaitTopic.
// Without Bounded a subscription is latest: one replaceable queued value,
// so a slow consumer skips to the newest instead of slowing anyone; 2 in
// flight unless InFlight says otherwise.
type SubscribeOption interface{ subscribe(*subscribeOpts) }

// ServiceOption configures Register: Queued, InFlight.
type ServiceOption interface{ service(*serviceOpts) }

// LimitOption is Queued or InFlight: it bounds a subscription or a
// service.
type LimitOption interface {
	SubscribeOption
	ServiceOption
}

// SealOption configures Seal: Digest, NoWait.
type SealOption interface{ seal(*sealOpts) }

// CallOption configures Call and CallAndWait: Pin, and the attachments
// (Attach).
type CallOption interface{ call(*callOpts) }

type subscribeOpts struct {
	mode             wire.Mode
	queued, inFlight int // 0: the mode's default
	replay           bool
	await            bool
}

type serviceOpts struct{ queued, inFlight int }

type sealOpts struct {
	digest string
	noWait bool
}

type callOpts struct {
	pin  wire.ServiceInc
	atts []Attachment
}

type modeOption wire.Mode

func (m modeOption) subscribe(o *subscribeOpts) { o.mode = wire.Mode(m) }

// Bounded subscribes in bounded mode: a FIFO (64 unless Queued says
// otherwise) that misses nothing, whose being full refuses publications
// (BACKPRESSURE); 16 in flight unless InFlight says otherwise.
func Bounded() SubscribeOption { return modeOption(wire.ModeBounded) }

type awaitOption struct{}

func (awaitOption) subscribe(o *subscribeOpts) { o.await = true }

// AwaitTopic subscribes to a topic that may not be declared yet: the
// subscription waits for its declaration and then receives every
// publication (the retained value too, with Replay), whatever the order in
// which consumer and producer start. If the topic is deleted, the
// subscription waits for the next declaration instead of ending.
// TopicIncarnation is zero while it waits.
func AwaitTopic() SubscribeOption { return awaitOption{} }

type replayOption struct{}

func (replayOption) subscribe(o *subscribeOpts) { o.replay = true }

// Replay delivers the topic's retained value, if it has one, first.
func Replay() SubscribeOption { return replayOption{} }

type queuedOption int

func (n queuedOption) subscribe(o *subscribeOpts) { o.queued = int(n) }
func (n queuedOption) service(o *serviceOpts)     { o.queued = int(n) }

// Queued bounds what waits: a bounded subscription's queue (latest mode
// keeps exactly 1: the router refuses another bound), or a service's calls
// waiting for dispatch (default 16).
func Queued(n int) LimitOption { return queuedOption(n) }

type inFlightOption int

func (n inFlightOption) subscribe(o *subscribeOpts) { o.inFlight = int(n) }
func (n inFlightOption) service(o *serviceOpts)     { o.inFlight = int(n) }

// InFlight bounds what is delivered and not yet closed: a subscription's
// open messages, or a service's requests not yet replied to (default 16).
func InFlight(n int) LimitOption { return inFlightOption(n) }

type digestOption string

func (d digestOption) seal(o *sealOpts) { o.digest = string(d) }

// Digest has the router check the bytes against hexDigest, a SHA-256
// written as 64 lowercase hex digits, and put it in the artifact's
// reference, where readers can verify it (ArtifactView.Verify).
func Digest(hexDigest string) SealOption { return digestOption(hexDigest) }

type noWaitOption struct{}

func (noWaitOption) seal(o *sealOpts) { o.noWait = true }

// NoWait returns from Seal as soon as the seal is sent, with an artifact
// whose View, ReadAll and Retain wait for the router's
// answer (Sealed reports it). A producer that publishes right away saves a
// round trip: the router seals before it reads the publish.
func NoWait() SealOption { return noWaitOption{} }

type pinOption wire.ServiceInc

func (p pinOption) call(o *callOpts) { o.pin = wire.ServiceInc(p) }

// Pin makes a call reach only that incarnation of its target service
// (TARGET_CHANGED if another one is registered); Service.Incarnation and
// PendingCall.Incarnation name one.
func Pin(inc wire.ServiceInc) CallOption { return pinOption(inc) }

func (a Attachment) call(o *callOpts) { o.atts = append(o.atts, a) }

func subscribeOptions(opts []SubscribeOption) subscribeOpts {
	o := subscribeOpts{mode: wire.ModeLatest}
	for _, opt := range opts {
		opt.subscribe(&o)
	}
	queued, inFlight := 1, 2
	if o.mode == wire.ModeBounded {
		queued, inFlight = 64, 16
	}
	if o.queued == 0 {
		o.queued = queued
	}
	if o.inFlight == 0 {
		o.inFlight = inFlight
	}
	return o
}

func serviceOptions(opts []ServiceOption) serviceOpts {
	var o serviceOpts
	for _, opt := range opts {
		opt.service(&o)
	}
	if o.queued == 0 {
		o.queued = 16
	}
	if o.inFlight == 0 {
		o.inFlight = 16
	}
	return o
}

func sealOptions(opts []SealOption) (wire.Opt[wire.Digest], bool, error) {
	var o sealOpts
	for _, opt := range opts {
		opt.seal(&o)
	}
	if o.digest == "" {
		return wire.Opt[wire.Digest]{}, o.noWait, nil
	}
	d, ok := wire.ParseDigest(o.digest)
	if !ok {
		return wire.Opt[wire.Digest]{}, false, fmt.Errorf("flybus: digest %q is not 64 lowercase hex digits", o.digest)
	}
	return wire.Some(d), o.noWait, nil
}

// callOptions reads opts with a type switch rather than through their
// methods: a pointer passed to an interface method escapes, and a call
// would then allocate its options.
func callOptions(opts []CallOption) callOpts {
	var o callOpts
	n := 0
	for _, opt := range opts {
		if _, ok := opt.(Attachment); ok {
			n++
		}
	}
	if n > 0 {
		o.atts = make([]Attachment, 0, n)
	}
	for _, opt := range opts {
		switch v := opt.(type) {
		case pinOption:
			o.pin = wire.ServiceInc(v)
		case Attachment:
			o.atts = append(o.atts, v)
		}
	}
	return o
}
