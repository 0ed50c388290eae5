package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/wire"
)

// tapConn sits between an SDK client and its transport. It records the op
// of every frame the client writes, and can hold one Write until the test
// lets it go, so that the client's write token stays taken and everything
// else the client queues waits behind it.
type tapConn struct {
	net.Conn

	mu      sync.Mutex
	pending []byte   // written bytes not yet forming a whole frame
	ops     []string // op of every whole frame written, in order
	armed   bool
	entered chan struct{} // closed when the held Write has started
	gate    chan struct{} // closed to let the held Write through
	opened  bool
}

func newTap(nc net.Conn) *tapConn { return &tapConn{Conn: nc} }

// hold makes the next Write wait for release; the returned channel is
// closed once that Write has started.
func (c *tapConn) hold() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = true
	c.entered = make(chan struct{})
	c.gate = make(chan struct{})
	c.opened = false
	return c.entered
}

// release lets a held Write through. Idempotent.
func (c *tapConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	if c.gate != nil && !c.opened {
		c.opened = true
		close(c.gate)
	}
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	var gate chan struct{}
	if c.armed {
		c.armed = false
		gate = c.gate
		close(c.entered)
	}
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	n, err := c.Conn.Write(p)
	c.record(p[:n])
	return n, err
}

func (c *tapConn) record(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, p...)
	for len(c.pending) >= 4 {
		n := int(binary.LittleEndian.Uint32(c.pending))
		if len(c.pending) < 4+n {
			break
		}
		c.ops = append(c.ops, opOf(c.pending[4:4+n]))
		c.pending = c.pending[4+n:]
	}
}

// Close lets a held Write go first, so the client's writer can stop.
func (c *tapConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// written returns how many whole frames the client has written.
func (c *tapConn) written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ops)
}

// opsSince returns the ops of the frames written after the first n.
func (c *tapConn) opsSince(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ops[n:]...)
}

// opOf reads the envelope's op: the first "op" key of the frame's JSON.
func opOf(frame []byte) string {
	const key = `"op":"`
	i := bytes.Index(frame, []byte(key))
	if i < 0 {
		return "?"
	}
	rest := frame[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "?"
	}
	return string(rest[:j])
}

// dialTap connects an SDK client through a tapConn.
func dialTap(h *bustest.Harness, id string, cfg client.Config) (*client.Client, *tapConn) {
	h.T().Helper()
	tc := newTap(h.Conn(""))
	c := h.DialOn(tc, id, cfg)
	h.T().Cleanup(tc.release) // runs before the client's Close
	return c, tc
}

// blockWriter takes c's write token with a round trip whose Write is held
// by tc, and returns once that Write has started. The returned channel
// yields the round trip's outcome after tc.release.
func blockWriter(t *testing.T, c *client.Client, tc *tapConn) <-chan error {
	t.Helper()
	entered := tc.hold()
	done := make(chan error, 1)
	go func() {
		_, err := c.DeclareTopic(context.Background(), "test.held", wire.RetainNone)
		done <- err
	}()
	select {
	case <-entered:
	case <-bustest.Ctx(t).Done():
		t.Fatal("the held write never started")
	}
	return done
}
