package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// prepareRoot makes sure no other user can replace, redirect or write into
// the absolute directory root, creating what is missing (mode 0700). It
// walks from / down with Lstat, so no component is followed through a
// symlink: once every directory above the root is owned by root or by this
// user and writable by nobody else (or sticky, like /tmp and /dev/shm), and
// the root itself is ours and writable by us alone, the paths the store
// uses afterwards cannot be swapped under it.
func prepareRoot(root string) error {
	uid := os.Geteuid()
	names := strings.Split(strings.TrimPrefix(root, "/"), "/")
	if root == "/" {
		names = nil
	}
	dir := "/"
	if err := checkDir(dir, len(names) == 0, uid); err != nil {
		return err
	}
	for i, name := range names {
		dir = filepath.Join(dir, name)
		if err := checkDir(dir, i == len(names)-1, uid); err != nil {
			return err
		}
	}
	return nil
}

// checkDir checks one component of the root's path, creating it when it
// is missing. last is the root itself.
func checkDir(dir string, last bool, uid int) error {
	var st unix.Stat_t
	err := unix.Lstat(dir, &st)
	if err == unix.ENOENT {
		// Mkdir honours the umask, which can only take bits away from 0700.
		if err = unix.Mkdir(dir, 0o700); err != nil && err != unix.EEXIST {
			return os.NewSyscallError("mkdir "+dir, err)
		}
		err = unix.Lstat(dir, &st)
	}
	if err != nil {
		return os.NewSyscallError("lstat "+dir, err)
	}
	mode := st.Mode
	switch {
	case mode&unix.S_IFMT == unix.S_IFLNK:
		hint := ""
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			hint = " (use the real path " + real + ")"
		}
		return unsafeRoot("%s is a symbolic link, which whoever controls it can point elsewhere%s", dir, hint)
	case mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory", dir)
	}
	owner := int(st.Uid)
	perm := mode & 0o7777
	if last {
		if owner != uid {
			return unsafeRoot("%s is owned by uid %d, not by this user (uid %d)", dir, owner, uid)
		}
		if perm&0o022 != 0 {
			return unsafeRoot("%s has mode %04o, which lets other users write into it (chmod 700 %s)", dir, perm, dir)
		}
		return nil
	}
	// Above the root, another user could rename the path away and put
	// their own directory in its place.
	if owner != 0 && owner != uid {
		return unsafeRoot("%s, above the store root, is owned by uid %d, who could replace what is below it", dir, owner)
	}
	if perm&0o022 != 0 && perm&unix.S_ISVTX == 0 {
		return unsafeRoot("%s, above the store root, has mode %04o: writable by other users without the sticky bit, so they could replace what is below it", dir, perm)
	}
	return nil
}

func unsafeRoot(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsafeRoot}, args...)...)
}
