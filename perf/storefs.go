package perf

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// tmpfsMagic is statfs's f_type of a tmpfs (TMPFS_MAGIC).
const tmpfsMagic = 0x01021994

// StoreFS describes the filesystem under the store, which decides most
// artifact costs: on a tmpfs with large folios (huge=within_size) the
// kernel sets up and tears down a few 2 MiB pages per frame instead of
// three hundred 4 KiB ones.
type StoreFS struct {
	Root       string `json:"root"`
	Magic      string `json:"statfsType"` // f_type, hex
	Tmpfs      bool   `json:"tmpfs"`
	MountPoint string `json:"mountPoint,omitempty"`
	FSType     string `json:"fsType,omitempty"`       // from mountinfo
	Options    string `json:"superOptions,omitempty"` // the filesystem's own options
	// Huge is the mount's huge= option ("never" when absent).
	Huge string `json:"huge,omitempty"`
	// ShmemEnabled is the bracketed choice of
	// /sys/kernel/mm/transparent_hugepage/shmem_enabled, which can force
	// or deny huge pages on every tmpfs ("" when unreadable).
	ShmemEnabled string `json:"shmemEnabled,omitempty"`
	Err          string `json:"error,omitempty"` // what could not be found out
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	point, fsType, source, superOptions string
}

// parseMountinfo parses /proc/self/mountinfo (proc(5)): fields 5 (mount
// point, octal-escaped) and, after the "-" separator, the filesystem type,
// the source and the super options.
func parseMountinfo(b []byte) ([]mount, error) {
	var out []mount
	for n, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(f) {
			return nil, fmt.Errorf("mountinfo line %d: malformed: %q", n+1, line)
		}
		m := mount{point: unescapeMount(f[4]), fsType: f[sep+1], source: f[sep+2]}
		if sep+3 < len(f) {
			m.superOptions = f[sep+3]
		}
		out = append(out, m)
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 is a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountOf returns the mount that holds path: the longest mount point that
// is path or one of its parents; of stacked mounts on one point, the last
// listed (the one on top).
func mountOf(mounts []mount, path string) (mount, bool) {
	var best mount
	found := false
	for _, m := range mounts {
		if !underMount(path, m.point) {
			continue
		}
		if !found || len(m.point) >= len(best.point) {
			best, found = m, true
		}
	}
	return best, found
}

func underMount(path, point string) bool {
	if point == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == point || strings.HasPrefix(path, point+"/")
}

// hugeOption returns the value of huge= in a tmpfs option list, "never"
// when the option is absent (the tmpfs default).
func hugeOption(opts string) string {
	for o := range strings.SplitSeq(opts, ",") {
		if v, ok := strings.CutPrefix(o, "huge="); ok {
			return v
		}
	}
	return "never"
}

// bracketed returns the [selected] word of a sysfs choice list.
func bracketed(s string) string {
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return ""
	}
	return s[i+1 : j]
}

// describeStore finds out what kind of filesystem root is on.
func describeStore(root string) StoreFS {
	fs := StoreFS{Root: root}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		fs.Err = os.NewSyscallError("statfs", err).Error()
		return fs
	}
	fs.Magic = fmt.Sprintf("0x%08x", uint64(st.Type))
	fs.Tmpfs = uint64(st.Type) == tmpfsMagic
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled"); err == nil {
		fs.ShmemEnabled = bracketed(string(b))
	}
	real, err := filepath.EvalSymlinks(root)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		fs.Err = err.Error()
		return fs
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		fs.Err = err.Error()
		return fs
	}
	mounts, err := parseMountinfo(b)
	if err != nil {
		fs.Err = err.Error()
		return fs
	}
	m, ok := mountOf(mounts, real)
	if !ok {
		fs.Err = "no mount holds " + real
		return fs
	}
	fs.MountPoint, fs.FSType, fs.Options = m.point, m.fsType, m.superOptions
	if m.fsType == "tmpfs" {
		fs.Huge = hugeOption(m.superOptions)
	}
	return fs
}
