package router

// The routing core makes a few short-lived values per frame: the artifact,
// the publication, copies of its payload and attachment list. Carving them
// from arrays keeps a steady stream of frames to one allocation per
// slabLen values (or per chunk of bytes), without a free list: nothing is
// ever reused, and the garbage collector frees an array once none of its
// values is referenced, so no value can be recycled while something (a
// frame being encoded outside the lock, say) still points at it. The cost
// is that one long-lived value keeps its array's dead neighbours in memory,
// which is why the arrays are short.

const slabLen = 32

// slab hands out zeroed values of T.
type slab[T any] struct{ free []T }

func (s *slab[T]) new() *T {
	if len(s.free) == 0 {
		s.free = make([]T, slabLen)
	}
	p := &s.free[0]
	s.free = s.free[1:]
	return p
}

// carver copies short slices of T into shared arrays of chunk elements;
// a copy longer than an eighth of a chunk gets an array of its own.
type carver[T any] struct {
	chunk int
	buf   []T
}

// copyOf returns a copy of src, nil when src is empty. The copy's capacity
// is its length, so appending to it can never reach a neighbour.
func (c *carver[T]) copyOf(src []T) []T {
	n := len(src)
	if n == 0 {
		return nil
	}
	if n > c.chunk/8 {
		return append([]T(nil), src...)
	}
	if cap(c.buf)-len(c.buf) < n {
		c.buf = make([]T, 0, c.chunk)
	}
	i := len(c.buf)
	c.buf = append(c.buf, src...)
	return c.buf[i:len(c.buf):len(c.buf)]
}
