package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// openRouter starts an embedded router that admits every client.
func openRouter() *router.Router {
	r, err := router.New(router.Config{Policy: router.OpenPolicy()})
	if err != nil {
		log.Fatal(err)
	}
	return r
}

// connect dials an embedded router in memory. Over a Unix socket the same
// client comes from client.ConnectUnix(ctx, path, client.Config{ClientID: id,
// StoreRoot: dir}), where dir is the router's store root (flybus serve --store).
func connect(ctx context.Context, r *router.Router, id string) *client.Client {
	nc, err := r.ConnectInMemory()
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Connect(ctx, nc, client.Config{ClientID: id})
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// counter answers Counter.Add until its service or client is closed.
// Serve closes each request when the handler returns, which consumes it:
// the service's credit returns.
func counter(ctx context.Context, svc *client.Service) {
	total := 0
	err := svc.Serve(ctx, func(ctx context.Context, req *client.Request) {
		var in struct{ N int }
		if err := req.Decode(&in); err == nil {
			total += in.N
		}
		if _, err := req.Reply(ctx, map[string]int{"total": total}); err != nil {
			log.Print(err)
		}
	})
	if err != nil {
		log.Print(err) // the router went away
	}
}

func ExampleClient_Call() {
	ctx := context.Background()
	r := openRouter()
	defer r.Shutdown(ctx)

	agent := connect(ctx, r, "agent")
	defer agent.Close()
	svc, err := agent.Register(ctx, "agent.counter")
	if err != nil {
		log.Fatal(err)
	}
	go counter(ctx, svc) // a service answers concurrently with its callers

	caller := connect(ctx, r, "caller")
	defer caller.Close()
	for _, n := range []int{2, 3} {
		p, err := caller.Call(ctx, "agent.counter", "Counter.Add", map[string]int{"n": n}, client.Pin(svc.Incarnation()))
		if err != nil {
			log.Fatal(err)
		}
		res, err := p.Result(ctx)
		if err != nil {
			log.Fatal(err)
		}
		var out struct{ Total int }
		if err := res.Decode(&out); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("added %d: total %d, answered by %s\n", n, out.Total, res.Responder.ClientID)
		res.Close()
		p.Close()
	}
	// Output:
	// added 2: total 2, answered by agent
	// added 3: total 5, answered by agent
}

func ExampleClient_Subscribe() {
	ctx := context.Background()
	r := openRouter()
	defer r.Shutdown(ctx)
	bus := connect(ctx, r, "observer")
	defer bus.Close()

	if _, err := bus.DeclareTopic(ctx, "session.snapshots", wire.RetainLatest); err != nil {
		log.Fatal(err)
	}
	if _, err := bus.Publish(ctx, "session.snapshots", map[string]int{"step": 1}); err != nil {
		log.Fatal(err)
	}
	// Replay delivers the retained value first; latest mode keeps only the
	// newest undelivered one.
	sub, err := bus.Subscribe(ctx, "session.snapshots", client.Replay())
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	if _, err := bus.Publish(ctx, "session.snapshots", map[string]int{"step": 2}); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		msg, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("#%d %s\n", msg.TopicSequence, msg.Payload)
		msg.Close() // consumes the delivery: the subscription's credit returns
	}
	// Output:
	// #1 {"step":1}
	// #2 {"step":2}
}

// frame is the producer's side of the artifact examples: allocate, fill,
// seal, publish.
func frame(ctx context.Context, bus *client.Client, topic string, pixels []byte) {
	w, err := bus.Allocate(ctx, int64(len(pixels)), "image/x-rgba")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close() // abandons the staging file if anything below fails; a no-op after Seal
	if _, err := w.Write(pixels); err != nil {
		log.Fatal(err)
	}
	sum := sha256.Sum256(pixels)
	img, err := w.Seal(ctx, client.Digest(hex.EncodeToString(sum[:])))
	if err != nil {
		log.Fatal(err)
	}
	defer img.Close() // the deliveries own it once published
	if _, err := bus.Publish(ctx, topic, map[string]int{"width": 4, "height": 2}, client.Attach("frame", img)); err != nil {
		log.Fatal(err)
	}
}

// receiveFrame is the consumer's side: it subscribes bus to topic, has
// frame publish pixels there and returns the delivered message, which stays
// valid after its subscription closes.
func receiveFrame(ctx context.Context, bus *client.Client, topic string, pixels []byte) *client.Message {
	if _, err := bus.DeclareTopic(ctx, topic, wire.RetainNone); err != nil {
		log.Fatal(err)
	}
	sub, err := bus.Subscribe(ctx, topic, client.Bounded())
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	frame(ctx, bus, topic, pixels)
	msg, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return msg
}

func ExampleArtifactWriter_Seal() {
	ctx := context.Background()
	r := openRouter()
	defer r.Shutdown(ctx)
	camera := connect(ctx, r, "camera")
	defer camera.Close()

	w, err := camera.Allocate(ctx, 8*4, "image/x-rgba")
	if err != nil {
		log.Fatal(err)
	}
	pixels := make([]byte, 8*4)
	for i := range pixels {
		pixels[i] = byte(i)
	}
	if _, err := w.Write(pixels); err != nil { // pwrite: the fastest fill
		log.Fatal(err)
	}
	img, err := w.Seal(ctx) // no byte moves: the router proves no writer is left
	if err != nil {
		log.Fatal(err)
	}
	defer img.Close()
	fmt.Println(img.Ref().ByteLength, "bytes sealed;", r.Stats().LeaseSeals, "lease seal")
	// Output: 32 bytes sealed; 1 lease seal
}

func ExampleArtifact_View() {
	ctx := context.Background()
	r := openRouter()
	defer r.Shutdown(ctx)
	bus := connect(ctx, r, "viewer")
	defer bus.Close()
	msg := receiveFrame(ctx, bus, "camera.frames", []byte("0123456789abcdef0123456789abcdef"))
	img, err := msg.Artifact("frame") // shares the message's delivery
	if err != nil {
		log.Fatal(err)
	}
	msg.Close() // the delivery stays owned by img
	v, err := img.View(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", v.Bytes()[:10]) // valid until v.Close
	v.Close()
	img.Close() // now the delivery is consumed
	// Output: 0123456789
}

func ExampleArtifact_Retain() {
	ctx := context.Background()
	r := openRouter()
	defer r.Shutdown(ctx)
	bus := connect(ctx, r, "cache")
	defer bus.Close()
	msg := receiveFrame(ctx, bus, "camera.frames", make([]byte, 1024))
	img, err := msg.Artifact("frame")
	if err != nil {
		log.Fatal(err)
	}
	kept, err := img.Retain(ctx) // an independent hold: retain before closing
	if err != nil {
		log.Fatal(err)
	}
	img.Close()
	msg.Close() // the delivery is consumed; kept still holds the artifact
	data, err := kept.ReadAll(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(data), "bytes kept after the message;", r.Stats().Artifacts, "artifact alive")
	kept.Close() // the last owner: the router collects the file
	// Output: 1024 bytes kept after the message; 1 artifact alive
}
