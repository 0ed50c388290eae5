package client

import "context"

// oneShot is an outcome that arrives once: set by the reader (or the
// connection's failure) exactly once, read by anyone once done is closed.
// The reply to a command nobody waits for lands in one: a NoWait seal, an
// open or an allocation made ahead.
type oneShot[T any] struct {
	done chan struct{}
	v    T
	err  error
}

func newOneShot[T any]() *oneShot[T] { return &oneShot[T]{done: make(chan struct{})} }

// set records the outcome; it is called once.
func (o *oneShot[T]) set(v T, err error) {
	o.v, o.err = v, err
	close(o.done)
}

// get returns the outcome if it has arrived.
func (o *oneShot[T]) get() (v T, err error, ok bool) {
	select {
	case <-o.done:
		return o.v, o.err, true
	default:
		return v, nil, false
	}
}

// wait returns the outcome once it arrives, or ctx's error first.
func (o *oneShot[T]) wait(ctx context.Context) (T, error) {
	select {
	case <-o.done:
		return o.v, o.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// complete is the request hook that sets o from a reply decoded into *v.
func (o *oneShot[T]) complete(v *T) func(error) {
	return func(err error) { o.set(*v, err) }
}
