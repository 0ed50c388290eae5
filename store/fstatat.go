//go:build linux && (amd64 || arm64 || riscv64 || loong64)

package store

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// fstatatName is unix.Fstatat for a name already converted to a C string:
// a seal checks its slot's name every frame, and converting it each time
// was one of the router's allocations per frame.
func fstatatName(dirfd int, name *byte, st *unix.Stat_t, flags int) error {
	_, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)),
		uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
