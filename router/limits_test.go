package router_test

import (
	"testing"

	"github.com/flybus/flybus/wire"
)

// Row 9.2: the defaults are section 9's table, and hello reports them.
func TestDefaultLimitsAreTheTable(t *testing.T) {
	check := func(t *testing.T, where string, l wire.Limits) {
		t.Helper()
		const mib = 1 << 20
		want := []struct {
			name      string
			got, want uint64
		}{
			{"maxClients", uint64(l.MaxClients), 64},
			{"maxServices", uint64(l.MaxServices), 256},
			{"maxTopics", uint64(l.MaxTopics), 512},
			{"maxSubscriptionsPerClient", uint64(l.MaxSubscriptionsPerClient), 128},
			{"maxSubscriptions", uint64(l.MaxSubscriptions), 1024},
			{"maxActiveCallsPerClient", uint64(l.MaxActiveCallsPerClient), 64},
			{"maxServiceQueued", uint64(l.MaxServiceQueued), 16},
			{"maxServiceInFlight", uint64(l.MaxServiceInFlight), 16},
			{"maxLatestInFlight", uint64(l.MaxLatestInFlight), 2},
			{"maxBoundedQueued", uint64(l.MaxBoundedQueued), 64},
			{"maxBoundedInFlight", uint64(l.MaxBoundedInFlight), 16},
			{"maxOwnersPerClient", uint64(l.MaxOwnersPerClient), 256},
			{"maxStoreBytes", l.MaxStoreBytes, 512 * mib},
			{"maxArtifactBytes", l.MaxArtifactBytes, 128 * mib},
			{"maxQueuedBytesPerClient", l.MaxQueuedBytesPerClient, 1 * mib},
			{"maxControlFrames", uint64(l.MaxControlFrames), 128},
			{"maxControlBytes", l.MaxControlBytes, 1 * mib},
		}
		for _, w := range want {
			if w.got != w.want {
				t.Errorf("%s: %s is %d, the table says %d", where, w.name, w.got, w.want)
			}
		}
	}
	if wire.MaxEnvelopeBytes != 64*1024 {
		t.Errorf("maxEnvelopeBytes is %d, the table says 64 KiB", wire.MaxEnvelopeBytes)
	}
	check(t, "DefaultLimits", wire.DefaultLimits())
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		got := h.dial("probe").Info().Limits
		check(t, "hello", got)
		if got != wire.DefaultLimits() {
			t.Fatalf("hello reports %+v, defaults are %+v", got, wire.DefaultLimits())
		}
	})
}
