package term

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFilesAndBuffersAreNotTerminals(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(&bytes.Buffer{}) {
		t.Fatal("a file or a buffer reported as a terminal")
	}
	if restore, ok := Raw(f); ok {
		restore()
		t.Fatal("raw mode on a regular file")
	}
}

// A pseudo-terminal is a terminal, and Raw turns off line editing and
// echo on it, then puts them back.
func TestRawOnAPseudoTerminal(t *testing.T) {
	m, pts, err := OpenPTY()
	if err != nil {
		t.Skip(err)
	}
	defer m.Close()
	defer pts.Close()
	if !IsTerminal(pts) {
		t.Fatal("a pseudo-terminal not taken for a terminal")
	}
	lflag := func() uint32 {
		st, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		return st.Lflag
	}
	before := lflag()
	restore, ok := Raw(pts)
	if !ok {
		t.Fatal("Raw refused a pseudo-terminal")
	}
	if lflag()&(unix.ICANON|unix.ECHO) != 0 {
		t.Error("raw input still edits lines or echoes")
	}
	restore()
	if lflag() != before {
		t.Errorf("restore left lflag %#x, was %#x", lflag(), before)
	}
}
