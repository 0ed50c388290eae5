// Package router is the flybus router, to embed in a program (New, then
// ListenUnix or ConnectInMemory) or to run as flybus serve. It moves RPC
// calls, topic publications and artifact references between the clients
// that connect to it, enforces each client's grants (Policy) and the bus's
// limits, and owns the artifact store: it hands out staging space, seals
// what producers wrote and collects each artifact after its last owner
// lets go. Stats and Details report what it holds; Shutdown tells every
// client and waits for them to go.
package router

// How it is built: a routing core that is a state machine with no
// goroutines, I/O or clock of its own (core.go, rpc.go, pubsub.go,
// artifacts.go, lanes.go; every input goes through step), and a thin shell
// around it of connection goroutines (shell.go), transports (listen.go,
// mempipe.go) and the store's I/O (router.go).
