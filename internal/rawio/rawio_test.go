package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pair returns the two ends of a connected Unix stream socket.
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	a, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// More bytes than the socket buffers: Write waits for room until all of
// them are written, and Reader returns them in order, then io.EOF.
func TestWriterWritesAllAndReaderReadsThem(t *testing.T) {
	a, b := pair(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan error, 1)
	go func() {
		n, err := NewWriter(a).Write(data)
		if err == nil && n != len(data) {
			err = errors.New("short write")
		}
		a.Close()
		done <- err
	}()
	got, err := io.ReadAll(NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, wrote %d, or not the same", len(got), len(data))
	}
}

// TryWrite never waits: into a full socket it writes nothing and says no
// error; once the peer reads, it writes again.
func TestTryWriterDoesNotWait(t *testing.T) {
	a, b := pair(t)
	tw := NewTryWriter(a)
	chunk := make([]byte, 64<<10)
	total := 0
	for {
		n, err := tw.TryWrite(chunk)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if n == 0 {
			break
		}
	}
	if total == 0 {
		t.Fatal("nothing fit into an empty socket")
	}
	if _, err := io.ReadFull(b, make([]byte, total)); err != nil {
		t.Fatal(err)
	}
	if n, err := tw.TryWrite(chunk); err != nil || n == 0 {
		t.Fatalf("after the peer read: %d, %v", n, err)
	}
}

// Deadlines and Close reach a waiting read, as with net.Conn.
func TestReaderHonoursDeadlineAndClose(t *testing.T) {
	a, _ := pair(t)
	r := NewReader(a)
	if err := a.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	if err := a.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := r.Read(make([]byte, 8)); errc <- err }()
	a.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed socket: %v", err)
	}
}

// A write to a peer that closed fails with the transport's error.
func TestWriterReportsABrokenPipe(t *testing.T) {
	a, b := pair(t)
	b.Close()
	w := NewWriter(a)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = w.Write(make([]byte, 1024))
	}
	if err == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}
}

// A connection without a descriptor is used as it is.
func TestPipesPassThrough(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if NewReader(a) != io.Reader(a) || NewWriter(a) != io.Writer(a) || NewTryWriter(a) != nil {
		t.Fatal("a pipe was wrapped")
	}
}
