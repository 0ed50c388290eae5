// Command goservice is the Go peer of the Python package's tests: it
// connects to a running router and serves one service whose replies show
// that Go answered. It prints "ready" once registered and serves until its
// stdin ends.
//
//	goservice --socket PATH --store DIR --name SERVICE
//
// Method "Echo" answers {"got": PAYLOAD, "by": "go"}; method "Digest"
// answers {"sha256": HEX, "bytes": N} for the attachment named "frame",
// read through a view, and replies with a frame of its own attached, the
// reversed bytes, as "frame".
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

func main() {
	socket := flag.String("socket", "", "the router's socket `PATH`")
	store := flag.String("store", "", "the router's store root `DIR`")
	name := flag.String("name", "go.echo", "the service `NAME` to register")
	flag.Parse()
	if err := run(*socket, *store, *name); err != nil {
		fmt.Fprintln(os.Stderr, "goservice:", err)
		os.Exit(1)
	}
}

func run(socket, store, name string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.ConnectUnix(ctx, socket, client.Config{ClientID: "goservice", StoreRoot: store})
	if err != nil {
		return err
	}
	defer c.Close()
	svc, err := c.Register(ctx, name)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	go func() { // the end of stdin stops the service
		bufio.NewScanner(os.Stdin).Scan()
		cancel()
	}()
	return svc.Serve(ctx, func(ctx context.Context, req *client.Request) {
		if err := answer(ctx, c, req); err != nil {
			fmt.Fprintln(os.Stderr, "goservice:", err)
		}
	})
}

func answer(ctx context.Context, c *client.Client, req *client.Request) error {
	if req.Method != "Digest" {
		var payload json.RawMessage
		if err := req.Decode(&payload); err != nil {
			return err
		}
		_, err := req.Reply(ctx, map[string]any{"got": payload, "by": "go"})
		return err
	}
	a, err := req.Artifact("frame")
	if err != nil {
		return err
	}
	defer a.Close()
	v, err := a.View(ctx)
	if err != nil {
		return err
	}
	data := slices.Clone(v.Bytes())
	v.Close()
	sum := sha256.Sum256(data)
	slices.Reverse(data)
	w, err := c.Allocate(ctx, int64(len(data)), "application/octet-stream")
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return err
	}
	out, err := w.Seal(ctx)
	if err != nil {
		return err
	}
	defer out.Close()
	_, err = req.Reply(ctx, wire.RawJSON(fmt.Sprintf(`{"sha256":%q,"bytes":%d}`, hex.EncodeToString(sum[:]), len(data))),
		client.Attach("frame", out))
	return err
}
