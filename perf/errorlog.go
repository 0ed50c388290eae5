package perf

import (
	"sync"
)

// ErrorLog counts failures and keeps the first few. It is exported for
// bench/compare, whose runs report their errors the same way.
type ErrorLog struct {
	mu    sync.Mutex
	n     int
	first []string
}

const keptErrors = 10

// Add counts err, keeping it as "where: err" while fewer than ten are kept.
func (e *ErrorLog) Add(where string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < keptErrors {
		e.first = append(e.first, where+": "+err.Error())
	}
}

// Count is the number of errors added.
func (e *ErrorLog) Count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// Summary returns the number of errors added and a copy of the kept ones.
func (e *ErrorLog) Summary() (int, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, append([]string(nil), e.first...)
}
