package router_test

import (
	"bytes"
	"testing"

	"github.com/flybus/flybus/mmap"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// rawAllocate allocates through a raw client and returns the grant.
func rawAllocate(t *testing.T, r *raw, n uint64) wire.AllocateOK {
	t.Helper()
	r.command(wire.OpArtifactAllocate, &wire.Allocate{ByteLength: n, ContentType: "x/y"})
	var a wire.AllocateOK
	if be := r.reply(&a); be != nil {
		t.Fatal(be)
	}
	return a
}

// readSealed reads a sealed artifact's bytes through a raw client's
// artifact.open and the store's read-only resolution.
func readSealed(t *testing.T, h *harness, r *raw, sealed wire.SealOK) []byte {
	t.Helper()
	r.command(wire.OpArtifactOpen, &wire.RefOwner{Ref: sealed.Ref, OwnerID: sealed.OwnerID})
	var op wire.OpenOK
	if be := r.reply(&op); be != nil {
		t.Fatal(be)
	}
	rf, err := store.OpenRead(h.root, op.ReadLocation.StoreID.String(), op.ReadLocation.RelativePath)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	got := make([]byte, sealed.Ref.ByteLength)
	if _, err := rf.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	return got
}

// A writable mapping kept past the seal forces the copy path too, and
// writes through it afterwards do not reach the sealed bytes.
func TestSealWithLiveMappingFallsBackToCopy(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("rawm")
		alloc := rawAllocate(t, r, 16384)
		f, err := store.OpenWrite(h.root, alloc.WriteLocation.StoreID.String(), alloc.WriteLocation.RelativePath)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mmap.MapWritable(f, 16384)
		f.Close() // only the mapping keeps the file open now
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		data := frameBytes(3, 16384)
		copy(m.Bytes(), data)
		r.command(wire.OpArtifactSeal, &wire.Seal{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID})
		var sealed wire.SealOK
		if be := r.reply(&sealed); be != nil {
			t.Fatal(be)
		}
		if s := h.r.Stats(); s.CopySeals != 1 || s.LeaseSeals != 0 {
			t.Fatalf("seal path with a live mapping: %+v", s)
		}
		copy(m.Bytes(), bytes.Repeat([]byte{0xee}, 16384)) // too late
		if !bytes.Equal(readSealed(t, h, r, sealed), data) {
			t.Fatal("sealed bytes changed through the kept mapping")
		}
	})
}

// A writer released while its seal runs: the artifact is never published,
// the seal is answered, and nothing is left behind. Which of the two
// commands the seal's I/O races is up to the scheduler, so both orders
// are accepted, each checked for consistency.
func TestWriterReleasedDuringSeal(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("raws")
		for range 5 {
			alloc := rawAllocate(t, r, 1<<20)
			// Seal and release written back to back in one write.
			var b []byte
			r.id++
			b, _ = wire.AppendFrame(b, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpArtifactSeal},
				&wire.Seal{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID, Digest: wire.Some(wire.Digest{})}, nil)
			r.id++
			b, _ = wire.AppendFrame(b, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpArtifactRelease},
				&wire.Release{OwnerIDs: []wire.OwnerID{alloc.OwnerID}}, nil)
			r.sendBytes(b)
			var rel wire.Released
			var sealErr *wire.BusError
			for range 2 {
				if err := r.next(); err != nil {
					t.Fatal(err)
				}
				switch r.env.Op {
				case wire.OpArtifactRelease:
					if be, err := r.env.DecodeReply(&rel); err != nil || be != nil {
						t.Fatalf("release: %v %v", be, err)
					}
				case wire.OpArtifactSeal:
					var ok wire.SealOK
					be, err := r.env.DecodeReply(&ok)
					if err != nil {
						t.Fatal(err)
					}
					sealErr = be
				}
			}
			// The zero digest never matches: a seal that ran to the end
			// reports ARTIFACT_MISMATCH; one overtaken by the release
			// reports ARTIFACT_GONE. Neither publishes anything.
			if sealErr == nil || (sealErr.Code != wire.ErrArtifactGone && sealErr.Code != wire.ErrArtifactMismatch) {
				t.Fatalf("seal after release: %v", sealErr)
			}
			waitFor(t, "nothing left", func() bool { s := h.r.Stats(); return s.Artifacts == 0 && s.StoreBytes == 0 })
		}
		if n := sealedFiles(t, h); n != 0 {
			t.Fatalf("%d sealed files left", n)
		}
	})
}
