package router

import (
	"maps"
	"slices"

	"github.com/flybus/flybus/wire"
)

// core is the routing state machine. It has no goroutines, no I/O, no clock
// and no lock of its own: the Router serializes every call into it with one
// mutex. Inputs are decoded commands and connection events; outputs are
// items queued on connections' lanes (pulled by their writers) and the set
// of connections whose writers must wake.
//
// Admission is all or nothing: every handler validates and reserves before
// it changes anything, so a refused command leaves the state as it was.
type core struct {
	limits   wire.Limits
	policy   Policy
	routerID wire.RouterID
	storeID  wire.StoreID

	conns   map[wire.ConnID]*conn
	clients map[string]*clientRec
	// Client records without a connection, oldest first (entries may be
	// stale), how many records are idle, the cap, and the last sequence.
	idleQueue      []idleRec
	idleHead, idle int
	remember       int
	idleSeq        uint64
	services       map[string]*service
	topics         map[string]*topic
	// waiting holds the subscriptions awaiting a topic's declaration
	// (extension await-topic), by name, in the order they were made.
	waiting map[string][]*subscription

	nextConn, nextSvc, nextTop, nextSub uint64
	pending                             int // accepted connections that have not completed hello
	closingConns                        int // registered connections already closing: they count against no limit
	subCount                            int
	retainedBytes                       uint64
	pubBytes                            []pubBytes // scratch for publish admission
	overflowed                          []*conn    // control lanes exhausted in this step; see settle

	hasStore bool
	pool     bool // the store reuses slots: artifact ids are slots, generations count
	// slotShare bounds the holds (writers and retained artifacts, each
	// keeping a slot and its descriptor) one connection may have in pool
	// mode, a share of the store's slot bound; 0: no bound.
	slotShare    int
	artifacts    map[wire.ArtifactID]*artifact
	nextArtifact uint64
	storeBytes   uint64 // staging, sealed and seal-copy reservations
	effects      []effect

	// dirty lists connections whose writers have new output; the shell
	// drains it after each step.
	dirty []*conn

	stats counters
	now   int64  // the latest publication's arrival, from the shell (input.now)
	buf   []byte // scratch for encoding reply and notice bodies
	ready ready  // what the latest step made ready (see step)

	// scratch holds bodies and lists a handler passes on as wire.Body or
	// encodes at once: a literal's address would move to the heap every
	// time. Replies are encoded before the step ends (pushControl copies).
	scratch struct {
		msg      wire.TopicMessage
		pubOK    wire.PublishOK
		released wire.Released
		allocOK  wire.AllocateOK
		sealOK   wire.SealOK
		// publishers is a subscription.publishers body
		publishers wire.SubscriptionPublishers
		atts       []wire.Attachment
		arts       []*artifact
	}

	// Per-frame values come from slabs and carvers (slab.go), so a steady
	// stream of frames allocates next to nothing.
	artSlab  slab[artifact]
	msgSlab  slab[topicMsg]
	payloads carver[byte]
	attLists carver[wire.Attachment]
	artLists carver[*artifact]

	// lastViolation is the reason of the latest protocol close, for the
	// shell's log line; the shell reads it in the step that closed.
	lastViolation string

	// bodies are the decode targets of command bodies: the core runs one
	// command at a time, so one of each serves, and decoding allocates
	// nothing. Handlers copy whatever they keep.
	bodies struct {
		allocate         wire.Allocate
		call             wire.Call
		cancel           wire.Cancel
		consumed         wire.Consumed
		declare          wire.Declare
		publish          wire.Publish
		refOwner         wire.RefOwner
		register         wire.Register
		release          wire.Release
		reply            wire.Reply
		responderRelease wire.ResponderRelease
		seal             wire.Seal
		subscribe        wire.Subscribe
		topicName        wire.TopicName
		unregister       wire.Unregister
		unsubscribe      wire.Unsubscribe
	}
}

// clientRec remembers a client id's last incarnation (refused if offered
// again) and its live connection, if any. Records of ids without a
// connection are kept for the most recent remembered ones only (see
// forget), so that a router serving tools with a fresh id per run does not
// grow for ever.
type clientRec struct {
	lastIncarnation string
	live            *conn
	idleSince       uint64 // the retire sequence when live became nil
}

// idleRec is an entry of the core's queue of ids whose connection ended,
// oldest first; stale once its record reconnected or idled again.
type idleRec struct {
	id  string
	seq uint64
}

// DefaultRememberedClients is Config.RememberedClients's default.
const DefaultRememberedClients = 16384

// counters are the cumulative figures; gauges are computed in stats().
type counters struct {
	connectionsTotal uint64
	callsTotal       uint64
	refusals         [32]uint64 // by wire.ErrorCode
	protocolCloses   uint64
	controlOverflows uint64
	publications     uint64
	seals            uint64
	collected        uint64
}

// coreConfig is everything the core takes from outside, set once by
// newCore: the router derives it from its Config and its store, and the
// simulation and the fuzz harness build theirs the same way.
type coreConfig struct {
	limits   wire.Limits
	policy   Policy
	routerID wire.RouterID
	storeID  wire.StoreID
	remember int  // RememberedClients; 0: DefaultRememberedClients
	hasStore bool // artifacts can be allocated
	pool     bool // the store reuses slots
	// slotShare bounds one connection's holds in pool mode; 0: no bound.
	slotShare int
}

func newCore(cfg coreConfig) *core {
	return &core{
		limits: cfg.limits, policy: cfg.policy, routerID: cfg.routerID, storeID: cfg.storeID,
		remember: cfg.remember, hasStore: cfg.hasStore, pool: cfg.pool, slotShare: cfg.slotShare,
		conns:    map[wire.ConnID]*conn{},
		clients:  map[string]*clientRec{},
		services: map[string]*service{},
		topics:   map[string]*topic{},
		waiting:  map[string][]*subscription{},

		artifacts: map[wire.ArtifactID]*artifact{},
		payloads:  carver[byte]{chunk: 4096},
		attLists:  carver[wire.Attachment]{chunk: 64},
		artLists:  carver[*artifact]{chunk: 256},
	}
}

func (k *core) markDirty(c *conn) {
	if !c.dirty && !c.gone {
		c.dirty = true
		k.dirty = append(k.dirty, c)
	}
}

// takeDirty hands the shell the connections to wake.
func (k *core) takeDirty(dst []*conn) []*conn {
	for _, c := range k.dirty {
		c.dirty = false
		dst = append(dst, c)
	}
	k.dirty = k.dirty[:0]
	return dst
}

// accept registers a new transport. bound is the launcher's client id, or
// "" for an unbound (self-asserted) transport. It fails when the router is
// full, counting connections that have not finished hello; boundPending
// keeps those to a share of the slots.
func (k *core) accept(bound string) (*conn, error) {
	if bound == "" && !k.policy.IsOpen() {
		return nil, wire.NewError(wire.ErrNotAuthorized, 0, "unbound transports need an open policy")
	}
	if len(k.conns)-k.closingConns >= k.limits.MaxClients {
		// QUOTA_EXCEEDED, not BACKPRESSURE: maxClients is a configured
		// bound the hello reports, and BACKPRESSURE means a queue that will
		// drain once someone reads. The shell sends it as connection.closing.
		k.stats.refusals[wire.ErrQuotaExceeded]++
		return nil, wire.NewError(wire.ErrQuotaExceeded, 0, "maxClients connections already open")
	}
	k.nextConn++
	c := newConn(wire.ConnID(k.nextConn), bound)
	k.conns[c.id] = c
	k.pending++
	k.stats.connectionsTotal++
	return c, nil
}

// boundPending closes the oldest connections still in hello while more
// than max are. Evicting the oldest rather than refusing the newest is what
// keeps a flood of silent connections from locking everyone out: a client
// that says hello at once is closed only if max more connections arrive
// before its hello does, while a silent one is the first to go.
func (k *core) boundPending(max int) {
	for k.pending > max {
		var oldest *conn
		for _, c := range k.conns {
			if !c.helloDone && !c.closing && (oldest == nil || c.id < oldest.id) {
				oldest = c
			}
		}
		if oldest == nil {
			return
		}
		k.stats.refusals[wire.ErrQuotaExceeded]++
		k.closeConn(oldest, wire.ErrQuotaExceeded, "too many connections waiting for bus.hello: the oldest is closed")
	}
}

// defaultMaxPending is the pending-hello bound for maxClients slots: a
// quarter, at least 4 (so small routers still accept a few connections at
// once), at most all of them.
func defaultMaxPending(maxClients int) int {
	return min(maxClients, max(maxClients/4, 4))
}

// handle runs one decoded command from c. decErr is the body-level error
// Decode already found, if any.
func (k *core) handle(c *conn, env *wire.Envelope, decErr *wire.BusError) {
	defer k.settle()
	if c.closing {
		return
	}
	if env.Kind != wire.KindCommand {
		k.violation(c, "clients send commands only")
		return
	}
	if c.anyCmd && env.ID <= c.lastCmd {
		k.violation(c, "command ids must increase")
		return
	}
	c.anyCmd, c.lastCmd = true, env.ID
	if !c.helloDone {
		if env.Op != wire.OpHello {
			k.violation(c, "the first command must be bus.hello")
			return
		}
		if decErr != nil {
			k.refuse(c, env, decErr)
			return
		}
		k.hello(c, env)
		return
	}
	// A 1.0 client's envelopes say minor 0, a 1.1 client's 1: each minor
	// only adds what a connection asks for at hello, so all are accepted.
	if env.Major != wire.Major || env.Minor > wire.Minor {
		k.violation(c, "envelopes after hello must be version 1.0 to 1.2")
		return
	}
	if env.Op == wire.OpHello {
		k.violation(c, "second bus.hello")
		return
	}
	if decErr != nil {
		k.refuse(c, env, decErr)
		return
	}
	var err *wire.BusError
	switch env.Op {
	case wire.OpServiceRegister:
		err = decoded(k, c, env, &k.bodies.register, (*core).opRegister)
	case wire.OpServiceUnregister:
		err = decoded(k, c, env, &k.bodies.unregister, (*core).opUnregister)
	case wire.OpRPCCall:
		err = decoded(k, c, env, &k.bodies.call, (*core).opCall)
	case wire.OpRPCReply:
		err = decoded(k, c, env, &k.bodies.reply, (*core).opReply)
	case wire.OpRPCCancel:
		err = decoded(k, c, env, &k.bodies.cancel, (*core).opCancel)
	case wire.OpRPCResponderRelease:
		err = decoded(k, c, env, &k.bodies.responderRelease, (*core).opResponderRelease)
	case wire.OpDeliveryConsumed:
		err = decoded(k, c, env, &k.bodies.consumed, (*core).opConsumed)
	case wire.OpTopicDeclare:
		err = decoded(k, c, env, &k.bodies.declare, (*core).opDeclare)
	case wire.OpTopicClear:
		err = decoded(k, c, env, &k.bodies.topicName, (*core).opClear)
	case wire.OpTopicDelete:
		err = decoded(k, c, env, &k.bodies.topicName, (*core).opDelete)
	case wire.OpSubscribe:
		err = decoded(k, c, env, &k.bodies.subscribe, (*core).opSubscribe)
	case wire.OpUnsubscribe:
		err = decoded(k, c, env, &k.bodies.unsubscribe, (*core).opUnsubscribe)
	case wire.OpPublish:
		err = decoded(k, c, env, &k.bodies.publish, (*core).opPublish)
	case wire.OpArtifactAllocate:
		err = decoded(k, c, env, &k.bodies.allocate, (*core).opAllocate)
	case wire.OpArtifactSeal:
		err = decoded(k, c, env, &k.bodies.seal, (*core).opSeal)
	case wire.OpArtifactOpen:
		err = decoded(k, c, env, &k.bodies.refOwner, (*core).opOpen)
	case wire.OpArtifactRetain:
		err = decoded(k, c, env, &k.bodies.refOwner, (*core).opRetain)
	case wire.OpArtifactRelease:
		err = decoded(k, c, env, &k.bodies.release, (*core).opRelease)
	default:
		err = wire.NewError(wire.ErrInvalidEnvelope, 0, "%s is not supported by this router yet", env.Op)
	}
	if err != nil {
		k.refuse(c, env, err)
	}
}

// decoded decodes env's body into b, the core's one decode target of its
// type, and runs op on it: the prologue of every command's handler,
// written once. A body the decoder refuses is the command's refusal.
func decoded[B wire.Body](k *core, c *conn, env *wire.Envelope, b B, op func(*core, *conn, *wire.Envelope, B) *wire.BusError) *wire.BusError {
	if err := env.DecodeBody(b); err != nil {
		return err
	}
	return op(k, c, env, b)
}

// pushControl copies body onto the control lane, closing the connection
// when the lane's bounds are exhausted: losing a reply or notice silently
// would break the control plane, so the client goes instead.
func (k *core) pushControl(c *conn, kind wire.EnvKind, op wire.Op, replyTo wire.Opt[wire.MsgID], body []byte, last bool) {
	if c.closing || c.gone {
		return
	}
	if c.overflowed && !last {
		return // it is being closed; see settle
	}
	cost := len(body) + controlOverhead
	if !last && (len(c.control)-c.ctrlHead+1 > k.limits.MaxControlFrames || uint64(c.controlBytes+cost) > k.limits.MaxControlBytes) {
		// Closing now would release state the running handler is still
		// changing (or iterating): mark it, and settle closes it when the
		// step is done. Nothing more is queued for it meanwhile.
		k.stats.controlOverflows++
		c.overflowed = true
		k.overflowed = append(k.overflowed, c)
		return
	}
	c.control = append(c.control, outItem{kind: kind, op: op, replyTo: replyTo,
		body: append(c.takeBody(), body...), closeAfter: last})
	c.controlBytes += cost
	k.markDirty(c)
}

// settle closes the connections whose control lane overflowed during the
// step that just ran. Closing one may overflow another (its notices), so it
// loops until none is left. Every entry point that can queue control frames
// ends with it; the shell calls it after every step too.
func (k *core) settle() {
	for i := 0; i < len(k.overflowed); i++ {
		k.closeConn(k.overflowed[i], wire.ErrBackpressure, "control lane exhausted: the client is not reading")
	}
	clear(k.overflowed)
	k.overflowed = k.overflowed[:0]
}

// controlOverhead approximates an envelope's framing around its body.
const controlOverhead = 160

// violation closes c after a frame- or envelope-level error.
func (k *core) violation(c *conn, msg string) {
	if c.closing || c.gone {
		return
	}
	k.stats.protocolCloses++
	k.lastViolation = msg
	k.closeConn(c, wire.ErrInvalidEnvelope, msg)
}

// closeConn sends connection.closing and releases everything c held. The
// writer sends what is queued on the control lane, the closing notice last,
// then closes the transport.
func (k *core) closeConn(c *conn, code wire.ErrorCode, msg string) {
	if c.closing || c.gone {
		return
	}
	cc := wire.ConnectionClosing{Code: code, Message: msg}
	k.buf = cc.AppendJSON(k.buf[:0])
	k.pushControl(c, wire.KindNotice, wire.OpConnectionClosing, wire.Opt[wire.MsgID]{}, k.buf, true)
	k.markClosing(c)
	k.release(c)
}

// markClosing marks c closing. From now on it counts against maxClients no
// more: an evicted connection waiting for its goodbye to be written must
// not keep a prompt client out.
func (k *core) markClosing(c *conn) {
	c.closing = true
	k.closingConns++
}

// shutdown closes every connection. All of them are marked closing before
// any state is released, so clients hear subscription.closed and then
// connection.closing (ROUTER_LOST), never a call.failed caused by another
// client's connection being torn down first.
func (k *core) shutdown() {
	defer k.settle()
	k.closeSubscriptions("router-shutdown")
	var closing []*conn
	for _, c := range k.connsInOrder() {
		if c.closing || c.gone {
			continue
		}
		cc := wire.ConnectionClosing{Code: wire.ErrRouterLost, Message: "router shutting down"}
		k.buf = cc.AppendJSON(k.buf[:0])
		k.pushControl(c, wire.KindNotice, wire.OpConnectionClosing, wire.Opt[wire.MsgID]{}, k.buf, true)
		k.markClosing(c)
		closing = append(closing, c)
	}
	for _, c := range closing {
		k.release(c)
	}
}

// connsInOrder lists the connections by id: whatever the core does to
// every connection happens in an order its inputs decide.
func (k *core) connsInOrder() []*conn {
	cs := make([]*conn, 0, len(k.conns))
	for _, id := range slices.Sorted(maps.Keys(k.conns)) {
		cs = append(cs, k.conns[id])
	}
	return cs
}

// drop handles a transport that ended or failed: nothing more can be sent.
func (k *core) drop(c *conn) {
	defer k.settle()
	if c.gone {
		return
	}
	if !c.closing {
		k.markClosing(c)
		k.release(c)
	}
	k.closingConns--
	c.gone = true
	c.control, c.ctrlHead, c.results = nil, 0, nil
	delete(k.conns, c.id)
}

// release undoes everything a connection held: its services (failing their
// calls), its calls as a caller (detaching them), its roots. Retained topic
// values stay with the router.
func (k *core) release(c *conn) {
	if !c.helloDone {
		k.pending--
	} else if rec := k.clients[c.ident.ClientID]; rec != nil && rec.live == c {
		k.retire(c.ident.ClientID, rec)
	}
	for _, s := range c.services {
		k.removeService(s, "disconnected", true)
	}
	c.services = nil
	for len(c.subs) > 0 {
		k.removeSubscription(c.subs[0])
	}
	k.dropPublisher(c)
	k.detachCaller(c)
	k.releaseServiceSide(c)
	// In hold order, so which slot a later allocation gets depends only on
	// the core's inputs.
	for _, id := range slices.Sorted(maps.Keys(c.holds)) {
		h := c.holds[id]
		h.art.retire = true // the program may still map it
		k.releaseHold(h)
	}
}

func (k *core) hello(c *conn, env *wire.Envelope) {
	var h wire.Hello
	if err := env.DecodeBody(&h); err != nil {
		k.refuse(c, env, err)
		return
	}
	fail := func(code wire.ErrorCode, msg string) {
		k.refuse(c, env, wire.NewError(code, 0, "%s", msg))
		k.closeConn(c, code, msg)
	}
	// The hello is answered in the minor it was written in (1.0's as
	// 1.1, as before 1.2; a later one's in this router's), with that
	// minor's contract digest: a client built against an older minor
	// finds what it expects, and a newer client can fall back.
	minor := min(max(env.Minor, wire.OldestMinor), wire.Minor)
	c.minor = wire.Some(minor) // its refusals too
	ext, granted, dup := grantExtensions(h.Extensions, minor)
	if dup != "" {
		// A malformed body: refused, and the connection still waits for a hello.
		k.refuse(c, env, wire.NewError(wire.ErrInvalidEnvelope, 0, "bus.hello: extension %q is listed twice", dup))
		return
	}
	major := false
	for _, m := range h.SupportedMajors {
		major = major || m == wire.Major
	}
	if !major {
		fail(wire.ErrVersionMismatch, "this router speaks flybus major 1 only")
		return
	}
	if c.bound != "" && c.bound != h.ClientID {
		fail(wire.ErrNotAuthorized, `this endpoint is bound to client id "`+c.bound+`"; connect as `+c.bound)
		return
	}
	g, ok := k.policy.grants(h.ClientID)
	if !ok {
		fail(wire.ErrNotAuthorized, "client id not admitted by the policy")
		return
	}
	rec := k.clients[h.ClientID]
	if rec != nil && rec.live != nil {
		fail(wire.ErrConflict, "client id already has a live connection")
		return
	}
	if rec != nil && rec.lastIncarnation == h.ClientIncarnation {
		fail(wire.ErrNotAuthorized, "client incarnation already used; reconnect with a new one")
		return
	}
	if rec == nil {
		rec = &clientRec{}
		k.clients[h.ClientID] = rec
	} else {
		k.idle-- // it was idle: no live connection, checked above
	}
	rec.lastIncarnation, rec.live = h.ClientIncarnation, c
	c.helloDone = true
	k.pending--
	c.ident = wire.Identity{ClientID: h.ClientID, ClientIncarnation: h.ClientIncarnation}
	c.grants = g
	c.ext = ext
	digest, _ := wire.ContractDigestFor(minor)
	k.reply(c, env, &wire.HelloOK{
		RouterID: k.routerID, ConnectionID: c.id, SelectedMajor: wire.Major, SelectedMinor: minor,
		ContractDigest: digest, Limits: k.limits, Extensions: granted, StoreID: k.storeID,
	})
}

// The extensions a connection was granted, as bits of conn.ext.
const (
	extAwaitTopic uint8 = 1 << iota
	extPresence
	extQuietConsume
)

// grantExtensions grants the extensions of a hello this router knows and
// the hello's minor defines, in the hello's order, ignoring the others;
// dup names one listed twice.
func grantExtensions(asked []string, minor uint32) (ext uint8, granted []string, dup string) {
	granted = []string{}
	for i, name := range asked {
		if slices.Contains(asked[:i], name) {
			return 0, nil, name
		}
		var bit uint8
		switch name {
		case wire.ExtAwaitTopic:
			bit = extAwaitTopic
		case wire.ExtPresence:
			bit = extPresence
		case wire.ExtQuietConsume:
			bit = extQuietConsume
		default:
			continue
		}
		if e, _ := wire.LookupExtension(name); e.Minor > minor {
			continue // not in the contract the client speaks
		}
		ext |= bit
		granted = append(granted, name)
	}
	return ext, granted, ""
}

// retire marks rec idle (its connection ended) and forgets the
// longest-idle records past the cap: their last incarnations are then
// accepted again, which a client reconnecting after that many others have
// come and gone cannot tell from a fresh start.
func (k *core) retire(id string, rec *clientRec) {
	rec.live = nil
	k.idleSeq++
	rec.idleSince = k.idleSeq
	k.idleQueue = append(k.idleQueue, idleRec{id: id, seq: k.idleSeq})
	k.idle++
	limit := k.remember
	if limit <= 0 {
		limit = DefaultRememberedClients
	}
	for k.idle > limit {
		e := k.idleQueue[k.idleHead]
		k.idleQueue[k.idleHead] = idleRec{}
		k.idleHead++
		if r := k.clients[e.id]; r != nil && r.live == nil && r.idleSince == e.seq {
			delete(k.clients, e.id)
			k.idle--
		}
	}
	// Stale entries (an id that came back, or idled again later) are
	// dropped when the queue is twice what is idle, and the consumed head
	// when it outweighs the rest, so the queue stays bounded by the idle
	// records however often one client reconnects.
	if n := len(k.idleQueue) - k.idleHead; n > 2*k.idle+64 || k.idleHead > 1024 && k.idleHead > n {
		live := k.idleQueue[:0]
		for _, e := range k.idleQueue[k.idleHead:] {
			if r := k.clients[e.id]; r != nil && r.live == nil && r.idleSince == e.seq {
				live = append(live, e)
			}
		}
		clear(k.idleQueue[len(live):])
		k.idleQueue, k.idleHead = live, 0
	}
}

// Stats is a snapshot of the router's registries and counters.
type Stats struct {
	Connections       int
	PendingHello      int
	Services          int
	Topics            int
	Subscriptions     int
	Calls             int // correlation records, detached included
	ActiveCalls       int // calls holding a caller's active-call slot
	Artifacts         int
	SealedArtifacts   int
	ArtifactRoots     int
	Owners            int
	ReplyCapabilities int
	ClientRecords     int    // client ids remembered (live, and idle up to Config.RememberedClients)
	Queued            int    // items waiting on any lane or service queue
	StoreBytes        uint64 // reserved: staging, sealed and seal copies in progress
	RetainedBytes     uint64
	QueuedBytes       uint64 // bounded subscriptions' queued delivery bytes

	ConnectionsTotal uint64
	CallsTotal       uint64
	ProtocolCloses   uint64
	ControlOverflows uint64
	AcceptRetries    uint64 // accept failures a listener backed off from and retried
	// Who wrote the router's frames: batches written by the step that made
	// them ready (no goroutine woken), by a connection's own writer, and
	// batches a step handed to that writer because the socket was full.
	DirectWrites   uint64
	WriterWrites   uint64
	WriterHandoffs uint64
	Publications   uint64
	Seals          uint64 // sealed artifacts published
	LeaseSeals     uint64 // seals that moved no bytes (write lease granted)
	CopySeals      uint64 // seals that copied (a writer kept the file open)
	Collected      uint64 // artifacts collected after their last root
	StoreFiles     int64  // staging and sealed files on disk; in pool mode, slots holding an artifact
	PoolHits       uint64 // allocations served by a prepared staging file
	PoolMisses     uint64
	PreparedBytes  int64 // files mode: bytes of prepared staging files no artifact uses yet
	// Pool mode: slot files (free and quarantined ones included), those
	// free, those kept from reuse because a writer held them, their bytes.
	Slots            int64
	FreeSlots        int64
	QuarantinedSlots int64
	SlotBytes        int64
	SlotsRetired     uint64 // slots unlinked, not reused, because a connection that ended owned them
	// The store's open, fallocate and unlink calls: in pool mode's steady
	// state none happen per frame.
	StoreOpens      uint64
	StoreFallocates uint64
	StoreUnlinks    uint64
	Refusals        map[string]uint64 // by error code
}

func (k *core) snapshot() Stats {
	s := Stats{
		Connections: len(k.conns), PendingHello: k.pending, Services: len(k.services), ClientRecords: len(k.clients),
		ConnectionsTotal: k.stats.connectionsTotal, CallsTotal: k.stats.callsTotal,
		ProtocolCloses: k.stats.protocolCloses, ControlOverflows: k.stats.controlOverflows,
		Publications: k.stats.publications, Refusals: map[string]uint64{},
		Topics: len(k.topics), Subscriptions: k.subCount, RetainedBytes: k.retainedBytes,
		Artifacts: len(k.artifacts), StoreBytes: k.storeBytes, Seals: k.stats.seals, Collected: k.stats.collected,
	}
	for _, a := range k.artifacts {
		if a.state == artSealed {
			s.SealedArtifacts++
		}
		s.ArtifactRoots += a.roots
	}
	for _, c := range k.conns {
		s.Calls += len(c.calls)
		s.ActiveCalls += len(c.calls)
		for _, cl := range c.caps {
			if cl.caller == nil {
				s.Calls++ // detached, still correlated by the service's capability
			}
		}
		s.Owners += c.owners()
		s.ReplyCapabilities += len(c.caps)
		s.Queued += len(c.control) - c.ctrlHead + len(c.results)
		for _, sub := range c.subs {
			s.Queued += len(sub.queue)
		}
		s.QueuedBytes += uint64(c.queuedBytes)
	}
	for _, svc := range k.services {
		s.Queued += len(svc.queue)
	}
	for code, n := range k.stats.refusals {
		if n > 0 {
			s.Refusals[wire.ErrorCode(code).String()] = n
		}
	}
	return s
}
