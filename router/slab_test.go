package router

import "testing"

func TestSlabHandsOutDistinctZeroedValues(t *testing.T) {
	var s slab[topicMsg]
	seen := map[*topicMsg]bool{}
	for i := range 3 * slabLen {
		m := s.new()
		if seen[m] {
			t.Fatalf("value %d handed out twice", i)
		}
		if m.seq != 0 || m.payload != nil {
			t.Fatalf("value %d is not zeroed: %+v", i, m)
		}
		seen[m] = true
		m.seq = uint64(i + 1)
	}
}

func TestCarvedCopiesCannotReachTheirNeighbours(t *testing.T) {
	c := carver[byte]{chunk: 64}
	a := c.copyOf([]byte("first"))
	b := c.copyOf([]byte("second"))
	if cap(a) != len(a) || cap(b) != len(b) {
		t.Fatalf("capacities %d and %d, want the lengths", cap(a), cap(b))
	}
	a = append(a, "!!!"...) // must move, not overwrite b
	if string(b) != "second" || string(a) != "first!!!" {
		t.Fatalf("a %q, b %q", a, b)
	}
	if c.copyOf(nil) != nil {
		t.Fatal("an empty copy is not nil")
	}
	// Longer than an eighth of a chunk: an array of its own, the chunk
	// left as it was.
	before := len(c.buf)
	long := c.copyOf(make([]byte, 9))
	if len(long) != 9 || len(c.buf) != before {
		t.Fatalf("a long copy was carved: len %d, chunk used %d -> %d", len(long), before, len(c.buf))
	}
	// A full chunk starts a new one; earlier copies keep their bytes.
	for range 20 {
		c.copyOf([]byte("12345678"))
	}
	if string(b) != "second" {
		t.Fatalf("b became %q", b)
	}
}
