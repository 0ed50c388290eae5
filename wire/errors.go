package wire

import "fmt"

// ErrorCode is a transport error code, one of the codes docs/protocol.md
// lists under Errors. An ErrorCode is itself an error so that
// errors.Is(err, wire.ErrNoService) works on any *BusError.
type ErrorCode uint8

const (
	ErrInvalidEnvelope ErrorCode = iota + 1
	ErrVersionMismatch
	ErrNotAuthorized
	ErrNoService
	ErrTargetChanged
	ErrBackpressure
	ErrCallGone
	ErrArtifactUnsealed
	ErrArtifactGone
	ErrOwnerInvalid
	ErrQuotaExceeded
	ErrStoreFailure
	ErrRouterLost
	ErrConflict
	ErrNoTopic
	ErrArtifactMismatch
)

var codeNames = [...]string{
	ErrInvalidEnvelope:  "INVALID_ENVELOPE",
	ErrVersionMismatch:  "VERSION_MISMATCH",
	ErrNotAuthorized:    "NOT_AUTHORIZED",
	ErrNoService:        "NO_SERVICE",
	ErrTargetChanged:    "TARGET_CHANGED",
	ErrBackpressure:     "BACKPRESSURE",
	ErrCallGone:         "CALL_GONE",
	ErrArtifactUnsealed: "ARTIFACT_UNSEALED",
	ErrArtifactGone:     "ARTIFACT_GONE",
	ErrOwnerInvalid:     "OWNER_INVALID",
	ErrQuotaExceeded:    "QUOTA_EXCEEDED",
	ErrStoreFailure:     "STORE_FAILURE",
	ErrRouterLost:       "ROUTER_LOST",
	ErrConflict:         "CONFLICT",
	ErrNoTopic:          "NO_TOPIC",
	ErrArtifactMismatch: "ARTIFACT_MISMATCH",
}

// AllErrorCodes lists every code in declaration order.
func AllErrorCodes() []ErrorCode {
	out := make([]ErrorCode, 0, len(codeNames)-1)
	for c := ErrInvalidEnvelope; int(c) < len(codeNames); c++ {
		out = append(out, c)
	}
	return out
}

// String is the wire spelling, e.g. "NO_SERVICE".
func (c ErrorCode) String() string {
	if c != 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("ErrorCode(%d)", uint8(c))
}

func (c ErrorCode) Error() string { return c.String() }

// ParseErrorCode maps a wire spelling to its code.
func ParseErrorCode(s string) (ErrorCode, bool) { return parseErrorCodeBytes([]byte(s)) }

func parseErrorCodeBytes(b []byte) (ErrorCode, bool) {
	for c := ErrInvalidEnvelope; int(c) < len(codeNames); c++ {
		if codeNames[c] == string(b) {
			return c, true
		}
	}
	return 0, false
}

// Dispatch says whether a failed operation may have reached its target.
type Dispatch uint8

const (
	NotDispatched Dispatch = iota + 1
	Dispatched
	DispatchUnknown
)

var dispatchNames = [...]string{NotDispatched: "not-dispatched", Dispatched: "dispatched", DispatchUnknown: "unknown"}

func (d Dispatch) String() string {
	if d != 0 && int(d) < len(dispatchNames) {
		return dispatchNames[d]
	}
	return fmt.Sprintf("Dispatch(%d)", uint8(d))
}

func parseDispatchBytes(b []byte) (Dispatch, bool) {
	for d := NotDispatched; int(d) < len(dispatchNames); d++ {
		if dispatchNames[d] == string(b) {
			return d, true
		}
	}
	return 0, false
}

// MaxErrorMessageLen bounds the message of an error body.
const MaxErrorMessageLen = 1024

// BusError is a refusal or failure reported by the bus: a reply's error, a
// call.failed notice, a connection.closing notice, or a local connection
// loss. Match codes with errors.Is(err, wire.ErrBackpressure) and read the
// dispatch with errors.As.
type BusError struct {
	Code     ErrorCode
	Message  string
	Dispatch Dispatch
}

// NewError builds a BusError; dispatch defaults to not-dispatched.
func NewError(code ErrorCode, dispatch Dispatch, format string, args ...any) *BusError {
	if dispatch == 0 {
		dispatch = NotDispatched
	}
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &BusError{Code: code, Message: msg, Dispatch: dispatch}
}

// Error reads as a sentence: the code, the message, and a note on dispatch
// only when the operation may have reached its target (the default,
// not-dispatched, is safe to retry and says nothing).
func (e *BusError) Error() string {
	s := e.Code.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	switch e.Dispatch {
	case Dispatched:
		s += " (it had reached its target)"
	case DispatchUnknown:
		s += " (it may have reached its target)"
	}
	return s
}

// Unwrap exposes the code, so errors.Is matches against ErrorCode values.
func (e *BusError) Unwrap() error { return e.Code }

// Is also matches another *BusError with the same code, so sentinel
// *BusError values work as well as bare codes.
func (e *BusError) Is(target error) bool {
	t, ok := target.(*BusError)
	return ok && t.Code == e.Code
}

// ProtocolError is a frame- or envelope-level violation. The peer that
// detects one sends connection.closing (the router does; the SDK just closes)
// and closes the connection; no reply is possible.
type ProtocolError struct {
	Msg string
}

func (e *ProtocolError) Error() string { return "flybus protocol violation: " + e.Msg }

func protoErr(msg string) error { return &ProtocolError{Msg: msg} }
