package router_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

func TestParsePatternKeepsToTheDocumentedSpellings(t *testing.T) {
	for s, want := range map[string]router.Pattern{
		"*":                     router.Any(),
		"agent.*":               router.Prefix("agent."),
		"world.demo.*":          router.Prefix("world.demo."),
		"example.counter":       router.Exact("example.counter"),
		"agent.ctl/status":      router.Exact("agent.ctl").Methods(router.Exact("status")),
		"agent.ctl/Admin.*":     router.Exact("agent.ctl").Methods(router.Prefix("Admin.")),
		"agent.*/*":             router.Prefix("agent.").Methods(router.Any()),
		"*/Counter.Get":         router.Any().Methods(router.Exact("Counter.Get")),
		"agent.ctl/a/b with sp": router.Exact("agent.ctl").Methods(router.Exact("a/b with sp")),
	} {
		got, err := router.ParsePattern(s)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParsePattern(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("ParsePattern(%q).String() = %q", s, got.String())
		}
	}
	for _, s := range []string{"", "ab*", "*x", ".*", "a..*", "a b", "agent.**", "Agent.*", "agent.ctl/", "a b/status", "agent.ctl/\x01"} {
		if p, err := router.ParsePattern(s); err == nil {
			t.Errorf("ParsePattern(%q) = %v, want an error", s, p)
		}
	}
}

// A call grant may name methods: everyone may call status, only the
// operator pause. The refusal says which method was not granted.
func TestCallGrantsNameMethods(t *testing.T) {
	anyone := router.Grants{Call: []router.Pattern{router.Exact("agent.ctl").Methods(router.Exact("status"))}}
	operator := router.Grants{Call: []router.Pattern{router.Exact("agent.ctl").Methods(router.Any())}}
	agent := router.Grants{Register: []router.Pattern{router.Exact("agent.ctl")}}
	cfg := router.Config{Policy: router.ClosedPolicy().WithDefault(&anyone).Client("operator", operator).Client("agent", agent)}
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		bound := func(id string) *client.Client { return h.DialOn(h.conn(id), id, client.Config{}) }
		svc := mustRegister(t, ctx, bound("agent"), "agent.ctl")
		go svc.Serve(ctx, func(ctx context.Context, req *client.Request) { req.Reply(ctx, map[string]string{"m": req.Method}) })
		for _, tc := range []struct {
			who, method string
			ok          bool
		}{
			{"viewer", "status", true},
			{"viewer", "pause", false},
			{"operator", "status", true},
			{"operator", "pause", true},
		} {
			c := bound(tc.who)
			res, err := c.CallAndWait(ctx, "agent.ctl", tc.method, nil)
			if tc.ok {
				if err != nil {
					t.Fatalf("%s calling %s: %v", tc.who, tc.method, err)
				}
				res.Close()
			} else if code(t, err) != wire.ErrNotAuthorized || !strings.Contains(err.Error(), "method pause of agent.ctl") {
				t.Fatalf("%s calling %s: %v, want NOT_AUTHORIZED naming the method", tc.who, tc.method, err)
			}
			c.Close()
		}
		svc.Close()
	})
}
