package perf

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/flybus/flybus/internal/term"
)

// TestProgressPlainLinesOffTerminal: a log or a pipe gets whole lines, one
// per change, never carriage returns.
func TestProgressPlainLinesOffTerminal(t *testing.T) {
	var b bytes.Buffer
	p := startProgress(&b)
	p.phase("baseline: %s", "copy")
	p.phase("baseline: %s", "copy") // unchanged: no second line
	p.phase("starting the router")
	frames := 0
	p.set(func() string { frames++; return fmt.Sprintf("1 agent: frame %d", frames) })
	p.stop()
	want := "perf: baseline: copy\nperf: starting the router\nperf: 1 agent: frame 1\n"
	if got := b.String(); !strings.HasPrefix(got, want) || strings.Contains(got, "\r") {
		t.Errorf("progress wrote %q, want plain lines starting %q", got, want)
	}
}

func TestProgressKnowsATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if term.IsTerminal(w) || term.IsTerminal(&bytes.Buffer{}) {
		t.Error("a pipe or a buffer taken for a terminal")
	}
	ptmx, pts := openPTY(t)
	if !term.IsTerminal(pts) {
		t.Fatal("a pseudo-terminal not taken for a terminal")
	}
	p := startProgress(pts)
	p.phase("starting the router")
	p.stop()
	buf := make([]byte, 256)
	n, err := ptmx.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "\rperf: starting the router") {
		t.Errorf("terminal got %q (%v), want the status line rewritten with \\r", buf[:n], err)
	}
}

// openPTY opens a pseudo-terminal pair, or skips where there is none.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, s, err := term.OpenPTY()
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}
