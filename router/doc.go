// Package router will hold the flybus router: a routing core written as a
// state machine with no goroutines, I/O or clock of its own (commands in;
// replies, deliveries, notices and effects out), and the thin shell around it
// of connection goroutines, Unix and in-memory listeners and artifact I/O.
package router
