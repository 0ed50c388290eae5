package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openPool(t *testing.T, cfg Config) *Store {
	t.Helper()
	cfg.Mode = ModePool
	return openAnyStore(t, cfg)
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"files": ModeFiles, "pool": ModePool} {
		if m, err := ParseMode(in); err != nil || m != want || m.String() != in {
			t.Errorf("ParseMode(%q) = %v, %v", in, m, err)
		}
	}
	if _, err := ParseMode("slots"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
}

// A slot's second generation costs no open, fallocate or unlink in the
// store, and is a fresh generation of the same slot.
func TestSlotReusedAcrossGenerations(t *testing.T) {
	s := openPool(t, Config{})
	data := pattern(1<<16, 1)
	st := mustStage(t, s, int64(len(data)))
	if st.Generation != 1 || st.Slot == 0 {
		t.Fatalf("first staging %+v", st)
	}
	fill(t, s, st.RelPath, data)
	sealed := mustSeal(t, s, st, data)
	if sealed.Path != SealLease || sealed.Slot != st.Slot || sealed.Generation != 1 {
		t.Fatalf("sealed %+v", sealed)
	}
	checkFile(t, s, st.RelPath, data, 0o444)
	before := s.Stats()
	if err := s.Collect(sealed.RelPath, sealed.Generation); err != nil {
		t.Fatal(err)
	}
	again := mustStage(t, s, int64(len(data)))
	if again.Slot != st.Slot || again.Generation != 2 || again.RelPath != st.RelPath {
		t.Fatalf("second staging %+v, want slot %d generation 2", again, st.Slot)
	}
	if fi, err := os.Stat(filepath.Join(s.Dir(), again.RelPath)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a reused slot is %v (%v), want 0600", fi.Mode(), err)
	}
	next := pattern(1<<16, 2)
	fill(t, s, again.RelPath, next)
	sealed2 := mustSeal(t, s, again, next)
	after := s.Stats()
	if after.Opens != before.Opens || after.Fallocates != before.Fallocates || after.Unlinks != before.Unlinks {
		t.Fatalf("a reused slot cost opens %d, fallocates %d, unlinks %d", after.Opens-before.Opens,
			after.Fallocates-before.Fallocates, after.Unlinks-before.Unlinks)
	}
	if sealed2.Generation != 2 || after.Slots != 1 || after.SlotBytes != 1<<16 {
		t.Fatalf("sealed %+v, stats %+v", sealed2, after)
	}
	// A stale generation's collect does nothing.
	if err := s.Collect(sealed.RelPath, 1); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.FreeSlots != 0 {
		t.Fatalf("a stale collect freed the slot: %+v", st)
	}
}

// A consumer's read-only mapping of an earlier generation does not stand
// in the way of the next generation's lease seal.
func TestSlotLeaseSealBesideAReadOnlyMapping(t *testing.T) {
	s := openPool(t, Config{})
	data := pattern(8192, 3)
	st := mustStage(t, s, int64(len(data)))
	fill(t, s, st.RelPath, data)
	sealed := mustSeal(t, s, st, data)
	f := openIn(t, s, OpenRead, sealed.RelPath)
	m, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if err := s.Collect(sealed.RelPath, 1); err != nil {
		t.Fatal(err)
	}
	st2 := mustStage(t, s, int64(len(data)))
	next := pattern(8192, 4)
	fill(t, s, st2.RelPath, next)
	if out := mustSeal(t, s, st2, next); out.Path != SealLease {
		t.Fatalf("sealed by %v beside a read-only mapping, want a lease", out.Path)
	}
	// The mapping sees the slot's current generation: the per-slot read
	// grant pool mode documents.
	if string(m[:16]) != string(next[:16]) {
		t.Fatal("the cached mapping does not show the slot's bytes")
	}
}

// A writer that keeps its descriptor makes the seal copy into another slot
// and quarantines its own until it lets go.
func TestSlotSealWithALiveWriterCopiesAndQuarantines(t *testing.T) {
	s := openPool(t, Config{IdleAfter: time.Hour})
	data := pattern(4096, 5)
	st := mustStage(t, s, int64(len(data)))
	w := openIn(t, s, OpenWrite, st.RelPath)
	if _, err := w.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	sealed := mustSeal(t, s, st, data)
	if sealed.Path != SealCopy || sealed.Slot == st.Slot {
		t.Fatalf("sealed %+v with a live writer, want a copy into another slot", sealed)
	}
	checkFile(t, s, sealed.RelPath, data, 0o444)
	// The stale writer cannot reach what the copy sealed.
	if _, err := w.WriteAt([]byte("scribble"), 0); err != nil {
		t.Fatal(err)
	}
	checkFile(t, s, sealed.RelPath, data, 0o444)
	if stt := s.Stats(); stt.QuarantinedSlots != 1 || stt.CopySeals != 1 {
		t.Fatalf("stats %+v", stt)
	}
	// Never handed out while the writer lives.
	if err := s.Collect(sealed.RelPath, sealed.Generation); err != nil {
		t.Fatal(err)
	}
	s.tidySlots(time.Now())
	for range 3 {
		next := mustStage(t, s, int64(len(data)))
		if next.Slot == st.Slot {
			t.Fatal("a quarantined slot was handed out while its writer lived")
		}
		defer s.Collect(next.RelPath, next.Generation)
	}
	w.Close()
	s.tidySlots(time.Now())
	if stt := s.Stats(); stt.QuarantinedSlots != 0 {
		t.Fatalf("the slot stayed quarantined after its writer closed: %+v", stt)
	}
}

// A writer that gives up its slot frees it, or quarantines it when it
// keeps the file open; a size or digest mismatch frees it too.
func TestSlotAbandonAndMismatch(t *testing.T) {
	s := openPool(t, Config{IdleAfter: time.Hour})
	st := mustStage(t, s, 100)
	if err := s.Collect(st.RelPath, st.Generation); err != nil {
		t.Fatal(err)
	}
	if stt := s.Stats(); stt.FreeSlots != 1 {
		t.Fatalf("abandoned slot not freed: %+v", stt)
	}
	st = mustStage(t, s, 100)
	w := openIn(t, s, OpenWrite, st.RelPath)
	if err := s.Collect(st.RelPath, st.Generation); err != nil {
		t.Fatal(err)
	}
	if stt := s.Stats(); stt.QuarantinedSlots != 1 || stt.FreeSlots != 0 {
		t.Fatalf("abandoned slot with a live writer: %+v", stt)
	}
	w.Close()
	s.tidySlots(time.Now())

	st = mustStage(t, s, 100)
	wrong := sha256.Sum256([]byte("not these bytes"))
	if _, err := s.Seal(st.RelPath, 100, &wrong); !errors.Is(err, ErrMismatch) {
		t.Fatalf("digest mismatch: %v", err)
	}
	if _, err := s.Seal(st.RelPath, 100, nil); !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("a second seal of a freed slot: %v", err)
	}
	if stt := s.Stats(); stt.FreeSlots != 1 || stt.SealMismatch != 1 {
		t.Fatalf("after a mismatch: %+v", stt)
	}
}

// Free slots of a size nobody stages go after IdleAfter; the byte bound
// evicts free slots of other sizes, and refuses when none is free.
func TestSlotIdleAndBound(t *testing.T) {
	s := openPool(t, Config{IdleAfter: time.Minute, MaxBytes: 300})
	a := mustStage(t, s, 200)
	if err := s.Collect(a.RelPath, a.Generation); err != nil {
		t.Fatal(err)
	}
	b := mustStage(t, s, 100) // 300 bytes of slots: at the bound
	c := mustStage(t, s, 150) // evicts the free 200-byte slot
	if stt := s.Stats(); stt.Slots != 2 || stt.SlotBytes != 250 {
		t.Fatalf("after eviction: %+v", stt)
	}
	if _, err := s.Stage(100); !errors.Is(err, ErrFull) {
		t.Fatalf("no free slot to evict: %v", err)
	}
	for _, st := range []Staging{b, c} {
		if err := s.Collect(st.RelPath, st.Generation); err != nil {
			t.Fatal(err)
		}
	}
	s.tidySlots(time.Now())
	if stt := s.Stats(); stt.FreeSlots != 2 {
		t.Fatalf("recently used slots went early: %+v", stt)
	}
	s.tidySlots(time.Now().Add(2 * time.Minute))
	if stt := s.Stats(); stt.Slots != 0 || stt.SlotBytes != 0 || files(t, s) != 1 {
		t.Fatalf("idle slots stayed: %+v, %d files", stt, files(t, s))
	}
}

// A slot whose name was replaced is never sealed.
func TestSlotReplacedNameRefused(t *testing.T) {
	s := openPool(t, Config{})
	st := mustStage(t, s, 64)
	other := filepath.Join(s.Dir(), "elsewhere")
	if err := os.WriteFile(other, make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, filepath.Join(s.Dir(), st.RelPath)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(st.RelPath, 64, nil); !errors.Is(err, ErrReplaced) {
		t.Fatalf("seal of a replaced slot: %v", err)
	}
}

// A writer that truncates or extends its slot before the seal has the seal
// refused, and the slot is retired rather than freed at the wrong length:
// the next allocation of the size gets a new slot of exactly that size,
// and its seal succeeds.
func TestSlotResizedByItsWriterIsRetired(t *testing.T) {
	for _, delta := range []int64{-4096, +4096} {
		t.Run(fmt.Sprintf("delta=%+d", delta), func(t *testing.T) {
			s := openPool(t, Config{IdleAfter: time.Hour})
			const size = 65536
			st := mustStage(t, s, size)
			f := openIn(t, s, OpenWrite, st.RelPath)
			if err := f.Truncate(size + delta); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if _, err := s.Seal(st.RelPath, size, nil); err == nil {
				t.Fatal("a resized slot was sealed")
			}
			if got := s.Stats(); got.FreeSlots != 0 || got.Slots != 0 || got.SlotsRetired != 1 {
				t.Fatalf("after the refused seal: %+v, want the slot retired", got)
			}
			again := mustStage(t, s, size)
			if again.Slot == st.Slot {
				t.Fatalf("the resized slot %d was handed out again", st.Slot)
			}
			data := pattern(size, 7)
			fill(t, s, again.RelPath, data)
			mustSeal(t, s, again, data)
		})
	}
}

// Slots are bounded in number, since each keeps a descriptor open: past
// MaxSlots free slots of other sizes are unlinked, and with none free a
// new one is refused ErrFull instead of exhausting descriptors.
func TestSlotCountIsBounded(t *testing.T) {
	s := openPool(t, Config{IdleAfter: time.Hour, MaxSlots: 3})
	var held []Staging
	for i := range 3 {
		held = append(held, mustStage(t, s, int64(4096*(i+1))))
	}
	if _, err := s.Stage(4096); !errors.Is(err, ErrFull) {
		t.Fatalf("a fourth slot with three in use: %v, want ErrFull", err)
	}
	fds := s.Stats()
	// One written and collected: it is free, and the next new size takes
	// its place.
	data := pattern(4096, 1)
	fill(t, s, held[0].RelPath, data)
	sealed := mustSeal(t, s, held[0], data)
	if err := s.Collect(sealed.RelPath, sealed.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stage(50000); err != nil {
		t.Fatalf("a new size with a free slot to evict: %v", err)
	}
	if got := s.Stats(); got.Slots != 3 || got.FreeSlots != 0 || got.Unlinks != fds.Unlinks+1 {
		t.Fatalf("after the eviction: %+v", got)
	}
	if DefaultMaxSlots() < minSlots {
		t.Fatalf("DefaultMaxSlots %d", DefaultMaxSlots())
	}
}

// A full filesystem is often full of the store's own free slots: an
// allocation that meets ENOSPC gives them back and tries once more. On a
// 4 MiB tmpfs, three free 1 MiB slots stand in the way of a 2 MiB one.
func TestSlotENOSPCEvictsFreeSlots(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Skipf("mounting a small tmpfs needs root: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	s := openPool(t, Config{Root: filepath.Join(dir, "root"), IdleAfter: time.Hour})
	var sts []Staging
	for range 3 {
		sts = append(sts, mustStage(t, s, 1<<20))
	}
	for _, st := range sts {
		data := pattern(1<<20, 2)
		fill(t, s, st.RelPath, data)
		sealed := mustSeal(t, s, st, data)
		if err := s.Collect(sealed.RelPath, sealed.Generation); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Stats(); got.FreeSlots != 3 {
		t.Fatalf("%+v, want three free slots", got)
	}
	st, err := s.Stage(2 << 20)
	if err != nil {
		t.Fatalf("a 2 MiB slot on a tmpfs full of free slots: %v", err)
	}
	if got := s.Stats(); got.FreeSlots != 0 || got.Slots != 1 {
		t.Fatalf("%+v, want the free slots given back", got)
	}
	data := pattern(2<<20, 3)
	fill(t, s, st.RelPath, data)
	mustSeal(t, s, st, data)
}
