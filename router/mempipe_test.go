package router

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
)

// The behaviour tests run over a memPipe and over a connected Unix socket
// pair with the same assertions: the memPipe must be a socket as far as the
// shell can tell. What a socket cannot show deterministically (a Write
// blocked on a full buffer of known size) is tested on the memPipe alone.

type pipeTransport struct {
	name       string
	pair       func(testing.TB) (net.Conn, net.Conn)
	brokenPipe error // what a Write to a closed peer wraps
}

var pipeTransports = []pipeTransport{
	{"memory", memPair, io.ErrClosedPipe},
	{"unix", unixPair, syscall.EPIPE},
}

// forEachPipe runs fn once per transport, checking that no goroutine
// outlives it.
func forEachPipe(t *testing.T, fn func(t *testing.T, tr pipeTransport)) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			noLeaks(t)
			fn(t, tr)
		})
	}
}

// noLeaks fails t if goroutines remain after its cleanups; call it before
// opening anything, so that it runs after they are closed.
func noLeaks(t *testing.T) {
	base := leakcheck.Goroutines()
	t.Cleanup(func() { leakcheck.WaitGoroutines(t, base) })
}

func memPair(tb testing.TB) (net.Conn, net.Conn) { return memPairCap(tb, 0) }

func memPairCap(tb testing.TB, capacity int) (net.Conn, net.Conn) {
	a, b := memPipe(capacity)
	tb.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func unixPair(tb testing.TB) (net.Conn, net.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(os.NewSyscallError("socketpair", err))
	}
	a, b := fileConn(tb, fds[0]), fileConn(tb, fds[1])
	tb.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func fileConn(tb testing.TB, fd int) net.Conn {
	f := os.NewFile(uintptr(fd), "socketpair")
	defer f.Close() // FileConn holds its own duplicate
	c, err := net.FileConn(f)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

type ioResult struct {
	n   int
	err error
}

func goRead(c net.Conn, p []byte) <-chan ioResult  { return goIO(c.Read, p) }
func goWrite(c net.Conn, p []byte) <-chan ioResult { return goIO(c.Write, p) }

// goIO runs one Read or Write on a goroutine and delivers its outcome.
func goIO(op func([]byte) (int, error), p []byte) <-chan ioResult {
	ch := make(chan ioResult, 1)
	go func() {
		n, err := op(p)
		ch <- ioResult{n, err}
	}()
	return ch
}

// waitParked waits until a Read (read) or a Write on the memPipe end c is
// waiting inside its buffer, so that what the test does next meets a
// blocked call. On a socket it returns at once: the assertions that follow
// hold whether or not the call had blocked yet.
func waitParked(t *testing.T, c net.Conn, read bool) {
	t.Helper()
	mc, ok := c.(*memConn)
	if !ok {
		return
	}
	b, waiters, what := mc.tx, &mc.tx.writers, "Write"
	if read {
		b, waiters, what = mc.rx, &mc.rx.readers, "Read"
	}
	give := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		n := *waiters
		b.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(give) {
			t.Fatalf("no %s blocked after 10s", what)
		}
		runtime.Gosched()
	}
}

func mustWrite(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
		t.Fatalf("Write(%q) = %d, %v", s, n, err)
	}
}

func mustRead(t *testing.T, c net.Conn, size int, want string) {
	t.Helper()
	p := make([]byte, size)
	n, err := c.Read(p)
	if err != nil || string(p[:n]) != want {
		t.Fatalf("Read([%d]) = %q, %v; want %q", size, p[:n], err, want)
	}
}

func wantTimeout(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	if !os.IsTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v, want a timeout", err)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

func TestMemPipePartialReads(t *testing.T) {
	forEachPipe(t, func(t *testing.T, tr pipeTransport) {
		a, b := tr.pair(t)
		mustWrite(t, a, "hello, world")
		mustRead(t, b, 1, "h")
		mustRead(t, b, 4, "ello")
		mustRead(t, b, 100, ", world")
		if n, err := b.Read(nil); n != 0 || err != nil {
			t.Fatalf("empty Read = %d, %v", n, err)
		}
		if n, err := a.Write(nil); n != 0 || err != nil {
			t.Fatalf("empty Write = %d, %v", n, err)
		}
		// Two writes read as one stream.
		mustWrite(t, a, "ab")
		mustWrite(t, a, "cd")
		mustRead(t, b, 3, "abc")
		mustRead(t, b, 3, "d")
		// Both directions are independent.
		mustWrite(t, b, "back")
		mustRead(t, a, 10, "back")
	})
}

func TestMemPipeEOFAfterBufferedData(t *testing.T) {
	forEachPipe(t, func(t *testing.T, tr pipeTransport) {
		a, b := tr.pair(t)
		mustWrite(t, a, "last words")
		a.Close()
		mustRead(t, b, 4, "last")
		mustRead(t, b, 100, " words")
		for range 2 {
			if n, err := b.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("Read after drain = %d, %v; want io.EOF", n, err)
			}
		}
	})
}

func TestMemPipeWriteAfterPeerClose(t *testing.T) {
	forEachPipe(t, func(t *testing.T, tr pipeTransport) {
		a, b := tr.pair(t)
		b.Close()
		n, err := a.Write([]byte("anyone?"))
		if n != 0 {
			t.Fatalf("Write to a closed peer buffered %d bytes", n)
		}
		wantErr(t, "Write to a closed peer", err, tr.brokenPipe)
		if errors.Is(err, net.ErrClosed) {
			t.Fatalf("a peer's Close reads as a local one: %v", err)
		}
	})
}

func TestMemPipeLocalClose(t *testing.T) {
	forEachPipe(t, func(t *testing.T, tr pipeTransport) {
		a, b := tr.pair(t)
		mustWrite(t, b, "unread")
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := a.Read(make([]byte, 8))
		wantErr(t, "Read after Close", err, net.ErrClosed)
		_, err = a.Write([]byte("x"))
		wantErr(t, "Write after Close", err, net.ErrClosed)
		wantErr(t, "SetDeadline after Close", a.SetDeadline(time.Now()), net.ErrClosed)
		var ne net.Error
		if !errors.As(err, &ne) || ne.Timeout() {
			t.Fatalf("closed error %v is not a non-timeout net.Error", err)
		}
	})
}

func TestMemPipeCloseIsIdempotent(t *testing.T) {
	noLeaks(t)
	a, b := memPair(t)
	for range 3 {
		if err := a.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	_, err := b.Read(make([]byte, 1))
	wantErr(t, "Read from a closed peer", err, io.EOF)
}

// parkedRead makes a pair and starts a Read on its first end that has
// parked by the time it returns.
func parkedRead(t *testing.T, tr pipeTransport) (a, b net.Conn, res <-chan ioResult) {
	t.Helper()
	a, b = tr.pair(t)
	res = goRead(a, make([]byte, 8))
	waitParked(t, a, true)
	return a, b, res
}

func TestMemPipeCloseUnblocksRead(t *testing.T) {
	t.Run("Local", func(t *testing.T) {
		forEachPipe(t, func(t *testing.T, tr pipeTransport) {
			a, _, res := parkedRead(t, tr)
			a.Close()
			wantErr(t, "blocked Read at Close", (<-res).err, net.ErrClosed)
		})
	})
	t.Run("Peer", func(t *testing.T) {
		forEachPipe(t, func(t *testing.T, tr pipeTransport) {
			_, b, res := parkedRead(t, tr)
			b.Close()
			if r := <-res; r.n != 0 || r.err != io.EOF {
				t.Fatalf("blocked Read at the peer's Close = %d, %v; want io.EOF", r.n, r.err)
			}
		})
	})
}

func TestMemPipeCloseUnblocksWrite(t *testing.T) {
	const capacity = 64
	for _, c := range []struct {
		name, what string
		peer       bool // close the peer rather than the writing end
		want       error
	}{
		{"Local", "blocked Write at Close", false, net.ErrClosed},
		{"Peer", "blocked Write at the peer's Close", true, io.ErrClosedPipe},
	} {
		t.Run(c.name, func(t *testing.T) {
			noLeaks(t)
			a, b := memPairCap(t, capacity)
			res := goWrite(a, make([]byte, 3*capacity))
			waitParked(t, a, false)
			if c.peer {
				b.Close()
			} else {
				a.Close()
			}
			r := <-res
			if r.n != capacity {
				t.Fatalf("blocked Write reports %d bytes buffered, want %d", r.n, capacity)
			}
			wantErr(t, c.what, r.err, c.want)
		})
	}
}

func TestMemPipeReadDeadline(t *testing.T) {
	t.Run("Blocked", func(t *testing.T) {
		forEachPipe(t, func(t *testing.T, tr pipeTransport) {
			a, b := tr.pair(t)
			a.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
			res := goRead(a, make([]byte, 8))
			waitParked(t, a, true)
			r := <-res
			if r.n != 0 {
				t.Fatalf("timed-out Read returned %d bytes", r.n)
			}
			wantTimeout(t, r.err)
			// The deadline stays expired until it is moved.
			mustWrite(t, b, "late")
			_, err := a.Read(make([]byte, 8))
			wantTimeout(t, err)
			a.SetReadDeadline(time.Time{})
			mustRead(t, a, 8, "late")
		})
	})
	t.Run("MovedWhileBlocked", func(t *testing.T) {
		forEachPipe(t, func(t *testing.T, tr pipeTransport) {
			a, _ := tr.pair(t)
			a.SetReadDeadline(time.Now().Add(time.Hour))
			res := goRead(a, make([]byte, 8))
			waitParked(t, a, true)
			a.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
			wantTimeout(t, (<-res).err)
		})
	})
	t.Run("Past", func(t *testing.T) {
		forEachPipe(t, func(t *testing.T, tr pipeTransport) {
			a, b := tr.pair(t)
			mustWrite(t, b, "ready")
			// A passed deadline fails at once, even with data buffered.
			a.SetReadDeadline(time.Now().Add(-time.Second))
			_, err := a.Read(make([]byte, 8))
			wantTimeout(t, err)
			// SetDeadline covers reads too.
			a.SetDeadline(time.Time{})
			mustRead(t, a, 8, "ready")
			a.SetDeadline(time.Unix(1, 0))
			_, err = a.Read(make([]byte, 8))
			wantTimeout(t, err)
		})
	})
	t.Run("Cleared", func(t *testing.T) {
		forEachPipe(t, func(t *testing.T, tr pipeTransport) {
			a, b := tr.pair(t)
			a.SetReadDeadline(time.Now().Add(-time.Second))
			a.SetReadDeadline(time.Time{})
			res := goRead(a, make([]byte, 8))
			waitParked(t, a, true)
			mustWrite(t, b, "fine")
			if r := <-res; r.err != nil || r.n != 4 {
				t.Fatalf("Read after clearing the deadline = %d, %v", r.n, r.err)
			}
		})
	})
}

func TestMemPipeWriteDeadline(t *testing.T) {
	t.Run("Blocked", func(t *testing.T) {
		// 16 MiB is more than a socket buffers, so the Write blocks on
		// either transport.
		forEachPipe(t, func(t *testing.T, tr pipeTransport) {
			a, b := tr.pair(t)
			big := make([]byte, 16<<20)
			a.SetWriteDeadline(time.Now().Add(5 * time.Millisecond))
			r := <-goWrite(a, big)
			if r.n >= len(big) {
				t.Fatalf("Write to a stalled reader buffered all %d bytes", r.n)
			}
			if _, ok := a.(*memConn); ok && r.n != defaultMemPipeCapacity {
				t.Fatalf("timed-out Write buffered %d bytes, want the capacity %d", r.n, defaultMemPipeCapacity)
			}
			wantTimeout(t, r.err)
			// Reading does not touch the write deadline.
			got, err := io.ReadFull(b, make([]byte, r.n))
			if got != r.n || err != nil {
				t.Fatalf("reading what was buffered: %d, %v", got, err)
			}
		})
	})
	t.Run("Past", func(t *testing.T) {
		forEachPipe(t, func(t *testing.T, tr pipeTransport) {
			a, b := tr.pair(t)
			a.SetWriteDeadline(time.Now().Add(-time.Second))
			n, err := a.Write([]byte("x"))
			if n != 0 {
				t.Fatalf("Write past its deadline buffered %d bytes", n)
			}
			wantTimeout(t, err)
			a.SetWriteDeadline(time.Time{})
			mustWrite(t, a, "y")
			mustRead(t, b, 8, "y")
		})
	})
}

// TestMemPipeStaleTimer fires a deadline's timer by hand after the deadline
// moved, as a timer already running when it moved would.
func TestMemPipeStaleTimer(t *testing.T) {
	noLeaks(t)
	a, b := memPair(t)
	rx := a.(*memConn).rx
	a.SetReadDeadline(time.Now().Add(time.Hour))
	rx.expire(&rx.rdl, &rx.readable)
	a.SetReadDeadline(time.Time{})
	rx.expire(&rx.rdl, &rx.readable)
	mustWrite(t, b, "still open")
	mustRead(t, a, 100, "still open")
}

func TestMemPipeCloseDisarmsTimers(t *testing.T) {
	noLeaks(t)
	a, _ := memPair(t)
	mc := a.(*memConn)
	a.SetDeadline(time.Now().Add(time.Hour))
	a.Close()
	// Stop reports whether the timer was still armed.
	if mc.rx.rdl.timer.Stop() || mc.tx.wdl.timer.Stop() {
		t.Fatal("Close left a deadline timer armed")
	}
}

func TestMemPipeWriteLargerThanCapacity(t *testing.T) {
	noLeaks(t)
	const capacity = 1000
	a, b := memPairCap(t, capacity)
	want := make([]byte, 100*capacity+7)
	for i := range want {
		want[i] = byte(i * 7 / 3)
	}
	res := goWrite(a, want)
	waitParked(t, a, false)
	if n := b.(*memConn).rx.buffered(); n != capacity {
		t.Fatalf("a blocked Write left %d bytes buffered, want the capacity %d", n, capacity)
	}
	got := make([]byte, 0, len(want))
	p := make([]byte, 333) // odd-sized reads, to cross the ring's end
	for len(got) < len(want) {
		n, err := b.Read(p)
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
		got = append(got, p[:n]...)
	}
	if r := <-res; r.n != len(want) || r.err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", r.n, r.err, len(want))
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the reader saw different bytes")
	}
}

// buffered reports how many unread bytes b holds, for tests.
func (b *memBuffer) buffered() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// TestMemPipeRingMatchesModel drives one direction with random-sized writes
// (never more than fits, so nothing blocks) and reads, against a
// bytes.Buffer, at capacities below, at and above the first allocation.
func TestMemPipeRingMatchesModel(t *testing.T) {
	for _, capacity := range []int{1, 7, 1000, memPipeMinAlloc, 5000, 70000} {
		t.Run(fmt.Sprintf("capacity=%d", capacity), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(capacity), 1))
			b := newMemBuffer(capacity)
			var model bytes.Buffer
			// Writes are windows of a counting pattern, so a byte out of
			// place shows.
			pattern := make([]byte, capacity+256)
			for i := range pattern {
				pattern[i] = byte(i)
			}
			seq := 0
			dst := make([]byte, capacity+1)
			for op := range 10000 {
				if rng.IntN(2) == 0 {
					m := rng.IntN(capacity - b.n + 1)
					src := pattern[seq : seq+m]
					seq = (seq + m) % 256
					if n, err := b.write(src); n != m || err != nil {
						t.Fatalf("op %d: write(%d) = %d, %v", op, m, n, err)
					}
					model.Write(src)
				} else {
					m := rng.IntN(len(dst)) + 1
					if b.n == 0 {
						continue // would block
					}
					n, err := b.read(dst[:m])
					want := model.Next(m)
					if err != nil || !bytes.Equal(dst[:n], want) {
						t.Fatalf("op %d: read(%d) = %d, %v; want %d bytes", op, m, n, err, len(want))
					}
				}
				if b.n != model.Len() || len(b.buf) > capacity {
					t.Fatalf("op %d: %d bytes buffered in %d of storage, model %d", op, b.n, len(b.buf), model.Len())
				}
			}
		})
	}
}

// TestMemPipeStream copies a megabyte through a small buffer with
// random-sized writes and reads on two goroutines.
func TestMemPipeStream(t *testing.T) {
	noLeaks(t)
	a, b := memPairCap(t, 1500)
	want := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	done := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(3, 4))
		rest := want
		for len(rest) > 0 {
			m := min(len(rest), rng.IntN(4000)+1)
			if _, err := a.Write(rest[:m]); err != nil {
				done <- err
				return
			}
			rest = rest[m:]
		}
		done <- a.Close()
	}()
	var got bytes.Buffer
	p := make([]byte, 3000)
	for {
		n, err := b.Read(p[:rng.IntN(len(p))+1])
		got.Write(p[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("got %d bytes, want %d, or different ones", got.Len(), len(want))
	}
}

// TestMemPipeWritesDoNotInterleave checks that each Write is contiguous in
// the stream, as on a socket, even when it blocks part way.
func TestMemPipeWritesDoNotInterleave(t *testing.T) {
	noLeaks(t)
	const block, blocks = 5000, 20
	a, b := memPairCap(t, 1000)
	var wg sync.WaitGroup
	for _, c := range []byte("xy") {
		wg.Go(func() {
			p := bytes.Repeat([]byte{c}, block)
			for range blocks {
				if _, err := a.Write(p); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	got := make([]byte, 2*block*blocks)
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := 0; i < len(got); i += block {
		if bytes.Count(got[i:i+block], got[i:i+1]) != block {
			t.Fatalf("writes interleaved in the block at %d", i)
		}
	}
}

// TestMemPipeConcurrentClose races reads, writes, deadline changes and both
// Closes; run it with -race. Every call must return once both ends close.
func TestMemPipeConcurrentClose(t *testing.T) {
	noLeaks(t)
	for i := range 50 {
		a, b := memPipe(64)
		var wg sync.WaitGroup
		for _, c := range []net.Conn{a, b} {
			wg.Go(func() { pump(c.Write) })
			wg.Go(func() { pump(c.Read) })
			wg.Go(func() {
				now := time.Now()
				for _, d := range []time.Duration{time.Millisecond, -time.Second, 0, time.Hour, 50 * time.Microsecond} {
					var dl time.Time
					if d != 0 {
						dl = now.Add(d)
					}
					c.SetDeadline(dl)
				}
			})
		}
		// Close the two ends in both orders, from other goroutines.
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		wg.Go(func() { first.Close() })
		wg.Go(func() { second.Close() })
		wg.Wait()
	}
}

// pump calls op until it fails with anything but a timeout.
func pump(op func([]byte) (int, error)) {
	p := make([]byte, 100)
	for {
		if _, err := op(p); err != nil && !os.IsTimeout(err) {
			return
		}
	}
}

func TestMemPipeSteadyStateDoesNotAllocate(t *testing.T) {
	noLeaks(t)
	a, b := memPair(t)
	msg := make([]byte, 300)
	p := make([]byte, 300)
	hop := func() {
		if _, err := a.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b, p); err != nil {
			t.Fatal(err)
		}
	}
	hop() // the first Write allocates the buffer
	if n := testing.AllocsPerRun(1000, hop); n != 0 {
		t.Fatalf("%v allocations per Write and Read", n)
	}
}

func TestMemPipeAddr(t *testing.T) {
	a, _ := memPair(t)
	for _, addr := range []net.Addr{a.LocalAddr(), a.RemoteAddr()} {
		if addr.Network() != "memory" || addr.String() != "memory" {
			t.Fatalf("address %s/%s", addr.Network(), addr)
		}
	}
}

const pingPongSize = 300

func BenchmarkMemPipePingPong(b *testing.B) {
	benchPingPong(b, func(testing.TB) (net.Conn, net.Conn) { return memPipe(0) })
}

func BenchmarkNetPipePingPong(b *testing.B) {
	benchPingPong(b, func(testing.TB) (net.Conn, net.Conn) { return net.Pipe() })
}

func BenchmarkUnixPingPong(b *testing.B) { benchPingPong(b, unixPair) }

// benchPingPong bounces a pingPongSize-byte message off an echoing peer
// hops times per iteration. SetBytes counts the bytes sent each way.
func benchPingPong(b *testing.B, pair func(testing.TB) (net.Conn, net.Conn)) {
	for _, hops := range []int{1, 2} {
		b.Run(fmt.Sprintf("hops=%d", hops), func(b *testing.B) {
			c, peer := pair(b)
			done := make(chan struct{})
			go func() {
				defer close(done)
				shmtest.Echo(peer, pingPongSize)
			}()
			b.SetBytes(int64(hops * pingPongSize))
			b.ReportAllocs()
			shmtest.PingPong(b, c, make([]byte, pingPongSize), hops)
			c.Close()
			<-done
		})
	}
}

// BenchmarkPipeStream writes one way as fast as the reader drains, in
// writes of frame-sized and batch-sized chunks.
func BenchmarkPipeStream(b *testing.B) {
	transports := []struct {
		name string
		pair func(testing.TB) (net.Conn, net.Conn)
	}{
		{"memory", func(testing.TB) (net.Conn, net.Conn) { return memPipe(0) }},
		{"netpipe", func(testing.TB) (net.Conn, net.Conn) { return net.Pipe() }},
		{"unix", unixPair},
	}
	for _, tr := range transports {
		for _, size := range []int{300, 64 << 10} {
			b.Run(fmt.Sprintf("transport=%s/write=%d", tr.name, size), func(b *testing.B) {
				w, r := tr.pair(b)
				done := make(chan struct{})
				go drain(r, done)
				p := make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := w.Write(p); err != nil {
						b.Fatal(err)
					}
				}
				w.Close()
				<-done
			})
		}
	}
}

// drain reads c in 64 KiB chunks, like a FrameReader grown to its maximum,
// until it fails.
func drain(c net.Conn, done chan<- struct{}) {
	defer close(done)
	defer c.Close()
	p := make([]byte, 64<<10)
	for {
		if _, err := c.Read(p); err != nil {
			return
		}
	}
}
