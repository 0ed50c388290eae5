package fastpath

// WriteBatch is how many frames a connection's writer takes from the
// routing core per lock acquisition and sends in one write.
//
// Each write is a system call, which costs far more than encoding a small
// envelope, so frames ready together should leave together; but the
// frames are pulled under the router's lock, so a batch is also how long
// one writer keeps every other connection waiting. BenchmarkWriteBatch
// writes 300-byte envelopes through a Unix socket: on the 2-CPU VM the CPU
// per frame is 4.9 µs one at a time, 1.16 µs by 4, 0.30 µs by 16, 0.19 µs
// by 32 and 0.10 µs by 64. Past 16 the saving is a fraction of a
// microsecond per frame, against a router that spends about a millisecond
// per 60 Hz frame; at 60 Hz a connection rarely has more than a few frames
// ready, so the batch matters for bursts, and 32 bounds the lock hold of
// one.
const WriteBatch = 32

// Spare control bodies (reply and notice buffers already written) a
// connection keeps for its next ones, so that a steady stream of replies
// allocates nothing (BenchmarkRoutedPublication in package router: 0
// allocs per routed frame): up to FreeBodies of them, each at most
// FreeBodyBytes. A reply is a few hundred bytes; an error with a long
// message or an artifact reference with its location stays under 4 KiB.
// Larger ones are rare (a hello reply) and go to the collector.
const (
	FreeBodies    = 32
	FreeBodyBytes = 4 << 10
)

// KeepWriteBytes is the largest coalescing buffer a connection keeps
// between writes: 1 MiB.
//
// A burst (a queue of 64 KiB deliveries, written WriteBatch at a time) can
// grow the buffer to 2 MiB; kept, every connection that ever had such a
// burst would hold that much for its whole life (128 MiB across 64
// clients). Dropping it is not free: BenchmarkKeepWriteBuffer measures a
// write from a fresh, growing buffer at 6x the cost of a kept one for
// 16 KiB, 16x for 128 KiB, 38x for 512 KiB and 74x for 2 MiB (20 ms: page
// faults on fresh memory are dear on these VMs). So the bound sits above
// what ordinary traffic uses (batches of small frames are a few KiB; 16
// frames of 64 KiB fit) and below the worst burst.
//
// cpuid's cache facts decided nothing here: the kept buffer's throughput
// is flat from 128 KiB to 2 MiB (6.5 to 7.6 GB/s), across this VM's 1 MiB
// L2, so the bound is about memory, not cache. (cpuid also reports 254
// physical cores on this 2-CPU VM; core counts come from the runtime.)
const KeepWriteBytes = 1 << 20
