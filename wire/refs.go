package wire

import "strconv"

// Shared shapes: references, attachments, locations, identities and the
// small enums that several bodies use.

// Location is a private grant naming a file beneath the client's configured
// store root: <root>/<storeId>/<relativePath>. It never appears in
// application bodies.
type Location struct {
	StoreID      StoreID `json:"storeId"`
	RelativePath string  `json:"relativePath" wire:"RelPath"`
}

// MaxRelPathLen bounds a location's relative path.
const MaxRelPathLen = 255

// ValidRelPathBytes reports whether b is a relative, slash-separated path of
// [A-Za-z0-9._-] components, none empty, "." or "..".
func ValidRelPathBytes(b []byte) bool {
	if len(b) == 0 || len(b) > MaxRelPathLen {
		return false
	}
	start := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != '/' {
			c := b[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
			continue
		}
		comp := b[start:i]
		if len(comp) == 0 || string(comp) == "." || string(comp) == ".." {
			return false
		}
		start = i + 1
	}
	return true
}

// Allocation is an unsealed artifact as artifact.allocate issues it: its
// id and generation, and the writer's owner id (own-<n>), which only the
// allocating connection holds. AllocateOK and Seal embed it, so its members
// are theirs: a writer seals with Seal{Allocation: ok.Allocation}.
type Allocation struct {
	ArtifactID ArtifactID `json:"artifactId"`
	Generation uint64     `json:"generation" wire:"U64"`
	OwnerID    OwnerID    `json:"ownerId"`
}

// Identity is a participant as the router authenticated it.
type Identity struct {
	ClientID          string `json:"clientId" wire:"Id"`
	ClientIncarnation string `json:"clientIncarnation" wire:"Id"`
}

// The small enums are one byte on the Go side and one of a few strings on
// the wire; each names table is indexed by value, 0 unused (the zero value
// is never valid), and is what the generated decoders match against.

// Retention is a topic's retained setting.
type Retention uint8

const (
	RetainNone Retention = iota + 1
	RetainLatest
)

// Mode is a subscription mode.
type Mode uint8

const (
	ModeLatest Mode = iota + 1
	ModeBounded
)

// CancelState is rpc.cancel's complete result enum.
type CancelState uint8

const (
	CancelledBeforeDispatch CancelState = iota + 1
	ExecutionUnknown
	Completed
	CallGoneState
)

var (
	retentionNames = [...]string{RetainNone: "none", RetainLatest: "latest"}
	modeNames      = [...]string{ModeLatest: "latest", ModeBounded: "bounded"}
	cancelNames    = [...]string{
		CancelledBeforeDispatch: "cancelled-before-dispatch", ExecutionUnknown: "execution-unknown",
		Completed: "completed", CallGoneState: "call-gone",
	}
)

func (r Retention) String() string   { return enumString(retentionNames[:], uint8(r), "Retention") }
func (m Mode) String() string        { return enumString(modeNames[:], uint8(m), "Mode") }
func (c CancelState) String() string { return enumString(cancelNames[:], uint8(c), "CancelState") }

// ParseRetention reads a retention by its wire spelling ("none" or
// "latest"), as flags and config files give it.
func ParseRetention(s string) (Retention, bool) {
	for i, n := range retentionNames {
		if i != 0 && n == s {
			return Retention(i), true
		}
	}
	return 0, false
}

// enumString is v's wire spelling, or Type(v) for a value out of range.
func enumString(names []string, v uint8, typ string) string {
	if v != 0 && int(v) < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}
