package perf

import (
	"sync"
)

// errorLog counts failures and keeps the first few.
type errorLog struct {
	mu    sync.Mutex
	n     int
	first []string
}

const keptErrors = 10

func (e *errorLog) add(where string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < keptErrors {
		e.first = append(e.first, where+": "+err.Error())
	}
}

func (e *errorLog) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

func (e *errorLog) summary() (int, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, append([]string(nil), e.first...)
}
