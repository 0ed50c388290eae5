package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// The history service's methods and their bodies.
const (
	MethodGet   = "History.Get"
	MethodRange = "History.Range"
	// MaxRange is the widest History.Range window.
	MaxRange = 64
	// rangePayloadBudget keeps a Range reply's payloads inside one
	// envelope (65,536 bytes) with room for the rest of the reply.
	rangePayloadBudget = 40 << 10
)

// GetRequest asks for the frame a topic had at one sequence.
type GetRequest struct {
	Topic    string `json:"topic"`
	Sequence uint64 `json:"sequence"`
}

// RangeRequest asks for the frames of sequences From to From+Count-1.
type RangeRequest struct {
	Topic string `json:"topic"`
	From  uint64 `json:"from"`
	Count int    `json:"count"`
}

// HistoryFrame is one frame in a reply. Its artifacts are the reply's
// attachments named Attachment (History.Get: the artifact's own name;
// History.Range: "f<index>.<name>").
type HistoryFrame struct {
	Topic       string             `json:"topic"`
	Sequence    uint64             `json:"sequence"`
	Incarnation string             `json:"incarnation"`
	Origin      string             `json:"origin"`
	Router      string             `json:"router"`
	Stored      time.Time          `json:"stored"`
	Payload     wire.RawJSON       `json:"payload"`
	Artifacts   []HistoryArtifact  `json:"artifacts"`
	arts        []*client.Artifact // sealed here, attached to the reply
}

// HistoryArtifact describes one attachment of a HistoryFrame.
type HistoryArtifact struct {
	Name        string `json:"name"`
	Attachment  string `json:"attachment"`
	ContentType string `json:"contentType"`
	ByteLength  int64  `json:"byteLength"`
	SHA256      string `json:"sha256"`
}

// GetReply answers History.Get; Found is false when the stream does not
// hold the frame (never stored, coalesced away, or past the limits).
type GetReply struct {
	Found bool          `json:"found"`
	Frame *HistoryFrame `json:"frame,omitempty"`
	Error string        `json:"error,omitempty"`
}

// RangeReply answers History.Range: the frames found, in sequence order,
// the sequences of the window the stream does not hold, and Next, the
// first sequence not looked at when the reply filled up (0 when done).
type RangeReply struct {
	Frames  []*HistoryFrame `json:"frames"`
	Missing []uint64        `json:"missing"`
	Next    uint64          `json:"next,omitempty"`
	Error   string          `json:"error,omitempty"`
}

var errNotFound = errors.New("not in the stream")

func (b *Bridge) serveHistory(ctx context.Context, c *client.Client, svc *client.Service) {
	// The connection's end is seen and reported by the session that runs
	// this, so Serve's own error says nothing more.
	_ = svc.Serve(ctx, func(ctx context.Context, req *client.Request) {
		b.history.requests.Add(1)
		b.answer(ctx, c, req)
	})
}

func (b *Bridge) answer(ctx context.Context, c *client.Client, req *client.Request) {
	var outcome any
	var frames []*HistoryFrame
	failed := false
	switch req.Method {
	case MethodGet:
		var in GetRequest
		if err := req.Decode(&in); err != nil {
			outcome, failed = GetReply{Error: "History.Get takes {topic, sequence}: " + err.Error()}, true
			break
		}
		f, err := b.loadFrame(ctx, c, in.Topic, in.Sequence, "")
		switch {
		case errors.Is(err, errNotFound):
			outcome = GetReply{}
		case err != nil:
			outcome, failed = GetReply{Error: err.Error()}, true
		default:
			frames = []*HistoryFrame{f}
			outcome = GetReply{Found: true, Frame: f}
		}
	case MethodRange:
		var in RangeRequest
		if err := req.Decode(&in); err != nil || in.Count < 1 || in.Count > MaxRange {
			msg := fmt.Sprintf("History.Range takes {topic, from, count} with count 1 to %d", MaxRange)
			if err != nil {
				msg += ": " + err.Error()
			}
			outcome, failed = RangeReply{Error: msg}, true
			break
		}
		out := RangeReply{Frames: []*HistoryFrame{}, Missing: []uint64{}}
		budget := 0
		for seq := in.From; seq < in.From+uint64(in.Count); seq++ {
			if budget > rangePayloadBudget {
				out.Next = seq
				break
			}
			f, err := b.loadFrame(ctx, c, in.Topic, seq, "f"+strconv.Itoa(len(out.Frames))+".")
			if errors.Is(err, errNotFound) {
				out.Missing = append(out.Missing, seq)
				continue
			}
			if err != nil {
				out.Error, failed = err.Error(), true
				break
			}
			out.Frames = append(out.Frames, f)
			budget += len(f.Payload) + 512
		}
		frames, outcome = out.Frames, out
	default:
		outcome, failed = map[string]string{"error": "unknown method " + req.Method + "; this service answers " +
			MethodGet + " and " + MethodRange}, true
	}
	var atts []client.Attachment
	for _, f := range frames {
		for i, a := range f.arts {
			atts = append(atts, client.Attach(f.Artifacts[i].Attachment, a))
		}
	}
	// Counted before the reply, which the caller may see at once.
	if failed {
		b.history.errors.Add(1)
	}
	b.history.frames.Add(uint64(len(frames)))
	if _, err := req.Reply(ctx, outcome, atts...); err != nil {
		b.log.Warn("history reply", "method", req.Method, "err", err)
		if !failed {
			b.history.errors.Add(1)
		}
	}
	for _, a := range atts {
		a.Artifact.Close() // the reply's delivery owns them now
	}
}

// loadFrame reads one frame from the topic's stream, checks it like an
// import does and seals its artifacts in the local store.
func (b *Bridge) loadFrame(ctx context.Context, c *client.Client, topic string, seq uint64, prefix string) (*HistoryFrame, error) {
	st := b.streams[topic]
	var subject string
	for _, e := range b.cfg.Exports {
		if e.Topic == topic {
			subject = e.Subject
		}
	}
	if st == nil {
		return nil, fmt.Errorf("topic %q has no history here", topic)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(b.cfg.NATS.Timeout))
	defer cancel()
	subj := subject + "." + strconv.FormatUint(seq, 10)
	last, err := st.GetLastMsgForSubject(rctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	i, n, ok := parseChunk(last.Header.Get(hdrChunk))
	if !ok || i != n-1 || last.Sequence < uint64(n-1) {
		return nil, errNotFound // the frame's last chunk never reached the stream
	}
	// An export publishes a frame's chunks back to back, so they are
	// consecutive in its stream; each is checked against the frame id.
	start := last.Sequence - uint64(n-1)
	var a *assembly
	var ws []*client.ArtifactWriter
	fail := func(err error) (*HistoryFrame, error) {
		closeWriters(ws)
		return nil, err
	}
	for k := range n {
		m := last
		if k < n-1 {
			m, err = st.GetMsg(rctx, start+uint64(k))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return fail(errNotFound) // its first chunks are past the limits
			}
			if err != nil {
				return fail(err)
			}
		}
		if m.Subject != subj {
			return fail(errNotFound)
		}
		if k == 0 {
			// Checked here, so a frame the stream holds damaged is
			// answered as an error rather than failing the reply's seal.
			if a, err = startAssembly(m.Header, int64(c.Info().Limits.MaxArtifactBytes), true); err != nil {
				return fail(err)
			}
			if ws, err = allocateParts(ctx, c, &a.man); err != nil {
				return fail(err)
			}
			for _, w := range ws {
				a.sinks = append(a.sinks, w)
			}
		} else if err := a.accept(m.Header); err != nil {
			return fail(err)
		}
		if _, err := a.write(m.Data); err != nil {
			return fail(err)
		}
	}
	f := &HistoryFrame{Topic: topic, Sequence: seq, Incarnation: a.meta.Incarnation, Origin: a.meta.Origin,
		Router: a.meta.Router, Stored: last.Time, Payload: wire.RawJSON(a.payload), Artifacts: []HistoryArtifact{}}
	for i, w := range ws {
		p := a.man.Artifacts[i]
		att := prefix + p.Name
		if !wire.ValidID(att) {
			closeWriters(ws[i:])
			f.close()
			return nil, fmt.Errorf("attachment name %q is too long", att)
		}
		art, err := w.Seal(ctx, client.Digest(p.SHA256), client.NoWait())
		if err != nil {
			closeWriters(ws[i+1:])
			f.close()
			return nil, err
		}
		f.arts = append(f.arts, art)
		f.Artifacts = append(f.Artifacts, HistoryArtifact{Name: p.Name, Attachment: att, ContentType: p.ContentType,
			ByteLength: p.Size, SHA256: p.SHA256})
	}
	return f, nil
}

func (f *HistoryFrame) close() {
	for _, a := range f.arts {
		a.Close()
	}
}
