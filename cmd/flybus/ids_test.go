package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/flybus/flybus/wire"
)

// Default client ids: unique on an open socket, the bound id on a bound one.

func TestDefaultIDsDoNotCollideOnAnOpenSocket(t *testing.T) {
	r := startOpenRouter(t)
	r.declare(t, "t")

	// Two subscribers at once: with one fixed default id the second was
	// always refused with CONFLICT.
	subs := []*proc{startSub(t, r.sock, "t"), startSub(t, r.sock, "t")}

	const n = 12
	var wg sync.WaitGroup
	errs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stdout, stderr, code := runFlybus(t, "pub", r.sock, "t", fmt.Sprintf(`{"n":%d}`, i))
			if code != 0 || !strings.HasPrefix(stdout, "published t #") {
				errs[i] = fmt.Sprintf("pub %d: exit %d, stdout %q, stderr %q", i, code, stdout, stderr)
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
	for _, s := range subs {
		s.signal(t, syscall.SIGTERM)
		if code := s.wait(t); code != 0 {
			t.Errorf("sub exit %d", code)
		}
	}
}

func TestDefaultIDIsTheBoundOne(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	store := filepath.Join(t.TempDir(), "store")
	startFlybus(t, "serve", "--store", store, "--listen", sock+"=agent-x").ready(t)

	// The router's refusal names the id the socket is bound to.
	err := intruderRefusal(t, sock)
	var be *wire.BusError
	if !errors.As(err, &be) || be.Code != wire.ErrNotAuthorized || !strings.Contains(be.Message, `bound to client id "agent-x"`) {
		t.Fatalf("refusal %v should be NOT_AUTHORIZED naming agent-x", err)
	}
	if id, ok := boundID(err); !ok || id != "agent-x" {
		t.Errorf("boundID = %q, %v", id, ok)
	}

	// Every tool without --client connects as agent-x, one at a time: a
	// bound socket has one id, and an id one live connection.
	stdout, stderr, code := runFlybus(t, "declare", sock, "t", "--retained", "latest")
	if code != 0 || !strings.HasPrefix(stdout, "declared t ") {
		t.Fatalf("declare: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, stderr, code = runFlybus(t, "pub", sock, "t", `{"n":1}`)
	if code != 0 || stdout != "published t #1 to 0 subscriber(s), 0 replaced\n" {
		t.Fatalf("pub: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, stderr, code = runFlybus(t, "sub", sock, "t", "--replay", "--count", "1")
	if code != 0 || stdout != "#1 t {\"n\":1}\n" {
		t.Errorf("sub: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// NO_SERVICE, not NOT_AUTHORIZED: call got in as agent-x.
	_, stderr, code = runFlybus(t, "call", sock, "nobody.here", "M", `{}`)
	if code != 1 || !strings.HasPrefix(stderr, "NO_SERVICE: ") {
		t.Errorf("call: exit %d, stderr %q", code, stderr)
	}

	// An explicit --client is taken as meant, and the hint names the id.
	_, stderr, code = runFlybus(t, "pub", sock, "t", `{}`, "--client", "someone")
	if code != 1 || !strings.HasPrefix(stderr, "NOT_AUTHORIZED: ") ||
		!strings.Contains(stderr, "flybus pub: this socket admits only agent-x; leave out --client (or give --client agent-x)") {
		t.Errorf("explicit other id: exit %d, stderr %q", code, stderr)
	}
}

func TestDefaultClientIDShape(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := defaultClientID("pub")
		if !regexp.MustCompile(`^flybus-pub-[0-9a-f]{8}$`).MatchString(id) || !wire.ValidID(id) || seen[id] {
			t.Fatalf("default id %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
	// Only a NOT_AUTHORIZED that names an id counts as a binding.
	for _, err := range []error{
		wire.NewError(wire.ErrNotAuthorized, 0, "client id not admitted by the policy"),
		wire.NewError(wire.ErrConflict, 0, `this endpoint is bound to client id "x"`),
		errors.New(`bound to client id "x"`),
	} {
		if id, ok := boundID(err); ok {
			t.Errorf("boundID(%v) = %q", err, id)
		}
	}
}
