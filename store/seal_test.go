package store

import (
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/mmap"
	"golang.org/x/sys/unix"
)

const frame = shmtest.FrameSize

func TestSealLease(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	st := mustStage(t, s, frame)
	data := pattern(frame, 3)
	fill(t, s, st.RelPath, data)
	before := shmtest.FDs(t)
	sealed := mustSeal(t, s, st, data)
	checkFDs(t, before)
	if sealed.Path != SealLease || sealed.Size != frame || !ValidRelPath(sealed.RelPath) {
		t.Fatalf("Sealed = %+v, want a lease seal of %d bytes", sealed, frame)
	}
	checkFile(t, s, sealed.RelPath, data, 0o444)
	checkGone(t, s, st.RelPath)
	stats := s.Stats()
	if stats.LeaseSeals != 1 || stats.CopySeals != 0 || stats.BytesCopied != 0 {
		t.Errorf("Stats = %+v, want one lease seal and no copy", stats)
	}
	if stats.StagingFiles != 0 || stats.SealedFiles != 1 || files(t, s) != 2 {
		t.Errorf("staging %d sealed %d on disk %d, want 0, 1, 2 with the marker",
			stats.StagingFiles, stats.SealedFiles, files(t, s))
	}
}

func TestSealLeaseWithoutDigest(t *testing.T) {
	s := openStore(t, Config{})
	for _, size := range []int64{0, 1, 4097} {
		st := mustStage(t, s, size)
		data := pattern(int(size), 9)
		fill(t, s, st.RelPath, data)
		sealed, err := s.Seal(st.RelPath, size, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sealed.Path != SealLease {
			t.Errorf("size %d: sealed by %v", size, sealed.Path)
		}
		checkFile(t, s, sealed.RelPath, data, 0o444)
	}
}

// TestSealCopyDescriptor: a producer that keeps its descriptor after sealing
// cannot change the sealed bytes.
func TestSealCopyDescriptor(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	st := mustStage(t, s, frame)
	w := openIn(t, s, OpenWrite, st.RelPath)
	defer w.Close()
	data := pattern(frame, 5)
	if _, err := w.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	before := shmtest.FDs(t)
	sealed := mustSeal(t, s, st, data)
	checkFDs(t, before)
	if sealed.Path != SealCopy {
		t.Fatalf("sealed by %v with a writable descriptor open", sealed.Path)
	}
	checkGone(t, s, st.RelPath)

	// Writes after the seal reach the orphaned staging inode only.
	if _, err := w.WriteAt(pattern(frame, 77), 0); err != nil {
		t.Fatal(err)
	}
	checkFile(t, s, sealed.RelPath, data, 0o444)
	var fst unix.Stat_t
	if err := unix.Fstat(int(w.Fd()), &fst); err != nil {
		t.Fatal(err)
	}
	if fst.Nlink != 0 {
		t.Errorf("producer's inode still has %d links", fst.Nlink)
	}

	stats := s.Stats()
	if stats.CopySeals != 1 || stats.LeaseSeals != 0 || stats.BytesCopied != frame {
		t.Errorf("Stats = %+v, want one copy seal of %d bytes", stats, frame)
	}
	if stats.StagingFiles != 0 || stats.SealedFiles != 1 || files(t, s) != 2 {
		t.Errorf("staging %d sealed %d on disk %d, want 0, 1, 2", stats.StagingFiles, stats.SealedFiles, files(t, s))
	}
}

// TestSealCopyMapping: a writable mapping kept after sealing (with its
// descriptor closed) cannot change the sealed bytes either.
func TestSealCopyMapping(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	st := mustStage(t, s, frame)
	m := mapIn(t, s, OpenWrite, st.RelPath, mmap.MapWritable, frame)
	defer m.Close()
	data := pattern(frame, 11)
	copy(m.Bytes(), data)

	sealed, err := s.Seal(st.RelPath, frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sealed.Path != SealCopy {
		t.Fatalf("sealed by %v with a writable mapping alive", sealed.Path)
	}
	copy(m.Bytes(), pattern(frame, 99))
	checkFile(t, s, sealed.RelPath, data, 0o444)
	checkGone(t, s, st.RelPath)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, s, sealed.RelPath, data, 0o444)
}

// TestSealCopyOthers: any other open of the inode, not only a writer, makes
// Seal copy. (A second hard link is refused: TestSealRefusesReplacedFile.)
func TestSealCopyOthers(t *testing.T) {
	for _, c := range []struct {
		name string
		hold func(t *testing.T, s *Store, rel string) (release func())
	}{
		{"Reader", func(t *testing.T, s *Store, rel string) func() {
			f := openIn(t, s, OpenRead, rel)
			return func() { f.Close() }
		}},
		{"ReadOnlyMapping", func(t *testing.T, s *Store, rel string) func() {
			v := mapIn(t, s, OpenRead, rel, mmap.MapFile, 4096)
			return func() { v.Close() }
		}},
		{"ChildProcess", func(t *testing.T, s *Store, rel string) func() {
			f := openIn(t, s, OpenWrite, rel)
			defer f.Close()
			// The child inherits the descriptor at fork; Start returns once
			// it has exec'd, so the parent's copy can go.
			cmd := exec.Command("sleep", "60")
			cmd.ExtraFiles = []*os.File{f}
			if err := cmd.Start(); err != nil {
				t.Skip("cannot start a child process:", err)
			}
			return func() { cmd.Process.Kill(); cmd.Wait() }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t, Config{PoolDepth: -1})
			st := mustStage(t, s, 4096)
			data := pattern(4096, 1)
			fill(t, s, st.RelPath, data)
			release := c.hold(t, s, st.RelPath)
			defer release()
			sealed, err := s.Seal(st.RelPath, 4096, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sealed.Path != SealCopy {
				t.Errorf("sealed by %v", sealed.Path)
			}
			checkFile(t, s, sealed.RelPath, data, 0o444)
			checkGone(t, s, st.RelPath)
		})
	}
}

func TestSealMismatch(t *testing.T) {
	const size = 8192
	data := pattern(size, 2)
	good := sha256.Sum256(data)
	bad := good
	bad[0] ^= 1
	for _, c := range []struct {
		name   string
		mutate func(f *os.File) error
		digest *[32]byte
	}{
		{"Truncated", func(f *os.File) error { return f.Truncate(size - 1) }, nil},
		{"Extended", func(f *os.File) error { return f.Truncate(size + 1) }, nil},
		{"Emptied", func(f *os.File) error { return f.Truncate(0) }, nil},
		{"Digest", func(*os.File) error { return nil }, &bad},
		{"DigestOfOtherBytes", func(f *os.File) error { _, err := f.WriteAt([]byte{0}, 100); return err }, &good},
	} {
		for _, path := range []SealPath{SealLease, SealCopy} {
			t.Run(c.name+"/"+path.String(), func(t *testing.T) {
				s := openStore(t, Config{PoolDepth: -1})
				st := mustStage(t, s, size)
				f := openIn(t, s, OpenWrite, st.RelPath)
				defer f.Close()
				if _, err := f.WriteAt(data, 0); err != nil {
					t.Fatal(err)
				}
				if err := c.mutate(f); err != nil {
					t.Fatal(err)
				}
				if path == SealLease {
					f.Close()
				}
				before := shmtest.FDs(t)
				_, err := s.Seal(st.RelPath, size, c.digest)
				if !errors.Is(err, ErrMismatch) {
					t.Fatalf("Seal = %v, want ErrMismatch", err)
				}
				var serr *Error
				if !errors.As(err, &serr) || serr.Op != "seal" || serr.RelPath != st.RelPath {
					t.Errorf("error %#v does not name the seal of %s", err, st.RelPath)
				}
				checkFDs(t, before)
				if n := files(t, s); n != 1 {
					t.Errorf("%d files left, want only the marker", n)
				}
				stats := s.Stats()
				if stats.SealMismatch != 1 || stats.StagingFiles != 0 || stats.SealedFiles != 0 {
					t.Errorf("Stats = %+v", stats)
				}
			})
		}
	}
}

func TestSealRefuses(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	st := mustStage(t, s, 10)
	for _, rel := range []string{
		"", "stage-", "stage-000000000000000g", "sealed-0000000000000001",
		"copy-0000000000000001", ".flybus-store", "../stage-0000000000000001",
		"stage-0000000000000001/x", "/stage-0000000000000001",
	} {
		if _, err := s.Seal(rel, 10, nil); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Seal(%q) = %v, want ErrInvalidPath", rel, err)
		}
	}
	if _, err := s.Seal(st.RelPath, -1, nil); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Seal with negative size = %v", err)
	}
	// A name that was never staged, or was sealed already, is a store
	// failure, not the producer's mismatch.
	sealed, err := s.Seal(st.RelPath, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Seal(st.RelPath, 10, nil)
	if err == nil || errors.Is(err, ErrMismatch) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("second Seal = %v, want a not-exist failure", err)
	}
	checkFile(t, s, sealed.RelPath, make([]byte, 10), 0o444)
	if s.Stats().SealFailures != 1 {
		t.Errorf("SealFailures = %d, want 1", s.Stats().SealFailures)
	}
}

func TestRemove(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	before := shmtest.FDs(t)
	a := mustStage(t, s, 100)
	b := mustStage(t, s, 100)
	sealed, err := s.Seal(b.RelPath, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{a.RelPath, sealed.RelPath} {
		for i := 0; i < 2; i++ {
			if err := s.Remove(rel); err != nil {
				t.Fatalf("Remove(%s) #%d: %v", rel, i+1, err)
			}
		}
		checkGone(t, s, rel)
	}
	for _, rel := range []string{"", "copy-0000000000000001", ".flybus-store", "x/stage-0000000000000001"} {
		if err := s.Remove(rel); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Remove(%q) = %v, want ErrInvalidPath", rel, err)
		}
	}
	if st := s.Stats(); st.StagingFiles != 0 || st.SealedFiles != 0 {
		t.Errorf("Stats = %+v", st)
	}
	if n := files(t, s); n != 1 {
		t.Errorf("%d files left, want only the marker", n)
	}
	checkFDs(t, before)
}

// TestViewAfterRemove: a consumer's view of a sealed artifact survives its
// collection.
func TestViewAfterRemove(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	st, _ := s.Stage(frame)
	data := pattern(frame, 4)
	fill(t, s, st.RelPath, data)
	sealed, err := s.Seal(st.RelPath, frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := mapIn(t, s, OpenRead, sealed.RelPath, mmap.MapFile, frame)
	defer v.Close()
	if err := s.Remove(sealed.RelPath); err != nil {
		t.Fatal(err)
	}
	if string(v.Bytes()) != string(data) {
		t.Error("view changed after Remove")
	}
}

// TestLifecycleConcurrent runs producers through stage, fill, seal and
// remove at once, some keeping their descriptor, to let the race detector
// look at every shared structure.
func TestLifecycleConcurrent(t *testing.T) {
	s := openStore(t, Config{PoolDepth: 2})
	const workers, rounds = 4, 12
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				size := int64(4096 * (1 + (w+i)%3))
				st, err := s.Stage(size)
				if err != nil {
					t.Error(err)
					return
				}
				data := pattern(int(size), byte(w))
				f, err := OpenWrite(s.Root(), s.ID(), st.RelPath)
				if err != nil {
					t.Error(err)
					return
				}
				f.WriteAt(data, 0)
				keep := i%2 == 0
				if !keep {
					f.Close()
				}
				digest := sha256.Sum256(data)
				sealed, err := s.Seal(st.RelPath, size, &digest)
				if keep {
					f.Close()
				}
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Remove(sealed.RelPath); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	if st.LeaseSeals+st.CopySeals != workers*rounds || st.CopySeals < workers*rounds/2 {
		t.Errorf("Stats = %+v", st)
	}
	if st.StagingFiles != 0 || st.SealedFiles != 0 {
		t.Errorf("files left: %+v", st)
	}
	if !s.pool.waitIdle() {
		t.Fatal("pool failed")
	}
	if n := files(t, s); int64(n) != 1+s.Stats().PooledFiles {
		t.Errorf("%d files on disk, want the marker and %d prepared", n, s.Stats().PooledFiles)
	}
}
