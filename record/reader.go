package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/flybus/flybus/record/mcap"
	"github.com/flybus/flybus/wire"
)

// Publication is one recorded publication.
type Publication struct {
	File             string
	Offset           int64 // of its message record, or of the chunk holding it
	LogTime          int64 // receive time, nanoseconds since the Unix epoch
	Topic            string
	TopicIncarnation string
	TopicSequence    uint64
	Replaced         uint64
	Retention        wire.Retention // 0 when the recording does not say
	Payload          wire.RawJSON
	Artifacts        []Artifact
}

// Time is the publication's receive time.
func (p *Publication) Time() time.Time { return time.Unix(0, p.LogTime) }

// Artifact is one recorded attachment. Data aliases the recording's
// mapping (or a decompressed chunk): it is valid until the Reader's next
// Next or Close.
type Artifact struct {
	Name        string
	ContentType string
	Digest      string // hex SHA-256, when the artifact was sealed with one
	Data        []byte
}

// Reader iterates the publications of one or more recordings in order, as
// one stream. Not safe for concurrent use.
type Reader struct {
	files []string
	i     int
	cur   *mcap.Reader
	it    *mcap.Iterator
	held  *mcap.Reader // the previous file, unmapped at the next Next
	pub   Publication
	// Skipped counts messages on channels that are not flybus's.
	Skipped uint64
}

// Open opens recordings: files, and directories, which stand for the .mcap
// files in them in name order (the parts of a split recording). They are
// read in the order given, one after the other.
func Open(paths ...string) (*Reader, error) {
	files, err := Expand(paths...)
	if err != nil {
		return nil, err
	}
	r := &Reader{files: files}
	if err := r.open(0); err != nil {
		return nil, err
	}
	return r, nil
}

// Expand lists the files that paths stand for, as Open reads them.
func Expand(paths ...string) ([]string, error) {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		var parts []string
		for _, e := range ents {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".mcap") {
				parts = append(parts, filepath.Join(p, e.Name()))
			}
		}
		if len(parts) == 0 {
			return nil, fmt.Errorf("%s: no .mcap files in the directory", p)
		}
		slices.Sort(parts)
		files = append(files, parts...)
	}
	if len(files) == 0 {
		return nil, errors.New("record: no recording named")
	}
	return files, nil
}

// Files are the files the Reader reads, in order.
func (r *Reader) Files() []string { return slices.Clone(r.files) }

func (r *Reader) open(i int) error {
	mr, err := mcap.Open(r.files[i])
	if err != nil {
		return err
	}
	// Any profile is read: flybus channels are known by their metadata,
	// and the others are skipped.
	r.i, r.cur, r.it = i, mr, mr.Messages()
	return nil
}

// Rewind starts again at the first file's first publication.
func (r *Reader) Rewind() error {
	r.release()
	if r.cur != nil {
		r.cur.Close()
		r.cur = nil
	}
	return r.open(0)
}

func (r *Reader) release() {
	if r.held != nil {
		r.held.Close()
		r.held = nil
	}
}

// Close unmaps the file being read.
func (r *Reader) Close() error {
	r.release()
	if r.cur != nil {
		err := r.cur.Close()
		r.cur = nil
		return err
	}
	return nil
}

// Next returns the next publication, io.EOF after the last one, or an
// error naming the file and offset of bad input. A publication is returned
// only whole: with its payload and the bytes of every artifact. The
// publication and its bytes are valid until the next call.
func (r *Reader) Next() (*Publication, error) {
	r.release()
	if r.cur == nil {
		return nil, errors.New("record: reader closed")
	}
	for {
		if !r.it.Next() {
			if err := r.it.Err(); err != nil {
				return nil, err
			}
			if r.i+1 == len(r.files) {
				return nil, io.EOF
			}
			r.held = r.cur // its bytes may still be in use until the next call
			r.cur = nil
			if err := r.open(r.i + 1); err != nil {
				return nil, err
			}
			continue
		}
		m := r.it.Message()
		ch := r.it.Channel(m.ChannelID)
		switch ch.Metadata[keyKind] {
		case kindPub:
			return r.publication(m, ch)
		case kindArtifact:
			return nil, layoutError(r.cur.Name, r.it.Offset(), "an artifact message (channel %d, %q) without the publication message that lists it", ch.ID, ch.Topic)
		default:
			r.Skipped++
		}
	}
}

func (r *Reader) publication(m *mcap.Message, ch *mcap.Channel) (*Publication, error) {
	name, off := r.cur.Name, r.it.Offset()
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	if err := dec.Decode(&env); err != nil {
		return nil, layoutError(name, off, "publication %d on channel %q: %v", m.Sequence, ch.Topic, err)
	}
	if env.Topic != ch.Metadata[keyTopic] || len(env.Payload) == 0 || env.Payload[0] != '{' {
		return nil, layoutError(name, off, "publication %d on channel %q: topic %q or payload does not fit the layout", m.Sequence, ch.Topic, env.Topic)
	}
	if len(env.Artifacts) > wire.MaxAttachments {
		return nil, layoutError(name, off, "publication %d on topic %s lists %d artifacts, more than a message carries", m.Sequence, env.Topic, len(env.Artifacts))
	}
	p := &r.pub
	ret, _ := wire.ParseRetention(ch.Metadata[keyRetention])
	*p = Publication{File: name, Offset: off, LogTime: int64(m.LogTime), Topic: env.Topic, TopicIncarnation: env.TopicIncarnation,
		TopicSequence: env.TopicSequence, Replaced: env.Replaced, Retention: ret, Payload: wire.RawJSON(env.Payload),
		Artifacts: p.Artifacts[:0]}
	seq := m.Sequence
	for _, a := range env.Artifacts {
		if !r.it.Next() {
			if err := r.it.Err(); err != nil {
				return nil, err
			}
			return nil, layoutError(name, off, "publication %d on topic %s: the file ends before its artifact %s", seq, env.Topic, a.Name)
		}
		am := r.it.Message()
		ac := r.it.Channel(am.ChannelID)
		md := ac.Metadata
		switch {
		case md[keyKind] != kindArtifact || md[keyTopic] != env.Topic || md[keyAttachment] != a.Name:
			return nil, layoutError(name, r.it.Offset(), "publication %d on topic %s: artifact %s should follow, found channel %q", seq, env.Topic, a.Name, ac.Topic)
		case am.Sequence != seq:
			return nil, layoutError(name, r.it.Offset(), "publication %d on topic %s: artifact %s has sequence %d", seq, env.Topic, a.Name, am.Sequence)
		case uint64(len(am.Data)) != a.ByteLength:
			return nil, layoutError(name, r.it.Offset(), "publication %d on topic %s: artifact %s has %d bytes, the publication says %d", seq, env.Topic, a.Name, len(am.Data), a.ByteLength)
		}
		ct := a.ContentType
		if ct == "" {
			ct = md[keyContentType]
		}
		p.Artifacts = append(p.Artifacts, Artifact{Name: a.Name, ContentType: ct, Digest: a.Digest, Data: am.Data})
	}
	return p, nil
}

// fromBytes reads one recording held in memory, for tests and fuzzing.
func fromBytes(data []byte, name string) (*Reader, error) {
	mr, err := mcap.NewReader(data, name)
	if err != nil {
		return nil, err
	}
	return &Reader{files: []string{name}, cur: mr, it: mr.Messages()}, nil
}
