package router_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
	"golang.org/x/sys/unix"
)

// acceptHelperEnv, set to a socket path, makes TestAcceptSurvivesEMFILE
// run as the child: a router short of descriptors.
const acceptHelperEnv = "FLYBUS_TEST_ACCEPT_HELPER"

// Running out of descriptors is temporary: the accept loop backs off and
// retries (and counts it) rather than stopping for good while the router
// looks healthy. The router runs in a child process whose RLIMIT_NOFILE
// leaves room for a handful of connections; the test connects many more,
// sees the child's accept fail and retry, closes them, and then connects a
// client that must complete hello.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	if sock := os.Getenv(acceptHelperEnv); sock != "" {
		acceptHelper(t, sock)
		return
	}
	sock := filepath.Join(t.TempDir(), "r.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptSurvivesEMFILE$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), acceptHelperEnv+"="+sock, "GORACE=atexit_sleep_ms=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var out strings.Builder
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if s, ok := strings.CutPrefix(sc.Text(), "helper: "); ok {
				lines <- s
			}
		}
	}()
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		for range lines {
		}
		if t.Failed() {
			t.Logf("child stdout:\n%s\nchild stderr:\n%s", out.String(), stderr.String())
		}
	}()
	expect := func(prefix string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, prefix) {
				t.Fatalf("child said %q (ok=%v), want %q", l, ok, prefix)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("timed out waiting for the child to say %q", prefix)
			return ""
		}
	}

	expect("listening")
	// Far more connections than the child has descriptors: the kernel
	// queues them all (the backlog is somaxconn), the router accepts until
	// it runs out.
	var conns []net.Conn
	for range 64 {
		nc, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	expect("retrying")
	for _, nc := range conns {
		nc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "after-emfile"})
	if err != nil {
		t.Fatalf("a client after the descriptors were freed: %v", err)
	}
	mustDeclare(t, c, "alive", wire.RetainNone)
	c.Close()
	io.WriteString(stdin, "quit\n")
	expect("stopped")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

// acceptHelper is the child: a router on sock whose process may open only
// a few more descriptors. It says "listening", then "retrying" once an
// accept failed and was retried, then waits for "quit" on stdin.
func acceptHelper(t *testing.T, sock string) {
	l := wire.DefaultLimits()
	l.MaxClients = 1000
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), Limits: l, MaxPendingHello: 1000, HelloTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ListenUnix(sock); err != nil {
		t.Fatal(err)
	}
	n := shmtest.FDs(t)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(n + 16)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fmt.Println("helper: listening")
	deadline := time.Now().Add(30 * time.Second)
	for r.Stats().AcceptRetries == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no accept was retried: %+v", r.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println("helper: retrying", r.Stats().AcceptRetries)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || line != "quit\n" {
		t.Fatalf("stdin said %q (%v)", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println("helper: stopped", r.Stats().AcceptRetries)
}
