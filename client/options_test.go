package client

import (
	"testing"

	"github.com/flybus/flybus/wire"
)

// Options are order-free and fill in each mode's defaults; what the
// program says is sent as said (the router judges it).
func TestSubscribeOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []SubscribeOption
		want subscribeOpts
	}{
		{"Default", nil, subscribeOpts{mode: wire.ModeLatest, queued: 1, inFlight: 2}},
		{"Latest/InFlight", []SubscribeOption{InFlight(1)}, subscribeOpts{mode: wire.ModeLatest, queued: 1, inFlight: 1}},
		{"Bounded", []SubscribeOption{Bounded()}, subscribeOpts{mode: wire.ModeBounded, queued: 64, inFlight: 16}},
		{"Bounded/AnyOrder", []SubscribeOption{Queued(8), InFlight(4), Bounded(), Replay()},
			subscribeOpts{mode: wire.ModeBounded, queued: 8, inFlight: 4, replay: true}},
		{"Latest/Queued", []SubscribeOption{Queued(2)}, subscribeOpts{mode: wire.ModeLatest, queued: 2, inFlight: 2}},
	} {
		if got := subscribeOptions(tc.opts); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := serviceOptions(nil); got != (serviceOpts{queued: 16, inFlight: 16}) {
		t.Errorf("service defaults %+v", got)
	}
	if got := serviceOptions([]ServiceOption{InFlight(1), Queued(4)}); got != (serviceOpts{queued: 4, inFlight: 1}) {
		t.Errorf("service options %+v", got)
	}
	o := callOptions([]CallOption{Pin(7), Attach("a", nil), Attach("b", nil)})
	if o.pin != 7 || len(o.atts) != 2 || o.atts[1].Name != "b" {
		t.Errorf("call options %+v", o)
	}
}

// A malformed digest is refused before the writer ends, so the program can
// seal again; a good one is parsed.
func TestSealOptions(t *testing.T) {
	if _, _, err := sealOptions([]SealOption{Digest("xyz")}); err == nil {
		t.Fatal("a malformed digest was accepted")
	}
	const hex = "0000000000000000000000000000000000000000000000000000000000000001"
	d, noWait, err := sealOptions([]SealOption{NoWait(), Digest(hex)})
	if err != nil || !d.Valid || !noWait || d.V.String() != hex {
		t.Fatalf("%v %v %v", d, noWait, err)
	}
	if d, noWait, err := sealOptions(nil); err != nil || d.Valid || noWait {
		t.Fatalf("defaults: %v %v %v", d, noWait, err)
	}
}
