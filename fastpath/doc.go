// Package fastpath holds the machine-dependent choices of the router's hot
// path, each with the measurement behind it: how many threads run Go code
// in a `flybus serve` process (RouterProcs), how many frames a writer sends
// per write (WriteBatch), the spare reply buffers a connection keeps
// (FreeBodies, FreeBodyBytes), and the largest coalescing buffer it keeps
// between writes (KeepWriteBytes). The CPU's cache sizes, as cpuid reports
// them, were measured against and decide nothing (see KeepWriteBytes).
package fastpath
