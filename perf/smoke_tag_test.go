//go:build perfsmoke

package perf

// smokeByTag: built with -tags perfsmoke, TestSmoke runs.
const smokeByTag = true
