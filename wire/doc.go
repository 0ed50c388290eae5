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
package wire
