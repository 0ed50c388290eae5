package store

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/flybus/flybus/internal/shmtest"
)

// The pooled store (planned) proves a seal with a read lease instead of a
// write lease, because consumers keep read-only mappings of a slot across
// generations. This test pins the kernel behaviour that design rests on: a
// read lease (F_RDLCK) is granted while read-only descriptors and read-only
// mappings exist, and refused while any open file description of the inode
// is open for writing, including a writable shared mapping whose descriptor
// was already closed.
func TestReadLeaseSemantics(t *testing.T) {
	dir := shmtest.Dir(t, "flybus-lease-")
	const size = 1 << 16
	path := filepath.Join(dir, "slot")
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	readLease := func() bool {
		t.Helper()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		switch _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err {
		case nil:
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK); err != nil {
				t.Fatal(err)
			}
			return true
		case unix.EAGAIN:
			return false
		default:
			t.Fatalf("F_SETLEASE(F_RDLCK): %v", err)
			return false
		}
	}
	mapFile := func(flags, prot int) []byte {
		t.Helper()
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd) // the mapping outlives the descriptor
		b, err := unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	if !readLease() {
		t.Fatal("read lease refused with no other opener")
	}
	ro := mapFile(unix.O_RDONLY, unix.PROT_READ)
	rfd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !readLease() {
		t.Fatal("read lease refused while only a read-only mapping and a read-only descriptor exist")
	}
	unix.Close(rfd)

	wfd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if readLease() {
		t.Fatal("read lease granted while a writable descriptor is open")
	}
	unix.Close(wfd)
	if !readLease() {
		t.Fatal("read lease refused after the writable descriptor closed")
	}

	rw := mapFile(unix.O_RDWR, unix.PROT_READ|unix.PROT_WRITE)
	if readLease() {
		t.Fatal("read lease granted while a writable mapping exists (its descriptor closed)")
	}
	if err := unix.Munmap(rw); err != nil {
		t.Fatal(err)
	}
	if !readLease() {
		t.Fatal("read lease refused after the writable mapping was unmapped")
	}
	if err := unix.Munmap(ro); err != nil {
		t.Fatal(err)
	}
}
