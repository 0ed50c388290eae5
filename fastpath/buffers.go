package fastpath

import "github.com/klauspost/cpuid/v2"

// WriteBatch is how many frames a connection's writer takes from the
// routing core per lock acquisition and sends in one write.
//
// Each write is a system call, which costs far more than encoding a small
// envelope, so frames ready together should leave together; but the
// frames are pulled under the router's lock, so a batch must stay short.
// BenchmarkWriteBatch writes 300-byte envelopes through a Unix socket in
// batches of 1 to 64: on the 2-CPU VM the CPU per frame falls steeply up
// to 16 (docs/perf.md has the figures) and barely after 32, where a batch
// is about 10 KB, so 32 it is.
const WriteBatch = 32

// Spare control bodies (reply and notice buffers already written) a
// connection keeps for its next ones, so that a steady stream of replies
// allocates nothing: up to FreeBodies of them, each at most FreeBodyBytes.
// A reply is a few hundred bytes; an error with a long message or an
// artifact reference with its location stays under 4 KiB. Larger ones are
// rare (a hello reply) and go to the collector.
const (
	FreeBodies    = 32
	FreeBodyBytes = 4 << 10
)

// KeepWriteBytes is the largest coalescing buffer a connection keeps
// between writes. A burst (a queue of 64 KiB deliveries, written 32 at a
// time) can grow the buffer to 2 MiB; kept, every connection that ever had
// a burst would hold that much for its whole life. Dropping a buffer larger
// than this after its write bounds that, and costs little: once a write is
// larger than the L2 cache, the bytes no longer stay in cache between
// encoding and the copy into the socket, and growing a fresh buffer is a
// small part of the write (BenchmarkKeepWriteBuffer). Half the L2 cache as
// cpuid reports it, within [64 KiB, 1 MiB]; 512 KiB on this VM (1 MiB L2).
func KeepWriteBytes() int { return keepWriteBytes(cpuid.CPU.Cache.L2) }

func keepWriteBytes(l2 int) int {
	const lo, hi = 64 << 10, 1 << 20
	return min(max(l2/2, lo), hi)
}
