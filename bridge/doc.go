// Package bridge carries selected flybus topics, payloads and artifacts,
// between hosts through NATS, and keeps their history in JetStream.
//
// A Bridge is an ordinary client of its local router and of NATS. An
// export subscribes to a local topic and publishes every message it
// consumes (the payload and each artifact's bytes, with sizes and SHA-256
// digests in headers) to NATS, inline when it fits the server's
// max_payload and in ordered chunks otherwise. An import reassembles the
// frames of a subject, writes the artifacts into its own router's store,
// seals them with their digests (the router checks the bytes as it seals)
// and publishes to a local topic; a frame with a missing or bad chunk is
// dropped and counted, never published in part. A bounded import publishes
// every frame in order; a latest one assembles in memory and publishes the
// newest complete frame, so a slow local router makes it skip, not lag. An export may also store its frames
// in a JetStream stream; the bridge then answers History.Get and
// History.Range on a local RPC service with frames sealed from the stream.
//
// Config holds the strict JSON configuration (ParseConfig), Stats the
// counters; the flybus-bridge command runs one Bridge.
package bridge
