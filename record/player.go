package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

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
	// Late is how long after its place in the recorded schedule each
	// publication was sent, and Admitted how long after it the router had
	// admitted it (the publish's round trip added). Paced play only (Speed
	// > 0); the first publication of each pass sets the schedule.
	Late, Admitted Lateness
}

// Lateness summarises how late publications were admitted against the
// schedule, in 10 µs steps up to 100 ms.
type Lateness struct {
	Count    uint64
	Max      time.Duration
	buckets  []uint32 // 10 µs each; the last holds everything later
	overflow uint64
}

const lateStep, lateBuckets = 10 * time.Microsecond, 10000

func (l *Lateness) add(d time.Duration) {
	if l.buckets == nil {
		l.buckets = make([]uint32, lateBuckets)
	}
	d = max(d, 0)
	l.Count++
	l.Max = max(l.Max, d)
	if i := int(d / lateStep); i < lateBuckets {
		l.buckets[i]++
	} else {
		l.overflow++
	}
}

// Quantile returns the q-quantile (0 < q <= 1), as its 10 µs step's upper
// bound, or Max past 100 ms.
func (l Lateness) Quantile(q float64) time.Duration {
	if l.Count == 0 {
		return 0
	}
	rank := uint64(q*float64(l.Count) + 0.5)
	rank = min(max(rank, 1), l.Count)
	var seen uint64
	for i, n := range l.buckets {
		if seen += uint64(n); seen >= rank {
			return min(time.Duration(i+1)*lateStep, l.Max)
		}
	}
	return l.Max
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
			// The artifacts are rendered into the store and sealed before
			// the publication's time comes, so that what is left at that
			// time is the publish itself.
			atts, err := prepare(ctx, c, p)
			if err != nil {
				return st, nilIfLoop(err, opts.Loop && ctx.Err() != nil)
			}
			var due time.Time
			if opts.Speed > 0 {
				if !played {
					t0, w0 = p.LogTime, time.Now()
				}
				due = w0.Add(time.Duration(float64(p.LogTime-t0) / opts.Speed))
				if err := sleepUntil(ctx, due); err != nil {
					closeAll(atts)
					return st, nilIfLoop(err, opts.Loop)
				}
			}
			played = true
			if opts.Speed > 0 {
				st.Late.add(time.Since(due))
			}
			rc, err := publish(ctx, c, topic, p, atts, &st)
			if err != nil {
				return st, nilIfLoop(err, opts.Loop && ctx.Err() != nil)
			}
			if opts.Speed > 0 {
				st.Admitted.add(time.Since(due))
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

// sleepUntil waits until t or ctx's end. The runtime's timers wake up to
// a millisecond late on Linux (its poller waits in whole milliseconds), so
// the last stretch is slept by the kernel's nanosleep, which wakes within
// its timer slack (50 µs): publications leave on time without spinning.
func sleepUntil(ctx context.Context, t time.Time) error {
	if d := time.Until(t) - fineSleep; d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
	for {
		d := time.Until(t)
		if d <= 0 {
			return ctx.Err()
		}
		ts := unix.NsecToTimespec(int64(d))
		if err := unix.Nanosleep(&ts, nil); err != nil && err != unix.EINTR {
			return err
		}
	}
}

// fineSleep is how much of a wait nanosleep takes: more than the timers'
// lateness, little enough that ctx's end is noticed at once.
const fineSleep = 2 * time.Millisecond

// prepare renders p's artifacts into the store and seals them.
func prepare(ctx context.Context, c *client.Client, p *Publication) ([]client.Attachment, error) {
	atts := make([]client.Attachment, 0, len(p.Artifacts))
	for _, a := range p.Artifacts {
		w, err := c.Allocate(ctx, int64(len(a.Data)), a.ContentType)
		if err != nil {
			closeAll(atts)
			return nil, fmt.Errorf("%s #%d: allocate %s: %w", p.Topic, p.TopicSequence, a.Name, err)
		}
		if _, err := w.Write(a.Data); err != nil {
			w.Close()
			closeAll(atts)
			return nil, fmt.Errorf("%s #%d: write %s: %w", p.Topic, p.TopicSequence, a.Name, err)
		}
		opts := []client.SealOption{client.NoWait()}
		if a.Digest != "" {
			opts = append(opts, client.Digest(a.Digest))
		}
		art, err := w.Seal(ctx, opts...)
		if err != nil {
			closeAll(atts)
			return nil, fmt.Errorf("%s #%d: seal %s: %w", p.Topic, p.TopicSequence, a.Name, err)
		}
		atts = append(atts, client.Attach(a.Name, art))
	}
	return atts, nil
}

func closeAll(atts []client.Attachment) {
	for _, a := range atts {
		a.Artifact.Close()
	}
}

// publish publishes p on topic with its prepared artifacts, which it
// closes, offering it again while a bounded subscriber is full.
func publish(ctx context.Context, c *client.Client, topic string, p *Publication, atts []client.Attachment, st *PlayStats) (client.PublishReceipt, error) {
	defer closeAll(atts)
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
