package perf

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress rewrites one status line on a terminal once a second. A nil
// *progress does nothing.
type progress struct {
	w      io.Writer
	mu     sync.Mutex
	status func() string
	width  int // of the last line written
	stopc  chan struct{}
	done   chan struct{}
}

func startProgress(w io.Writer) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw()
			case <-p.stopc:
				return
			}
		}
	}()
	return p
}

// set changes what the line shows; f is called once a second.
func (p *progress) set(f func() string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.status = f
	p.mu.Unlock()
	p.draw()
}

// phase shows a fixed text.
func (p *progress) phase(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	p.set(func() string { return s })
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == nil {
		return
	}
	line := "perf: " + p.status()
	pad := ""
	if n := p.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n) // blank what a longer line left
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.width = len(line)
}

// stop ends the line with a newline, leaving the last status visible.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.stopc)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width > 0 {
		fmt.Fprintln(p.w)
	}
}
