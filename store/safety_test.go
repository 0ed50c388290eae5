package store

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flybus/flybus/internal/shmtest"
)

// nobody is the uid and gid a test running as root gives a directory to
// make it another user's.
const nobody = 65534

// TestOpenRefusesUnsafeRoot: a root another user could replace, redirect
// or write into is refused with ErrUnsafeRoot, naming the path, and
// nothing is created or changed.
func TestOpenRefusesUnsafeRoot(t *testing.T) {
	asRoot := os.Geteuid() == 0
	cases := []struct {
		name  string
		setup func(t *testing.T, base string) (root, culprit string)
		want  string
		root  bool // needs to run as root (to chown)
	}{
		{name: "Symlink", want: "symbolic link", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "real"), 0o700)
			symlink(t, filepath.Join(base, "real"), filepath.Join(base, "root"))
			return filepath.Join(base, "root"), filepath.Join(base, "root")
		}},
		{name: "SymlinkAbove", want: "symbolic link", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "real", "root"), 0o700)
			symlink(t, filepath.Join(base, "real"), filepath.Join(base, "link"))
			return filepath.Join(base, "link", "root"), filepath.Join(base, "link")
		}},
		{name: "SymlinkAboveMissingRoot", want: "symbolic link", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "real"), 0o700)
			symlink(t, filepath.Join(base, "real"), filepath.Join(base, "link"))
			return filepath.Join(base, "link", "root"), filepath.Join(base, "link")
		}},
		{name: "WorldWritable", want: "mode 0777", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "root"), 0o777)
			return filepath.Join(base, "root"), filepath.Join(base, "root")
		}},
		{name: "GroupWritable", want: "mode 0770", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "root"), 0o770)
			return filepath.Join(base, "root"), filepath.Join(base, "root")
		}},
		{name: "StickyWorldWritable", want: "mode 1777", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "root"), fs.ModeSticky|0o777)
			return filepath.Join(base, "root"), filepath.Join(base, "root")
		}},
		{name: "WorldWritableParent", want: "without the sticky bit", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "parent"), 0o777)
			shmtest.MkdirMode(t, filepath.Join(base, "parent", "root"), 0o700)
			return filepath.Join(base, "parent", "root"), filepath.Join(base, "parent")
		}},
		{name: "GroupWritableParent", want: "without the sticky bit", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "parent"), 0o770)
			return filepath.Join(base, "parent", "root"), filepath.Join(base, "parent")
		}},
		{name: "OtherOwner", want: "owned by uid 65534", root: true, setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "root"), 0o700)
			chown(t, filepath.Join(base, "root"))
			return filepath.Join(base, "root"), filepath.Join(base, "root")
		}},
		{name: "OtherOwnerAbove", want: "owned by uid 65534", root: true, setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "parent", "root"), 0o700)
			chown(t, filepath.Join(base, "parent"))
			return filepath.Join(base, "parent", "root"), filepath.Join(base, "parent")
		}},
		{name: "RootOwnedWhenNotRoot", want: "owned by uid 0", setup: func(t *testing.T, base string) (string, string) {
			if asRoot {
				t.Skip("running as root: OtherOwner covers this")
			}
			return "/usr", "/usr"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && !asRoot {
				t.Skip("giving a directory to another user needs root")
			}
			base := shmtest.Dir(t, "flybus-store-test-")
			root, culprit := c.setup(t, base)
			before := snapshotTree(t, base)
			s, err := Open(Config{Root: root})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded", root)
			}
			if !errors.Is(err, ErrUnsafeRoot) {
				t.Fatalf("Open(%s) = %v, want ErrUnsafeRoot", root, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, culprit+" ") && !strings.Contains(msg, culprit+",") || !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not name %s and %q", msg, culprit, c.want)
			}
			if after := snapshotTree(t, base); after != before {
				t.Errorf("Open changed the tree:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestOpenAcceptsSafeRoots: a sticky world-writable directory above the
// root is fine, as /tmp and /dev/shm are; missing directories are created
// 0700, and an existing root readable by others is used as it is.
func TestOpenAcceptsSafeRoots(t *testing.T) {
	base := shmtest.Dir(t, "flybus-store-test-")
	sticky := filepath.Join(base, "sticky")
	shmtest.MkdirMode(t, sticky, fs.ModeSticky|0o777)
	root := filepath.Join(sticky, "a", "b", "root")
	s, err := Open(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, d := range []string{filepath.Join(sticky, "a"), filepath.Join(sticky, "a", "b"), root} {
		if fi, err := os.Lstat(d); err != nil || fi.Mode() != fs.ModeDir|0o700 {
			t.Errorf("%s: %v %v, want a 0700 directory", d, fi.Mode(), err)
		}
	}
	readable := filepath.Join(base, "readable")
	shmtest.MkdirMode(t, readable, 0o755)
	s, err = Open(Config{Root: readable})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, _ := os.Lstat(readable); fi.Mode() != fs.ModeDir|0o755 {
		t.Errorf("an accepted root's mode changed to %v", fi.Mode())
	}
	// A relative root is checked as the absolute path it names.
	t.Chdir(base)
	s, err = Open(Config{Root: "rel"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Root() != filepath.Join(base, "rel") {
		t.Errorf("Root() = %s", s.Root())
	}
	s.Close()
}

// TestSealRefusesReplacedFile: whatever the staging name leads to at seal
// must be the inode the store created there, with no other name; a file
// put in its place is never sealed (its bytes do not become an artifact),
// the name is removed, and the other file is left alone.
func TestSealRefusesReplacedFile(t *testing.T) {
	const size = 4096
	for _, c := range []struct {
		name    string
		replace func(t *testing.T, stagingPath, other string)
	}{
		{"HardLinkToOtherFile", func(t *testing.T, staging, other string) {
			if err := os.Remove(staging); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(other, staging); err != nil {
				t.Fatal(err)
			}
		}},
		{"RenameOver", func(t *testing.T, staging, other string) {
			if err := os.Rename(other, staging); err != nil {
				t.Fatal(err)
			}
		}},
		{"SecondLink", func(t *testing.T, staging, other string) {
			if err := os.Remove(other); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(staging, other); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, pooled := range []bool{false, true} {
			name := c.name + "/Created"
			if pooled {
				name = c.name + "/Pooled"
			}
			t.Run(name, func(t *testing.T) {
				cfg := Config{PoolDepth: -1}
				if pooled {
					cfg = Config{}
				}
				s := openStore(t, cfg)
				st := mustStage(t, s, size)
				if pooled {
					// The first Stage of a size misses; the pool prepares
					// the next ones.
					if err := s.Remove(st.RelPath); err != nil {
						t.Fatal(err)
					}
					if !s.pool.waitIdle() {
						t.Fatal("the pool failed")
					}
					st = mustStage(t, s, size)
					if s.Stats().PoolHits != 1 {
						t.Fatalf("not a pool hit: %+v", s.Stats())
					}
				}
				fill(t, s, st.RelPath, pattern(size, 1))
				s.pool.waitIdle() // no refill may open files while descriptors are counted
				// The other file lives outside the store directory, on the
				// same filesystem, so it can be linked and renamed.
				other := filepath.Join(s.Root(), "other")
				secret := []byte(strings.Repeat("not an artifact ", size/16))
				if err := os.WriteFile(other, secret, 0o600); err != nil {
					t.Fatal(err)
				}
				c.replace(t, filepath.Join(s.Dir(), st.RelPath), other)
				before := shmtest.FDs(t)
				_, err := s.Seal(st.RelPath, size, nil)
				if !errors.Is(err, ErrReplaced) || errors.Is(err, ErrMismatch) {
					t.Fatalf("Seal = %v, want ErrReplaced", err)
				}
				checkFDs(t, before)
				checkGone(t, s, st.RelPath)
				if n := files(t, s); n != 1+int(s.Stats().PooledFiles) {
					t.Errorf("%d files left in the store, want the marker and %d pooled", n, s.Stats().PooledFiles)
				}
				if stats := s.Stats(); stats.StagingFiles != 0 || stats.SealedFiles != 0 || stats.SealFailures != 1 {
					t.Errorf("Stats = %+v", stats)
				}
				switch got, err := os.ReadFile(other); c.name {
				case "HardLinkToOtherFile":
					if err != nil || !bytes.Equal(got, secret) {
						t.Errorf("the other file was touched: %v, equal=%v", err, bytes.Equal(got, secret))
					}
				case "SecondLink":
					if err != nil {
						t.Errorf("the other name was removed: %v", err)
					}
				}
			})
		}
	}
}

// TestSealRefusesUnstagedName: a file the store never staged, planted
// under a staging name, is not sealed.
func TestSealRefusesUnstagedName(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	rel := fileName(kindStaging, 1000)
	if err := os.WriteFile(filepath.Join(s.Dir(), rel), []byte("planted"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(rel, 7, nil); !errors.Is(err, ErrReplaced) {
		t.Fatalf("Seal = %v, want ErrReplaced", err)
	}
	checkGone(t, s, rel)
}

// TestCheckNamed: a sealed name swapped while the seal ran (a rename the
// lease does not prevent) is refused and removed.
func TestCheckNamed(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	st := mustStage(t, s, 10)
	id, ok := s.takeStaging(1)
	if !ok {
		t.Fatal("no identity recorded for the staged file")
	}
	if err := s.checkNamed(st.RelPath, id); err != nil {
		t.Fatalf("the file itself: %v", err)
	}
	if err := os.Remove(filepath.Join(s.Dir(), st.RelPath)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), st.RelPath), []byte("swapped"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.checkNamed(st.RelPath, id); !errors.Is(err, ErrReplaced) {
		t.Fatalf("a swapped file: %v, want ErrReplaced", err)
	}
	checkGone(t, s, st.RelPath)
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
}

// snapshotTree describes every path under base with its mode, so a test
// can tell that nothing was created or changed.
func snapshotTree(t *testing.T, base string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(strings.TrimPrefix(p, base) + ":" + fi.Mode().String() + " ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
