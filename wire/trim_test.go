package wire

import (
	"strings"
	"testing"
)

func TestScannerDropsAGrownTape(t *testing.T) {
	var s Scanner
	big := "[" + strings.Repeat("0,", 20000) + "0]"
	if err := s.Scan([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if cap(s.toks) <= keepToks {
		t.Fatalf("a 20,001-value document left a tape of capacity %d", cap(s.toks))
	}
	s.Trim()
	if cap(s.toks) > keepToks || s.data != nil {
		t.Fatalf("after Trim: tape capacity %d, data kept %v", cap(s.toks), s.data != nil)
	}
	// Scan trims before it reuses; a small document's tape is kept.
	if err := s.Scan([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if err := s.Scan([]byte(`{"a":[1,2,3]}`)); err != nil {
		t.Fatal(err)
	}
	if c := cap(s.toks); c > keepToks || c == 0 {
		t.Fatalf("tape capacity %d after a small document, want 1..%d", c, keepToks)
	}
	small := cap(s.toks)
	s.Trim()
	if cap(s.toks) != small {
		t.Fatalf("Trim dropped a small tape")
	}
}
