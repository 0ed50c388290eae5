// Package fastpath will hold hot-path pieces chosen by what the CPU offers:
// the copy behind the seal's fallback path, pooled envelope buffers, and the
// machine description that perf reports print. Every choice is measured.
package fastpath
