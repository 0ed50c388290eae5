// Package edge is flybus edge: a WebSocket gateway that serves chosen
// topics of a router to browsers, with a live viewer. It keeps one bus
// subscription per topic (latest, one in flight, replay) however many
// browsers watch, and sends each publication to each browser as one
// binary message, a JSON header then the wanted attachments' bytes,
// written from the artifact's read-only mapping. A browser that reads
// slowly skips publications (it is told how many); it never slows the bus
// or another browser. docs/edge.md is the protocol.
//
// The package is the command's (cmd/flybus edge), not a library: it may
// depend on what the executable does (coder/websocket, client_golang).
package edge
