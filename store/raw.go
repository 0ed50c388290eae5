//go:build linux && (amd64 || arm64 || riscv64 || loong64)

package store

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The calls a pooled frame makes on its slot's descriptor every frame
// (fstat, fstatat, fchmod, fcntl leases) are made raw: on tmpfs they
// never block, and one made through the runtime's syscall path wakes the
// runtime's monitor thread when it sleeps, which at tens of frames a
// second it always does; that wake and the monitor's polling after it
// cost the router more than the calls themselves.

// fstatatName is fstatat(2) for a name already converted to a C string:
// a seal checks its slot's name every frame, and converting it each time
// was one of the router's allocations per frame.
func fstatatName(dirfd int, name *byte, st *unix.Stat_t, flags int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)),
		uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func fstat(fd int, st *unix.Stat_t) error {
	_, _, e := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0)
	if e != 0 {
		return e
	}
	return nil
}

func fchmod(fd int, mode uint32) error {
	_, _, e := unix.RawSyscall(unix.SYS_FCHMOD, uintptr(fd), uintptr(mode), 0)
	if e != 0 {
		return e
	}
	return nil
}

// setLeaseFcntl is fcntl(fd, F_SETLEASE, kind).
func setLeaseFcntl(fd, kind int) error {
	_, _, e := unix.RawSyscall(unix.SYS_FCNTL, uintptr(fd), unix.F_SETLEASE, uintptr(kind))
	if e != 0 {
		return e
	}
	return nil
}
