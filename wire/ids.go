package wire

import (
	"fmt"
	"strconv"
)

// Serial identifiers are "<prefix>-<U64>". On the wire they are strings; in
// Go they are integers of a distinct type per family, so that a delivery id
// cannot be passed where a call id is expected and so that decoding one costs
// no allocation.

// Family names one serial id family by its prefix.
type Family uint8

const (
	FamMsg      Family = iota + 1 // command envelope ids
	FamBus                        // router envelope ids
	FamConn                       // connection ids
	FamSvc                        // service incarnations
	FamTop                        // topic incarnations
	FamSub                        // subscription ids
	FamCall                       // call ids
	FamArtifact                   // artifact ids
	FamDelivery                   // delivery ids
	FamOwn                        // explicit holds and writers
)

var familyPrefix = [...]string{
	FamMsg: "msg-", FamBus: "bus-", FamConn: "conn-", FamSvc: "svc-", FamTop: "top-",
	FamSub: "sub-", FamCall: "call-", FamArtifact: "a-", FamDelivery: "dlv-", FamOwn: "own-",
}

// Prefix is the family's prefix including the dash.
func (f Family) Prefix() string {
	if int(f) < len(familyPrefix) && f != 0 {
		return familyPrefix[f]
	}
	return "?-"
}

// ParseSerialBytes parses b as "<prefix><canonical U64>" of family f.
func ParseSerialBytes(f Family, b []byte) (uint64, bool) {
	if f == 0 || int(f) >= len(familyPrefix) {
		return 0, false // "?-" is Prefix's placeholder for messages, not a spelling
	}
	p := familyPrefix[f]
	if len(b) <= len(p) || string(b[:len(p)]) != p {
		return 0, false
	}
	return ParseU64Bytes(b[len(p):])
}

// AppendSerial appends "<prefix><n>".
func AppendSerial(b []byte, f Family, n uint64) []byte {
	b = append(b, f.Prefix()...)
	return strconv.AppendUint(b, n, 10)
}

// FormatSerial returns "<prefix><n>".
func FormatSerial(f Family, n uint64) string { return string(AppendSerial(nil, f, n)) }

// Each family gets a named type with a String method.
type (
	MsgID      uint64 // msg-<n>
	BusID      uint64 // bus-<n>
	ConnID     uint64 // conn-<n>
	ServiceInc uint64 // svc-<n>
	TopicInc   uint64 // top-<n>
	SubID      uint64 // sub-<n>
	CallID     uint64 // call-<n>
	ArtifactID uint64 // a-<n>
	DeliveryID uint64 // dlv-<n>
	HoldID     uint64 // own-<n>
)

func (x MsgID) String() string      { return FormatSerial(FamMsg, uint64(x)) }
func (x BusID) String() string      { return FormatSerial(FamBus, uint64(x)) }
func (x ConnID) String() string     { return FormatSerial(FamConn, uint64(x)) }
func (x ServiceInc) String() string { return FormatSerial(FamSvc, uint64(x)) }
func (x TopicInc) String() string   { return FormatSerial(FamTop, uint64(x)) }
func (x SubID) String() string      { return FormatSerial(FamSub, uint64(x)) }
func (x CallID) String() string     { return FormatSerial(FamCall, uint64(x)) }
func (x ArtifactID) String() string { return FormatSerial(FamArtifact, uint64(x)) }
func (x DeliveryID) String() string { return FormatSerial(FamDelivery, uint64(x)) }
func (x HoldID) String() string     { return FormatSerial(FamOwn, uint64(x)) }

// OwnerID names an ownership root held by one connection: either a delivery
// (dlv-<n>) or an explicit hold or writer (own-<n>). The two families have
// separate watermarks.
type OwnerID struct {
	Delivery bool // true: dlv-<N>; false: own-<N>
	N        uint64
}

// DeliveryOwner and HoldOwner build owner ids.
func DeliveryOwner(d DeliveryID) OwnerID { return OwnerID{Delivery: true, N: uint64(d)} }
func HoldOwner(h HoldID) OwnerID         { return OwnerID{N: uint64(h)} }

func (o OwnerID) family() Family {
	if o.Delivery {
		return FamDelivery
	}
	return FamOwn
}

func (o OwnerID) String() string { return FormatSerial(o.family(), o.N) }

// ParseOwnerIDBytes accepts dlv-<n> or own-<n>.
func ParseOwnerIDBytes(b []byte) (OwnerID, bool) {
	if n, ok := ParseSerialBytes(FamDelivery, b); ok {
		return OwnerID{Delivery: true, N: n}, true
	}
	n, ok := ParseSerialBytes(FamOwn, b)
	return OwnerID{N: n}, ok
}

// Tag is the 64-bit value shared by a router incarnation's routerId
// (router-<16 hex>) and storeId (store-<16 hex>).
type (
	RouterID uint64
	StoreID  uint64
)

func appendTag(b []byte, prefix string, v uint64) []byte {
	b = append(b, prefix...)
	for i := 60; i >= 0; i -= 4 {
		b = append(b, hexDigits[v>>uint(i)&15])
	}
	return b
}

func parseTag(prefix string, b []byte) (uint64, bool) {
	if len(b) != len(prefix)+16 || string(b[:len(prefix)]) != prefix {
		return 0, false
	}
	var v uint64
	for _, c := range b[len(prefix):] {
		d, ok := unhex(c)
		if !ok {
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

func (r RouterID) String() string { return string(appendTag(nil, "router-", uint64(r))) }
func (s StoreID) String() string  { return string(appendTag(nil, "store-", uint64(s))) }

// ParseRouterID and ParseStoreID parse the tagged forms.
func ParseRouterID(s string) (RouterID, bool) {
	v, ok := parseTag("router-", []byte(s))
	return RouterID(v), ok
}

func ParseStoreID(s string) (StoreID, bool) {
	v, ok := parseTag("store-", []byte(s))
	return StoreID(v), ok
}

// Opt is an optional value: the wire's `T | null`.
type Opt[T any] struct {
	Valid bool
	V     T
}

// Some returns a present value.
func Some[T any](v T) Opt[T] { return Opt[T]{Valid: true, V: v} }

func (o Opt[T]) String() string {
	if !o.Valid {
		return "null"
	}
	return fmt.Sprint(o.V)
}
