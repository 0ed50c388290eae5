package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/flybus/flybus/record/mcap"
	"github.com/flybus/flybus/wire"
)

// The layout, version 1 (docs/recording.md).
const (
	// Profile is the MCAP header's profile.
	Profile = "flybus"
	// LayoutVersion is the "version" of the flybus.recording metadata.
	LayoutVersion = "1"

	schemaName     = "flybus.Publication"
	schemaEncoding = "jsonschema"
	payloadEnc     = "json"
	metadataName   = "flybus.recording"

	keyKind        = "flybus.kind"
	keyTopic       = "flybus.topic"
	keyRetention   = "flybus.retention"
	keyMode        = "flybus.mode"
	keyAttachment  = "flybus.attachment"
	keyContentType = "flybus.contentType"
	kindPub        = "publication"
	kindArtifact   = "artifact"
)

// ErrLayout: an MCAP file whose flybus channels break the layout (an
// artifact message without its publication, a length that differs from
// the envelope's). Returned inside an *mcap.Error naming file and offset.
var ErrLayout = errors.New("not a valid flybus recording")

// envelopeSchema is the JSON Schema of a publication message, for tools
// that show JSON by its schema.
var envelopeSchema = []byte(`{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"flybus publication",` +
	`"type":"object","required":["topic","topicSequence","payload","artifacts"],"properties":{` +
	`"topic":{"type":"string"},"topicIncarnation":{"type":"string"},"topicSequence":{"type":"integer"},` +
	`"replaced":{"type":"integer"},"payload":{"type":"object"},"artifacts":{"type":"array","items":{"type":"object",` +
	`"required":["name","contentType","byteLength"],"properties":{"name":{"type":"string"},"contentType":{"type":"string"},` +
	`"byteLength":{"type":"integer"},"digest":{"type":"string"}}}}}}`)

// envelope is a publication message's JSON.
type envelope struct {
	Topic            string          `json:"topic"`
	TopicIncarnation string          `json:"topicIncarnation,omitempty"`
	TopicSequence    uint64          `json:"topicSequence"`
	Replaced         uint64          `json:"replaced"`
	Payload          json.RawMessage `json:"payload"`
	Artifacts        []artifactInfo  `json:"artifacts"`
}

type artifactInfo struct {
	Name        string `json:"name"`
	ContentType string `json:"contentType"`
	ByteLength  uint64 `json:"byteLength"`
	Digest      string `json:"digest,omitempty"`
}

// appendEnvelope writes the envelope by hand: once per publication, and the
// payload goes in as the JSON it already is.
func appendEnvelope(b []byte, topic string, inc wire.TopicInc, seq, replaced uint64, payload []byte, arts []artifactInfo) []byte {
	b = append(b, `{"topic":`...)
	b = appendJSONString(b, topic)
	if inc != 0 {
		b = append(b, `,"topicIncarnation":`...)
		b = appendJSONString(b, inc.String())
	}
	b = append(b, `,"topicSequence":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"replaced":`...)
	b = strconv.AppendUint(b, replaced, 10)
	b = append(b, `,"payload":`...)
	if len(bytes.TrimSpace(payload)) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, payload...)
	}
	b = append(b, `,"artifacts":[`...)
	for i, a := range arts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, a.Name)
		b = append(b, `,"contentType":`...)
		b = appendJSONString(b, a.ContentType)
		b = append(b, `,"byteLength":`...)
		b = strconv.AppendUint(b, a.ByteLength, 10)
		if a.Digest != "" {
			b = append(b, `,"digest":`...)
			b = appendJSONString(b, a.Digest)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendJSONString quotes s for JSON; the bus's names and types are ASCII,
// but nothing here relies on it.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = fmt.Appendf(b, `\u%04x`, c)
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func publicationChannel(topic string, ret wire.Retention, mode string) map[string]string {
	m := map[string]string{keyKind: kindPub, keyTopic: topic, keyMode: mode}
	if ret != 0 {
		m[keyRetention] = ret.String()
	}
	return m
}

func artifactChannel(topic, name, contentType string) map[string]string {
	return map[string]string{keyKind: kindArtifact, keyTopic: topic, keyAttachment: name, keyContentType: contentType}
}

// layoutError is bad flybus content at a place in a file.
func layoutError(file string, off int64, format string, args ...any) error {
	return &mcap.Error{File: file, Offset: off, Err: ErrLayout, Detail: fmt.Sprintf(format, args...)}
}
