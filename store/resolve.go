package store

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The client side: opening the file a router's location names, and nothing
// else, whatever the location says.

// maxRelPath bounds a relative path, the usual limit of a file name.
const maxRelPath = 255

// ValidRelPath reports whether p may be a location's relative path: 1 to
// 255 bytes, slash-separated components of ASCII letters, digits, '-', '_'
// and '.', none empty and none starting with '.', which rules out "." and
// ".." as well as the store's own hidden files. A leading '/' makes an empty
// first component, so absolute paths are refused.
func ValidRelPath(p string) bool {
	if len(p) == 0 || len(p) > maxRelPath {
		return false
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if i == start || p[start] == '.' {
				return false
			}
			start = i + 1
			continue
		}
		if !relPathByte(p[i]) {
			return false
		}
	}
	return true
}

func relPathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.'
}

// OpenRead opens, for reading, the file at relPath in store storeID under
// root. See OpenWrite for how the path is resolved.
func OpenRead(root, storeID, relPath string) (*os.File, error) {
	return openLocation(root, storeID, relPath, unix.O_RDONLY)
}

// OpenWrite opens, for reading and writing (as a writable mapping needs),
// the existing file at relPath in store storeID under root. It never creates
// or truncates.
//
// root is trusted configuration and may itself be a symbolic link. Below it,
// the store id and relPath must be valid (ValidStoreID, ValidRelPath), and
// resolution stays strictly beneath root and follows no symbolic link, in
// any component; the result must be a regular file. The kernel enforces
// this with openat2 (RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS,
// RESOLVE_NO_MAGICLINKS); on kernels without openat2 each component is
// opened in turn with O_NOFOLLOW.
func OpenWrite(root, storeID, relPath string) (*os.File, error) {
	return openLocation(root, storeID, relPath, unix.O_RDWR)
}

func openLocation(root, storeID, relPath string, mode int) (*os.File, error) {
	if !ValidStoreID(storeID) {
		return nil, &Error{Op: "open location", RelPath: storeID, Err: ErrInvalidID}
	}
	if !ValidRelPath(relPath) {
		return nil, &Error{Op: "open location", RelPath: relPath, Err: ErrInvalidPath}
	}
	name := storeID + "/" + relPath
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &Error{Op: "open location", RelPath: name, Err: &os.PathError{Op: "open", Path: root, Err: err}}
	}
	defer unix.Close(rootfd)
	// O_NONBLOCK keeps a FIFO planted in the store from hanging the open;
	// it is cleared again once the file is known to be regular.
	fd, err := openBeneath(rootfd, name, mode|unix.O_NONBLOCK)
	if err != nil {
		return nil, &Error{Op: "open location", RelPath: name, Err: err}
	}
	if err := checkRegular(fd); err != nil {
		unix.Close(fd)
		return nil, &Error{Op: "open location", RelPath: name, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, name)), nil
}

// checkRegular fails unless fd is a regular file, then clears O_NONBLOCK.
func checkRegular(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ErrNotRegular
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return os.NewSyscallError("fcntl(F_SETFL)", err)
	}
	return nil
}

// noOpenat2 is set once openat2 turns out to be missing (before Linux 5.6).
var noOpenat2 atomic.Bool

// openBeneath opens name relative to dirfd without leaving dirfd's tree and
// without following any symbolic link.
func openBeneath(dirfd int, name string, flags int) (int, error) {
	if !noOpenat2.Load() {
		fd, err := openat2Beneath(dirfd, name, flags)
		if err != unix.ENOSYS {
			if err != nil {
				return -1, os.NewSyscallError("openat2", err)
			}
			return fd, nil
		}
		noOpenat2.Store(true)
	}
	return openatWalk(dirfd, name, flags)
}

// openat2Beneath lets the kernel enforce the rules in one call. It returns
// the bare errno so the caller can tell ENOSYS apart.
func openat2Beneath(dirfd int, name string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// openatWalk is the fallback for kernels without openat2: it opens one
// component at a time, each with O_NOFOLLOW, so no symbolic link is ever
// followed and, with "." and ".." refused, nothing outside dirfd is reached.
func openatWalk(dirfd int, name string, flags int) (int, error) {
	if name == "" || name[0] == '/' {
		return -1, os.NewSyscallError("openat", unix.EXDEV)
	}
	cur := dirfd
	release := func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}
	for {
		comp, rest, more := strings.Cut(name, "/")
		if comp == "" || comp == "." || comp == ".." {
			release()
			return -1, os.NewSyscallError("openat", unix.EXDEV)
		}
		if !more {
			fd, err := unix.Openat(cur, comp, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			release()
			if err != nil {
				return -1, os.NewSyscallError("openat", err)
			}
			return fd, nil
		}
		// O_PATH|O_NOFOLLOW on a symbolic link would open the link itself;
		// O_DIRECTORY makes that fail with ENOTDIR instead.
		next, err := unix.Openat(cur, comp, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		release()
		if err != nil {
			return -1, os.NewSyscallError("openat", err)
		}
		cur, name = next, rest
	}
}
