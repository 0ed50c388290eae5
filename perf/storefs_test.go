package perf

import (
	"os"
	"testing"
)

const mountinfoSample = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684084k
30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=1024k
42 27 0:39 / /mnt/fbhuge rw,relatime shared:7 master:2 - tmpfs tmpfs rw,size=2097152k,mode=700,huge=within_size
43 27 0:40 / /mnt/with\040space rw - tmpfs none rw
`

func TestParseMountinfo(t *testing.T) {
	ms, err := parseMountinfo([]byte(mountinfoSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 5 {
		t.Fatalf("%d mounts, want 5", len(ms))
	}
	if m := ms[3]; m.point != "/mnt/fbhuge" || m.fsType != "tmpfs" || m.superOptions != "rw,size=2097152k,mode=700,huge=within_size" {
		t.Fatalf("optional fields confused the parser: %+v", m)
	}
	if ms[4].point != "/mnt/with space" {
		t.Fatalf("escape not undone: %q", ms[4].point)
	}
	if _, err := parseMountinfo([]byte("1 2 0:1 / /x rw no separator\n")); err == nil {
		t.Fatal("a line without the - separator was accepted")
	}
}

func TestMountOf(t *testing.T) {
	ms, err := parseMountinfo([]byte(mountinfoSample))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, point, opts string }{
		{"/dev/shm/flybus-perf-1", "/dev/shm", "rw,size=1024k"}, // the mount on top
		{"/mnt/fbhuge", "/mnt/fbhuge", "rw,size=2097152k,mode=700,huge=within_size"},
		{"/mnt/fbhugeish/x", "/", "rw"},
		{"/home/x", "/", "rw"},
	}
	for _, tt := range tests {
		m, ok := mountOf(ms, tt.path)
		if !ok || m.point != tt.point || m.superOptions != tt.opts {
			t.Errorf("mountOf(%s) = %+v %v, want %s", tt.path, m, ok, tt.point)
		}
	}
}

func TestHugeOption(t *testing.T) {
	for opts, want := range map[string]string{
		"rw,size=2097152k,mode=700,huge=within_size": "within_size",
		"rw,huge=always":    "always",
		"rw,size=24684084k": "never",
		"":                  "never",
	} {
		if got := hugeOption(opts); got != want {
			t.Errorf("hugeOption(%q) = %q, want %q", opts, got, want)
		}
	}
	if got := bracketed("always within_size advise [never] deny force\n"); got != "never" {
		t.Errorf("bracketed: %q", got)
	}
}

func TestDescribeStoreOnShm(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	fs := describeStore("/dev/shm")
	if !fs.Tmpfs || fs.Magic != "0x01021994" || fs.FSType != "tmpfs" || fs.Huge == "" || fs.Err != "" {
		t.Fatalf("/dev/shm described as %+v", fs)
	}
}
