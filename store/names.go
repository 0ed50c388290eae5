package store

import "crypto/rand"

// Files in a store directory, all flat:
//
//	.flybus-store        the marker, held under flock by the live router
//	.flybus-store.new    the marker before it is locked (never swept)
//	stage-<16 hex>       a staging file, prepared or handed out
//	sealed-<16 hex>      the sealed artifact made from the staging file
//	copy-<16 hex>        the fresh inode a copying seal is writing
//	slot-<16 hex>        a slot of the pool mode, reused across generations
//
// The hex is a per-store sequence number, so no name is ever issued twice in
// an incarnation and every staging file is a fresh inode.
const (
	markerName    = ".flybus-store"
	markerNewName = ".flybus-store.new"
)

type kind uint8

const (
	kindNone kind = iota
	kindStaging
	kindSealed
	kindCopy
	kindSlot
)

var prefixes = [...]string{
	kindStaging: "stage-",
	kindSealed:  "sealed-",
	kindCopy:    "copy-",
	kindSlot:    slotPrefix,
}

const hexDigits = "0123456789abcdef"

// fileName returns the name of the file of kind k for sequence number seq.
func fileName(k kind, seq uint64) string {
	p := prefixes[k]
	b := make([]byte, len(p)+16)
	copy(b, p)
	for i := len(b) - 1; i >= len(p); i-- {
		b[i] = hexDigits[seq&0xf]
		seq >>= 4
	}
	return string(b)
}

// parseName returns the kind and sequence number of a name this store
// issues, or kindNone.
func parseName(name string) (kind, uint64) {
	for k := kindStaging; k <= kindSlot; k++ {
		p := prefixes[k]
		if len(name) != len(p)+16 || name[:len(p)] != p {
			continue
		}
		if seq, ok := parseHex16(name[len(p):]); ok {
			return k, seq
		}
	}
	return kindNone, 0
}

// parseHex16 parses exactly 16 lowercase hex digits.
func parseHex16(s string) (uint64, bool) {
	if len(s) != 16 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | uint64(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// ValidStoreID reports whether id has the form of a store id:
// "store-" followed by 16 lowercase hex digits.
func ValidStoreID(id string) bool {
	const p = "store-"
	if len(id) != len(p)+16 || id[:len(p)] != p {
		return false
	}
	_, ok := parseHex16(id[len(p):])
	return ok
}

// NewID returns a fresh random store id.
func NewID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails; see crypto/rand.Read
	id := []byte("store-0000000000000000")
	for i, c := range b {
		id[6+2*i] = hexDigits[c>>4]
		id[7+2*i] = hexDigits[c&0xf]
	}
	return string(id)
}

// IsSlotPath reports whether a read location names a slot of a pooled
// store: a file reused across generations, which a consumer may keep
// mapped while the connection lives.
func IsSlotPath(relPath string) bool {
	k, _ := parseName(relPath)
	return k == kindSlot
}
