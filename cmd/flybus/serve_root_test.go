package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flybus/flybus/internal/shmtest"
)

// flybus serve refuses a store root another user could replace or write
// into, as a configuration error: exit 2, an error naming the path and the
// problem, and nothing created or changed (a 0777 root stays 0777).
func TestServeRefusesUnsafeStoreRoot(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, base string) (root, culprit string)
		want  string
		root  bool // needs root, to give a directory to another user
	}{
		{name: "Symlink", want: "symbolic link", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "real"), 0o700)
			if err := os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "root")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(base, "root"), filepath.Join(base, "root")
		}},
		{name: "WorldWritable", want: "mode 0777", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "root"), 0o777)
			return filepath.Join(base, "root"), filepath.Join(base, "root")
		}},
		{name: "WritableParentWithoutSticky", want: "without the sticky bit", setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "parent"), 0o777)
			return filepath.Join(base, "parent", "root"), filepath.Join(base, "parent")
		}},
		{name: "OtherOwner", want: "owned by uid 65534", root: true, setup: func(t *testing.T, base string) (string, string) {
			shmtest.MkdirMode(t, filepath.Join(base, "root"), 0o700)
			if err := os.Chown(filepath.Join(base, "root"), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(base, "root"), filepath.Join(base, "root")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("giving a directory to another user needs root")
			}
			t.Parallel()
			base := t.TempDir()
			root, culprit := c.setup(t, base)
			sock := filepath.Join(shortDir(t), "a.sock")
			before, _ := os.Lstat(culprit)
			_, stderr, code := runFlybus(t, "serve", "--store", root, "--listen", sock+"=agent-a")
			if code != 2 || !strings.Contains(stderr, "unsafe store root") ||
				!strings.Contains(stderr, culprit) || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2, naming %s and %q", code, stderr, culprit, c.want)
			}
			mustNotExist(t, sock)
			if after, err := os.Lstat(culprit); err != nil || after.Mode() != before.Mode() {
				t.Errorf("%s changed: %v -> %v (%v)", culprit, before.Mode(), after.Mode(), err)
			}
			if c.name == "WritableParentWithoutSticky" {
				mustNotExist(t, root)
			}
		})
	}
}
