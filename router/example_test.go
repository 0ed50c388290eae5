package router_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
)

// An embedded router with a closed policy: each client id is admitted with
// its own grants, one over an in-memory transport, one over a Unix socket
// bound to its id.
func ExampleRouter() {
	ctx := context.Background()
	policy := router.ClosedPolicy().
		Client("agent", router.Grants{Register: []router.Pattern{router.Exact("agent.echo")}}).
		Client("coordinator", router.Grants{Call: []router.Pattern{router.Prefix("agent.")}})
	r, err := router.New(router.Config{Policy: policy}) // no StoreRoot: a private one on /dev/shm
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(ctx) // connection.closing to every client, then the store is removed

	// The agent runs in this process: an in-memory transport bound to its id.
	nc, err := r.ConnectInMemoryAs("agent")
	if err != nil {
		log.Fatal(err)
	}
	agent, err := client.Connect(ctx, nc, client.Config{ClientID: "agent"})
	if err != nil {
		log.Fatal(err)
	}
	defer agent.Close()
	svc, err := agent.Register(ctx, "agent.echo")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for {
			req, err := svc.Next(ctx)
			if err != nil {
				return // the service or its client was closed
			}
			req.Reply(ctx, map[string]any{"echo": req.Payload, "caller": req.Caller.ClientID})
			req.Close()
		}
	}()

	// The coordinator is another process: a socket bound to its id (0600).
	dir, err := os.MkdirTemp("", "flybus-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "coordinator.sock")
	if _, err := r.ListenUnixAs(sock, "coordinator"); err != nil {
		log.Fatal(err)
	}
	coord, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "coordinator", StoreRoot: r.StoreRoot()})
	if err != nil {
		log.Fatal(err)
	}
	defer coord.Close()
	res, err := coord.CallAndWait(ctx, "agent.echo", "Echo", map[string]int{"x": 1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", res.Outcome)
	res.Close()

	// Grants are enforced: the agent may not call.
	_, err = agent.CallAndWait(ctx, "agent.echo", "Echo", nil)
	fmt.Println(err)
	// Output:
	// {"caller":"coordinator","echo":{"x":1}}
	// NOT_AUTHORIZED: no call grant for agent.echo
}
