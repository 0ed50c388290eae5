// Package mcap writes and reads MCAP files (https://mcap.dev/spec, major
// version 0): the container that ROS 2 bags and Foxglove use for
// timestamped pub/sub messages.
//
// The Writer streams: a chunk's record is written in place with its header
// patched when the chunk ends, so a message's bytes go from the caller's
// slice (a mapped artifact, say) to the file without another copy, and a
// process that dies mid-chunk leaves a file whose complete chunks are still
// readable. Finished files carry message indexes, a summary (schemas,
// channels, statistics, chunk and metadata indexes), summary offsets and
// CRCs of the chunks, the data section and the summary.
//
// The Reader parses a file held in memory, normally a read-only mapping
// (Open). Messages iterates the data section in file order and Summary reads
// the summary through the footer without touching the data. Bad input (a
// truncated, corrupt or foreign file, a CRC mismatch) is reported as an
// *Error naming the file and the offset; the reader never panics on it, and
// a chunk is checked whole before any of its messages is returned.
//
// Compression is "" (none) or "zstd"; lz4 chunks are reported as
// unsupported.
package mcap
