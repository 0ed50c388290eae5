// Package record records flybus publications to MCAP files and plays them
// back.
//
// A Recorder writes what subscriptions deliver: each publication's payload
// and the bytes of every artifact it carries, with its topic, incarnation,
// sequence, coalesced count and receive time. Uncompressed, an artifact's
// bytes go from its read-only mapping to the file in one write. A Reader
// iterates a recording's publications in order, across the parts of a
// split recording as one stream; a Player publishes them through a Client
// at the recorded pace, rendering each artifact straight into the store.
// Info reads a file's summary without reading its data.
//
// The files are standard MCAP (package mcap); docs/recording.md describes
// their channels and messages for readers that do not use flybus.
package record
