// Package perf will hold the 60 Hz harness: 640x480 RGBA frames produced at
// 60 Hz on a latest topic to three consumers (one slow), with 1, 2 and 4
// agent services, measured against baselines taken in the same run.
package perf
