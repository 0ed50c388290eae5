package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// A socket file left by a router that died must not block the next one,
// but a live router's socket must never be taken from it. Connecting tells
// the two apart: only ECONNREFUSED proves nobody listens.

// liveSocketError says a router (or something) answers on a socket path.
type liveSocketError struct{ path string }

func (e *liveSocketError) Error() string {
	return "a live router answers on " + e.path + "; leaving that socket alone"
}

// probeTimeout bounds the connect to an existing socket; a listener whose
// backlog is full answers slowly but is still alive.
const probeTimeout = 2 * time.Second

// probeSocket reports whether path holds a stale socket to remove. It
// fails when path is a live socket, is not a socket, or cannot be checked.
func probeSocket(path string) (stale bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return false, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	c, err := net.DialTimeout("unix", path, probeTimeout)
	if err == nil {
		c.Close()
		return false, &liveSocketError{path: path}
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true, nil
	}
	return false, fmt.Errorf("cannot tell whether anything listens on %s: %w", path, err)
}

// clearStaleSockets checks every path first and removes stale sockets only
// when none is live, so a refused start changes nothing.
func clearStaleSockets(paths []string) (removed []string, err error) {
	var stale []string
	for _, p := range paths {
		s, err := probeSocket(p)
		if err != nil {
			return nil, err
		}
		if s {
			stale = append(stale, p)
		}
	}
	for _, p := range stale {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}
