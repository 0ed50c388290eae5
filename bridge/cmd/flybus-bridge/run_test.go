package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// The built command bridges, answers SIGTERM with a clean stop (exit 0,
// the counters logged) and leaves nothing in its router.
func TestCommandRunsAndStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "flybus-bridge")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	root := filepath.Join(dir, "store")
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	sock := filepath.Join(dir, "r.sock")
	if _, err := r.ListenUnix(sock); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "app", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareTopic(ctx, "out", wire.RetainNone); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"nats": {"urls": [%q]}, "local": {"socket": %q, "clientId": "bridge", "storeRoot": %q},
	  "exports": [{"topic": "out", "subject": "s.out", "mode": "bounded"}]}`, ns.ClientURL(), sock, root)
	path := filepath.Join(dir, "bridge.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--log-format", "json", path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up, logged := make(chan struct{}), make(chan string, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if !seen && strings.Contains(sc.Text(), "local session up") {
				seen = true
				close(up)
			}
		}
		logged <- all.String()
	}()
	select {
	case <-up:
	case <-ctx.Done():
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no session: %s", <-logged)
	}
	if _, err := c.Publish(ctx, "out", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	out := <-logged
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"msg":"stats"`) {
		t.Fatalf("no stats logged: %s", out)
	}
	if s := r.Stats(); s.Owners != 0 || s.Artifacts != 0 {
		t.Fatalf("left in the router: %+v", s)
	}
}
