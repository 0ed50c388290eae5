// Command interop is the Go peer of the Node client's interop tests (js/test)
// and benchmark (js/bench): small roles against a running router, each
// printing one JSON object per line on stdout so that the Node side can wait
// on what it says instead of on time.
//
//	interop consume --socket PATH --store DIR --topic T [--count N] [--client ID] [--await]
//	interop serve   --socket PATH --store DIR --name SERVICE [--client ID]
//	interop call    --socket PATH --store DIR --target SERVICE --method M --payload JSON [--frame FILE] [--client ID]
//	interop rpcbench --socket PATH [--n N]
//	interop produce --socket PATH --store DIR --topic T [--count N] [--hz HZ] [--size BYTES]
//
// consume prints {"ready":true} once subscribed (bounded; with --await it
// may subscribe before T is declared, and the line adds "topicIncarnation",
// "" while it waits; a refusal is {"end":CODE,"dispatch":D}), then per message
// {"seq":N,"payload":...,"bytes":N,"sha256":HEX,"digest":HEX|null} with the
// frame attachment read through a view, and at the end {"end":CODE,...}:
// "done" after --count messages, "SUBSCRIPTION_CLOSED" (its "error" names the
// router's reason), or a bus error code. serve registers SERVICE, prints {"ready":true,"incarnation":
// SVC}, answers "Echo" with {"got":PAYLOAD,"by":"go"} and "Digest" with the
// frame's sha256 and a reversed copy of it attached as "frame", until its
// stdin ends ({"end":"done"}) or the connection is lost ({"end":CODE}). call
// prints {"outcome":...,"responder":ID} (with "sha256" of an attached
// "frame"), or {"error":CODE,"dispatch":D} and exits 3. rpcbench registers an
// echo service and calls it from a second connection, printing
// {"n":N,"nsPerCall":X}. produce publishes --count frames of --size bytes
// (each with its sha256 digest) to T at --hz, as the 60 Hz frame schedule
// does, and prints {"published":N}.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: interop consume|serve|call|rpcbench [flags]")
		os.Exit(2)
	}
	role, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(role, flag.ExitOnError)
	socket := fs.String("socket", "", "the router's socket `PATH`")
	store := fs.String("store", "", "the router's store root `DIR`")
	id := fs.String("client", "go-"+role, "the client `ID`")
	topic := fs.String("topic", "", "the `TOPIC` to consume")
	count := fs.Int("count", 0, "stop after `N` messages (0: until the subscription ends)")
	name := fs.String("name", "go.echo", "the service `NAME` to register")
	target := fs.String("target", "", "the `SERVICE` to call")
	method := fs.String("method", "Echo", "the `METHOD` to call")
	payload := fs.String("payload", "{}", "the call's payload, a JSON object")
	frame := fs.String("frame", "", "attach `FILE` as the artifact \"frame\"")
	n := fs.Int("n", 2000, "rpcbench: `N` calls")
	hz := fs.Float64("hz", 60, "produce: frames per second")
	size := fs.Int("size", 640*480*4, "produce: `BYTES` per frame")
	await := fs.Bool("await", false, "consume: subscribe with AwaitTopic, before the topic is declared")
	_ = fs.Parse(args)

	ctx := context.Background()
	var err error
	switch role {
	case "consume":
		err = consume(ctx, *socket, *store, *id, *topic, *count, *await)
	case "serve":
		err = serve(ctx, *socket, *store, *id, *name)
	case "call":
		err = call(ctx, *socket, *store, *id, *target, *method, *payload, *frame)
	case "rpcbench":
		err = rpcbench(ctx, *socket, *n)
	case "produce":
		err = produce(ctx, *socket, *store, *id, *topic, *count, *hz, *size)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
}

var out = json.NewEncoder(os.Stdout)

func emit(v any) {
	if err := out.Encode(v); err != nil {
		os.Exit(1)
	}
}

// code names how an operation ended, as the Node tests compare it: the bus
// error code, or SUBSCRIPTION_CLOSED.
func code(err error) string {
	var be *wire.BusError
	switch {
	case errors.As(err, &be):
		return be.Code.String()
	case errors.Is(err, client.ErrSubscriptionClosed):
		return "SUBSCRIPTION_CLOSED"
	}
	return err.Error()
}

// dispatch is the dispatch of a bus error, "" for any other.
func dispatch(err error) string {
	var be *wire.BusError
	if errors.As(err, &be) {
		return be.Dispatch.String()
	}
	return ""
}

func dial(ctx context.Context, socket, store, id string) (*client.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.ConnectUnix(cctx, socket, client.Config{ClientID: id, StoreRoot: store})
}

func consume(ctx context.Context, socket, store, id, topic string, count int, await bool) error {
	c, err := dial(ctx, socket, store, id)
	if err != nil {
		return err
	}
	defer c.Close()
	opts := []client.SubscribeOption{client.Bounded()}
	if await {
		opts = append(opts, client.AwaitTopic())
	}
	sub, err := c.Subscribe(ctx, topic, opts...)
	if err != nil {
		emit(map[string]any{"end": code(err), "dispatch": dispatch(err)})
		return nil
	}
	defer sub.Close()
	if await {
		inc := ""
		if v := sub.TopicIncarnation(); v != 0 {
			inc = v.String()
		}
		emit(map[string]any{"ready": true, "topicIncarnation": inc})
	} else {
		emit(map[string]any{"ready": true})
	}
	for i := 0; count == 0 || i < count; i++ {
		msg, err := sub.Next(ctx)
		if err != nil {
			emit(map[string]any{"end": code(err), "error": err.Error()})
			return nil
		}
		line := map[string]any{"seq": msg.TopicSequence, "payload": msg.Payload}
		if a, err := msg.Artifact("frame"); err == nil {
			v, err := a.View(ctx)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(v.Bytes())
			line["bytes"] = len(v.Bytes())
			line["sha256"] = hex.EncodeToString(sum[:])
			line["digest"] = nil
			if d := a.Ref().Digest; d.Valid {
				line["digest"] = d.V.String()
			}
			v.Close()
			a.Close()
		}
		msg.Close()
		emit(line)
	}
	emit(map[string]any{"end": "done"})
	return nil
}

func serve(ctx context.Context, socket, store, id, name string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := dial(ctx, socket, store, id)
	if err != nil {
		return err
	}
	defer c.Close()
	svc, err := c.Register(ctx, name)
	if err != nil {
		emit(map[string]any{"end": code(err)})
		return nil
	}
	emit(map[string]any{"ready": true, "incarnation": svc.Incarnation()})
	go func() { // the end of stdin stops the service
		bufio.NewScanner(os.Stdin).Scan()
		cancel()
	}()
	err = svc.Serve(ctx, func(ctx context.Context, req *client.Request) {
		if err := answer(ctx, c, req); err != nil {
			fmt.Fprintln(os.Stderr, "interop:", err)
		}
	})
	if err != nil {
		emit(map[string]any{"end": code(err)})
		return nil
	}
	emit(map[string]any{"end": "done"})
	return nil
}

func answer(ctx context.Context, c *client.Client, req *client.Request) error {
	if req.Method != "Digest" {
		_, err := req.Reply(ctx, map[string]any{"got": req.Payload, "by": "go"})
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
	back := sha256.Sum256(data)
	reply, err := w.Seal(ctx, client.Digest(hex.EncodeToString(back[:])))
	if err != nil {
		return err
	}
	defer reply.Close()
	_, err = req.Reply(ctx, map[string]any{"sha256": hex.EncodeToString(sum[:]), "bytes": len(data), "by": "go"},
		client.Attach("frame", reply))
	return err
}

func call(ctx context.Context, socket, store, id, target, method, payload, frame string) error {
	c, err := dial(ctx, socket, store, id)
	if err != nil {
		return err
	}
	defer c.Close()
	var opts []client.CallOption
	if frame != "" {
		data, err := os.ReadFile(frame)
		if err != nil {
			return err
		}
		w, err := c.Allocate(ctx, int64(len(data)), "application/octet-stream")
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			w.Close()
			return err
		}
		a, err := w.Seal(ctx)
		if err != nil {
			return err
		}
		defer a.Close()
		opts = append(opts, client.Attach("frame", a))
	}
	res, err := c.CallAndWait(ctx, target, method, wire.RawJSON(payload), opts...)
	if err != nil {
		emit(map[string]any{"error": code(err), "dispatch": dispatch(err)})
		c.Close()
		os.Exit(3)
	}
	defer res.Close()
	line := map[string]any{"outcome": res.Outcome, "responder": res.Responder.ClientID}
	if a, err := res.Artifact("frame"); err == nil {
		v, err := a.View(ctx)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(v.Bytes())
		line["sha256"] = hex.EncodeToString(sum[:])
		v.Close()
		a.Close()
	}
	emit(line)
	return nil
}

func rpcbench(ctx context.Context, socket string, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := dial(ctx, socket, "", "go-bench-service")
	if err != nil {
		return err
	}
	defer srv.Close()
	svc, err := srv.Register(ctx, "go.bench.echo")
	if err != nil {
		return err
	}
	go func() {
		_ = svc.Serve(ctx, func(ctx context.Context, req *client.Request) {
			_, _ = req.Reply(ctx, map[string]any{"got": req.Payload})
		})
	}()
	caller, err := dial(ctx, socket, "", "go-bench-caller")
	if err != nil {
		return err
	}
	defer caller.Close()
	once := func(i int) error {
		res, err := caller.CallAndWait(ctx, "go.bench.echo", "Echo", map[string]int{"i": i}, client.Pin(svc.Incarnation()))
		if err != nil {
			return err
		}
		return res.Close()
	}
	for i := range 200 { // warm up
		if err := once(i); err != nil {
			return err
		}
	}
	start := time.Now()
	for i := range n {
		if err := once(i); err != nil {
			return err
		}
	}
	emit(map[string]any{"n": n, "nsPerCall": time.Since(start).Nanoseconds() / int64(n)})
	return nil
}

func produce(ctx context.Context, socket, store, id, topic string, count int, hz float64, size int) error {
	c, err := dial(ctx, socket, store, id)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.DeclareTopic(ctx, topic, wire.RetainNone); err != nil {
		return err
	}
	pixels := make([]byte, size)
	tick := time.NewTicker(time.Duration(float64(time.Second) / hz))
	defer tick.Stop()
	for i := range count {
		<-tick.C
		for j := 0; j < len(pixels); j += 4096 {
			pixels[j] = byte(i + j)
		}
		w, err := c.Allocate(ctx, int64(size), "image/x-rgba")
		if err != nil {
			return err
		}
		if _, err := w.Write(pixels); err != nil {
			w.Close()
			return err
		}
		sum := sha256.Sum256(pixels)
		a, err := w.Seal(ctx, client.Digest(hex.EncodeToString(sum[:])))
		if err != nil {
			return err
		}
		_, err = c.Publish(ctx, topic, map[string]int{"seq": i}, client.Attach("frame", a))
		a.Close()
		if err != nil {
			return err
		}
	}
	emit(map[string]any{"published": count})
	return nil
}
