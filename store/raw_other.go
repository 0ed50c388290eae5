//go:build !(linux && (amd64 || arm64 || riscv64 || loong64))

package store

import "golang.org/x/sys/unix"

// fstatatName is unix.Fstatat for a name already converted to a C string,
// on architectures without the newfstatat system call.
func fstatatName(dirfd int, name *byte, st *unix.Stat_t, flags int) error {
	return unix.Fstatat(dirfd, unix.BytePtrToString(name), st, flags)
}

func fstat(fd int, st *unix.Stat_t) error { return unix.Fstat(fd, st) }

func fchmod(fd int, mode uint32) error { return unix.Fchmod(fd, mode) }

func setLeaseFcntl(fd, kind int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, kind)
	return err
}
