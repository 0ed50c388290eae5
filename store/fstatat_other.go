//go:build !(linux && (amd64 || arm64 || riscv64 || loong64))

package store

import "golang.org/x/sys/unix"

// fstatatName is unix.Fstatat for a name already converted to a C string,
// on architectures without the newfstatat system call.
func fstatatName(dirfd int, name *byte, st *unix.Stat_t, flags int) error {
	return unix.Fstatat(dirfd, unix.BytePtrToString(name), st, flags)
}
