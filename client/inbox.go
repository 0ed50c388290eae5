package client

import (
	"context"
	"errors"
	"sync"
)

// inbox is an unbounded hand-off queue from the connection's reader, which
// must never block on user code, to a handle's Next. The router bounds what
// can arrive (credits), so unbounded here means bounded by the protocol.
// Several goroutines may wait in next at once: signal holds one wake-up, so
// a waiter that leaves something behind (items, or the close) passes it on.
type inbox[T interface{ Close() error }] struct {
	mu     sync.Mutex
	queue  []T
	signal chan struct{} // buffered 1: "something changed"
	closed bool
	err    error // why it closed: what next returns once drained
}

func newInbox[T interface{ Close() error }]() inbox[T] {
	return inbox[T]{signal: make(chan struct{}, 1)}
}

func (b *inbox[T]) notify() {
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// push queues v; false once the inbox is closed (the caller disposes of v).
func (b *inbox[T]) push(v T) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	b.queue = append(b.queue, v)
	b.mu.Unlock()
	b.notify()
	return true
}

// tryNext takes the oldest item without waiting.
func (b *inbox[T]) tryNext() (T, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var zero T
	if len(b.queue) == 0 {
		return zero, false
	}
	v := b.queue[0]
	b.queue[0] = zero
	b.queue = b.queue[1:]
	if len(b.queue) > 0 {
		b.notify() // the one signal may have woken only this taker
	}
	return v, true
}

// next waits for an item; once the inbox is closed and drained it returns
// the error it was closed with.
func (b *inbox[T]) next(ctx context.Context) (T, error) {
	for {
		if v, ok := b.tryNext(); ok {
			return v, nil
		}
		b.mu.Lock()
		closed, err := b.closed, b.err
		b.mu.Unlock()
		if closed {
			b.notify() // passes the close on to the next waiter
			var zero T
			return zero, err
		}
		select {
		case <-b.signal:
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}

// close stops delivery and closes every item nobody took; the first close
// decides the error next returns.
func (b *inbox[T]) close(err error) {
	b.mu.Lock()
	if !b.closed {
		b.closed, b.err = true, err
	}
	q := b.queue
	b.queue = nil
	b.mu.Unlock()
	b.notify()
	for _, v := range q {
		v.Close()
	}
}

// drain closes every item nobody took and keeps the inbox open: a
// reconnecting client's subscription drops what its lost connection
// queued and goes on with the next one's.
func (b *inbox[T]) drain() {
	b.mu.Lock()
	q := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, v := range q {
		v.Close()
	}
}

// handleEach hands what next yields to handle, one at a time, and closes
// each when handle returns, panicking or not, so no delivery outlives its
// handler unnoticed. It ends with nil once the program ended delivery (ctx,
// the handle's Close, the client's) and with the cause otherwise.
func handleEach[T interface{ Close() error }](ctx context.Context, next func(context.Context) (T, error), handle func(context.Context, T)) error {
	for ctx.Err() == nil {
		v, err := next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrHandleClosed) || errors.Is(err, ErrClosed) {
				return nil
			}
			return err
		}
		func() {
			defer v.Close()
			handle(ctx, v)
		}()
	}
	return nil
}
