package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/client"
)

// publication is one message of a topic as the edge serves it: its header
// fields and, per attachment, an explicit hold and a read-only view. It is
// shared by every browser that sends it and by its topic (the latest);
// the last reference to go closes the views and lets the holds go.
//
// The holds are why the delivery itself is consumed at once: the
// subscription has one credit, and a browser still writing an older
// frame must not keep the next one from arriving.
type publication struct {
	topic       *topic
	seq         uint64
	incarnation string
	replaced    uint64
	payload     json.RawMessage
	receivedUs  int64
	atts        []AttachmentInfo
	holds       []*client.Artifact
	views       []*client.ArtifactView // nil where the view failed
	bytes       uint64                 // attachment bytes, for rates

	refs     atomic.Int32
	released func() // counts the release for the edge's stats
}

// take turns a delivered message into a publication with one reference,
// consuming the delivery before any view is made.
func take(ctx context.Context, t *topic, m *client.Message) (p *publication, err error) {
	p = &publication{topic: t, seq: m.TopicSequence, incarnation: m.TopicIncarnation.String(), replaced: m.Replaced,
		payload: json.RawMessage(append([]byte(nil), m.Payload...)), receivedUs: time.Now().UnixMicro()}
	p.refs.Store(1)
	defer func() {
		if err != nil {
			p.release()
			p = nil
		}
	}()
	names := m.Attachments()
	for _, name := range names {
		a, err := m.Artifact(name)
		if err != nil {
			m.Close()
			return p, fmt.Errorf("attachment %s: %w", name, err)
		}
		h, err := a.Retain(ctx)
		a.Close()
		if err != nil {
			m.Close()
			return p, fmt.Errorf("holding attachment %s: %w", name, err)
		}
		ref := h.Ref()
		p.holds = append(p.holds, h)
		p.atts = append(p.atts, AttachmentInfo{Name: name, ContentType: ref.ContentType, Size: ref.ByteLength})
		p.bytes += ref.ByteLength
	}
	// Consumed: the subscription's credit returns and the next message
	// can come while browsers are still sending this one.
	m.Close()
	p.views = make([]*client.ArtifactView, len(p.holds))
	var errs []error
	for i, h := range p.holds {
		v, err := h.View(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("viewing attachment %s: %w", p.atts[i].Name, err))
			continue
		}
		if uint64(len(v.Bytes())) != p.atts[i].Size {
			v.Close()
			errs = append(errs, fmt.Errorf("attachment %s maps %d bytes, its reference says %d", p.atts[i].Name, len(v.Bytes()), p.atts[i].Size))
			continue
		}
		p.views[i] = v
	}
	return p, errors.Join(errs...)
}

func (p *publication) ref() { p.refs.Add(1) }

func (p *publication) unref() {
	if n := p.refs.Add(-1); n == 0 {
		p.release()
	} else if n < 0 {
		panic("edge: publication released twice")
	}
}

func (p *publication) release() {
	for _, v := range p.views {
		if v != nil {
			v.Close()
		}
	}
	for _, h := range p.holds {
		h.Close()
	}
	if p.released != nil {
		p.released()
	}
}

// header builds the message head for a browser that wants sel, with its
// skip count; it reports which attachments it includes.
func (p *publication) header(sel selection, skipped uint64) ([]byte, []bool, error) {
	h := PublicationHeader{Type: "publication", Topic: p.topic.name, Sequence: p.seq, Incarnation: p.incarnation,
		Replaced: p.replaced, Skipped: skipped, ReceivedUs: p.receivedUs, Payload: p.payload,
		Attachments: make([]Attachment, len(p.atts))}
	included := make([]bool, len(p.atts))
	for i, a := range p.atts {
		h.Attachments[i] = Attachment{Name: a.Name, ContentType: a.ContentType, Size: a.Size}
		included[i] = p.views[i] != nil && sel.wants(a.Name)
	}
	head, err := encodeHeader(&h, included)
	return head, included, err
}
