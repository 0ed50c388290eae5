package store

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/flybus/flybus/internal/shmtest"
)

var relPathCases = []struct {
	path string
	ok   bool
}{
	{"a", true},
	{"stage-0000000000000001", true},
	{"sealed-00000000000000ff", true},
	{"dir/file", true},
	{"a.b/c-d/E_9", true},
	{strings.Repeat("a", 255), true},
	{strings.Repeat("a", 256), false},
	{"", false},
	{"/abs", false},
	{"/", false},
	{"dir/", false},
	{"a//b", false},
	{".", false},
	{"..", false},
	{"../x", false},
	{"a/..", false},
	{"a/../b", false},
	{"a/./b", false},
	{".flybus-store", false},
	{"a/.hidden", false},
	{"a b", false},
	{`a\b`, false},
	{"a\x00b", false},
	{"a\nb", false},
	{"caf\u00e9", false},
	{"a:b", false},
	{"~", false},
}

func TestValidRelPath(t *testing.T) {
	for _, c := range relPathCases {
		if got := ValidRelPath(c.path); got != c.ok {
			t.Errorf("ValidRelPath(%q) = %v, want %v", c.path, got, c.ok)
		}
	}
}

// FuzzValidRelPath checks that every accepted path is local and clean,
// whatever bytes it is made of.
func FuzzValidRelPath(f *testing.F) {
	for _, c := range relPathCases {
		f.Add(c.path)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !ValidRelPath(p) {
			return
		}
		if !filepath.IsLocal(p) || filepath.Clean(p) != p || len(p) > 255 {
			t.Fatalf("accepted %q, which is not a clean local path", p)
		}
		for _, c := range strings.Split(p, "/") {
			if c == "" || c[0] == '.' {
				t.Fatalf("accepted %q with component %q", p, c)
			}
		}
	})
}

func TestValidStoreID(t *testing.T) {
	for id, ok := range map[string]bool{
		"store-0123456789abcdef":  true,
		"store-0123456789ABCDEF":  false,
		"store-0123456789abcde":   false,
		"store-0123456789abcdef0": false,
		"store-0123456789abcdeg":  false,
		"Store-0123456789abcdef":  false,
		"router-0123456789abcdef": false,
		"":                        false,
		"../0123456789abcdef0000": false,
	} {
		if ValidStoreID(id) != ok {
			t.Errorf("ValidStoreID(%q) = %v", id, !ok)
		}
	}
	if id := NewID(); !ValidStoreID(id) || id == NewID() {
		t.Errorf("NewID() = %q", id)
	}
}

const testID = "store-0123456789abcdef"

// locationTree builds, under a fresh root, a store directory with files to
// find and traps to refuse, and a secret outside the root.
//
//	<tmp>/outside/secret, <tmp>/outside/file
//	<tmp>/root/store-…/file, sub/file, dir/, fifo
//	<tmp>/root/store-…/lastlink -> ../../outside/secret
//	<tmp>/root/store-…/abslink  -> <tmp>/outside/secret
//	<tmp>/root/store-…/innerlink -> file           (inside, still refused)
//	<tmp>/root/store-…/dirlink  -> <tmp>/outside    (escape in the middle)
//	<tmp>/root/store-…/innerdir -> sub             (inside, still refused)
func locationTree(t *testing.T) (root string) {
	t.Helper()
	base := shmtest.Dir(t, "flybus-store-test-")
	outside := filepath.Join(base, "outside")
	root = filepath.Join(base, "root")
	store := filepath.Join(root, testID)
	for _, d := range []string{outside, filepath.Join(store, "sub"), filepath.Join(store, "dir")} {
		mkdir(t, d)
	}
	for p, data := range map[string]string{
		filepath.Join(outside, "secret"):  "secret",
		filepath.Join(outside, "file"):    "secret",
		filepath.Join(store, "file"):      "inside",
		filepath.Join(store, "sub/file"):  "inside",
		filepath.Join(store, "sub/other"): "inside",
	} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"lastlink":  "../../outside/secret",
		"abslink":   filepath.Join(outside, "secret"),
		"innerlink": "file",
		"dirlink":   outside,
		"innerdir":  "sub",
	} {
		if err := os.Symlink(target, filepath.Join(store, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(store, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestResolvers drives both ways of resolving beneath a directory with the
// same names, including ones ValidRelPath would already have refused, so
// each resolver is proven to refuse on its own.
func TestResolvers(t *testing.T) {
	root := locationTree(t)
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootfd)

	resolvers := map[string]func(int, string, int) (int, error){
		"openat2": openat2Beneath,
		"openat":  openatWalk,
	}
	if fd, err := openat2Beneath(rootfd, testID+"/file", unix.O_RDONLY); err == unix.ENOSYS {
		delete(resolvers, "openat2")
		t.Log("openat2 missing on this kernel; testing the fallback only")
	} else if err == nil {
		unix.Close(fd)
	}

	for _, c := range []struct {
		name string
		ok   bool
	}{
		{testID + "/file", true},
		{testID + "/sub/file", true},
		{testID + "/lastlink", false},
		{testID + "/abslink", false},
		{testID + "/innerlink", false},
		{testID + "/dirlink/file", false},
		{testID + "/innerdir/file", false},
		{"../outside/secret", false},
		{testID + "/../../outside/secret", false},
		{filepath.Join(filepath.Dir(root), "outside/secret"), false},
		{"/etc/passwd", false},
	} {
		for rname, resolve := range resolvers {
			t.Run(rname+"/"+strings.ReplaceAll(c.name, "/", "|"), func(t *testing.T) {
				before := shmtest.FDs(t)
				fd, err := resolve(rootfd, c.name, unix.O_RDONLY)
				if c.ok {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					f := os.NewFile(uintptr(fd), c.name)
					defer f.Close()
					if b, _ := io.ReadAll(f); string(b) != "inside" {
						t.Fatalf("read %q", b)
					}
					return
				}
				if err == nil {
					b := make([]byte, 16)
					n, _ := unix.Read(fd, b)
					unix.Close(fd)
					t.Fatalf("opened, and read %q", b[:n])
				}
				var errno syscall.Errno
				if !errors.As(err, &errno) || (errno != unix.ELOOP && errno != unix.EXDEV && errno != unix.ENOTDIR) {
					t.Errorf("refused with %v, want ELOOP, EXDEV or ENOTDIR", err)
				}
				checkFDs(t, before)
			})
		}
	}
}

func TestOpenLocation(t *testing.T) {
	root := locationTree(t)
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "openat"
		}
		t.Run(name, func(t *testing.T) {
			saved := noOpenat2.Load()
			noOpenat2.Store(fallback || saved)
			defer noOpenat2.Store(saved)
			testOpenLocation(t, root)
		})
	}
}

func testOpenLocation(t *testing.T, root string) {
	before := shmtest.FDs(t)
	for _, rel := range []string{"file", "sub/file"} {
		f, err := OpenRead(root, testID, rel)
		if err != nil {
			t.Fatalf("OpenRead(%s): %v", rel, err)
		}
		if b, _ := io.ReadAll(f); string(b) != "inside" {
			t.Errorf("OpenRead(%s) read %q", rel, b)
		}
		if _, err := f.Write([]byte("x")); err == nil {
			t.Errorf("OpenRead(%s) gave a writable file", rel)
		}
		f.Close()
	}
	f, err := OpenWrite(root, testID, "sub/other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("INS"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(root, testID, "sub/other")); string(b) != "INSide" {
		t.Errorf("OpenWrite wrote %q", b)
	}
	if _, err := OpenWrite(root, testID, "missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenWrite of a missing file: %v, want not-exist (it must not create)", err)
	}

	for _, c := range []struct {
		id, rel string
		want    error // nil: any error
	}{
		{testID, "lastlink", nil},
		{testID, "abslink", nil},
		{testID, "innerlink", nil},
		{testID, "dirlink/file", nil},
		{testID, "innerdir/file", nil},
		{testID, "dir", nil}, // EISDIR for writing, ErrNotRegular for reading
		{testID, "fifo", ErrNotRegular},
		{testID, "../root/" + testID + "/file", ErrInvalidPath},
		{testID, "/etc/passwd", ErrInvalidPath},
		{testID, "sub/../file", ErrInvalidPath},
		{"store-0123", "file", ErrInvalidID},
		{"..", testID + "/file", ErrInvalidID},
		{"store-fedcba9876543210", "file", os.ErrNotExist},
	} {
		for op, open := range map[string]func(string, string, string) (*os.File, error){
			"OpenRead": OpenRead, "OpenWrite": OpenWrite,
		} {
			f, err := open(root, c.id, c.rel)
			if err == nil {
				f.Close()
				t.Errorf("%s(%s, %s) succeeded", op, c.id, c.rel)
				continue
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("%s(%s, %s) = %v, want %v", op, c.id, c.rel, err, c.want)
			}
		}
	}
	if _, err := OpenRead(root, testID, "dir"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenRead of a directory = %v, want ErrNotRegular", err)
	}
	checkFDs(t, before)
}
