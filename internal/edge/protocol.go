package edge

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/flybus/flybus/wire"
)

// The edge protocol (docs/edge.md): a browser sends text messages holding
// one JSON object each (Request); the edge answers with text messages for
// its notices and one binary message per publication.

// Protocol constants a client needs.
const (
	// Subprotocol is the WebSocket subprotocol a client must offer.
	Subprotocol = "flybus-edge.v1"
	// Version is the protocol version hello names.
	Version = 1
	// MaxRequestBytes is the largest text message a browser may send.
	MaxRequestBytes = 4096
	// MaxTopicsPerRequest bounds the topics one subscribe names.
	MaxTopicsPerRequest = 64
	// MaxTokenBytes bounds hello's token.
	MaxTokenBytes = 512
	// AllAttachments in a subscribe's list asks for every attachment.
	AllAttachments = "*"
)

// CloseUnauthorized is the close code for a hello without the right token.
const CloseUnauthorized = 4001

// Request is one message from a browser. Op is "hello" (first, once),
// "subscribe" (the whole selection, replacing the previous one) or "time"
// (asks for the edge's clock).
type Request struct {
	Op      string `json:"op"`
	Version int    `json:"version,omitempty"`
	Token   string `json:"token,omitempty"`
	// Topics maps each topic to the attachment names wanted with its
	// publications: none ([] or null) for header and payload only, "*" for all.
	Topics map[string][]string `json:"topics"`
	// Router asks for the router's live view (subscribe only).
	Router *bool `json:"router,omitempty"`
	// T is the client's clock, echoed by the time answer.
	T *float64 `json:"t,omitempty"`
}

// RequestError is why a request was refused.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) error {
	return &RequestError{Msg: fmt.Sprintf(format, args...)}
}

// DecodeRequest parses and checks one browser message. It is strict: the
// text must be one JSON object under the bus's rules (no duplicate keys,
// valid UTF-8), with only the fields its op takes.
func DecodeRequest(b []byte) (Request, error) {
	var r Request
	if len(b) > MaxRequestBytes {
		return r, badRequest("a request holds at most %d bytes", MaxRequestBytes)
	}
	if err := wire.Valid(b); err != nil {
		return r, badRequest("not strict JSON: %v", err)
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return r, badRequest("a request is a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Request{}, badRequest("%v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if err := r.check(); err != nil {
		return Request{}, err
	}
	return r, nil
}

func (r *Request) check() error {
	extra := func(allowed ...string) error {
		present := map[string]bool{"version": r.Version != 0, "token": r.Token != "", "topics": r.Topics != nil,
			"router": r.Router != nil, "t": r.T != nil}
		for _, a := range allowed {
			delete(present, a)
		}
		var names []string
		for k, v := range present {
			if v {
				names = append(names, k)
			}
		}
		if len(names) > 0 {
			sort.Strings(names)
			return badRequest("%s takes no %s", r.Op, strings.Join(names, ", "))
		}
		return nil
	}
	switch r.Op {
	case "hello":
		if r.Version != Version {
			return badRequest("hello needs version %d (got %d)", Version, r.Version)
		}
		if len(r.Token) > MaxTokenBytes {
			return badRequest("the token is longer than %d bytes", MaxTokenBytes)
		}
		return extra("version", "token")
	case "subscribe":
		if r.Topics == nil {
			return badRequest(`subscribe needs "topics" (an object; {} stops every topic)`)
		}
		if len(r.Topics) > MaxTopicsPerRequest {
			return badRequest("subscribe names at most %d topics", MaxTopicsPerRequest)
		}
		for name, atts := range r.Topics {
			if !wire.ValidName(name) {
				return badRequest("%q is not a topic name", name)
			}
			if err := checkAttachmentNames(name, atts); err != nil {
				return err
			}
		}
		return extra("topics", "router")
	case "time":
		if r.T == nil {
			return badRequest(`time needs "t"`)
		}
		return extra("t")
	case "":
		return badRequest(`a request needs "op"`)
	}
	return badRequest("unknown op %q (hello, subscribe, time)", r.Op)
}

func checkAttachmentNames(topic string, atts []string) error {
	if len(atts) > wire.MaxAttachments {
		return badRequest("topic %s: at most %d attachment names", topic, wire.MaxAttachments)
	}
	seen := map[string]bool{}
	for _, a := range atts {
		switch {
		case a == AllAttachments && len(atts) > 1:
			return badRequest(`topic %s: "*" stands alone`, topic)
		case a != AllAttachments && !wire.ValidID(a):
			return badRequest("topic %s: %q is not an attachment name", topic, a)
		case seen[a]:
			return badRequest("topic %s: attachment %s named twice", topic, a)
		}
		seen[a] = true
	}
	return nil
}

// PublicationHeader is the JSON header of a publication message.
type PublicationHeader struct {
	Type        string          `json:"type"` // "publication"
	Topic       string          `json:"topic"`
	Sequence    uint64          `json:"sequence"`
	Incarnation string          `json:"incarnation"`
	Replaced    uint64          `json:"replaced"`   // coalesced by the router before the edge took one
	Skipped     uint64          `json:"skipped"`    // this browser's, since its previous message on the topic
	ReceivedUs  int64           `json:"receivedUs"` // when the edge took it, Unix microseconds
	Payload     json.RawMessage `json:"payload"`
	Attachments []Attachment    `json:"attachments"`
}

// Attachment describes one artifact a publication carries. Offset is
// where its bytes start in the message, or 0 when they were not asked for.
type Attachment struct {
	Name        string `json:"name"`
	ContentType string `json:"contentType"`
	Size        uint64 `json:"size"`
	Offset      uint64 `json:"offset,omitempty"`
}

// Align is the alignment of every attachment's offset, so typed arrays
// (Float32Array, BigUint64Array) can view the bytes in place.
const Align = 8

func align(n uint64) uint64 { return (n + Align - 1) &^ (Align - 1) }

// encodeHeader returns the message's head: the header's length as a u32
// little-endian, then the JSON, padded with spaces so that the first
// attachment starts aligned. It sets the offsets of the attachments
// included (sizes must be set).
func encodeHeader(h *PublicationHeader, included []bool) ([]byte, error) {
	n := 0
	for _, in := range included {
		if in {
			n++
		}
	}
	// Offsets add digits; start from a guess that usually holds, and grow.
	var base uint64
	for range 8 {
		off := base
		for i := range h.Attachments {
			h.Attachments[i].Offset = 0
			if included[i] {
				off = align(off)
				h.Attachments[i].Offset = off
				off += h.Attachments[i].Size
			}
		}
		js, err := json.Marshal(h)
		if err != nil {
			return nil, err
		}
		need := align(uint64(4 + len(js)))
		if base == 0 {
			base = align(need + uint64(24*n))
			continue
		}
		if need <= base {
			out := make([]byte, base)
			binary.LittleEndian.PutUint32(out, uint32(base-4))
			copy(out[4:], js)
			for i := 4 + len(js); i < len(out); i++ {
				out[i] = ' '
			}
			return out, nil
		}
		base = need
	}
	return nil, errors.New("edge: header layout did not settle")
}

// ParsePublication reads a publication message's header and checks that
// every included attachment lies within the message, aligned, in order.
// The bytes of attachment i are msg[a.Offset : a.Offset+a.Size].
func ParsePublication(msg []byte) (PublicationHeader, error) {
	var h PublicationHeader
	if len(msg) < 4 {
		return h, errors.New("edge: a publication message starts with a 4-byte header length")
	}
	n := uint64(binary.LittleEndian.Uint32(msg))
	if 4+n > uint64(len(msg)) {
		return h, fmt.Errorf("edge: header of %d bytes in a message of %d", n, len(msg))
	}
	head := msg[4 : 4+n]
	if err := wire.Valid(head); err != nil {
		return h, fmt.Errorf("edge: header: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return h, fmt.Errorf("edge: header: %w", err)
	}
	if h.Type != "publication" {
		return h, fmt.Errorf("edge: header type %q, want publication", h.Type)
	}
	next := 4 + n
	for _, a := range h.Attachments {
		if a.Offset == 0 {
			continue
		}
		if a.Offset < next || a.Offset%Align != 0 || a.Size > uint64(len(msg)) || a.Offset > uint64(len(msg))-a.Size {
			return h, fmt.Errorf("edge: attachment %s at %d+%d does not fit a message of %d bytes after %d", a.Name, a.Offset, a.Size, len(msg), next)
		}
		next = a.Offset + a.Size
	}
	return h, nil
}

// Notices: the edge's text messages. Each is a JSON object whose "type"
// says which.

type welcomeMsg struct {
	Type            string   `json:"type"` // "welcome"
	Version         int      `json:"version"`
	Topics          []string `json:"topics"`
	RouterView      bool     `json:"routerView"`
	MaxRequestBytes int      `json:"maxRequestBytes"`
	Now             float64  `json:"now"` // Unix milliseconds
}

type statusMsg struct {
	Type     string  `json:"type"` // "status"
	Bus      string  `json:"bus"`  // "up" or "down"
	Since    float64 `json:"since"`
	Reason   string  `json:"reason,omitempty"`
	RouterID string  `json:"routerId,omitempty"`
}

type subscribedMsg struct {
	Type   string              `json:"type"` // "subscribed"
	Topics map[string][]string `json:"topics"`
	Router bool                `json:"router"`
}

type timeMsg struct {
	Type string  `json:"type"` // "time"
	T    float64 `json:"t"`
	Now  float64 `json:"now"`
}

type errorMsg struct {
	Type    string `json:"type"` // "error"
	Code    string `json:"code"`
	Message string `json:"message"`
}

// TopicStatus is one topic in the periodic topics notice.
type TopicStatus struct {
	Name         string           `json:"name"`
	Subscribed   bool             `json:"subscribed"`
	State        string           `json:"state"`
	Sequence     uint64           `json:"sequence"`
	Incarnation  string           `json:"incarnation,omitempty"`
	Publications uint64           `json:"publications"`
	Replaced     uint64           `json:"replaced"`
	Rate         float64          `json:"rate"`      // publications per second over the interval
	BytesRate    float64          `json:"bytesRate"` // attachment bytes per second received
	Attachments  []AttachmentInfo `json:"attachments"`
}

// AttachmentInfo names an attachment of a topic's latest publication.
type AttachmentInfo struct {
	Name        string `json:"name"`
	ContentType string `json:"contentType"`
	Size        uint64 `json:"size"`
}

type topicsMsg struct {
	Type     string        `json:"type"` // "topics"
	Interval float64       `json:"interval"`
	Topics   []TopicStatus `json:"topics"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only types of this file, which always marshal
	}
	return b
}
