package bridge

import "sync/atomic"

// Stats are a bridge's counters since it started. Bus admission, local
// consumption and JetStream's storage acknowledgment are different events
// and are counted apart: ExportStats.Consumed (the bridge consumed a local
// delivery), ExportStats.StoredAcked (JetStream acknowledged storing the
// frame) and ImportStats.Admitted (the importing router admitted the
// publication, whoever later consumes it).
type Stats struct {
	LocalSessions   uint64 // connections to the local router made
	NATSReconnects  uint64
	NATSDisconnects uint64
	Exports         map[string]ExportStats // by local topic
	Imports         map[string]ImportStats // by local topic
	History         HistoryStats
}

// ExportStats count one export.
type ExportStats struct {
	Consumed    uint64 // local deliveries the bridge took and consumed
	Coalesced   uint64 // values replaced before the bridge took them (latest mode)
	LoopSkipped uint64 // messages this bridge had imported: never sent back
	Sent        uint64 // frames published to NATS whole
	Chunked     uint64 // of them, frames sent in more than one message
	Messages    uint64 // NATS messages published
	Bytes       uint64 // body bytes published
	Unsent      uint64 // latest mode: consumed while NATS was down, not sent
	Failed      uint64 // a publish or flush failed: the frame may be partial
	StoredAcked uint64 // frames JetStream acknowledged storing, every chunk
	StoreFailed uint64 // frames JetStream did not store whole
}

// ImportStats count one import.
type ImportStats struct {
	Received       uint64 // complete frames whose sizes and digests checked (the artifacts' by the router's seal)
	Admitted       uint64 // frames the local router admitted
	Deliveries     uint64 // subscriptions the admitted frames were queued for
	DroppedMissing uint64 // frames with a missing chunk
	DroppedCorrupt uint64 // frames with a bad size, digest or header
	DroppedOrigin  uint64 // frames this bridge exported itself
	DroppedLocal   uint64 // frames that could not be written or published locally
	NATSDropped    uint64 // messages NATS dropped because the import was slow
	Coalesced      uint64 // latest mode: complete frames a newer one replaced before they were written (and checked)
}

// HistoryStats count the history service.
type HistoryStats struct {
	Requests uint64
	Frames   uint64 // frames sealed from the stream and sent
	Errors   uint64 // requests answered with an error
}

type exportCounters struct {
	consumed, coalesced, loopSkipped, sent, chunked, messages, bytes, unsent, failed, storedAcked, storeFailed atomic.Uint64
}

func (c *exportCounters) snapshot() ExportStats {
	return ExportStats{Consumed: c.consumed.Load(), Coalesced: c.coalesced.Load(), LoopSkipped: c.loopSkipped.Load(),
		Sent: c.sent.Load(), Chunked: c.chunked.Load(), Messages: c.messages.Load(), Bytes: c.bytes.Load(),
		Unsent: c.unsent.Load(), Failed: c.failed.Load(), StoredAcked: c.storedAcked.Load(), StoreFailed: c.storeFailed.Load()}
}

type importCounters struct {
	received, admitted, deliveries, droppedMissing, droppedCorrupt, droppedOrigin, droppedLocal, natsDropped, coalesced atomic.Uint64
}

func (c *importCounters) snapshot() ImportStats {
	return ImportStats{Received: c.received.Load(), Admitted: c.admitted.Load(), Deliveries: c.deliveries.Load(),
		DroppedMissing: c.droppedMissing.Load(), DroppedCorrupt: c.droppedCorrupt.Load(),
		DroppedOrigin: c.droppedOrigin.Load(), DroppedLocal: c.droppedLocal.Load(), NATSDropped: c.natsDropped.Load(),
		Coalesced: c.coalesced.Load()}
}
