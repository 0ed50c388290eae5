package router_test

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// harness is a bustest.Harness under the names the router's tests use: the
// router, the transport and the store as fields, and its methods in lower
// case. Every integration test runs through forEachTransport, so the
// in-memory and the Unix-socket transports pass the same tests through the
// same router code.
type harness struct {
	*bustest.Harness
	t      *testing.T
	r      *router.Router
	unix   bool
	dir    string
	socket string     // unbound listener path (open policy only)
	root   string     // the router's store root
	mode   store.Mode // the store's backend
}

func wrap(h *bustest.Harness) *harness {
	return &harness{Harness: h, t: h.T(), r: h.Router(), unix: h.Unix(), dir: h.Dir(), socket: h.Socket(), root: h.Root(), mode: h.Mode()}
}

func wrapped(fn func(t *testing.T, h *harness)) func(t *testing.T, h *bustest.Harness) {
	return func(t *testing.T, h *bustest.Harness) { fn(t, wrap(h)) }
}

// open is the configuration most tests use: a trusted deployment; openWith
// is open with the limits l sets, and the defaults for those it leaves zero.
var (
	open     = bustest.Open
	openWith = bustest.OpenWith
)

// storeModes are the store backends every integration test runs over.
var storeModes = bustest.StoreModes

func forEachTransport(t *testing.T, cfg router.Config, fn func(t *testing.T, h *harness)) {
	bustest.ForEachTransport(t, cfg, wrapped(fn))
}

// forEachTransportIn runs fn over both transports in each of modes; tests
// of one mode's own behaviour name it.
func forEachTransportIn(t *testing.T, cfg router.Config, modes []store.Mode, fn func(t *testing.T, h *harness)) {
	bustest.ForEachTransportIn(t, cfg, modes, wrapped(fn))
}

// leakCheckedHarness is newHarness with the leak check ForEachTransport
// makes, after fdWait for a descriptor to close.
func leakCheckedHarness(t *testing.T, cfg router.Config, unix bool, fdWait time.Duration) *harness {
	return wrap(bustest.LeakChecked(t, cfg, unix, fdWait))
}

// newHarness starts a router the caller shuts down.
func newHarness(t *testing.T, cfg router.Config, unix bool) *harness {
	return wrap(bustest.New(t, cfg, unix))
}

func (h *harness) track(c *client.Client) *client.Client { return h.Track(c) }

func (h *harness) cachedSlots() int { return h.CachedSlots() }

func (h *harness) conn(id string) net.Conn { h.t.Helper(); return h.Conn(id) }

func (h *harness) dial(id string) *client.Client { h.t.Helper(); return h.Dial(id) }

func (h *harness) pubSub(pubID, subID, topic string, r wire.Retention, opts ...client.SubscribeOption) (pub, sub *client.Client, s *client.Subscription) {
	h.t.Helper()
	return h.PubSub(pubID, subID, topic, r, opts...)
}

func (h *harness) serviceAndCaller(svcID, name string, opts ...client.ServiceOption) (svcClient, caller *client.Client, svc *client.Service) {
	h.t.Helper()
	return h.ServiceAndCaller(svcID, name, opts...)
}

func sealedFiles(t *testing.T, h *harness) int { t.Helper(); return h.SealedFiles(t) }

func sealedPaths(t *testing.T, h *harness) []string { t.Helper(); return h.SealedPaths(t) }

// The test steps of bustest, under the names the router's tests use.
var (
	ctxT                = bustest.Ctx
	waitFor             = bustest.WaitFor
	code                = bustest.Code
	dispatchOf          = bustest.DispatchOf
	wantResultErr       = bustest.WantResultErr
	nextMessage         = bustest.NextMessage
	nextRequest         = bustest.NextRequest
	mustResult          = bustest.MustResult
	mustMap             = bustest.MustMap
	mustAllocate        = bustest.MustAllocate
	mustSubscribe       = bustest.MustSubscribe
	mustRegister        = bustest.MustRegister
	mustCall            = bustest.MustCall
	mustDeclare         = bustest.MustDeclare
	mustArtifact        = bustest.MustArtifact
	declareAndSubscribe = bustest.DeclareAndSubscribe
	barrier             = bustest.Barrier
	frameBytes          = bustest.FrameBytes
	produce             = bustest.Produce
	checkBytes          = bustest.CheckBytes
	publishFrame        = bustest.PublishFrame
	viewFrame           = bustest.ViewFrame
)

// orFatal returns v, failing the test when err is set.
func orFatal[T any](t *testing.T, v T, err error) T { t.Helper(); return bustest.OrFatal(t, v, err) }

// rawAllocate allocates through a raw client and returns the grant.
func rawAllocate(t *testing.T, r *raw, n uint64) wire.AllocateOK {
	t.Helper()
	var a wire.AllocateOK
	rawOK(t, r, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: n, ContentType: "x/y"}, &a)
	return a
}

// openLocation opens a location the router granted with open
// (store.OpenRead or store.OpenWrite), as a client resolves it under its
// store root.
func openLocation(t *testing.T, h *harness, open func(root, storeID, relPath string) (*os.File, error), loc wire.Location) *os.File {
	t.Helper()
	f, err := open(h.root, loc.StoreID.String(), loc.RelativePath)
	return orFatal(t, f, err)
}

// writeLocation writes data into the staging file of a grant's write
// location, as a producer does before its seal.
func writeLocation(t *testing.T, h *harness, loc wire.Location, data []byte) {
	t.Helper()
	f := openLocation(t, h, store.OpenWrite, loc)
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
}

// rawOK sends a command through a raw client and decodes its reply into
// reply, failing the test on a refusal.
func rawOK(t *testing.T, r *raw, op wire.Op, body, reply wire.Body) {
	t.Helper()
	r.command(op, body)
	if be := r.reply(reply); be != nil {
		t.Fatal(be)
	}
}

// openRouterOn starts an open router on the store root root, outside any
// harness; the caller shuts it down.
func openRouterOn(t *testing.T, root string) *router.Router {
	t.Helper()
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: root})
	return orFatal(t, r, err)
}

// inMemory connects an unbound in-memory transport to r.
func inMemory(t *testing.T, r *router.Router) net.Conn {
	t.Helper()
	nc, err := r.ConnectInMemory()
	return orFatal(t, nc, err)
}
