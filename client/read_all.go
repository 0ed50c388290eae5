package client

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ReadAll copies the artifact's bytes. With Config.VerifyReads set, the
// copy is checked against the artifact's digest (see ArtifactView.Verify);
// unlike a view, a verified copy cannot change afterwards.
func (a *Artifact) ReadAll(ctx context.Context) ([]byte, error) {
	f, _, err := a.openHeld(ctx)
	if err != nil {
		return nil, err
	}
	defer a.g.drop()
	defer f.Close()
	// The length comes from the router; the file says how much there is.
	// Sizing the copy from an unchecked length would let a bad reference
	// crash the program (a length past what make accepts) or exhaust it.
	size := int64(a.ref.ByteLength)
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != size {
		return nil, fmt.Errorf("flybus: %s's file holds %d bytes, its reference says %d", a.ref.ArtifactID, fi.Size(), size)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil && !(errors.Is(err, io.EOF) && size == 0) {
		return nil, err
	}
	if a.c.cfg.VerifyReads {
		if err := verifyBytes(a.Ref(), buf); err != nil { // settled: openHeld waited for the seal
			return nil, err
		}
	}
	return buf, nil
}
