// Package wire is the flybus v1 wire protocol: scalar encodings, a strict
// JSON scanner, envelopes and every command, reply, delivery and notice
// body, u32-prefixed framing, the contract text and its digest, error codes
// and limits.
//
// Both ends of a connection use it. The router decodes every inbound frame
// through a Decoder, which keeps its scratch memory between frames so that a
// warm decoder does not allocate: serial identifiers (msg-7, call-3, dlv-12)
// become integers, names that repeat (topics, methods, content types) are
// interned, and opaque payloads stay as validated slices of the frame.
// Anything a Decoder returns that aliases the frame is documented as valid
// only until its next Decode.
//
// Where things are: the body types are declared in commands.go, replies.go,
// events.go, refs.go and envelope.go; their strict decoders and appenders
// are generated from the struct tags into codecs_gen.go by
// internal/wiregen (see its doc for how a tag becomes a codec), over the
// field readers of decoder.go and the appenders of encode.go. Written by
// hand are only what no member-by-member codec expresses: the envelope
// (whose id family depends on its kind), the reply wrapper (whose members
// depend on ok), Limits (members from a table, three fixed by the
// protocol) and RawJSON. After changing a body type, run go generate; a
// test fails until the generated file matches.
package wire

//go:generate go run github.com/flybus/flybus/internal/wiregen/cmd/wiregen
