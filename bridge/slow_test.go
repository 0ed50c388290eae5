package bridge

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// throttle is a TCP proxy to a NATS server whose client-to-server
// direction carries at most rate bytes a second: a slow link.
type throttle struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn []net.Conn
}

func startThrottle(t *testing.T, target string, rate int) *throttle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &throttle{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conn = append(p.conn, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(c, s); c.Close() }()
			go func() { defer p.wg.Done(); slowCopy(s, c, rate); s.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conn {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// slowCopy paces the copy to rate bytes a second: the sleep sets the
// link's speed, it orders nothing.
func slowCopy(dst io.Writer, src io.Reader, rate int) {
	buf := make([]byte, 16<<10)
	start, sent := time.Now(), 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			sent += n
			if ahead := time.Duration(float64(sent)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		if err != nil {
			return
		}
	}
}

// A latest export over a slow link sends the newest frame and counts what
// it coalesced: once the producer stops, at most the frame on the wire and
// the newest one are still to go, and the newest arrives.
func TestLatestExportOverSlowLinkCoalesces(t *testing.T) {
	n := startNATS(t, 8<<20)
	link := startThrottle(t, n.s.Addr().String(), 12<<20) // ~0.1 s a frame
	p := bridgePair(t, n, []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "latest"}},
		[]ImportConfig{{Subject: "site.cam", Topic: "cam.frames"}}, Options{},
		func(ca, _ *Config) { ca.NATS.URLs = []string{"nats://" + link.ln.Addr().String()} })
	ba, bb := p.ba, p.bb
	sub := subscribe(t, p.cons, "cam.frames")
	const frames = 30
	for i := uint64(1); i <= frames; i++ {
		publishFrame(t, p.prod, "cam.frames", i, map[string]int{"frame": frameSize})
	}
	sentAtEnd := ba.b.Stats().Exports["cam.frames"].Sent
	var last uint64
	got := 0
	for last != frames {
		k := nextFrame(t, sub)
		if k <= last {
			t.Fatalf("frame %d after %d", k, last)
		}
		last = k
		got++
	}
	waitFor(t, "the export to settle", func() bool {
		e := ba.b.Stats().Exports["cam.frames"]
		return e.Consumed+e.Coalesced == frames
	})
	e := ba.b.Stats().Exports["cam.frames"]
	if e.Coalesced == 0 || e.Sent+e.Coalesced+e.Unsent+e.Failed != frames {
		t.Fatalf("export: %+v", e)
	}
	if e.Sent-sentAtEnd > 2 {
		t.Fatalf("a backlog: %d frames sent after the producer's last (export %+v)", e.Sent-sentAtEnd, e)
	}
	waitFor(t, "the import to admit every frame sent", func() bool { return bb.b.Stats().Imports["cam.frames"].Admitted == e.Sent })
	t.Logf("30 frames over a 12 MiB/s link: %d sent, %d coalesced, %d delivered", e.Sent, e.Coalesced, got)
}
