// Package compare measures flybus's peers on the 60 Hz schedule of the perf
// harness (github.com/flybus/flybus/perf) and plots the three side by side.
//
// The peers are an embedded NATS server (nats-server/v2 in a child process,
// nats.go clients over loopback) and the "direct" design flybus replaces: a
// producer writing every frame to every consumer over its own Unix socket.
// Both runs write a JSON Result whose histograms use perf.Hist's encoding,
// so the plot command reads the three files the same way.
//
// This is a nested module (its own go.mod) so that the main module keeps
// its dependency list; `go test ./...` in the main module does not reach it.
package compare
