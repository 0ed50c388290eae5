// Package bench holds go test benchmarks of flybus hot paths that span
// packages, with allocation and byte counts, measured beside the baselines
// they are judged against (encoding/json, raw Unix-socket ping-pong, copy).
package bench
