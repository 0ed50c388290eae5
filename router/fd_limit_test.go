package router_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/wire"
	"golang.org/x/sys/unix"
)

// A router process under `ulimit -n 128`, in pool mode, where every slot
// keeps a descriptor open. A client that keeps allocating one-byte
// artifacts and holding them is refused QUOTA_EXCEEDED at its share of the
// store's slot bound (a quarter of a quarter of the limit), long before
// the router runs out of descriptors; another client still allocates,
// seals and reads. When the hog's connection is cut, the slots it held are
// retired at once: within waitFor's 10 s the router's descriptors and the
// store's slot files are back to what they were, plus the other client's
// one free slot.
func TestSlotDescriptorsAreBoundedPerClient(t *testing.T) {
	bin := bustest.FlybusBinary(t)
	root := shmtest.Dir(t, "flybus-test-")
	sock := filepath.Join(t.TempDir(), "bus.sock")
	child, storeID := bustest.StartServe(t, exec.Command("sh", "-c", `ulimit -n 128 && exec "$@"`, "sh",
		bin, "serve", "--open", "--store", root, "--listen", sock))
	pid := child.Process.Pid
	storeDir := filepath.Join(root, storeID)
	fds := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	slotFiles := func() int {
		ents, err := os.ReadDir(storeDir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "slot-") {
				n++
			}
		}
		return n
	}
	ctx := ctxT(t)
	fd0 := fds()

	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hog, err := client.Connect(ctx, nc, client.Config{ClientID: "hog", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	held := 0
	for {
		_, err := hog.Allocate(ctx, 1, "x/y")
		if err != nil {
			if code(t, err) != wire.ErrQuotaExceeded || !strings.Contains(err.Error(), "share of the store's slot files") {
				t.Fatalf("allocation %d: %v, want QUOTA_EXCEEDED for the client's share of the slots", held+1, err)
			}
			break
		}
		if held++; held > 64 {
			t.Fatalf("%d one-byte allocations held under ulimit -n 128 and none refused", held)
		}
	}
	if n := fds(); n >= 100 {
		t.Fatalf("the router holds %d descriptors of 128 with the hog at its share (%d slots)", n, held)
	}

	other, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "other", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	data := frameBytes(5, 4096)
	a := produce(t, other, data)
	mustRead(t, a, data)
	a.Close()
	barrier(t, other)

	cut(hog, nc)
	waitFor(t, "the hog's slots and descriptors to go", func() bool {
		return slotFiles() <= 1 && fds() <= fd0+1+slotFiles()
	})
	t.Logf("the hog held %d slots; descriptors %d before, %d after, %d slot files left", held, fd0, fds(), slotFiles())
	other.Close()
	if err := child.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
}

// A router process whose store is a 6 MiB tmpfs: a client fills it with
// four 1 MiB frames, lets them go (four free slots, 4 MiB of the 6), and
// leaves; a 3 MiB allocation then meets ENOSPC, and the store gives its
// free slots back and succeeds at once instead of failing until they
// idle out.
func TestFullTmpfsGivesFreeSlotsBack(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=6m,mode=0700"); err != nil {
		t.Skipf("mounting a small tmpfs needs root: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	bin := bustest.FlybusBinary(t)
	sock := filepath.Join(t.TempDir(), "bus.sock")
	child, _ := bustest.Serve(t, bin, root, sock)
	ctx := ctxT(t)

	filler, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "filler", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	var frames []*client.Artifact
	for i := range 4 {
		frames = append(frames, produce(t, filler, frameBytes(byte(i), 1<<20)))
	}
	for _, a := range frames {
		a.Close()
	}
	filler.Close()

	c, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "big", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	data := frameBytes(9, 3<<20)
	a := produce(t, c, data)
	mustRead(t, a, data)
	a.Close()
	c.Close()
	if err := child.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
}
