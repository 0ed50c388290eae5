package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flybus/flybus/client"
)

// export subscribes to one local topic and sends every message it takes,
// until ctx ends; the subscription outlives reconnects. ready gets nil once
// the subscription stands, or the router's refusal.
func (b *Bridge) export(ctx context.Context, c *client.Client, e *ExportConfig, ready chan<- error) {
	cnt := b.exports[e.Topic]
	cfg := []client.SubscribeOption{client.Bounded()}
	if e.Mode == "latest" {
		// One in flight: while a frame is on its way, the router keeps
		// only the newest value queued, so a slow link never builds a
		// backlog and the coalesced values are counted in Replaced.
		cfg = []client.SubscribeOption{client.InFlight(1)}
	}
	if e.Declare != "" {
		r, _ := parseRetention(e.Declare)
		if _, err := c.DeclareTopic(ctx, e.Topic, r); err != nil {
			b.log.Warn("declare", "topic", e.Topic, "err", err)
		}
	}
	// A topic its producer has not declared yet is awaited: the router
	// starts the subscription at the declaration, so nothing published
	// after it is missed, whoever starts first.
	sub, err := c.Subscribe(ctx, e.Topic, append(cfg, client.AwaitTopic())...)
	if err != nil {
		ready <- fmt.Errorf("export %s: subscribe: %w", e.Topic, err)
		return
	}
	defer sub.Close()
	ready <- nil
	own := b.own[e.Topic]
	var scratch []byte // reused by every frame: inline frames are copied together
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				// Only a subscription the new router refused ends here.
				b.log.Error("export ended", "topic", e.Topic, "err", err)
			}
			return
		}
		cnt.coalesced.Add(msg.Replaced)
		switch {
		case own != nil && own.has(msg.TopicSequence):
			cnt.loopSkipped.Add(1)
		case !b.nc.IsConnected() && e.Mode == "latest":
			cnt.unsent.Add(1) // a frame sent later would be stale: the next one goes instead
		default:
			if e.Mode == "bounded" {
				// Every frame, in order: wait for the server rather than
				// drop; the local queue then pushes back on the producer.
				if err := b.waitConnected(ctx); err != nil {
					msg.Close()
					return
				}
			}
			if err := b.sendFrame(ctx, c, e, msg, &scratch); err != nil {
				cnt.failed.Add(1)
				b.log.Warn("export", "topic", e.Topic, "seq", msg.TopicSequence, "err", err)
			}
		}
		msg.Close()
		cnt.consumed.Add(1)
	}
}

// outPart is one part of a frame being sent: its bytes stay valid until
// the frame has been published (they may be a view of the store).
type outPart struct {
	data []byte
}

// sendFrame publishes one message: its payload and every artifact's
// bytes, inline when they fit max_payload and in ordered chunks otherwise.
func (b *Bridge) sendFrame(ctx context.Context, c *client.Client, e *ExportConfig, msg *client.Message, reuse *[]byte) error {
	cnt := b.exports[e.Topic]
	man := manifest{Payload: part{Size: int64(len(msg.Payload)), SHA256: sha256Hex(msg.Payload)}}
	parts := []outPart{{data: msg.Payload}}
	var views []*client.ArtifactView
	defer func() {
		for _, v := range views {
			v.Close()
		}
	}()
	for _, name := range msg.Attachments() {
		a, err := msg.Artifact(name)
		if err != nil {
			return err
		}
		v, err := a.View(ctx)
		ref := a.Ref()
		a.Close() // the view keeps the delivery
		if err != nil {
			return err
		}
		views = append(views, v)
		data := v.Bytes()
		sum := ""
		if ref.Digest.Valid {
			// The router checked the bytes against it when they were sealed.
			sum = ref.Digest.V.String()
		} else {
			sum = sha256Hex(data)
		}
		man.Artifacts = append(man.Artifacts, part{Name: name, ContentType: ref.ContentType, Size: int64(len(data)), SHA256: sum})
		parts = append(parts, outPart{data: data})
	}
	mj, err := json.Marshal(&man)
	if err != nil {
		return err
	}
	frameID := b.cfg.Origin + "-" + b.run + "-" + strconv.FormatUint(b.next.Add(1), 10)
	subject := e.Subject + "." + strconv.FormatUint(msg.TopicSequence, 10)
	base := func(i, n int) nats.Header {
		h := nats.Header{}
		h.Set(hdrOrigin, b.cfg.Origin)
		h.Set(hdrRouter, c.Info().RouterID.String())
		h.Set(hdrTopic, e.Topic)
		h.Set(hdrSeq, strconv.FormatUint(msg.TopicSequence, 10))
		h.Set(hdrIncarnation, msg.TopicIncarnation.String())
		h.Set(hdrFrame, frameID)
		h.Set(hdrChunk, strconv.Itoa(i)+"/"+strconv.Itoa(n))
		return h
	}
	first := base(0, 1)
	first.Set(hdrManifest, string(mj))
	total := man.total()
	chunk, n, err := chunkPlan(total, first, b.nc.MaxPayload())
	if err != nil {
		return err
	}
	if n > 1 {
		first.Set(hdrChunk, "0/"+strconv.Itoa(n))
	}
	stream := b.streams[e.Topic]
	var acks []jetstream.PubAckFuture
	scratch := *reuse
	defer func() {
		if stream == nil {
			*reuse = scratch[:0]
		}
	}()
	idx, off := 0, 0 // position in parts
	for i := range n {
		want := int(min(chunk, total-int64(i)*chunk))
		// A chunk inside one part is a slice of it; one that spans parts
		// is copied together. Stream publishes are always copied, since
		// nats.go keeps the message until the server acknowledges it.
		var data []byte
		for want > 0 && idx < len(parts) && off == len(parts[idx].data) {
			idx, off = idx+1, 0
		}
		if want > 0 && stream == nil && len(parts[idx].data)-off >= want {
			data = parts[idx].data[off : off+want]
			off += want
		} else {
			if stream != nil {
				scratch = make([]byte, 0, want)
			} else {
				scratch = scratch[:0]
			}
			for len(scratch) < want {
				if off == len(parts[idx].data) {
					idx, off = idx+1, 0
					continue
				}
				k := min(want-len(scratch), len(parts[idx].data)-off)
				scratch = append(scratch, parts[idx].data[off:off+k]...)
				off += k
			}
			data = scratch
		}
		h := first
		if i > 0 {
			h = base(i, n)
		}
		m := &nats.Msg{Subject: subject, Header: h, Data: data}
		if stream != nil {
			f, err := b.js.PublishMsgAsync(m, jetstream.WithExpectStream(e.Stream.Name))
			if err != nil {
				cnt.storeFailed.Add(1) // never stored whole, whatever was acknowledged
				return err
			}
			acks = append(acks, f)
		} else if err := b.nc.PublishMsg(m); err != nil {
			return err
		}
		cnt.messages.Add(1)
		cnt.bytes.Add(uint64(len(data)))
	}
	if stream != nil {
		b.awaitAcks(cnt, acks)
	}
	if e.Mode == "latest" {
		// Wait until the server has the frame, so that at most one frame
		// is ever buffered on the way and the next one is the newest.
		if err := b.nc.FlushTimeout(time.Duration(b.cfg.NATS.Timeout)); err != nil {
			return err
		}
	}
	cnt.sent.Add(1)
	if n > 1 {
		cnt.chunked.Add(1)
	}
	return nil
}

// awaitAcks counts the frame stored once JetStream acknowledged every
// chunk of it, on a goroutine of its own so that the next frame need not
// wait for the acknowledgments.
func (b *Bridge) awaitAcks(cnt *exportCounters, acks []jetstream.PubAckFuture) {
	if len(acks) == 0 {
		return
	}
	b.acks.Add(1)
	go func() {
		defer b.acks.Done()
		timeout := time.NewTimer(2 * time.Duration(b.cfg.NATS.Timeout))
		defer timeout.Stop()
		for _, f := range acks {
			select {
			case <-f.Ok():
			case <-f.Err():
				cnt.storeFailed.Add(1)
				return
			case <-timeout.C:
				cnt.storeFailed.Add(1)
				return
			}
		}
		cnt.storedAcked.Add(1)
	}()
}
