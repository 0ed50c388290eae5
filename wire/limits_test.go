package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Limits: the defaults are consistent, every invariant of Validate fires on
// its own, Set works by hello name, and the hello encoding is exactly the 22
// documented members with counts as integers and byte sizes as U64 strings.

func TestDefaultLimitsValid(t *testing.T) {
	l := DefaultLimits()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLimitsValidate(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Limits)
		want   string // a fragment of the one reported violation
	}{
		{"Credit/ServiceQueued", func(l *Limits) { l.MaxServiceQueued = MaxCredit + 1 }, "maxServiceQueued must be at most 65535"},
		{"Credit/ServiceInFlight", func(l *Limits) { l.MaxServiceInFlight = MaxCredit + 1 }, "maxServiceInFlight must be at most"},
		{"Credit/LatestInFlight", func(l *Limits) { l.MaxLatestInFlight = MaxCredit + 1 }, "maxLatestInFlight must be at most"},
		{"Credit/BoundedQueued", func(l *Limits) { l.MaxBoundedQueued = MaxCredit + 1 }, "maxBoundedQueued must be at most"},
		{"Credit/BoundedInFlight", func(l *Limits) { l.MaxBoundedInFlight = MaxCredit + 1 }, "maxBoundedInFlight must be at most"},
		{"Owners/ReserveEqualsMax", func(l *Limits) { l.ReservedOwnersPerClient = l.MaxOwnersPerClient }, "reservedOwnersPerClient must be below"},
		{"Owners/ReserveAboveMax", func(l *Limits) { l.ReservedOwnersPerClient = l.MaxOwnersPerClient + 1 }, "reservedOwnersPerClient must be below"},
		{"Subscriptions/PerClientAboveTotal", func(l *Limits) { l.MaxSubscriptionsPerClient = l.MaxSubscriptions + 1 }, "maxSubscriptionsPerClient must not exceed"},
		{"Bytes/ArtifactAboveStore", func(l *Limits) { l.MaxArtifactBytes = l.MaxStoreBytes + 1 }, "maxArtifactBytes must not exceed"},
		{"Bytes/ControlBelowFrame", func(l *Limits) { l.MaxControlBytes = MaxEnvelopeBytes + FrameHeaderLen - 1 }, "maxControlBytes must hold one largest frame"},
		{"Bytes/QueuedBelowFrame", func(l *Limits) { l.MaxQueuedBytesPerClient = MaxEnvelopeBytes + FrameHeaderLen - 1 }, "maxQueuedBytesPerClient must hold one largest frame"},
	}
	// Every configurable limit must be at least 1. Zeroing the lower side
	// of a pairwise invariant would report that invariant too, so each
	// case zeroes one field and allows exactly the reports it implies.
	for _, f := range limitFields {
		var zero func(*Limits)
		switch {
		case f.count != nil:
			zero = func(l *Limits) { *f.count(l) = 0 }
		case f.size != nil:
			zero = func(l *Limits) { *f.size(l) = 0 }
		default:
			continue // fixed by the protocol, not configurable
		}
		cases = append(cases, struct {
			name   string
			change func(*Limits)
			want   string
		}{"AtLeastOne/" + f.name, zero, f.name + " must be at least 1"})
	}
	implied := map[string]string{ // a zeroed field that breaks a second invariant
		"maxOwnersPerClient":      "reservedOwnersPerClient must be below",
		"maxSubscriptions":        "maxSubscriptionsPerClient must not exceed",
		"maxStoreBytes":           "maxArtifactBytes must not exceed",
		"maxControlBytes":         "maxControlBytes must hold",
		"maxQueuedBytesPerClient": "maxQueuedBytesPerClient must hold",
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := DefaultLimits()
			c.change(&l)
			err := l.Validate()
			if err == nil {
				t.Fatalf("not reported; want %q", c.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if !strings.Contains(lines[0], c.want) {
				t.Errorf("got %q, want %q first", err, c.want)
			}
			want := 1
			if extra, ok := implied[strings.TrimPrefix(c.name, "AtLeastOne/")]; ok {
				want = 2
				if !strings.Contains(err.Error(), extra) {
					t.Errorf("got %q, want also %q", err, extra)
				}
			}
			if len(lines) != want {
				t.Errorf("%d violations reported, want %d: %q", len(lines), want, err)
			}
		})
	}
	t.Run("AllAtOnce", func(t *testing.T) {
		var l Limits // every limit zero
		err := l.Validate()
		if err == nil {
			t.Fatal("zero limits validate")
		}
		for _, f := range limitFields {
			if (f.count != nil || f.size != nil) && !strings.Contains(err.Error(), f.name+" must be at least 1") {
				t.Errorf("zero %s not reported", f.name)
			}
		}
	})
}

func TestLimitsSet(t *testing.T) {
	for i, name := range LimitNames() {
		t.Run(name, func(t *testing.T) {
			var l Limits
			f := limitFields[i]
			err := l.Set(name, 12345)
			switch {
			case f.count != nil:
				if err != nil || *f.count(&l) != 12345 {
					t.Fatalf("Set: %v, value %d", err, *f.count(&l))
				}
				if err := l.Set(name, 1<<31); err == nil {
					t.Error("count above 2^31-1 accepted")
				}
				if *f.count(&l) != 12345 {
					t.Error("a refused Set changed the value")
				}
			case f.size != nil:
				if err != nil || *f.size(&l) != 12345 {
					t.Fatalf("Set: %v, value %d", err, *f.size(&l))
				}
				if err := l.Set(name, 1<<64-1); err != nil || *f.size(&l) != 1<<64-1 {
					t.Errorf("max size: %v", err)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), "fixed") {
					t.Fatalf("Set of fixed %s: %v", name, err)
				}
				if l != (Limits{}) {
					t.Error("a refused Set changed the limits")
				}
			}
		})
	}
	var l Limits
	for _, bad := range []string{"maxclients", "MaxClients", "", "maxWidgets"} {
		if err := l.Set(bad, 1); err == nil || !strings.Contains(err.Error(), "unknown limit") {
			t.Errorf("Set(%q): %v", bad, err)
		}
	}
}

func TestLimitsHelloEncoding(t *testing.T) {
	names := LimitNames()
	wantNames := strings.Fields(`maxEnvelopeBytes maxAttachments maxBatch maxClients maxServices
		maxTopics maxSubscriptionsPerClient maxSubscriptions maxActiveCallsPerClient maxServiceQueued
		maxServiceInFlight maxLatestInFlight maxBoundedQueued maxBoundedInFlight maxOwnersPerClient
		reservedOwnersPerClient maxControlFrames maxStoreBytes maxArtifactBytes maxRetainedBytes
		maxQueuedBytesPerClient maxControlBytes`)
	if !reflect.DeepEqual(names, wantNames) {
		t.Fatalf("LimitNames() = %v\nwant (Wire summary) %v", names, wantNames)
	}
	byteSizes := map[string]bool{"maxEnvelopeBytes": true, "maxStoreBytes": true, "maxArtifactBytes": true,
		"maxRetainedBytes": true, "maxQueuedBytesPerClient": true, "maxControlBytes": true}

	l := DefaultLimits()
	enc := l.AppendJSON(nil)
	if err := Valid(enc); err != nil {
		t.Fatal(err)
	}
	// encoding/json is the independent reader of the values; the order
	// comes from the tape.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(enc, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 22 {
		t.Errorf("%d members, want 22", len(raw))
	}
	if err := membersInOrder(enc, names); err != nil {
		t.Error(err)
	}
	for _, n := range names {
		v, ok := raw[n]
		if !ok {
			t.Errorf("%s missing", n)
			continue
		}
		if IsByteLimit(n) != byteSizes[n] {
			t.Errorf("IsByteLimit(%s) = %v", n, IsByteLimit(n))
		}
		if byteSizes[n] {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				t.Errorf("%s = %s, want a U64 string", n, v)
			} else if _, ok := ParseU64(s); !ok {
				t.Errorf("%s = %q is not a canonical U64", n, s)
			}
		} else {
			var i int64
			if err := json.Unmarshal(v, &i); err != nil || strings.ContainsAny(string(v), `".eE`) {
				t.Errorf("%s = %s, want a JSON integer", n, v)
			}
		}
	}
	if string(raw["maxEnvelopeBytes"]) != `"65536"` || string(raw["maxAttachments"]) != "32" || string(raw["maxBatch"]) != "64" {
		t.Errorf("fixed limits: %s %s %s", raw["maxEnvelopeBytes"], raw["maxAttachments"], raw["maxBatch"])
	}
	if IsByteLimit("maxWidgets") {
		t.Error("IsByteLimit of an unknown name")
	}
}

// membersInOrder checks obj's top-level keys are exactly names, in order.
func membersInOrder(obj []byte, names []string) error {
	got := membersOf(obj)
	if len(got) != len(names) {
		return &SyntaxError{Msg: "member count differs"}
	}
	for i, m := range got {
		if m.k != names[i] {
			return &SyntaxError{Offset: i, Msg: "member " + m.k + " where " + names[i] + " belongs"}
		}
	}
	return nil
}

func TestLimitsRoundTripThroughHelloOK(t *testing.T) {
	l := DefaultLimits()
	// Distinct values everywhere, and sizes beyond 2^53 that a float would
	// lose.
	for i, f := range limitFields {
		switch {
		case f.count != nil:
			*f.count(&l) = 1000 + i
		case f.size != nil:
			*f.size(&l) = 1<<63 + uint64(i)
		}
	}
	want := &HelloOK{RouterID: 1, ConnectionID: 2, SelectedMajor: 1, ContractDigest: ContractDigestValue(), Limits: l}
	var d Decoder
	env := decodeFrame(t, &d, AppendEnvelope(nil, headerFor(KindReply, OpHello, 1), &ReplyBody{Value: want}, nil))
	var got HelloOK
	if be, err := env.DecodeReply(&got); be != nil || err != nil {
		t.Fatal(be, err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("got %+v\nwant %+v", got.Limits, want.Limits)
	}

	// The decoder refuses a changed fixed limit, a wrong encoding, an
	// unknown or a missing member.
	base := membersOf(l.AppendJSON(nil))
	s, _ := shapeOf(OpHello)
	for name, lim := range map[string]members{
		"FixedChanged":    base.with("maxBatch", "65"),
		"EnvelopeChanged": base.with("maxEnvelopeBytes", `"65537"`),
		"EnvelopeNumber":  base.with("maxEnvelopeBytes", "65536"),
		"CountAsString":   base.with("maxClients", `"64"`),
		"CountZero":       base.with("maxClients", "0"),
		"SizeAsNumber":    base.with("maxStoreBytes", "1024"),
		"Unknown":         base.with("maxWidgets", "1"),
		"Missing":         base.without("maxControlBytes"),
	} {
		t.Run(name, func(t *testing.T) {
			v := membersOf(want.AppendJSON(nil)).with("limits", lim.String())
			frame := cmdEnvelope("bus.hello", `{"ok":true,"value":`+v.String()+`}`).
				with("kind", `"reply"`).with("id", `"bus-1"`).with("replyTo", `"msg-1"`).bytes()
			env := decodeFrame(t, &d, frame)
			be, err := env.DecodeReply(fresh(s.Reply))
			if be != nil {
				t.Fatal(be)
			}
			wantBodyRefusal(t, err, frame)
		})
	}
}
