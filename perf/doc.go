// Package perf is the 60 Hz harness that checks the performance targets of
// docs/design.md.
//
// One run measures its own baselines first (a copy of a frame, a raw
// Unix-socket ping-pong of 300 bytes over one and two hops, a pwrite of a
// frame into a fresh fallocated file of the store, and a map, touch and
// unmap of a frame-sized file of the store), then runs one schedule per
// agent count against one router: 640x480 RGBA frames (1,228,800 bytes)
// produced at 60 Hz, each allocated, filled, sealed and published on a
// topic without retention to three latest-mode consumers (the third takes
// 40 ms per frame) and attached to a call to every agent service. Every
// latency is kept sample by sample; the report prints p50/p95/p99 beside
// the matching baseline, the Rust crate's figures and the targets of
// docs/design.md.
//
// The router runs as its own process by default (`flybus serve`, measured
// through /proc and its /metrics endpoint) or embedded in the harness
// (router.New; its CPU cannot then be told apart from the clients').
//
// Main is the command-line entry point behind `flybus perf`; Run is the
// same harness as an API. The schedule's workload (FramePattern, Touch)
// and its measures of a process (ProcessCPU, SelfCPU, ReadMemory,
// ResetPeakRSS, ErrorLog) are exported too, so that bench/compare runs
// its peers on the same frames and measures them alike.
package perf
