//go:build !perfsmoke

package perf

// smokeByTag: without -tags perfsmoke, TestSmoke runs only when
// FLYBUS_PERF_SMOKE=1.
const smokeByTag = false
