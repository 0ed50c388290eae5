package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
)

// ArtifactReader reads an artifact through a descriptor (io.ReaderAt).
type ArtifactReader struct {
	f       *os.File
	size    int64
	g       *guard
	closed  atomic.Bool
	cleanup handleWatch
}

// ReaderAt opens the artifact for positioned reads; close it when done.
func (a *Artifact) ReaderAt(ctx context.Context) (*ArtifactReader, error) {
	f, _, err := a.openHeld(ctx)
	if err != nil {
		return nil, err
	}
	r := &ArtifactReader{f: f, size: int64(a.ref.ByteLength), g: a.g}
	g := a.g
	r.cleanup = watch(a.c, r, "ArtifactReader", g, func() { f.Close(); g.drop() })
	return r, nil
}

// ReadAt implements io.ReaderAt.
func (r *ArtifactReader) ReadAt(p []byte, off int64) (int, error) {
	if r.closed.Load() {
		return 0, closedHandle("artifact reader")
	}
	return r.f.ReadAt(p, off)
}

// Size is the artifact's length.
func (r *ArtifactReader) Size() int64 { return r.size }

// Close closes the descriptor and releases the reader's hold.
func (r *ArtifactReader) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.cleanup.Stop()
	err := r.f.Close()
	r.g.drop()
	return err
}

// ReadAll copies the artifact's bytes. With Config.VerifyReads set, the
// copy is checked against the artifact's digest (see ArtifactView.Verify);
// unlike a view, a verified copy cannot change afterwards.
func (a *Artifact) ReadAll(ctx context.Context) ([]byte, error) {
	r, err := a.ReaderAt(ctx)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// The length comes from the router; the file says how much there is.
	// Sizing the copy from an unchecked length would let a bad reference
	// crash the program (a length past what make accepts) or exhaust it.
	fi, err := r.f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != r.size {
		return nil, fmt.Errorf("flybus: %s's file holds %d bytes, its reference says %d", a.ref.ArtifactID, fi.Size(), r.size)
	}
	buf := make([]byte, r.size)
	if _, err := r.ReadAt(buf, 0); err != nil && !(errors.Is(err, io.EOF) && r.size == 0) {
		return nil, err
	}
	if a.c.cfg.VerifyReads {
		if err := verifyBytes(a.Ref(), buf); err != nil { // settled: ReaderAt waited for the seal
			return nil, err
		}
	}
	return buf, nil
}
