package perf

import (
	"sync/atomic"
	"time"
)

// The 60 Hz schedule that docs/design.md's performance targets are measured on.
const (
	FrameWidth  = 640
	FrameHeight = 480
	// FrameBytes is one 640x480 RGBA frame: 1,228,800 bytes.
	FrameBytes = FrameWidth * FrameHeight * 4
	// FrameRate is the producer's rate, in frames per second.
	FrameRate = 60
	// Consumers is the number of latest-mode subscribers; the last of them
	// is the slow one.
	Consumers = 3
	// SlowConsumerDelay is the slow consumer's work per frame: it sleeps
	// this long after touching the bytes, holding the frame.
	SlowConsumerDelay = 40 * time.Millisecond
	// TouchStride is the distance between two bytes a reader reads: one
	// byte per 64-byte cache line, 19,200 reads per frame.
	TouchStride = 64
)

// framePeriod is one slot of the 60 Hz schedule.
const framePeriod = time.Second / FrameRate

// Touch reads one byte of every TouchStride-byte line of b and returns
// their sum, so that the reads cannot be optimized away.
func Touch(b []byte) byte {
	var sum byte
	for i := 0; i < len(b); i += TouchStride {
		sum += b[i]
	}
	return sum
}

// sinkByte receives touch sums nobody else needs.
var sinkByte atomic.Uint32

// FramePattern is the producer's source image: a gradient, so that pages
// are not all alike. The schedule stamps each frame's sequence number into
// its first eight bytes.
func FramePattern() []byte {
	b := make([]byte, FrameBytes)
	for y := range FrameHeight {
		row := b[y*FrameWidth*4 : (y+1)*FrameWidth*4]
		for x := range FrameWidth {
			row[4*x], row[4*x+1], row[4*x+2], row[4*x+3] = byte(x), byte(y), byte(x^y), 0xff
		}
	}
	return b
}
