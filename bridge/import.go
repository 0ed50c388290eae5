package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// importer receives one subject's frames and publishes them locally. Its
// NATS handler runs on one goroutine, so frames are handled in order. A
// bounded import writes each frame into the local store as its chunks
// come and publishes it from the handler; a latest one assembles in
// memory and leaves complete frames to its writer (latest.go).
type importer struct {
	b   *Bridge
	cfg *ImportConfig
	cnt *importCounters
	ctx context.Context
	sub *nats.Subscription

	mu      sync.Mutex // guards the fields below against the timeout
	cur     *assembly
	writers []*client.ArtifactWriter // the current frame's, in manifest order
	sess    *session                 // the session the writers belong to
	bufs    [][]byte                 // latest mode: the current frame's artifacts
	slot    *frameSlot               // latest mode: to the writer
	timer   *time.Timer
	dropped uint64 // sub.Dropped() already counted
	// lastDropped is the frame dropLocked abandoned, skipping the frame
	// whose later chunks are being skipped: each drop is counted once.
	lastDropped, skipping string
}

func (b *Bridge) startImport(ctx context.Context, cfg *ImportConfig) (*importer, error) {
	im := &importer{b: b, cfg: cfg, cnt: b.imports[cfg.Topic], ctx: ctx}
	// Held until im.sub is set: the handler may run before Subscribe returns.
	im.mu.Lock()
	defer im.mu.Unlock()
	sub, err := b.nc.Subscribe(cfg.Subject+".*", im.onMsg)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", cfg.Subject, err)
	}
	// Messages past pendingBytes are dropped by nats.go (counted), rather
	// than a slow import holding the connection's memory without bound.
	if err := sub.SetPendingLimits(-1, cfg.PendingBytes); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	im.sub = sub
	if cfg.Mode == "latest" {
		wctx, stop := context.WithCancel(ctx)
		im.slot = newFrameSlot(stop)
		go im.writeLatest(wctx)
	}
	return im, nil
}

// stop unsubscribes, waits for the handler to return and abandons a frame
// in progress.
func (im *importer) stop() {
	im.sub.Unsubscribe()
	// A handler already running holds the lock: taking it waits for that
	// one; any later one finds the context ended and does nothing.
	im.mu.Lock()
	im.abandonLocked()
	im.mu.Unlock()
	if im.slot != nil {
		im.stopLatest()
	}
}

// onMsg takes one message of the subject: a frame's next chunk, or the
// first of a new frame.
func (im *importer) onMsg(m *nats.Msg) {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.countNATSDropsLocked()
	if im.ctx.Err() != nil {
		im.abandonLocked()
		return
	}
	h := m.Header
	if h.Get(hdrOrigin) == im.b.cfg.Origin {
		// Our own export coming back (a shared subject, or another
		// bridge's re-export): never published here again.
		if i, _, ok := parseChunk(h.Get(hdrChunk)); ok && i == 0 {
			im.cnt.droppedOrigin.Add(1)
		}
		return
	}
	if im.cur != nil {
		if err := im.cur.accept(h); err != nil {
			im.dropLocked(err)
			// This message may start the next frame.
		} else {
			im.chunkLocked(m.Data)
			return
		}
	}
	i, _, ok := parseChunk(h.Get(hdrChunk))
	if ok && i > 0 {
		// The rest of a frame already dropped, or one whose first chunk
		// never came: counted once.
		if f := h.Get(hdrFrame); f != im.skipping {
			im.skipping = f
			if f != im.lastDropped {
				im.cnt.droppedMissing.Add(1)
			}
		}
		return
	}
	a, err := startAssembly(h, im.maxArtifact(), false)
	if err != nil {
		im.count(err)
		return
	}
	if err := im.beginLocked(a); err != nil {
		im.cnt.droppedLocal.Add(1)
		im.b.log.Warn("import: cannot write locally", "topic", im.cfg.Topic, "err", err)
		return
	}
	im.chunkLocked(m.Data)
}

func (im *importer) maxArtifact() int64 {
	if s := im.b.current(); s != nil {
		return int64(s.c.Info().Limits.MaxArtifactBytes)
	}
	return 0
}

// beginLocked allocates the frame's artifacts in the local store, or in
// memory for a latest import.
func (im *importer) beginLocked(a *assembly) error {
	s := im.b.current()
	if s == nil {
		return errors.New("no local router")
	}
	if im.slot != nil {
		// Memory is taken before any byte arrives: a frame the local
		// store could not hold is refused here, not after.
		if total, budget := a.man.total()-a.man.Payload.Size, s.c.Info().Limits.MaxStoreBytes; uint64(total) > budget {
			return fmt.Errorf("a frame of %d artifact bytes, the local store holds %d", total, budget)
		}
		for _, p := range a.man.Artifacts {
			buf := im.slot.buffer(p.Size)
			im.bufs = append(im.bufs, buf)
			a.sinks = append(a.sinks, memSink(buf))
		}
	} else {
		ws, err := allocateParts(im.ctx, s.c, &a.man)
		if err != nil {
			return err
		}
		for _, w := range ws {
			a.sinks = append(a.sinks, w)
		}
		im.sess, im.writers = s, ws
	}
	im.cur = a
	im.armLocked()
	return nil
}

// allocateParts allocates a frame's artifacts in c's store, in manifest
// order; after a refusal it gives back those it had.
func allocateParts(ctx context.Context, c *client.Client, man *manifest) ([]*client.ArtifactWriter, error) {
	ws := make([]*client.ArtifactWriter, 0, len(man.Artifacts))
	for _, p := range man.Artifacts {
		w, err := c.Allocate(ctx, p.Size, p.ContentType)
		if err != nil {
			closeWriters(ws)
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// armLocked (re)starts the wait for the frame's next chunk.
func (im *importer) armLocked() {
	d := time.Duration(im.cfg.FrameTimeout)
	cur := im.cur
	if im.timer != nil {
		im.timer.Stop()
	}
	im.timer = time.AfterFunc(d, func() {
		im.mu.Lock()
		defer im.mu.Unlock()
		if im.cur == cur {
			im.dropLocked(fmt.Errorf("%w: no chunk for %v", errMissingChunk, d))
		}
	})
}

func (im *importer) chunkLocked(data []byte) {
	done, err := im.cur.write(data)
	if err != nil {
		im.dropLocked(err)
		return
	}
	if !done {
		im.armLocked()
		return
	}
	im.publishLocked()
}

// publishLocked takes the complete frame: a latest import leaves it to
// its writer, replacing one not taken yet; a bounded one publishes it.
func (im *importer) publishLocked() {
	a, s, ws, bufs := im.cur, im.sess, im.writers, im.bufs
	im.cur, im.sess, im.writers, im.bufs = nil, nil, nil, nil
	if im.timer != nil {
		im.timer.Stop()
	}
	if im.slot != nil {
		if old := im.slot.offer(&heldFrame{a: a, bufs: bufs}); old != nil {
			im.cnt.coalesced.Add(1)
			im.slot.recycle(old.bufs)
		}
		return
	}
	im.beforePublish()
	im.publish(im.ctx, s, a, ws)
}

// beforePublish runs the test hook, if any.
func (im *importer) beforePublish() {
	if hook := im.b.opts.BeforeImportPublish; hook != nil {
		hook(im.cfg.Topic)
	}
}

// publish seals every artifact with its digest, which is where the
// artifacts' bytes are checked (the router hashes each as it seals it; the
// assembly checked sizes and the payload), and publishes the frame through
// s; any failure publishes nothing.
func (im *importer) publish(ctx context.Context, s *session, a *assembly, ws []*client.ArtifactWriter) {
	if im.b.current() != s {
		closeWriters(ws)
		im.cnt.droppedLocal.Add(1)
		return
	}
	var atts []client.Attachment
	defer func() {
		for _, at := range atts {
			at.Artifact.Close()
		}
	}()
	for i, w := range ws {
		art, err := w.Seal(ctx, client.Digest(a.man.Artifacts[i].SHA256), client.NoWait())
		if err != nil {
			closeWriters(ws[i+1:])
			im.cnt.droppedLocal.Add(1)
			return
		}
		atts = append(atts, client.Attach(a.man.Artifacts[i].Name, art))
	}
	own := im.b.own[im.cfg.Topic]
	var rc client.PublishReceipt
	var err error
	for attempt := 0; ; attempt++ {
		if own != nil {
			own.mu.Lock()
		}
		rc, err = s.c.Publish(ctx, im.cfg.Topic, wire.RawJSON(a.payload), atts...)
		if own != nil {
			if err == nil {
				own.add(rc.TopicSequence)
			}
			own.mu.Unlock()
		}
		// A full bounded queue refuses the whole publication: try again a
		// few times before dropping the frame (the producer's side of
		// bounded mode; NATS keeps no frames for us meanwhile).
		if !errors.Is(err, wire.ErrBackpressure) || attempt == 50 {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	if err != nil {
		// A refused publication says nothing of the seals: ask them.
		switch sealErr := sealed(ctx, atts); {
		case errors.Is(sealErr, wire.ErrArtifactMismatch):
			im.count(fmt.Errorf("%w: %v", errCorrupt, sealErr))
			return
		case sealErr == nil:
			im.cnt.received.Add(1)
		}
		im.cnt.droppedLocal.Add(1)
		im.b.log.Warn("import: publish", "topic", im.cfg.Topic, "err", err)
		return
	}
	im.cnt.received.Add(1)
	im.cnt.admitted.Add(1)
	im.cnt.deliveries.Add(rc.Subscribers)
}

// sealed is the first failed seal of atts, if any.
func sealed(ctx context.Context, atts []client.Attachment) error {
	for _, at := range atts {
		if _, err := at.Artifact.Sealed(ctx); err != nil {
			return err
		}
	}
	return nil
}

// dropLocked abandons the frame in progress, counting why.
func (im *importer) dropLocked(err error) {
	if im.cur == nil {
		return
	}
	im.lastDropped = im.cur.meta.Frame
	im.count(err)
	im.abandonLocked()
}

func (im *importer) count(err error) {
	if errors.Is(err, errMissingChunk) {
		im.cnt.droppedMissing.Add(1)
	} else {
		im.cnt.droppedCorrupt.Add(1)
	}
	im.b.log.Debug("import: frame dropped", "topic", im.cfg.Topic, "err", err)
}

func (im *importer) abandonLocked() {
	closeWriters(im.writers)
	if im.slot != nil {
		im.slot.recycle(im.bufs)
	}
	im.cur, im.sess, im.writers, im.bufs = nil, nil, nil, nil
	if im.timer != nil {
		im.timer.Stop()
		im.timer = nil
	}
}

func closeWriters(ws []*client.ArtifactWriter) {
	for _, w := range ws {
		w.Close() // releases the staging file: nothing was sealed
	}
}

// countNATSDropsLocked adds what nats.go dropped for this subscription
// since the last look.
func (im *importer) countNATSDropsLocked() {
	n, err := im.sub.Dropped()
	if err != nil || n < 0 {
		return
	}
	if uint64(n) > im.dropped {
		im.cnt.natsDropped.Add(uint64(n) - im.dropped)
		im.dropped = uint64(n)
	}
}
