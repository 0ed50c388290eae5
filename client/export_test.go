package client

import "github.com/flybus/flybus/wire"

// OwnerOf is the owner an artifact handle uses on the router, for tests
// that check two handles share one.
func OwnerOf(a *Artifact) wire.OwnerID { return a.g.owner }

// WithControlLane returns cfg with room for n queued consumes, releases
// and cancels.
func WithControlLane(cfg Config, n int) Config { cfg.controlLane = n; return cfg }

// Waiting is how many commands of c's current connection await a reply, and
// whether its consumes are quiet (extension quiet-consume).
func Waiting(c *Client) (n int, quiet bool) {
	c.mu.Lock()
	cn := c.cur
	c.mu.Unlock()
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return len(cn.waiters), cn.quietConsume
}
