package router_test

import (
	"strconv"
	"testing"

	"github.com/flybus/flybus/wire"
)

// The router remembers the last incarnation of at most RememberedClients
// disconnected ids: the most recent ones still refuse that incarnation,
// the ones idle longest are forgotten (their records go, so a router that
// serves a fresh id per tool run stays bounded), and a live client's
// record is never dropped.
func TestClientRecordsAreBounded(t *testing.T) {
	cfg := open()
	cfg.RememberedClients = 2
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		hello := func(id, inc string) *wire.BusError {
			t.Helper()
			r := newRaw(t, h.conn(""))
			r.command(wire.OpHello, &wire.Hello{ClientID: id, ClientIncarnation: inc, SupportedMajors: []uint32{1}})
			be := r.reply(&wire.HelloOK{})
			r.nc.Close()
			waitFor(t, id+" gone", func() bool { return h.r.Stats().Connections == 1 })
			return be
		}
		live := newRaw(t, h.conn(""))
		live.hello("rec-live")
		// rec-1 comes back once: the stale queue entry of its first
		// disconnection must not make it forgotten early or twice.
		used := map[string]int{}
		for _, id := range []string{"rec-0", "rec-1", "rec-1", "rec-2", "rec-3"} {
			used[id]++
			if be := hello(id, "inc-"+strconv.Itoa(used[id])); be != nil {
				t.Fatalf("%s: %v", id, be)
			}
		}
		// Idle in order rec-0, rec-1, rec-2, rec-3; the two most recent are
		// remembered, with the live one.
		if n := h.r.Stats().ClientRecords; n != 3 {
			t.Fatalf("%d client records, want 3 (two idle, one live)", n)
		}
		for _, id := range []string{"rec-2", "rec-3"} {
			if be := hello(id, "inc-"+strconv.Itoa(used[id])); be == nil || be.Code != wire.ErrNotAuthorized {
				t.Errorf("%s offering its last incarnation again: %v, want NOT_AUTHORIZED", id, be)
			}
		}
		for _, id := range []string{"rec-0", "rec-1"} {
			if be := hello(id, "inc-"+strconv.Itoa(used[id])); be != nil {
				t.Errorf("%s, forgotten, offering its last incarnation: %v, want accepted", id, be)
			}
		}
		// The forgotten two came back and left: now they are the most
		// recent, and rec-2 and rec-3 are forgotten in turn.
		if n := h.r.Stats().ClientRecords; n != 3 {
			t.Errorf("%d client records after the forgotten ones came back, want 3", n)
		}
		if be := hello("rec-2", "inc-"+strconv.Itoa(used["rec-2"])); be != nil {
			t.Errorf("rec-2, forgotten now: %v", be)
		}
		r := newRaw(t, h.conn(""))
		r.command(wire.OpHello, &wire.Hello{ClientID: "rec-live", ClientIncarnation: "inc-other", SupportedMajors: []uint32{1}})
		if be := r.reply(&wire.HelloOK{}); be == nil || be.Code != wire.ErrConflict {
			t.Errorf("a second connection of the live id: %v, want CONFLICT", be)
		}
	})
}
