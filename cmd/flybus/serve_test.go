package main

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// End-to-end tests of `flybus serve`, run as a child process.

func TestServeReadyLineSocketsAndSIGTERM(t *testing.T) {
	dir := shortDir(t)
	store := filepath.Join(t.TempDir(), "store")
	a, b := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	p := startFlybus(t, "serve", "--store", store, "--listen", a+"=agent-a", "--listen", b, "--open")
	r := p.ready(t)

	if !r.Ready || !slices.Equal(r.Sockets, []string{a, b}) {
		t.Errorf("ready line %+v, want ready and sockets [%s %s]", r, a, b)
	}
	tag, ok := strings.CutPrefix(r.RouterID, "router-")
	if !ok || r.StoreID != "store-"+tag {
		t.Errorf("routerId %q and storeId %q should share one tag", r.RouterID, r.StoreID)
	}
	for _, s := range []string{a, b} {
		fi, err := os.Lstat(s)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want a socket with 0600", s, fi.Mode())
		}
	}
	storeDir := filepath.Join(store, r.StoreID)
	if fi, err := os.Stat(storeDir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("store directory %s: %v, %v", storeDir, fi, err)
	}

	// The unbound socket takes a self-asserted id under --open.
	connect(t, b, "anyone")

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	if n := strings.Count(p.stdout.String(), "\n"); n != 1 {
		t.Errorf("stdout has %d lines, want exactly the ready line:\n%s", n, p.stdout)
	}
	mustNotExist(t, a)
	mustNotExist(t, b)
	mustNotExist(t, storeDir)
}

func TestServeShutdownClosesClients(t *testing.T) {
	dir := shortDir(t)
	store := filepath.Join(t.TempDir(), "store")
	sock := filepath.Join(dir, "a.sock")
	p := startFlybus(t, "serve", "--store", store, "--listen", sock+"=agent-a")
	r := p.ready(t)
	c := connect(t, sock, "agent-a")

	p.signal(t, syscall.SIGINT)
	select {
	case <-c.Done():
	case <-time.After(testTimeout):
		t.Fatal("the client did not see its connection close")
	}
	// ROUTER_LOST (rather than a bare EOF) proves connection.closing arrived.
	if err := c.Err(); !errors.Is(err, wire.ErrRouterLost) {
		t.Errorf("client saw %v, want ROUTER_LOST from connection.closing", err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGINT", code)
	}
	mustNotExist(t, sock)
	mustNotExist(t, filepath.Join(store, r.StoreID))
	if _, err := os.Stat(store); err != nil {
		t.Errorf("the store root itself should stay: %v", err)
	}
}

func TestServeBoundListenerRefusesOtherIDs(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	startFlybus(t, "serve", "--store", filepath.Join(t.TempDir(), "s"), "--listen", sock+"=agent-a").ready(t)

	err := intruderRefusal(t, sock)
	if !errors.Is(err, wire.ErrNotAuthorized) {
		t.Fatalf("got %v, want NOT_AUTHORIZED", err)
	}
	connect(t, sock, "agent-a") // the bound id itself is admitted
}

// intruderRefusal connects to the bound socket sock as another client id
// and returns the router's refusal; being admitted fails t.
func intruderRefusal(t *testing.T, sock string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "intruder"})
	if err == nil {
		c.Close()
		t.Fatal("a bound socket admitted another client id")
	}
	return err
}

func TestServeConfigErrorsExit2AndCreateNothing(t *testing.T) {
	cases := []struct {
		name   string
		config string // written to a file and passed with --config when set
		args   []string
		want   string
	}{
		{name: "UnknownTopKey", config: `{"limts": {}}`, args: []string{"--listen", "SOCK=agent-a"}, want: `unknown key "limts"`},
		{name: "UnknownGrantKey", config: `{"policy": {"clients": {"agent-a": {"regster": ["*"]}}}}`,
			args: []string{"--listen", "SOCK=agent-a"}, want: `unknown key "regster"`},
		{name: "UnknownLimit", config: `{"limits": {"maxClient": 3}}`, args: []string{"--listen", "SOCK=agent-a"}, want: `"maxClient"`},
		{name: "BadLimitFlag", args: []string{"--listen", "SOCK=agent-a", "--limit", "maxClients=0"}, want: "maxClients must be at least 1"},
		{name: "BadLimitFile", config: `{"limits": {"maxControlBytes": "1000"}}`, args: []string{"--listen", "SOCK=agent-a"}, want: "maxControlBytes must hold"},
		{name: "FixedLimit", args: []string{"--listen", "SOCK=agent-a", "--limit", "maxBatch=8"}, want: "fixed by the protocol"},
		{name: "UnboundWithoutOpen", args: []string{"--listen", "SOCK"}, want: "needs --open"},
		{name: "BadClientID", args: []string{"--listen", "SOCK=Agent_A"}, want: "not a valid client id"},
		{name: "BadPattern", config: `{"policy": {"clients": {"agent-a": {"call": ["agent*"]}}}}`,
			args: []string{"--listen", "SOCK=agent-a"}, want: `pattern "agent*"`},
		{name: "NoSocket", want: "no socket"},
		{name: "UnknownFlag", args: []string{"--listen", "SOCK=agent-a", "--bogus"}, want: "flag provided but not defined"},
		{name: "DuplicateConfigKey", config: `{"store": "x", "store": "y"}`, args: []string{"--listen", "SOCK=agent-a"}, want: "not strict JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := shortDir(t)
			sock := filepath.Join(dir, "x.sock")
			store := filepath.Join(t.TempDir(), "store")
			args := []string{"serve", "--store", store}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "SOCK", sock))
			}
			if tc.config != "" {
				cfg := filepath.Join(t.TempDir(), "flybus.json")
				if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", cfg)
			}
			_, stderr, code := runFlybus(t, args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", code, stderr, tc.want)
			}
			mustNotExist(t, store)
			mustNotExist(t, sock)
		})
	}
}

func TestServeReplacesStaleSocket(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	// A listener closed without unlinking leaves what a crashed router
	// leaves: a socket file nobody answers on.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()

	p := startFlybus(t, "serve", "--store", filepath.Join(t.TempDir(), "s"), "--listen", sock+"=agent-a")
	p.ready(t)
	// stderr is copied separately from stdout: wait for it rather than
	// read what has arrived so far.
	p.waitOutput(t, p.stderr, "the stale socket's log", func(s string) bool { return strings.Contains(s, "removed a stale socket") })
	connect(t, sock, "agent-a")
}

func TestServeRefusesNonSocketPath(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "a.sock")
	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(t.TempDir(), "s")
	_, stderr, code := runFlybus(t, "serve", "--store", store, "--listen", path+"=agent-a")
	if code != 1 || !strings.Contains(stderr, "not a socket") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "not a socket" {
		t.Errorf("the file was touched: %q, %v", b, err)
	}
	mustNotExist(t, store)
}

func TestServeLeavesLiveRouterAlone(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	store := filepath.Join(t.TempDir(), "s")
	first := startFlybus(t, "serve", "--store", store, "--listen", sock+"=agent-a")
	r := first.ready(t)

	_, stderr, code := runFlybus(t, "serve", "--store", store, "--listen", sock+"=agent-a")
	if code != 1 || !strings.Contains(stderr, "live router") {
		t.Fatalf("second router: exit %d, stderr:\n%s", code, stderr)
	}
	// The first router still owns its socket and its store.
	connect(t, sock, "agent-a")
	if _, err := os.Stat(filepath.Join(store, r.StoreID)); err != nil {
		t.Errorf("the first router's store: %v", err)
	}
	entries, _ := os.ReadDir(store)
	if len(entries) != 1 {
		t.Errorf("store root holds %d entries, want only the first router's", len(entries))
	}
}
