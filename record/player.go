package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// PlayOptions configure Play. The zero value publishes everything once, as
// fast as the router admits it.
type PlayOptions struct {
	// Speed scales the recorded pace: 1 is the recorded pace, 2 twice as
	// fast; 0 does not wait at all.
	Speed float64
	// Loop plays the recording again from its start (at Start) until ctx
	// ends.
	Loop bool
	// Topics, when not empty, plays only these recorded topics.
	Topics []string
	// Remap publishes a recorded topic under another name.
	Remap map[string]string
	// Start and End play only what was received that long after the
	// recording's first publication [End 0: to the end].
	Start, End time.Duration
	// NoDeclare leaves topics alone: by default a topic is declared, with
	// its recorded retention (none when the recording does not say), before
	// its first publication; one that exists already is used as it is.
	NoDeclare bool
	// OnPublish, if set, is called after each publication.
	OnPublish func(p *Publication, rc client.PublishReceipt)
}

// PlayStats count what Play published.
type PlayStats struct {
	Publications  uint64
	Artifacts     uint64
	ArtifactBytes uint64
	Backpressured uint64 // publications refused BACKPRESSURE and sent again
	Loops         int
}

// Play publishes r's publications through c, from where r stands: each
// artifact is allocated in the store, written there from the recording and
// sealed (with its recorded digest, which the router checks), then the
// publication is published with its recorded payload. It returns at the
// end of the recording (Loop: when ctx ends, then with a nil error), or at
// the first error: bad input in the recording (nothing of that publication
// is published) or a refusal. A publication refused BACKPRESSURE by a full
// bounded subscriber is sent again until it is admitted or ctx ends.
func Play(ctx context.Context, c *client.Client, r *Reader, opts PlayOptions) (PlayStats, error) {
	var st PlayStats
	var only map[string]bool
	if len(opts.Topics) > 0 {
		only = map[string]bool{}
		for _, t := range opts.Topics {
			only[t] = true
		}
	}
	declared := map[string]bool{}
	for {
		var first int64 = -1 // the recording's first receive time
		var t0 int64         // the first played publication's receive time
		var w0 time.Time     // and when it was published
		played := false
		for {
			p, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return st, err
			}
			if first < 0 {
				first = p.LogTime
			}
			at := time.Duration(p.LogTime - first)
			if at < opts.Start || (only != nil && !only[p.Topic]) {
				continue
			}
			if opts.End > 0 && at > opts.End {
				break
			}
			if opts.Speed > 0 {
				if !played {
					t0, w0 = p.LogTime, time.Now()
				} else if err := sleepUntil(ctx, w0.Add(time.Duration(float64(p.LogTime-t0)/opts.Speed))); err != nil {
					return st, nilIfLoop(err, opts.Loop)
				}
			}
			played = true
			topic := p.Topic
			if to, ok := opts.Remap[topic]; ok {
				topic = to
			}
			if !opts.NoDeclare && !declared[topic] {
				ret := p.Retention
				if ret == 0 {
					ret = wire.RetainNone
				}
				if _, err := c.DeclareTopic(ctx, topic, ret); err != nil && !errors.Is(err, wire.ErrConflict) {
					return st, fmt.Errorf("declare %s: %w", topic, err)
				}
				declared[topic] = true
			}
			rc, err := publish(ctx, c, topic, p, &st)
			if err != nil {
				return st, nilIfLoop(err, opts.Loop && ctx.Err() != nil)
			}
			st.Publications++
			if opts.OnPublish != nil {
				opts.OnPublish(p, rc)
			}
		}
		st.Loops++
		if !opts.Loop || ctx.Err() != nil {
			return st, nil
		}
		if err := r.Rewind(); err != nil {
			return st, err
		}
	}
}

func nilIfLoop(err error, loop bool) error {
	if loop {
		return nil
	}
	return err
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// publish renders p's artifacts into the store and publishes p on topic.
func publish(ctx context.Context, c *client.Client, topic string, p *Publication, st *PlayStats) (client.PublishReceipt, error) {
	atts := make([]client.Attachment, 0, len(p.Artifacts))
	defer func() {
		for _, a := range atts {
			a.Artifact.Close()
		}
	}()
	for _, a := range p.Artifacts {
		w, err := c.Allocate(ctx, int64(len(a.Data)), a.ContentType)
		if err != nil {
			return client.PublishReceipt{}, fmt.Errorf("%s #%d: allocate %s: %w", p.Topic, p.TopicSequence, a.Name, err)
		}
		if _, err := w.Write(a.Data); err != nil {
			w.Close()
			return client.PublishReceipt{}, fmt.Errorf("%s #%d: write %s: %w", p.Topic, p.TopicSequence, a.Name, err)
		}
		opts := []client.SealOption{client.NoWait()}
		if a.Digest != "" {
			opts = append(opts, client.Digest(a.Digest))
		}
		art, err := w.Seal(ctx, opts...)
		if err != nil {
			return client.PublishReceipt{}, fmt.Errorf("%s #%d: seal %s: %w", p.Topic, p.TopicSequence, a.Name, err)
		}
		atts = append(atts, client.Attach(a.Name, art))
	}
	backoff := 100 * time.Microsecond
	for {
		rc, err := c.Publish(ctx, topic, p.Payload, atts...)
		if err == nil {
			st.Artifacts += uint64(len(atts))
			for _, a := range p.Artifacts {
				st.ArtifactBytes += uint64(len(a.Data))
			}
			return rc, nil
		}
		if !errors.Is(err, wire.ErrBackpressure) {
			return rc, fmt.Errorf("publish %s (recorded %s #%d): %w", topic, p.Topic, p.TopicSequence, err)
		}
		// A full bounded subscriber: the publication is whole and still
		// ours, so wait a little and offer it again.
		st.Backpressured++
		if err := sleepUntil(ctx, time.Now().Add(backoff)); err != nil {
			return rc, err
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}
