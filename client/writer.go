package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/flybus/flybus/mmap"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// ErrNoStoreRoot is returned for artifact work on a client that does not
// know the router's store root.
var ErrNoStoreRoot = errors.New("flybus: artifacts need Config.StoreRoot, the directory the router keeps its store under " +
	"(flybus serve --store DIR; a client connected in memory learns it from its router)")

func (c *conn) Allocate(ctx context.Context, n int64, contentType string) (*ArtifactWriter, error) {
	if c.cfg.StoreRoot == "" {
		return nil, ErrNoStoreRoot
	}
	if n < 0 {
		return nil, fmt.Errorf("flybus: negative artifact size %d", n)
	}
	var ok wire.AllocateOK
	k := aheadKey{n, contentType}
	hit := false
	if c.cfg.AllocateAhead > 0 {
		var err error
		if ok, hit, err = c.allocateAhead(ctx, k); err != nil {
			return nil, err
		}
	}
	if !hit {
		err := c.do(ctx, request{op: wire.OpArtifactAllocate, body: &wire.Allocate{ByteLength: uint64(n), ContentType: contentType}, reply: &ok, orphan: func(err error) {
			if err == nil { // granted after the caller gave up: give it back
				c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
			}
		}})
		if err != nil {
			return nil, err
		}
	}
	if c.cfg.AllocateAhead > 0 {
		c.ahead.want(k)
	}
	f, err := store.OpenWrite(c.cfg.StoreRoot, ok.WriteLocation.StoreID.String(), ok.WriteLocation.RelativePath)
	if err != nil {
		c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
		return nil, c.locationError(ok.WriteLocation, err)
	}
	st := &writerState{f: f}
	w := &ArtifactWriter{c: c, alloc: ok.Allocation, size: n, contentType: contentType, st: st,
		storeID: ok.WriteLocation.StoreID}
	owner := ok.OwnerID
	w.cleanup = watch(c, w, "ArtifactWriter", nil, func() {
		if ended, _ := st.end(false); ended {
			c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{owner}})
		}
	})
	return w, nil
}

// locationError explains a location the client could not open: the router
// went away with its store, or the client looks under the wrong root.
func (c *conn) locationError(loc wire.Location, err error) error {
	if lost := c.Err(); lost != nil {
		return lostError(lost)
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("flybus: artifact file %s/%s is not under StoreRoot %q: is StoreRoot the router's store root "+
			"(its --store directory)? %w", loc.StoreID, loc.RelativePath, c.cfg.StoreRoot, err)
	}
	return err
}

// ArtifactWriter fills one staging file. It is unique: Seal ends its
// writable lifetime, Close abandons it. Write and WriteAt (pwrite) are the
// fastest way to fill; Bytes maps the file for rendering in place.
type ArtifactWriter struct {
	c           *conn
	alloc       wire.Allocation // its generation: 1 in a files store, the slot's use in a pool store
	size        int64
	contentType string
	storeID     wire.StoreID
	st          *writerState
	cleanup     handleWatch
}

// writerState is what a writer holds open, apart from the writer so that
// its safety net can close it.
type writerState struct {
	mu     sync.Mutex
	f      *os.File
	m      *mmap.Writable
	off    int64
	done   bool
	sealed bool
}

// doneErr says how the writer ended. Called with mu held.
func (st *writerState) doneErr() error {
	if st.sealed {
		return &handleError{msg: "flybus: this artifact writer was already sealed", kinds: []error{ErrWriterDone}}
	}
	return closedHandle("artifact writer", ErrWriterDone)
}

// Size is the allocated length.
func (w *ArtifactWriter) Size() int64 { return w.size }

// Write appends at the writer's offset; writing past the allocated length
// fails with io.ErrShortWrite after writing what fits.
func (w *ArtifactWriter) Write(p []byte) (int, error) {
	st := w.st
	st.mu.Lock()
	defer st.mu.Unlock()
	n, err := w.writeAt(p, st.off)
	st.off += int64(n)
	return n, err
}

// WriteAt writes at off, within the allocated length.
func (w *ArtifactWriter) WriteAt(p []byte, off int64) (int, error) {
	w.st.mu.Lock()
	defer w.st.mu.Unlock()
	return w.writeAt(p, off)
}

// writeAt is called with st.mu held.
func (w *ArtifactWriter) writeAt(p []byte, off int64) (int, error) {
	if w.st.done {
		return 0, w.st.doneErr()
	}
	if off < 0 || off > w.size {
		return 0, fmt.Errorf("flybus: write at %d outside the artifact's %d bytes", off, w.size)
	}
	short := false
	if int64(len(p)) > w.size-off {
		p, short = p[:w.size-off], true
	}
	n, err := w.st.f.WriteAt(p, off)
	if err == nil && short {
		err = io.ErrShortWrite
	}
	return n, err
}

// Bytes maps the staging file writable and returns its bytes, valid until
// Seal or Close. Measured slower than Write on 4 KiB pages; use it to render
// in place.
func (w *ArtifactWriter) Bytes() ([]byte, error) {
	st := w.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return nil, st.doneErr()
	}
	if st.m == nil {
		m, err := mmap.MapWritable(st.f, w.size)
		if err != nil {
			return nil, err
		}
		st.m = m
	}
	return st.m.Bytes(), nil
}

// end ends the writer's writable lifetime: it closes the mapping and the
// descriptor, so that the router's seal can prove no writer remains and
// move no bytes. ended is false when the writer had ended before (err then
// says how); otherwise err is what closing returned, and the caller owns
// the writer's id either way. sealing marks how the writer ended, for the
// errors of later use: a writer that could not close is not sealed.
func (st *writerState) end(sealing bool) (ended bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return false, st.doneErr()
	}
	st.done = true
	var errs []error
	if st.m != nil {
		errs = append(errs, st.m.Close())
		st.m = nil
	}
	errs = append(errs, st.f.Close())
	err = errors.Join(errs...)
	st.sealed = sealing && err == nil
	return true, err
}

// endForSeal ends the writer before its seal. If the staging file could
// not be closed, the writer is abandoned instead (a mapping that may
// remain must not be sealed) and the error says so.
func (w *ArtifactWriter) endForSeal() error {
	ended, err := w.st.end(true)
	if !ended {
		return err
	}
	if err != nil {
		w.abandon()
		return fmt.Errorf("flybus: the artifact was not sealed and its allocation was released: "+
			"the writer could not close its staging file: %w", err)
	}
	return nil
}

// abandon gives the writer's id back (the router collects the staging
// file) and disarms the safety net, once the writer has ended.
func (w *ArtifactWriter) abandon() {
	w.cleanup.Stop()
	w.c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{w.alloc.OwnerID}})
}

// Seal makes the bytes immutable and returns the artifact, held by the
// writer's id (now an explicit hold). With Digest the router checks the
// bytes' SHA-256 (ARTIFACT_MISMATCH if they differ). With NoWait it returns
// at once, without waiting for the router's answer: attach the artifact to
// a Publish, Call or Reply straight away and the seal and that command cost
// one round trip between them (the router finishes a seal before it reads
// the connection's next command, so the command finds the artifact sealed;
// if the seal fails, the command fails with the seal's error and nothing
// is published, called or replied). Until then the artifact's View,
// ReadAll and Retain wait for the answer, and Sealed reports it.
// If the writer cannot close its staging file, nothing is sealed: the
// allocation is released and the error returned.
func (w *ArtifactWriter) Seal(ctx context.Context, opts ...SealOption) (*Artifact, error) {
	digest, noWait, err := sealOptions(opts)
	if err != nil {
		return nil, err // the writer is untouched: fix the digest and seal again
	}
	if noWait {
		return w.sealNoWait(digest)
	}
	return w.seal(ctx, digest)
}

func (w *ArtifactWriter) seal(ctx context.Context, digest wire.Opt[wire.Digest]) (*Artifact, error) {
	if err := w.endForSeal(); err != nil {
		return nil, err
	}
	w.cleanup.Stop() // the seal settles the writer's id, whatever its outcome
	c := w.c
	var ok wire.SealOK
	err := c.do(ctx, request{op: wire.OpArtifactSeal, body: &wire.Seal{Allocation: w.alloc, Digest: digest}, reply: &ok, orphan: func(err error) {
		// The caller gave up: give back whatever the seal left us, the
		// new hold or, after a refusal, the writer's id (a retired id
		// releases nothing).
		if err == nil {
			c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
		} else if !errors.Is(err, wire.ErrRouterLost) {
			c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{w.alloc.OwnerID}})
		}
	}})
	if err != nil {
		var be *wire.BusError
		if !errors.As(err, &be) || be.Code == wire.ErrRouterLost {
			return nil, err
		}
		// A refused seal leaves the writer's id with the router only when
		// the refusal happened before the seal began; release it (a repeat
		// release of a retired id is a no-op).
		c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{w.alloc.OwnerID}})
		return nil, err
	}
	return c.newArtifact(ok.Ref, c.holdGuard(ok.OwnerID)), nil
}

func (w *ArtifactWriter) sealNoWait(digest wire.Opt[wire.Digest]) (*Artifact, error) {
	if err := w.endForSeal(); err != nil {
		return nil, err
	}
	w.cleanup.Stop() // the artifact's guard owns the writer's id from here
	c := w.c
	ref := wire.ArtifactRef{StoreID: w.storeID, ArtifactID: w.alloc.ArtifactID, Generation: w.alloc.Generation, ByteLength: uint64(w.size),
		ContentType: w.contentType, Digest: digest}
	s := newOneShot[wire.ArtifactRef]()
	var ok wire.SealOK
	a := c.newArtifact(ref, c.holdGuard(w.alloc.OwnerID))
	a.seal = s
	if err := c.post(request{op: wire.OpArtifactSeal, body: &wire.Seal{Allocation: w.alloc, Digest: digest}, reply: &ok,
		complete: func(err error) {
			// The reader settles the seal before it dispatches the reply
			// of the command behind it. After a refusal the writer's id
			// is released by the artifact's Close, like any hold.
			s.set(ok.Ref, err)
		}}, false); err != nil {
		a.Close()
		return nil, err
	}
	c.flush()
	return a, nil
}

// Close abandons an unsealed writer: the staging file is collected. The
// allocation is released even when unmapping or closing the staging file
// fails; that error is returned. Idempotent; a no-op after Seal.
func (w *ArtifactWriter) Close() error {
	ended, err := w.st.end(false)
	if !ended {
		return nil
	}
	w.abandon()
	return err
}
