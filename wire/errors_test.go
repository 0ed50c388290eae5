package wire

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Error codes: the 16 wire spellings parse and print, and a *BusError
// matches with errors.Is against a bare code or another *BusError of the
// same code, and gives up its dispatch through errors.As, also wrapped.

var wireCodes = []struct {
	code ErrorCode
	name string
}{
	{ErrInvalidEnvelope, "INVALID_ENVELOPE"},
	{ErrVersionMismatch, "VERSION_MISMATCH"},
	{ErrNotAuthorized, "NOT_AUTHORIZED"},
	{ErrNoService, "NO_SERVICE"},
	{ErrTargetChanged, "TARGET_CHANGED"},
	{ErrBackpressure, "BACKPRESSURE"},
	{ErrCallGone, "CALL_GONE"},
	{ErrArtifactUnsealed, "ARTIFACT_UNSEALED"},
	{ErrArtifactGone, "ARTIFACT_GONE"},
	{ErrOwnerInvalid, "OWNER_INVALID"},
	{ErrQuotaExceeded, "QUOTA_EXCEEDED"},
	{ErrStoreFailure, "STORE_FAILURE"},
	{ErrRouterLost, "ROUTER_LOST"},
	{ErrConflict, "CONFLICT"},
	{ErrNoTopic, "NO_TOPIC"},
	{ErrArtifactMismatch, "ARTIFACT_MISMATCH"},
}

func TestParseErrorCode(t *testing.T) {
	all := AllErrorCodes()
	if len(all) != len(wireCodes) {
		t.Fatalf("AllErrorCodes() has %d codes, want %d", len(all), len(wireCodes))
	}
	for i, c := range wireCodes {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ParseErrorCode(c.name)
			if !ok || got != c.code {
				t.Fatalf("ParseErrorCode(%q) = %v, %v", c.name, got, ok)
			}
			if c.code.String() != c.name || c.code.Error() != c.name {
				t.Errorf("%d prints as %q / %q", c.code, c.code.String(), c.code.Error())
			}
			if all[i] != c.code {
				t.Errorf("AllErrorCodes()[%d] = %v", i, all[i])
			}
		})
	}
	for _, bad := range []string{"", "no_service", "NO SERVICE", "NO_SERVICE ", "OK", "ErrorCode(4)"} {
		if c, ok := ParseErrorCode(bad); ok {
			t.Errorf("ParseErrorCode(%q) = %v", bad, c)
		}
	}
	if s := ErrorCode(0).String(); s != "ErrorCode(0)" {
		t.Errorf("zero code prints %q", s)
	}
	if s := ErrorCode(200).String(); s != "ErrorCode(200)" {
		t.Errorf("out-of-range code prints %q", s)
	}
}

func TestBusErrorMatching(t *testing.T) {
	var err error = NewError(ErrNoService, Dispatched, "no service %q", "x")
	wrapped := fmt.Errorf("call failed: %w", err)

	for name, e := range map[string]error{"Direct": err, "Wrapped": wrapped} {
		t.Run(name, func(t *testing.T) {
			if !errors.Is(e, ErrNoService) {
				t.Error("not Is ErrNoService")
			}
			if errors.Is(e, ErrBackpressure) {
				t.Error("Is ErrBackpressure")
			}
			if !errors.Is(e, &BusError{Code: ErrNoService}) {
				t.Error("not Is another *BusError with the same code")
			}
			if errors.Is(e, &BusError{Code: ErrNoTopic, Dispatch: Dispatched}) {
				t.Error("Is a *BusError with another code")
			}
			var be *BusError
			if !errors.As(e, &be) || be.Dispatch != Dispatched || be.Code != ErrNoService {
				t.Fatalf("errors.As: %+v", be)
			}
			var code ErrorCode
			if !errors.As(e, &code) || code != ErrNoService {
				t.Errorf("errors.As to ErrorCode: %v", code)
			}
			if errors.As(e, new(*ProtocolError)) {
				t.Error("a *BusError is a *ProtocolError")
			}
		})
	}
}

func TestBusErrorText(t *testing.T) {
	cases := []struct {
		err  *BusError
		want string
	}{
		{NewError(ErrNoService, 0, "no service %q", "x"), `NO_SERVICE: no service "x"`},
		{NewError(ErrCallGone, DispatchUnknown, "gone"), `CALL_GONE: gone (it may have reached its target)`},
		{&BusError{Code: ErrRouterLost, Dispatch: Dispatched}, `ROUTER_LOST (it had reached its target)`},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	if s := Dispatch(0).String(); s != "Dispatch(0)" {
		t.Errorf("zero dispatch prints %q", s)
	}
	for _, d := range []Dispatch{NotDispatched, Dispatched, DispatchUnknown} {
		if got, ok := parseDispatchBytes([]byte(d.String())); !ok || got != d {
			t.Errorf("dispatch %v does not parse back", d)
		}
	}
	pe := &ProtocolError{Msg: "bad length"}
	if !strings.Contains(pe.Error(), "bad length") {
		t.Errorf("ProtocolError prints %q", pe.Error())
	}
}
