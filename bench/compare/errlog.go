package compare

import (
	"fmt"
	"sync"
)

// errorLog keeps the first few errors of a run and counts the rest.
type errorLog struct {
	mu    sync.Mutex
	first []string
	n     int
}

const keepErrors = 10

func (l *errorLog) add(what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if len(l.first) < keepErrors {
		l.first = append(l.first, fmt.Sprintf("%s: %v", what, err))
	}
}

func (l *errorLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.first...)
	if l.n > len(l.first) {
		out = append(out, fmt.Sprintf("... and %d more", l.n-len(l.first)))
	}
	return out
}
