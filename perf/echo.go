package perf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// echoEnv turns any executable that links this package (flybus, a test
// binary) into the echo peer of the cross-process ping-pong baseline: when
// it is set, the process listens on that Unix socket path, prints "ready",
// echoes 300-byte messages on one connection until it closes, and exits
// before main runs. The harness sets it only on the child it starts.
const echoEnv = "FLYBUS_PERF_ECHO_SOCKET"

func init() {
	if path := os.Getenv(echoEnv); path != "" {
		if err := serveEcho(path, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "flybus perf echo: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// serveEcho accepts one connection on path and echoes fixed-size messages
// until the peer hangs up.
func serveEcho(path string, ready io.Writer) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	defer ln.Close()
	// Nobody dialing within 10 s means the harness gave up.
	if err := ln.(*net.UnixListener).SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(ready, "ready"); err != nil {
		return err
	}
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, pingPongBytes)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
}

// echoGoroutine serves the in-process ping-pong on a goroutine; wait
// returns its error once the client hung up.
func echoGoroutine(path string) (wait func() error, err error) {
	ready := make(chan struct{})
	done := make(chan error, 1)
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Scan()
		close(ready)
		io.Copy(io.Discard, pr)
	}()
	go func() {
		err := serveEcho(path, pw)
		pw.Close()
		done <- err
	}()
	select {
	case <-ready:
	case err := <-done:
		return nil, err
	}
	return func() error { return <-done }, nil
}

// echoProcess starts this executable again as the echo peer.
func echoProcess(ctx context.Context, path string) (wait func() error, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), echoEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
		io.Copy(io.Discard, out)
	}()
	wait = func() error {
		<-read // Wait must follow the last read of the pipe
		return cmd.Wait()
	}
	kill := func(err error) (func() error, error) {
		cmd.Process.Kill()
		wait()
		return nil, err
	}
	select {
	case l := <-line:
		if l != "ready" {
			return kill(fmt.Errorf("the echo process printed %q, not ready", l))
		}
	case <-time.After(10 * time.Second):
		return kill(errors.New("the echo process did not start within 10 s"))
	case <-ctx.Done():
		return kill(ctx.Err())
	}
	return wait, nil
}
