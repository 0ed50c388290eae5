package record

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/record/mcap"
	"github.com/flybus/flybus/wire"
)

// Options configure a Recorder. The zero value records uncompressed into
// one file until Close.
type Options struct {
	// Compression is "none" (or "") or "zstd".
	Compression string
	// ChunkSize is the uncompressed size at which a chunk ends [4 MiB]. A
	// publication is never split between chunks, so a crash loses at most
	// the chunk being written.
	ChunkSize int64
	// SplitSize starts a new part before a publication that would take the
	// current one past this many bytes [0: never]. SplitDuration starts one
	// when the current part has spanned this long [0: never]. With either,
	// the parts of path FILE.mcap are FILE-0001.mcap, FILE-0002.mcap, ...,
	// each a complete MCAP file.
	SplitSize     int64
	SplitDuration time.Duration
	// Count and Duration end Run after that many publications or that long
	// [0: no limit].
	Count    int64
	Duration time.Duration
	// Mode is recorded in the file: "latest" (the default) or "bounded",
	// the subscription mode the recording was made with. Subscribe uses it.
	Mode string
	// FlushInterval finishes the open chunk and hands it to the file when
	// it has been open this long, so that a slow stream reaches the file
	// (and survives a crash) [1s; negative: only when a chunk is full].
	FlushInterval time.Duration
	// NoCRC skips the chunk and data CRCs: one pass over the bytes fewer.
	NoCRC bool
}

// Stats count what a Recorder wrote.
type Stats struct {
	Publications  uint64
	Replaced      uint64 // coalesced before delivery, summed over publications
	Artifacts     uint64
	ArtifactBytes uint64
	Bytes         int64    // written to files, summaries included once closed
	Files         []string // the parts so far, the current one last
}

// topicTotals are one topic's counts in one part.
type topicTotals struct {
	Topic         string `json:"topic"`
	Retention     string `json:"retention,omitempty"`
	Publications  uint64 `json:"publications"`
	Replaced      uint64 `json:"replaced"`
	Artifacts     uint64 `json:"artifacts"`
	ArtifactBytes uint64 `json:"artifactBytes"`
	FirstSequence uint64 `json:"firstSequence"`
	LastSequence  uint64 `json:"lastSequence"`
}

type artKey struct{ topic, name, contentType string }

// Recorder writes publications to an MCAP file, or a series of parts.
// Record may be called from several goroutines.
type Recorder struct {
	opts  Options
	path  string
	split bool

	mu        sync.Mutex
	f         *os.File
	w         *mcap.Writer
	part      int
	partStart uint64
	seq       uint32 // publications in this part
	schema    uint16
	pubCh     map[string]uint16
	artCh     map[artKey]uint16
	totals    map[string]*topicTotals
	order     []string
	retention map[string]wire.Retention
	unknown   map[string]*client.Client // awaited topics whose retention is asked at their first publication
	stats     Stats
	closedB   int64 // bytes of finished parts
	last      uint64
	dirty     bool
	closed    bool
	err       error
	scratch   []byte
	msgs      []mcap.Message

	base     time.Time     // wall clock at Create, with its monotonic reading
	clock    func() uint64 // tests set the receive times
	reserved atomic.Int64
	stop     chan struct{}
	stopped  chan struct{}
}

// Create starts a recording at path (FILE.mcap; with splitting, its parts
// FILE-0001.mcap, ...). The first file is created at once, so a bad path
// fails here.
func Create(path string, opts Options) (*Recorder, error) {
	switch opts.Compression {
	case "", "none":
		opts.Compression = mcap.CompressionNone
	case mcap.CompressionZstd:
	default:
		return nil, fmt.Errorf("record: unknown compression %q (want none or zstd)", opts.Compression)
	}
	switch opts.Mode {
	case "":
		opts.Mode = "latest"
	case "latest", "bounded":
	default:
		return nil, fmt.Errorf("record: unknown mode %q (want latest or bounded)", opts.Mode)
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = time.Second
	}
	r := &Recorder{opts: opts, path: path, split: opts.SplitSize > 0 || opts.SplitDuration > 0,
		retention: map[string]wire.Retention{}, unknown: map[string]*client.Client{}, base: time.Now()}
	if err := r.openPart(); err != nil {
		return nil, err
	}
	if opts.FlushInterval > 0 {
		r.stop, r.stopped = make(chan struct{}), make(chan struct{})
		go r.flusher()
	}
	return r, nil
}

// PartName is the name of part n (from 1) of a split recording at path.
func PartName(path string, n int) string {
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s-%04d%s", strings.TrimSuffix(path, ext), n, ext)
}

func (r *Recorder) openPart() error {
	r.part++
	name := r.path
	if r.split {
		name = PartName(r.path, r.part)
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	w, err := mcap.NewWriter(f, mcap.WriterOptions{Profile: Profile, Library: "flybus record " + LayoutVersion,
		Compression: r.opts.Compression, ChunkSize: r.opts.ChunkSize, NoCRC: r.opts.NoCRC})
	if err == nil {
		r.schema, err = w.AddSchema(schemaName, schemaEncoding, envelopeSchema)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	r.f, r.w = f, w
	r.seq, r.partStart = 0, 0
	r.pubCh, r.artCh, r.totals, r.order = map[string]uint16{}, map[artKey]uint16{}, map[string]*topicTotals{}, nil
	r.stats.Files = append(r.stats.Files, name)
	return nil
}

// closePart writes the part's metadata and summary and closes its file.
func (r *Recorder) closePart() error {
	var topics []*topicTotals
	for _, t := range r.order {
		topics = append(topics, r.totals[t])
	}
	tj, _ := json.Marshal(topics)
	part := 0
	if r.split {
		part = r.part
	}
	compression := r.opts.Compression
	if compression == "" {
		compression = "none"
	}
	md := map[string]string{"version": LayoutVersion, "mode": r.opts.Mode, "compression": compression,
		"part": strconv.Itoa(part), "topics": string(tj)}
	if r.seq > 0 {
		md["start"] = strconv.FormatUint(r.partStart, 10)
	}
	err := r.w.AddMetadata(metadataName, md)
	err = errors.Join(err, r.w.Close())
	r.closedB += r.w.Size()
	err = errors.Join(err, r.f.Close())
	if err != nil {
		return fmt.Errorf("%s: %w", r.f.Name(), err)
	}
	return nil
}

// SetRetention records topic's retention in the channel a later
// publication of it creates (Subscribe finds it out by itself).
func (r *Recorder) SetRetention(topic string, ret wire.Retention) {
	r.mu.Lock()
	r.retention[topic] = ret
	r.mu.Unlock()
}

// Subscribe subscribes c to topic in the recorder's mode (Options.Mode) and
// records the topic's retention, which Player declares a missing topic
// with. opts are added after the mode (Queued, InFlight, Replay).
func (r *Recorder) Subscribe(ctx context.Context, c *client.Client, topic string, opts ...client.SubscribeOption) (*client.Subscription, error) {
	// Latest is the client's default mode, so only bounded needs an option.
	if r.opts.Mode == "bounded" {
		opts = append([]client.SubscribeOption{client.Bounded()}, opts...)
	}
	sub, err := c.Subscribe(ctx, topic, opts...)
	if err != nil {
		return nil, err
	}
	if sub.TopicIncarnation() == 0 {
		// An awaited topic (AwaitTopic) is not declared yet: asking now
		// would declare it. Its first publication proves it exists, and
		// Record asks then.
		r.mu.Lock()
		r.unknown[topic] = c
		r.mu.Unlock()
		return sub, nil
	}
	if ret, err := TopicRetention(ctx, c, topic); err == nil {
		r.SetRetention(topic, ret)
	}
	return sub, nil
}

// learnRetention asks for the retention of a topic Subscribe could not
// ask about, once, at its first publication.
func (r *Recorder) learnRetention(ctx context.Context, topic string) {
	r.mu.Lock()
	c := r.unknown[topic]
	delete(r.unknown, topic)
	r.mu.Unlock()
	if c == nil {
		return
	}
	if ret, err := TopicRetention(ctx, c, topic); err == nil {
		r.SetRetention(topic, ret)
	}
}

// TopicRetention finds out the retention of a declared topic. The bus has
// no command that reports it, so it redeclares the topic with retention
// none: a topic declared so is left as it is, and one declared latest
// refuses with CONFLICT. Call it while subscribed, when nobody can delete
// the topic: on a missing topic the redeclaration would create it.
func TopicRetention(ctx context.Context, c *client.Client, topic string) (wire.Retention, error) {
	_, err := c.DeclareTopic(ctx, topic, wire.RetainNone)
	switch {
	case err == nil:
		return wire.RetainNone, nil
	case errors.Is(err, wire.ErrConflict):
		return wire.RetainLatest, nil
	}
	return 0, err
}

// errLimit ends Run at Options.Count.
var errLimit = errors.New("record: count reached")

// Run records what subs deliver, each on its own goroutine, until ctx ends
// or Options.Count or Options.Duration is reached (nil), or a subscription
// or the recording fails (that error). It closes every message it takes.
// Close the Recorder afterwards.
func (r *Recorder) Run(ctx context.Context, subs ...*client.Subscription) error {
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if r.opts.Duration > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, r.opts.Duration)
		defer stop()
	}
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() {
			for {
				m, err := s.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						cancel(fmt.Errorf("record: topic %s: %w", s.Topic(), err))
					}
					return
				}
				if r.opts.Count > 0 && r.reserved.Add(1) > r.opts.Count {
					m.Close()
					cancel(errLimit)
					return
				}
				err = r.Record(ctx, m)
				m.Close()
				if err != nil {
					cancel(err)
					return
				}
				if r.opts.Count > 0 && r.Stats().Publications >= uint64(r.opts.Count) {
					cancel(errLimit)
				}
			}
		})
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && cause != errLimit && parent.Err() == nil && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return nil
}

// Record writes m: its payload and the bytes of each of its artifacts,
// read through a view. The caller still closes m.
func (r *Recorder) Record(ctx context.Context, m *client.Message) error {
	r.learnRetention(ctx, m.Topic)
	names := m.Attachments()
	arts := make([]artifactInfo, len(names))
	data := make([][]byte, len(names))
	for i, name := range names {
		a, err := m.Artifact(name)
		if err != nil {
			return fmt.Errorf("record: %s #%d attachment %s: %w", m.Topic, m.TopicSequence, name, err)
		}
		defer a.Close()
		ref := a.Ref()
		arts[i] = artifactInfo{Name: name, ContentType: ref.ContentType, ByteLength: ref.ByteLength}
		if ref.Digest.Valid {
			arts[i].Digest = hex.EncodeToString(ref.Digest.V[:])
		}
		if ref.ByteLength == 0 {
			continue
		}
		v, err := a.View(ctx)
		if err != nil {
			return fmt.Errorf("record: %s #%d attachment %s: %w", m.Topic, m.TopicSequence, name, err)
		}
		defer v.Close()
		data[i] = v.Bytes()
	}
	return r.write(m.Topic, m.TopicIncarnation, m.TopicSequence, m.Replaced, m.Payload, arts, data)
}

// write appends one publication; data[i] holds arts[i]'s bytes.
func (r *Recorder) write(topic string, inc wire.TopicInc, seq, replaced uint64, payload []byte, arts []artifactInfo, data [][]byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("record: recorder closed")
	}
	if r.err != nil {
		return r.err
	}
	// Receive time on the monotonic clock, so the file's times never go
	// back when the wall clock is set.
	now := uint64(r.base.UnixNano() + int64(time.Since(r.base)))
	if r.clock != nil {
		now = r.clock()
	}
	now = max(now, r.last)
	r.last = now
	if r.seq > 0 && r.needSplit(now, len(payload), data) {
		if err := r.rotate(); err != nil {
			return err
		}
	}
	if r.seq == 0 {
		r.partStart = now
	}
	if err := r.writeLocked(now, topic, inc, seq, replaced, payload, arts, data); err != nil {
		r.err = err
		return err
	}
	return nil
}

func (r *Recorder) needSplit(now uint64, payload int, data [][]byte) bool {
	if r.opts.SplitDuration > 0 && now-r.partStart >= uint64(r.opts.SplitDuration) {
		return true
	}
	if r.opts.SplitSize <= 0 {
		return false
	}
	n := int64(payload) + 512
	for _, d := range data {
		n += int64(len(d)) + 64
	}
	return r.w.Size()+n > r.opts.SplitSize
}

func (r *Recorder) rotate() error {
	err := r.closePart()
	if err == nil {
		err = r.openPart()
	}
	if err != nil {
		r.err = err
	}
	return err
}

func (r *Recorder) writeLocked(now uint64, topic string, inc wire.TopicInc, seq, replaced uint64, payload []byte, arts []artifactInfo, data [][]byte) error {
	w := r.w
	pc, ok := r.pubCh[topic]
	if !ok {
		var err error
		if pc, err = w.AddChannel(r.schema, topic, payloadEnc, publicationChannel(topic, r.retention[topic], r.opts.Mode)); err != nil {
			return err
		}
		r.pubCh[topic] = pc
		t := &topicTotals{Topic: topic, FirstSequence: seq}
		if ret := r.retention[topic]; ret != 0 {
			t.Retention = ret.String()
		}
		r.totals[topic] = t
		r.order = append(r.order, topic)
	}
	r.seq++
	r.scratch = appendEnvelope(r.scratch[:0], topic, inc, seq, replaced, payload, arts)
	msgs := append(r.msgs[:0], mcap.Message{ChannelID: pc, Sequence: r.seq, LogTime: now, PublishTime: now, Data: r.scratch})
	t := r.totals[topic]
	for i, a := range arts {
		k := artKey{topic, a.Name, a.ContentType}
		ac, ok := r.artCh[k]
		if !ok {
			var err error
			if ac, err = w.AddChannel(0, topic+"/"+a.Name, a.ContentType, artifactChannel(topic, a.Name, a.ContentType)); err != nil {
				return err
			}
			r.artCh[k] = ac
		}
		msgs = append(msgs, mcap.Message{ChannelID: ac, Sequence: r.seq, LogTime: now, PublishTime: now, Data: data[i]})
		t.Artifacts++
		t.ArtifactBytes += a.ByteLength
		r.stats.Artifacts++
		r.stats.ArtifactBytes += a.ByteLength
	}
	err := w.WriteMessages(msgs...)
	clear(msgs) // let go of the views' bytes
	r.msgs = msgs[:0]
	if err != nil {
		return fmt.Errorf("%s: %w", r.f.Name(), err)
	}
	t.Publications++
	t.Replaced += replaced
	t.LastSequence = seq
	r.stats.Publications++
	r.stats.Replaced += replaced
	r.dirty = true
	return nil
}

// flusher finishes chunks that have been open for FlushInterval.
func (r *Recorder) flusher() {
	defer close(r.stopped)
	t := time.NewTicker(r.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		if r.dirty && !r.closed && r.err == nil {
			r.dirty = false
			if err := r.w.Flush(); err != nil {
				r.err = fmt.Errorf("%s: %w", r.f.Name(), err)
			}
		}
		r.mu.Unlock()
	}
}

// Stats returns the counts so far.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Files = append([]string(nil), s.Files...)
	s.Bytes = r.closedB
	if !r.closed {
		s.Bytes += r.w.Size()
	}
	return s
}

// Close finishes the current part (metadata, summary, footer) and closes
// it. Idempotent.
func (r *Recorder) Close() error {
	if r.stop != nil {
		select {
		case <-r.stop:
		default:
			close(r.stop)
		}
		<-r.stopped
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if err := r.closePart(); err != nil {
		return err
	}
	return r.err
}
