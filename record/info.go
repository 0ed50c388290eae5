package record

import (
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/flybus/flybus/record/mcap"
)

// FileInfo describes one recording file.
type FileInfo struct {
	File    string `json:"file"`
	Size    int64  `json:"size"`
	Profile string `json:"profile"`
	// Complete is true when the file has its summary, which Info read
	// without reading the data; false when the data was scanned instead
	// (a recording that did not finish), with Problem saying where it ends.
	Complete      bool          `json:"complete"`
	Problem       string        `json:"problem,omitempty"`
	Compression   string        `json:"compression"` // none, zstd, or several joined by +
	Chunks        int           `json:"chunks"`
	Messages      uint64        `json:"messages"`
	Start         time.Time     `json:"start"`
	End           time.Time     `json:"end"`
	Duration      time.Duration `json:"durationNs"`
	Publications  uint64        `json:"publications"`
	Rate          float64       `json:"rate"` // publications per second
	Replaced      uint64        `json:"replaced"`
	ArtifactBytes uint64        `json:"artifactBytes"`
	Mode          string        `json:"mode,omitempty"`
	Part          int           `json:"part,omitempty"`
	Topics        []TopicInfo   `json:"topics"`
	// Other counts messages on channels that are not flybus's.
	Other uint64 `json:"otherMessages,omitempty"`
}

// TopicInfo describes one topic of a recording.
type TopicInfo struct {
	Topic         string           `json:"topic"`
	Retention     string           `json:"retention,omitempty"`
	Publications  uint64           `json:"publications"`
	Rate          float64          `json:"rate"`
	Replaced      uint64           `json:"replaced"`
	ArtifactBytes uint64           `json:"artifactBytes"`
	FirstSequence uint64           `json:"firstSequence,omitempty"`
	LastSequence  uint64           `json:"lastSequence,omitempty"`
	Attachments   []AttachmentInfo `json:"attachments,omitempty"`
}

// AttachmentInfo counts one attachment name and content type of a topic.
type AttachmentInfo struct {
	Name        string `json:"name"`
	ContentType string `json:"contentType"`
	Count       uint64 `json:"count"`
}

// Info describes the recording at path from its summary and metadata,
// without reading its data; a file without a summary (a recording that did
// not finish) is scanned instead, up to where it can be read.
func Info(path string) (*FileInfo, error) {
	mr, err := mcap.Open(path)
	if err != nil {
		return nil, err
	}
	defer mr.Close()
	fi := &FileInfo{File: path, Size: mr.Size(), Profile: mr.Header.Profile}
	s, err := mr.Summary()
	if errors.Is(err, mcap.ErrNoSummary) || errors.Is(err, mcap.ErrTruncated) {
		mr.Close()
		return scan(fi, err)
	}
	if err != nil {
		return nil, err
	}
	fi.Complete = true
	st := s.Statistics
	if st == nil {
		st = &mcap.Statistics{ChannelMessageCounts: map[uint16]uint64{}}
	}
	fi.Messages, fi.Chunks = st.MessageCount, len(s.ChunkIndexes)
	if st.MessageCount > 0 {
		fi.Start, fi.End = time.Unix(0, int64(st.MessageStartTime)), time.Unix(0, int64(st.MessageEndTime))
	}
	var comps []string
	for _, ci := range s.ChunkIndexes {
		c := ci.Compression
		if c == "" {
			c = "none"
		}
		if !slices.Contains(comps, c) {
			comps = append(comps, c)
		}
	}
	fi.Compression = joinPlus(comps)
	// Topics from the channels, in channel order, counted by the statistics.
	topics := map[string]*TopicInfo{}
	var order []string
	ids := make([]uint16, 0, len(s.Channels))
	for id := range s.Channels {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	topic := func(name string) *TopicInfo {
		t := topics[name]
		if t == nil {
			t = &TopicInfo{Topic: name}
			topics[name] = t
			order = append(order, name)
		}
		return t
	}
	for _, id := range ids {
		ch, n := s.Channels[id], st.ChannelMessageCounts[id]
		switch md := ch.Metadata; md[keyKind] {
		case kindPub:
			t := topic(md[keyTopic])
			t.Publications += n
			t.Retention = md[keyRetention]
			fi.Mode = md[keyMode]
		case kindArtifact:
			t := topic(md[keyTopic])
			t.Attachments = append(t.Attachments, AttachmentInfo{Name: md[keyAttachment], ContentType: md[keyContentType], Count: n})
		default:
			fi.Other += n
		}
	}
	// The flybus metadata adds what the statistics cannot hold.
	for _, mi := range s.MetadataIndexes {
		if mi.Name != metadataName {
			continue
		}
		md, err := mr.Metadata(mi)
		if err != nil {
			return nil, err
		}
		if v := md.Metadata["mode"]; v != "" {
			fi.Mode = v
		}
		fi.Part, _ = strconv.Atoi(md.Metadata["part"])
		var totals []topicTotals
		if json.Unmarshal([]byte(md.Metadata["topics"]), &totals) == nil {
			for _, tt := range totals {
				t := topic(tt.Topic)
				t.Replaced, t.ArtifactBytes = tt.Replaced, tt.ArtifactBytes
				t.FirstSequence, t.LastSequence = tt.FirstSequence, tt.LastSequence
				if t.Retention == "" {
					t.Retention = tt.Retention
				}
			}
		}
	}
	for _, name := range order {
		fi.Topics = append(fi.Topics, *topics[name])
	}
	fi.finish()
	return fi, nil
}

// scan counts a file that has no summary by reading it.
func scan(fi *FileInfo, why error) (*FileInfo, error) {
	fi.Problem = why.Error()
	r, err := Open(fi.File)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	topics := map[string]*TopicInfo{}
	var order []string
	for {
		p, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fi.Problem = err.Error()
			break
		}
		t := topics[p.Topic]
		if t == nil {
			t = &TopicInfo{Topic: p.Topic, FirstSequence: p.TopicSequence}
			if p.Retention != 0 {
				t.Retention = p.Retention.String()
			}
			topics[p.Topic] = t
			order = append(order, p.Topic)
		}
		if fi.Publications == 0 {
			fi.Start = p.Time()
		}
		fi.End = p.Time()
		fi.Publications++
		fi.Messages += 1 + uint64(len(p.Artifacts))
		t.Publications++
		t.Replaced += p.Replaced
		t.LastSequence = p.TopicSequence
		for _, a := range p.Artifacts {
			t.ArtifactBytes += uint64(len(a.Data))
			i := slices.IndexFunc(t.Attachments, func(x AttachmentInfo) bool { return x.Name == a.Name && x.ContentType == a.ContentType })
			if i < 0 {
				t.Attachments = append(t.Attachments, AttachmentInfo{Name: a.Name, ContentType: a.ContentType})
				i = len(t.Attachments) - 1
			}
			t.Attachments[i].Count++
		}
	}
	fi.Other = r.Skipped
	fi.Compression = "unknown"
	for _, name := range order {
		fi.Topics = append(fi.Topics, *topics[name])
	}
	fi.Publications = 0
	fi.finish()
	return fi, nil
}

// finish derives the totals and rates.
func (fi *FileInfo) finish() {
	if !fi.Start.IsZero() {
		fi.Duration = fi.End.Sub(fi.Start)
	}
	fi.Publications, fi.Replaced, fi.ArtifactBytes = 0, 0, 0
	for i := range fi.Topics {
		t := &fi.Topics[i]
		fi.Publications += t.Publications
		fi.Replaced += t.Replaced
		fi.ArtifactBytes += t.ArtifactBytes
		t.Rate = rate(t.Publications, fi.Duration)
	}
	fi.Rate = rate(fi.Publications, fi.Duration)
}

// rate is n events over d, counting the intervals between them.
func rate(n uint64, d time.Duration) float64 {
	if n < 2 || d <= 0 {
		return 0
	}
	return float64(n-1) / d.Seconds()
}

func joinPlus(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += "+"
		}
		out += v
	}
	if out == "" {
		return "none"
	}
	return out
}
