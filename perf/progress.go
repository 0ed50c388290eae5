package perf

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/flybus/flybus/internal/term"
)

// progress shows what the run is doing. On a terminal it rewrites one
// status line once a second; anywhere else (a log file, a CI console, a
// pipe) carriage returns would pile up into one unreadable line, so it
// writes plain lines: one per phase, and a running schedule's figures
// every plainEvery seconds. A nil *progress does nothing.
type progress struct {
	w      io.Writer
	tty    bool
	mu     sync.Mutex
	status func() string
	width  int    // of the last line written (terminal)
	last   string // the last line written (plain)
	ticks  int
	stopc  chan struct{}
	done   chan struct{}
}

// plainEvery is how many seconds apart plain lines repeat a running
// status; a terminal line is redrawn every second.
const plainEvery = 5

func startProgress(w io.Writer) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, tty: term.IsTerminal(w), stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.tick()
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
	p.status, p.ticks = f, 0
	p.mu.Unlock()
	p.draw()
}

// phase shows a fixed text.
func (p *progress) phase(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	p.set(func() string { return s })
}

func (p *progress) tick() {
	p.mu.Lock()
	p.ticks++
	due := p.tty || p.ticks%plainEvery == 0
	p.mu.Unlock()
	if due {
		p.draw()
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == nil {
		return
	}
	line := "perf: " + p.status()
	if !p.tty {
		if line != p.last {
			fmt.Fprintln(p.w, line)
			p.last = line
		}
		return
	}
	pad := ""
	if n := p.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n) // blank what a longer line left
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.width = len(line)
}

// stop ends the terminal line with a newline, leaving the last status
// visible; plain lines are already complete.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.stopc)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.width > 0 {
		fmt.Fprintln(p.w)
	}
}
