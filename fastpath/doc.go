// Package fastpath holds the machine-dependent choices of the router's hot
// path, each with the measurement behind it. Today that is one choice: how
// many threads run Go code in a `flybus serve` process (RouterProcs). The
// other hot-path sizes (the frames a writer pulls at once, the reply
// buffers a connection keeps) live beside the code they bound, in
// package router.
package fastpath
