// Package router is the flybus router, embeddable in a program or run as
// flybus serve: a routing core written as a state machine with no
// goroutines, I/O or clock of its own (commands in; replies, deliveries,
// notices and effects out; core.go, rpc.go, pubsub.go, artifacts.go,
// lanes.go), and the thin shell around it of connection goroutines
// (shell.go), Unix and in-memory transports (listen.go, mempipe.go), policy
// (policy.go) and the artifact store's I/O (router.go).
package router
