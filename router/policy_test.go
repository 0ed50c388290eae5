package router_test

import (
	"testing"

	"github.com/flybus/flybus/router"
)

func TestParsePatternKeepsToTheDocumentedSpellings(t *testing.T) {
	for s, want := range map[string]router.Pattern{
		"*":               router.Any(),
		"agent.*":         router.Prefix("agent."),
		"world.demo.*":    router.Prefix("world.demo."),
		"example.counter": router.Exact("example.counter"),
	} {
		got, err := router.ParsePattern(s)
		if err != nil || got != want {
			t.Errorf("ParsePattern(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("ParsePattern(%q).String() = %q", s, got.String())
		}
	}
	for _, s := range []string{"", "ab*", "*x", ".*", "a..*", "a b", "agent.**", "Agent.*"} {
		if p, err := router.ParsePattern(s); err == nil {
			t.Errorf("ParsePattern(%q) = %v, want an error", s, p)
		}
	}
}
