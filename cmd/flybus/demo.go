package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

var demoCmd = &command{
	name:    "demo",
	summary: "run an embedded router with a counter RPC, an observer and a held frame",
	run:     runDemo,
	usage:   demoUsage,
}

type demoOptions struct {
	store string
}

func demoFlags(o *demoOptions) *flag.FlagSet {
	set := newFlagSet("demo")
	set.StringVar(&o.store, "store", "", "store root `DIR` (default: a fresh directory under /dev/shm, removed afterwards)")
	return set
}

func demoUsage() string {
	notes := `Runs a small end-to-end example in one process, over in-memory transports: a
counter service answering RPCs, an observer subscribed to a latest topic, and
a 640x480 RGBA frame published as an artifact, which the observer keeps and
reads after its message has been consumed. Every step prints one line; the
output is the same on every run. From a checkout: go run ./cmd/flybus demo.
`
	return usageText("flybus demo [--store DIR]", "Run the embedded-router demo.", demoFlags(&demoOptions{}), notes,
		walkExample("demo"))
}

func runDemo(c *command, args []string, stdout, stderr io.Writer) int {
	o := &demoOptions{}
	pos, code, ok := parse(c, demoFlags(o), args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(c, stderr, "demo takes no arguments")
	}
	root := o.store
	if root == "" {
		base := ""
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			base = "/dev/shm"
		}
		dir, err := os.MkdirTemp(base, "flybus-demo-")
		if err != nil {
			fmt.Fprintln(stderr, "flybus demo:", err)
			return exitFailure
		}
		defer os.RemoveAll(dir)
		root = dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := demo(ctx, root, stdout); err != nil {
		fmt.Fprintln(stderr, "flybus demo:", err)
		return exitFailure
	}
	return exitOK
}

// demo is the program; it prints only lines that do not depend on ids,
// timing or the machine.
func demo(ctx context.Context, root string, out io.Writer) (err error) {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	policy := router.ClosedPolicy().
		Client("counter", router.Grants{Register: []router.Pattern{router.Exact("example.counter")}}).
		Client("camera", router.Grants{Publish: []router.Pattern{router.Prefix("demo.")}, ManageTopics: []router.Pattern{router.Prefix("demo.")}}).
		Client("observer", router.Grants{Call: []router.Pattern{router.Exact("example.counter")}, Subscribe: []router.Pattern{router.Prefix("demo.")}})
	r, err := router.New(router.Config{Policy: policy, StoreRoot: root})
	if err != nil {
		return err
	}
	defer func() {
		if serr := r.Shutdown(context.Background()); serr != nil && err == nil {
			err = serr
		}
		if _, serr := os.Stat(r.StoreDir()); serr == nil && err == nil {
			err = errors.New("the store directory survived shutdown")
		}
	}()
	say("router: up, policy closed: counter, camera and observer admitted")
	connect := func(id string) (*client.Client, error) {
		nc, err := r.ConnectInMemoryAs(id)
		if err != nil {
			return nil, err
		}
		return client.Connect(ctx, nc, client.Config{ClientID: id, StoreRoot: root})
	}
	counter, err := connect("counter")
	if err != nil {
		return err
	}
	defer counter.Close()
	camera, err := connect("camera")
	if err != nil {
		return err
	}
	defer camera.Close()
	observer, err := connect("observer")
	if err != nil {
		return err
	}
	defer observer.Close()
	say("clients: counter, camera and observer connected (contract %s...)", wire.ContractDigest()[:12])

	// 1. A counter RPC.
	svc, err := counter.Register(ctx, "example.counter", client.Queued(4), client.InFlight(4))
	if err != nil {
		return err
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		total := 0
		_ = svc.Serve(ctx, func(ctx context.Context, req *client.Request) {
			var in struct{ Amount int }
			_ = req.Decode(&in)
			total += in.Amount
			_, _ = req.Reply(ctx, map[string]int{"total": total})
		})
	}()
	say("counter: registered example.counter")
	for _, amount := range []int{1, 2, 3} {
		res, err := observer.CallAndWait(ctx, "example.counter", "Counter.Increment", map[string]int{"amount": amount}, client.Pin(svc.Incarnation()))
		if err != nil {
			return err
		}
		var v struct{ Total int }
		if err := res.Decode(&v); err != nil {
			return err
		}
		res.Close()
		say("observer: Counter.Increment(%d) -> total %d (answered by %s)", amount, v.Total, res.Responder.ClientID)
	}
	if _, err := camera.Call(ctx, "example.counter", "Counter.Increment", nil); errors.Is(err, wire.ErrNotAuthorized) {
		say("camera: Counter.Increment refused: NOT_AUTHORIZED (no call grant)")
	} else {
		return fmt.Errorf("the camera's call was not refused: %v", err)
	}

	// 2. A pub/sub observer.
	if _, err := camera.DeclareTopic(ctx, "demo.frames", wire.RetainLatest); err != nil {
		return err
	}
	sub, err := observer.Subscribe(ctx, "demo.frames", client.InFlight(1))
	if err != nil {
		return err
	}
	say("observer: subscribed to demo.frames (latest, 1 in flight)")

	// 3. A frame artifact, held past message consumption.
	const w, h = 640, 480
	frame := make([]byte, w*h*4)
	for i := range frame {
		frame[i] = byte(i * 31)
	}
	sum := sha256.Sum256(frame)
	writer, err := camera.Allocate(ctx, int64(len(frame)), "image/x-rgba")
	if err != nil {
		return err
	}
	if _, err := writer.Write(frame); err != nil {
		return err
	}
	art, err := writer.Seal(ctx, client.Digest(hex.EncodeToString(sum[:])))
	if err != nil {
		return err
	}
	path := "copy"
	if r.Stats().LeaseSeals == 1 {
		path = "lease, no bytes copied"
	}
	say("camera: sealed a %dx%d RGBA frame, %d bytes (%s)", w, h, art.Ref().ByteLength, path)
	rc, err := camera.Publish(ctx, "demo.frames", map[string]int{"width": w, "height": h}, client.Attach("frame", art))
	if err != nil {
		return err
	}
	art.Close() // the delivery and the retained value own it now
	say("camera: published frame #%d to %d subscriber(s)", rc.TopicSequence, rc.Subscribers)

	msg, err := sub.Next(ctx)
	if err != nil {
		return err
	}
	held, err := msg.Artifact("frame")
	if err != nil {
		return err
	}
	say("observer: got frame #%d, took the artifact, closed the message", msg.TopicSequence)
	msg.Close() // the delivery stays owned by the artifact taken from it
	view, err := held.View(ctx)
	if err != nil {
		return err
	}
	got := sha256.Sum256(view.Bytes())
	match := "matches"
	if got != sum {
		match = "DIFFERS"
	}
	say("observer: read the held frame after its message: %d bytes, digest %s", len(view.Bytes()), match)
	view.Close()
	held.Close()
	if _, err := camera.ClearTopic(ctx, "demo.frames"); err != nil {
		return err
	}
	// Collection happens after the last owner lets go; the observer's
	// consume travels ahead of its next command, so one round trip settles it.
	res, err := observer.CallAndWait(ctx, "example.counter", "Counter.Increment", map[string]int{"amount": 0})
	if err != nil {
		return err
	}
	res.Close()
	st := r.Stats()
	say("router: frame collected after its last owner let go (artifacts %d, roots %d, collected %d)", st.Artifacts, st.ArtifactRoots, st.Collected)
	if got != sum || st.Artifacts != 0 {
		return errors.New("the demo's checks failed")
	}
	svc.Close()
	sub.Close()
	say("router: shutting down")
	return nil
}
