package client

import "github.com/flybus/flybus/wire"

// OwnerOf is the owner an artifact handle uses on the router, for tests
// that check two handles share one.
func OwnerOf(a *Artifact) wire.OwnerID { return a.g.owner }

// WithControlLane returns cfg with room for n queued consumes, releases
// and cancels.
func WithControlLane(cfg Config, n int) Config { cfg.controlLane = n; return cfg }
