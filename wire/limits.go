package wire

import (
	"errors"
	"fmt"
	"strconv"
)

// Limits are the router's configured bounds, reported in the hello reply.
// MaxEnvelopeBytes, MaxAttachments and MaxBatch are fixed by the protocol
// and are reported alongside these; configuration cannot change them.
type Limits struct {
	MaxClients                int
	MaxServices               int
	MaxTopics                 int
	MaxSubscriptionsPerClient int
	MaxSubscriptions          int
	MaxActiveCallsPerClient   int
	MaxServiceQueued          int
	MaxServiceInFlight        int
	MaxLatestInFlight         int
	MaxBoundedQueued          int
	MaxBoundedInFlight        int
	MaxOwnersPerClient        int
	ReservedOwnersPerClient   int
	MaxControlFrames          int
	MaxStoreBytes             uint64
	MaxArtifactBytes          uint64
	MaxRetainedBytes          uint64
	MaxQueuedBytesPerClient   uint64
	MaxControlBytes           uint64
}

const mib = 1 << 20

// DefaultLimits returns the defaults of docs/protocol.md's Limits table.
func DefaultLimits() Limits {
	return Limits{
		MaxClients:                64,
		MaxServices:               256,
		MaxTopics:                 512,
		MaxSubscriptionsPerClient: 128,
		MaxSubscriptions:          1024,
		MaxActiveCallsPerClient:   64,
		MaxServiceQueued:          16,
		MaxServiceInFlight:        16,
		MaxLatestInFlight:         2,
		MaxBoundedQueued:          64,
		MaxBoundedInFlight:        16,
		MaxOwnersPerClient:        256,
		ReservedOwnersPerClient:   64,
		MaxControlFrames:          128,
		MaxStoreBytes:             512 * mib,
		MaxArtifactBytes:          128 * mib,
		MaxRetainedBytes:          128 * mib,
		MaxQueuedBytesPerClient:   1 * mib,
		MaxControlBytes:           1 * mib,
	}
}

// limitField describes one member of the hello encoding. Exactly one of
// count and size is set for configurable limits; fixed ones have neither.
type limitField struct {
	name  string
	count func(*Limits) *int
	size  func(*Limits) *uint64
	fixed uint64
}

// limitFields is the hello encoding, in its documented order.
var limitFields = [...]limitField{
	{name: "maxEnvelopeBytes", fixed: MaxEnvelopeBytes},
	{name: "maxAttachments", fixed: MaxAttachments},
	{name: "maxBatch", fixed: MaxBatch},
	{name: "maxClients", count: func(l *Limits) *int { return &l.MaxClients }},
	{name: "maxServices", count: func(l *Limits) *int { return &l.MaxServices }},
	{name: "maxTopics", count: func(l *Limits) *int { return &l.MaxTopics }},
	{name: "maxSubscriptionsPerClient", count: func(l *Limits) *int { return &l.MaxSubscriptionsPerClient }},
	{name: "maxSubscriptions", count: func(l *Limits) *int { return &l.MaxSubscriptions }},
	{name: "maxActiveCallsPerClient", count: func(l *Limits) *int { return &l.MaxActiveCallsPerClient }},
	{name: "maxServiceQueued", count: func(l *Limits) *int { return &l.MaxServiceQueued }},
	{name: "maxServiceInFlight", count: func(l *Limits) *int { return &l.MaxServiceInFlight }},
	{name: "maxLatestInFlight", count: func(l *Limits) *int { return &l.MaxLatestInFlight }},
	{name: "maxBoundedQueued", count: func(l *Limits) *int { return &l.MaxBoundedQueued }},
	{name: "maxBoundedInFlight", count: func(l *Limits) *int { return &l.MaxBoundedInFlight }},
	{name: "maxOwnersPerClient", count: func(l *Limits) *int { return &l.MaxOwnersPerClient }},
	{name: "reservedOwnersPerClient", count: func(l *Limits) *int { return &l.ReservedOwnersPerClient }},
	{name: "maxControlFrames", count: func(l *Limits) *int { return &l.MaxControlFrames }},
	{name: "maxStoreBytes", size: func(l *Limits) *uint64 { return &l.MaxStoreBytes }},
	{name: "maxArtifactBytes", size: func(l *Limits) *uint64 { return &l.MaxArtifactBytes }},
	{name: "maxRetainedBytes", size: func(l *Limits) *uint64 { return &l.MaxRetainedBytes }},
	{name: "maxQueuedBytesPerClient", size: func(l *Limits) *uint64 { return &l.MaxQueuedBytesPerClient }},
	{name: "maxControlBytes", size: func(l *Limits) *uint64 { return &l.MaxControlBytes }},
}

// LimitNames lists the hello encoding's field names in order.
func LimitNames() []string {
	out := make([]string, len(limitFields))
	for i, f := range limitFields {
		out[i] = f.name
	}
	return out
}

// IsByteLimit reports whether the named limit is a byte size (a U64 string
// on the wire) rather than a count (a JSON integer).
func IsByteLimit(name string) bool {
	for _, f := range limitFields {
		if f.name == name {
			return f.size != nil || f.name == "maxEnvelopeBytes"
		}
	}
	return false
}

// Set assigns one configurable limit by its hello name, as configuration
// files and flags do.
func (l *Limits) Set(name string, v uint64) error {
	for _, f := range limitFields {
		if f.name != name {
			continue
		}
		switch {
		case f.count != nil:
			if v > 1<<31-1 {
				return fmt.Errorf("limit %s: %d is too large", name, v)
			}
			*f.count(l) = int(v)
		case f.size != nil:
			*f.size(l) = v
		default:
			return fmt.Errorf("limit %s is fixed by the protocol at %d", name, f.fixed)
		}
		return nil
	}
	return fmt.Errorf("unknown limit %q", name)
}

// Validate reports every inconsistent or out-of-range limit.
func (l *Limits) Validate() error {
	var errs []error
	for _, f := range limitFields {
		switch {
		case f.count != nil && *f.count(l) < 1:
			errs = append(errs, fmt.Errorf("%s must be at least 1", f.name))
		case f.size != nil && *f.size(l) < 1:
			errs = append(errs, fmt.Errorf("%s must be at least 1", f.name))
		}
	}
	credit := func(name string, v int) {
		if v > MaxCredit {
			errs = append(errs, fmt.Errorf("%s must be at most %d", name, MaxCredit))
		}
	}
	credit("maxServiceQueued", l.MaxServiceQueued)
	credit("maxServiceInFlight", l.MaxServiceInFlight)
	credit("maxLatestInFlight", l.MaxLatestInFlight)
	credit("maxBoundedQueued", l.MaxBoundedQueued)
	credit("maxBoundedInFlight", l.MaxBoundedInFlight)
	if l.ReservedOwnersPerClient >= l.MaxOwnersPerClient {
		errs = append(errs, errors.New("reservedOwnersPerClient must be below maxOwnersPerClient"))
	}
	if l.MaxSubscriptionsPerClient > l.MaxSubscriptions {
		errs = append(errs, errors.New("maxSubscriptionsPerClient must not exceed maxSubscriptions"))
	}
	if l.MaxArtifactBytes > l.MaxStoreBytes {
		errs = append(errs, errors.New("maxArtifactBytes must not exceed maxStoreBytes"))
	}
	if l.MaxControlBytes < MaxEnvelopeBytes+4 {
		errs = append(errs, fmt.Errorf("maxControlBytes must hold one largest frame (%d bytes)", MaxEnvelopeBytes+4))
	}
	if l.MaxQueuedBytesPerClient < MaxEnvelopeBytes+4 {
		errs = append(errs, fmt.Errorf("maxQueuedBytesPerClient must hold one largest frame (%d bytes)", MaxEnvelopeBytes+4))
	}
	return errors.Join(errs...)
}

// AppendJSON appends the hello encoding: counts as JSON integers, byte
// sizes as U64 strings.
func (l *Limits) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	for i, f := range limitFields {
		b = appendKey(b, f.name, i == 0)
		switch {
		case f.count != nil:
			b = strconv.AppendInt(b, int64(*f.count(l)), 10)
		case f.size != nil:
			b = appendU64Str(b, *f.size(l))
		case f.name == "maxEnvelopeBytes":
			b = appendU64Str(b, f.fixed)
		default:
			b = strconv.AppendUint(b, f.fixed, 10)
		}
	}
	return append(b, '}')
}

// limitNames is LimitNames for the decoder's missing-member check.
var limitNames = LimitNames()

// decodeJSON is written by hand, not generated: the members come from
// limitFields rather than struct tags, and the three the protocol fixes
// are checked against their values.
func (l *Limits) decodeJSON(d *Decoder, ti uint32, ctx string) *BusError {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		idx := -1
		for i := range limitFields {
			if limitFields[i].name == string(f.key) {
				idx = i
				break
			}
		}
		if idx < 0 {
			return f.unknown()
		}
		lf := &limitFields[idx]
		switch {
		case lf.count != nil:
			n, err := f.integer(1, 1<<31-1)
			if err != nil {
				return err
			}
			*lf.count(l) = int(n)
		case lf.size != nil:
			n, err := f.u64()
			if err != nil {
				return err
			}
			*lf.size(l) = n
		default:
			var n uint64
			var err *BusError
			if lf.name == "maxEnvelopeBytes" {
				n, err = f.u64()
			} else {
				n, err = f.integer(0, 1<<31-1)
			}
			if err != nil {
				return err
			}
			if n != lf.fixed {
				return f.fail("protocol fixes this at " + strconv.FormatUint(lf.fixed, 10))
			}
		}
	}
	return f.require(limitNames...)
}
