package edge

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// A browser is one WebSocket. Its handler goroutine reads requests; a
// writer goroutine sends, one message at a time: first queued answers
// (welcome, subscribed, errors, time), then the latest notices (status,
// topics, router view), then publications, one topic after another. Per
// topic it keeps only the newest publication not yet sent: an older one
// still waiting is replaced and counted as skipped, so a slow browser
// falls behind by skipping, never by slowing the bus or another browser.

type slotKind int

const (
	slotStatus slotKind = iota
	slotTopics
	slotRouter
	nSlots
)

// maxQueued bounds the answers waiting for a browser that does not read.
const maxQueued = 16

// selection is which attachments a browser wants of a topic.
type selection struct {
	all   bool
	names []string
}

func selectionOf(atts []string) selection {
	if len(atts) == 1 && atts[0] == AllAttachments {
		return selection{all: true}
	}
	return selection{names: slices.Clone(atts)}
}

func (s selection) wants(name string) bool { return s.all || slices.Contains(s.names, name) }

func (s selection) list() []string {
	if s.all {
		return []string{AllAttachments}
	}
	if s.names == nil {
		return []string{}
	}
	return s.names
}

// want is one topic a browser subscribed to.
type want struct {
	sel     selection
	pending *publication // the newest not yet sent
	skipped uint64       // replaced since the last one sent
}

type closeReq struct {
	code   websocket.StatusCode
	reason string
}

type browser struct {
	e          *Edge
	conn       *websocket.Conn
	remote     string
	authed     bool // by the Authorization header
	wake       chan struct{}
	writerDone chan struct{}
	helloDone  bool // the reader's own

	mu         sync.Mutex
	order      []string
	want       map[string]*want
	routerView bool
	ctrl       [][]byte
	slots      [nSlots][]byte
	rr         int
	closeReq   *closeReq
	readDone   bool
	gone       bool
}

func newBrowser(e *Edge, conn *websocket.Conn, remote string, authed bool) *browser {
	return &browser{e: e, conn: conn, remote: remote, authed: authed, wake: make(chan struct{}, 1),
		writerDone: make(chan struct{}), want: map[string]*want{}}
}

func (b *browser) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// offer makes p the topic's newest for this browser if it follows the
// topic; it returns the publication p replaced, for the caller to let go
// of outside the locks. Called with Edge.mu held.
func (b *browser) offer(t *topic, p *publication) *publication {
	b.mu.Lock()
	w := b.want[t.name]
	if w == nil || b.gone {
		b.mu.Unlock()
		return nil
	}
	old := w.pending
	if old != nil {
		w.skipped++
		t.skipped.Add(1)
	}
	p.ref()
	w.pending = p
	b.mu.Unlock()
	b.signal()
	return old
}

func (b *browser) setSlot(k slotKind, js []byte) {
	b.mu.Lock()
	if k != slotRouter || b.routerView {
		b.slots[k] = js
	}
	b.mu.Unlock()
	b.signal()
}

// queue adds an answer; false when too many wait.
func (b *browser) queue(js []byte) bool {
	b.mu.Lock()
	ok := b.queueLocked(js)
	b.mu.Unlock()
	b.signal()
	return ok
}

func (b *browser) queueLocked(js []byte) bool {
	if len(b.ctrl) >= maxQueued {
		return false
	}
	b.ctrl = append(b.ctrl, js)
	return true
}

// closeWith asks the writer to close the WebSocket with code once the
// answers queued before are sent.
func (b *browser) closeWith(code websocket.StatusCode, reason string) {
	b.mu.Lock()
	if b.closeReq == nil {
		b.closeReq = &closeReq{code: code, reason: reason}
	}
	b.mu.Unlock()
	b.signal()
}

// cut closes the WebSocket at once, without a goodbye.
func (b *browser) cut() {
	b.mu.Lock()
	conn := b.conn
	b.mu.Unlock()
	if conn != nil {
		conn.CloseNow()
	}
}

// refuse sends an error notice and closes with code.
func (b *browser) refuse(errCode, msg string, code websocket.StatusCode) {
	b.queue(mustJSON(errorMsg{Type: "error", Code: errCode, Message: msg}))
	reason := msg
	if len(reason) > 120 { // a close frame's reason is short; the notice has it whole
		reason = reason[:117] + "..."
	}
	b.closeWith(code, reason)
}

func (b *browser) protocolError(errCode, msg string, code websocket.StatusCode) {
	b.e.c.protocolErrors.Add(1)
	b.e.notify()
	b.refuse(errCode, msg, code)
}

// run serves the browser until its WebSocket closes.
func (b *browser) run() {
	go b.writeLoop()
	b.readLoop()
	b.mu.Lock()
	b.readDone = true
	b.mu.Unlock()
	b.signal()
	<-b.writerDone
	b.e.unregister(b)
}

func (b *browser) readLoop() {
	e := b.e
	hello := time.AfterFunc(e.cfg.HelloTimeout, func() {
		b.protocolError("NO_HELLO", fmt.Sprintf("no hello within %v", e.cfg.HelloTimeout), websocket.StatusPolicyViolation)
	})
	defer hello.Stop()
	for {
		typ, data, err := b.conn.Read(context.Background())
		if err != nil {
			return // closed: by the browser, the writer or the network
		}
		if typ != websocket.MessageText {
			b.protocolError("BAD_REQUEST", "the edge takes text messages only", websocket.StatusUnsupportedData)
			return
		}
		req, err := DecodeRequest(data)
		if err != nil {
			b.protocolError("BAD_REQUEST", err.Error(), websocket.StatusPolicyViolation)
			return
		}
		if !b.helloDone {
			if req.Op != "hello" {
				b.protocolError("BAD_REQUEST", "the first request must be hello", websocket.StatusPolicyViolation)
				return
			}
			if !hello.Stop() {
				return // too late: the timeout is closing the socket
			}
			if e.cfg.Token != "" && !b.authed && !tokenEqual(req.Token, e.cfg.Token) {
				e.c.refusedToken.Add(1)
				e.notify()
				what := "the edge needs a token"
				if req.Token != "" {
					what = "wrong token"
				}
				b.refuse("UNAUTHORIZED", what, CloseUnauthorized)
				return
			}
			b.helloDone = true
			if !e.register(b) {
				return
			}
			continue
		}
		ok := true
		switch req.Op {
		case "hello":
			b.protocolError("BAD_REQUEST", "hello twice", websocket.StatusPolicyViolation)
			return
		case "subscribe":
			if err := e.subscribe(b, req); err != nil {
				ok = b.queue(mustJSON(errorMsg{Type: "error", Code: "NOT_SERVED", Message: err.Error()}))
			}
		case "time":
			ok = b.queue(mustJSON(timeMsg{Type: "time", T: *req.T, Now: unixMs(time.Now())}))
		}
		if !ok {
			b.protocolError("TOO_MANY_REQUESTS", "requests outpace the answers: read them before asking again", websocket.StatusPolicyViolation)
			return
		}
	}
}

func tokenEqual(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// item is the writer's next job.
type item struct {
	text    []byte
	pub     *publication
	sel     selection
	skipped uint64
	close   *closeReq
	gone    bool
}

func (b *browser) next() item {
	for {
		b.mu.Lock()
		if it, ok := b.nextLocked(); ok {
			b.mu.Unlock()
			return it
		}
		b.mu.Unlock()
		<-b.wake
	}
}

func (b *browser) nextLocked() (item, bool) {
	if len(b.ctrl) > 0 {
		js := b.ctrl[0]
		b.ctrl[0] = nil
		b.ctrl = b.ctrl[1:]
		return item{text: js}, true
	}
	if b.closeReq != nil {
		return item{close: b.closeReq}, true
	}
	if b.readDone {
		return item{gone: true}, true
	}
	for k := range b.slots {
		if js := b.slots[k]; js != nil {
			b.slots[k] = nil
			return item{text: js}, true
		}
	}
	n := len(b.order)
	for i := range n {
		idx := (b.rr + i) % n
		w := b.want[b.order[idx]]
		if w.pending == nil {
			continue
		}
		it := item{pub: w.pending, sel: w.sel, skipped: w.skipped}
		w.pending, w.skipped = nil, 0
		b.rr = idx + 1
		return it, true
	}
	return item{}, false
}

func (b *browser) writeLoop() {
	defer close(b.writerDone)
	for {
		it := b.next()
		var err error
		switch {
		case it.gone:
			b.conn.CloseNow()
			b.drain()
			return
		case it.close != nil:
			b.conn.Close(it.close.code, it.close.reason)
			b.drain()
			return
		case it.pub != nil:
			err = b.writePublication(it)
			it.pub.unref()
		default:
			err = b.writeText(it.text)
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				b.e.c.slowDrops.Add(1)
				b.e.notify()
				b.e.log.Warn("browser dropped: a message took longer than the write timeout", "remote", b.remote, "timeout", b.e.cfg.WriteTimeout)
			}
			b.conn.CloseNow()
			b.drain()
			return
		}
	}
}

// drain marks the browser gone and lets go of what it was offered.
func (b *browser) drain() {
	b.mu.Lock()
	b.gone = true
	var drop []*publication
	for _, w := range b.want {
		if w.pending != nil {
			drop = append(drop, w.pending)
			w.pending = nil
		}
	}
	b.mu.Unlock()
	for _, p := range drop {
		p.unref()
	}
}

func (b *browser) writeText(js []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), b.e.cfg.WriteTimeout)
	defer cancel()
	return b.conn.Write(ctx, websocket.MessageText, js)
}

var zeros [Align]byte

// writePublication sends one publication as one binary message: the
// head, then each wanted attachment straight from its mapping (each
// Write is one WebSocket frame written to the socket: no copy is made
// for the browser).
func (b *browser) writePublication(it item) error {
	p := it.pub
	head, included, err := p.header(it.sel, it.skipped)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.e.cfg.WriteTimeout)
	defer cancel()
	w, err := b.conn.Writer(ctx, websocket.MessageBinary)
	if err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	pos := uint64(len(head))
	for i, in := range included {
		data := p.views[i].Bytes()
		if !in || len(data) == 0 {
			continue
		}
		if pad := align(pos) - pos; pad > 0 {
			if _, err := w.Write(zeros[:pad]); err != nil {
				return err
			}
			pos += pad
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
		pos += uint64(len(data))
	}
	if err := w.Close(); err != nil {
		return err
	}
	p.topic.sent.Add(1)
	p.topic.bytesSent.Add(pos)
	b.e.notify()
	return nil
}

// register admits a browser past hello: it is sent the welcome, the bus
// status and the topics, and may subscribe. False when the edge is
// closing.
func (e *Edge) register(b *browser) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	e.browsers[b] = struct{}{}
	b.queue(mustJSON(welcomeMsg{Type: "welcome", Version: Version, Topics: e.names, RouterView: e.cfg.RouterDetails != nil,
		MaxRequestBytes: MaxRequestBytes, Now: unixMs(time.Now())}))
	b.setSlot(slotStatus, e.statusJS)
	b.setSlot(slotTopics, e.topicsJS)
	e.mu.Unlock()
	e.c.clientsTotal.Add(1)
	e.notify()
	return true
}

func (e *Edge) unregister(b *browser) {
	e.mu.Lock()
	delete(e.browsers, b)
	delete(e.all, b)
	e.mu.Unlock()
	b.drain()
	e.notify()
}

// subscribe replaces a browser's selection. A topic newly followed gets
// its latest publication at once, as a replay does on the bus.
func (e *Edge) subscribe(b *browser, req Request) error {
	var unknown []string
	for name := range req.Topics {
		if e.topics[name] == nil {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("not served by this edge: %v (it serves %v)", unknown, e.names)
	}
	names := make([]string, 0, len(req.Topics))
	for name := range req.Topics {
		names = append(names, name)
	}
	sort.Strings(names)
	ack := subscribedMsg{Type: "subscribed", Topics: map[string][]string{}, Router: req.Router != nil && *req.Router}

	var drop []*publication
	e.mu.Lock()
	b.mu.Lock()
	wants := make(map[string]*want, len(names))
	for _, name := range names {
		sel := selectionOf(req.Topics[name])
		ack.Topics[name] = sel.list()
		if w := b.want[name]; w != nil {
			w.sel = sel
			wants[name] = w
			continue
		}
		w := &want{sel: sel}
		if p := e.topics[name].latest; p != nil {
			p.ref()
			w.pending = p
		}
		wants[name] = w
	}
	for name, w := range b.want {
		if wants[name] == nil && w.pending != nil {
			drop = append(drop, w.pending)
		}
	}
	b.want, b.order, b.rr = wants, names, 0
	b.routerView = ack.Router
	b.slots[slotRouter] = nil
	if b.routerView {
		b.slots[slotRouter] = e.routerJS
	}
	ok := b.queueLocked(mustJSON(ack))
	b.mu.Unlock()
	e.mu.Unlock()
	b.signal()
	for _, p := range drop {
		p.unref()
	}
	if !ok {
		b.protocolError("TOO_MANY_REQUESTS", "requests outpace the answers: read them before asking again", websocket.StatusPolicyViolation)
	}
	return nil
}
