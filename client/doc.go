// Package client is the flybus SDK: one Client per connection to a router
// serves RPC (Register, Call, Request, Responder, PendingCall), pub/sub
// (DeclareTopic, Subscribe, Publish, Message) and artifacts (Allocate,
// ArtifactWriter, Artifact, ArtifactView). Service.Serve and
// Subscription.Receive run a handler per request or message and close each
// when its handler returns.
//
// Every handle that owns something on the router has an idempotent Close,
// and refuses use after it with ErrHandleClosed. Artifacts taken from a
// message, request or result share its delivery: the delivery (and the
// credit it holds) is consumed when all of them are closed. Errors tell
// apart a closed handle (ErrHandleClosed), a closed client (ErrClosed) and
// a lost router (wire.ErrRouterLost). A handle garbage-collected without
// Close is released by a safety net and counted in Stats().Leaked. A
// subscription whose in-flight credits the program has held unconsumed for
// longer than Config.HeldCreditsWarnAfter is logged at once, without
// waiting for a collection; Config.TrackHandles (or FLYBUS_TRACK_HANDLES=1)
// makes both warnings say where the open handles were taken.
//
// The API follows three conventions. A Client is configured once, by the
// Config given to Connect; every operation with settings takes them as a
// variadic list of options after its required arguments (Subscribe with
// Bounded, Queued, InFlight, Replay; Register with Queued, InFlight; Seal
// with Digest, NoWait; Call with Pin and its attachments), each documenting
// its default. Every call that can wait takes a context first. Handles
// name their identity alike: ID for the bus id a handle has (Subscription,
// PendingCall), Name and Incarnation for a service; counters are read
// from Stats.
package client
