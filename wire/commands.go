package wire

// Command bodies, one type per command of docs/protocol.md's Operations
// section. Each decodes strictly (unknown fields refused, every field
// required) and appends itself as JSON, by codecs generated from these
// struct tags into codecs_gen.go: json names the member (",omitempty":
// an optional member, see internal/wiregen), wire is its label
// in the Contract text, codec adds what the label leaves out (see
// internal/wiregen).

// Hello is bus.hello. Extensions may be absent (a 1.0 client's hello):
// none are asked for then, and an empty list is not written.
type Hello struct {
	ClientID          string   `json:"clientId" wire:"Id"`
	ClientIncarnation string   `json:"clientIncarnation" wire:"Id"`
	SupportedMajors   []uint32 `json:"supportedMajors" wire:"[int 1..65535]" codec:"len=1..MaxSupportedMajors"`
	Extensions        []string `json:"extensions,omitempty" wire:"[Id 0..16]" codec:"len=0..MaxExtensions"`
}

// Register is service.register.
type Register struct {
	Name        string `json:"name" wire:"Name"`
	MaxQueued   uint32 `json:"maxQueued" wire:"int 1..65535"`
	MaxInFlight uint32 `json:"maxInFlight" wire:"int 1..65535"`
}

// Unregister is service.unregister.
type Unregister struct {
	Name               string     `json:"name" wire:"Name"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
}

// Call is rpc.call.
type Call struct {
	CallID              CallID          `json:"callId"`
	Target              string          `json:"target" wire:"Name"`
	ExpectedIncarnation Opt[ServiceInc] `json:"expectedIncarnation"`
	Method              string          `json:"method" wire:"Method"`
	Payload             RawJSON         `json:"payload"`
}

// ReplyCapability names the reply capability that an rpc.request gives
// the service it is delivered to: the call, and the delivery that carried
// it (docs/protocol.md, rpc.request). rpc.reply uses it up and
// rpc.responder.release gives it up; both bodies embed it, so its members
// are theirs.
type ReplyCapability struct {
	CallID            CallID     `json:"callId"`
	RequestDeliveryID DeliveryID `json:"requestDeliveryId"`
}

// Reply is rpc.reply.
type Reply struct {
	ReplyCapability
	Outcome RawJSON `json:"outcome"`
}

// Cancel is rpc.cancel.
type Cancel struct {
	CallID CallID `json:"callId"`
}

// ResponderRelease is rpc.responder.release: a service gives up reply
// authority for a dispatched call (docs/protocol.md, rpc.responder.release).
type ResponderRelease struct {
	ReplyCapability
}

// Declare is topic.declare.
type Declare struct {
	Name     string    `json:"name" wire:"Name"`
	Retained Retention `json:"retained" wire:"none|latest"`
}

// TopicName is the body of topic.clear and topic.delete.
type TopicName struct {
	Name string `json:"name" wire:"Name"`
}

// Subscribe is subscribe. AwaitTopic belongs to extension await-topic: it
// is written only when Valid, and a connection that was not granted the
// extension may not send it at all.
type Subscribe struct {
	Topic        string    `json:"topic" wire:"Name"`
	Mode         Mode      `json:"mode" wire:"latest|bounded"`
	MaxQueued    uint32    `json:"maxQueued" wire:"int 1..65535"`
	MaxInFlight  uint32    `json:"maxInFlight" wire:"int 1..65535"`
	ReplayLatest bool      `json:"replayLatest"`
	AwaitTopic   Opt[bool] `json:"awaitTopic,omitempty"`
}

// Unsubscribe is unsubscribe.
type Unsubscribe struct {
	SubscriptionID SubID `json:"subscriptionId"`
}

// Publish is publish.
type Publish struct {
	Topic   string  `json:"topic" wire:"Name"`
	Payload RawJSON `json:"payload"`
}

// Consumed is delivery.consumed. Decoding reuses DeliveryIDs' capacity.
type Consumed struct {
	DeliveryIDs []DeliveryID `json:"deliveryIds" wire:"[DeliveryId 1..64]" codec:"len=1..MaxBatch"`
}

// Allocate is artifact.allocate.
type Allocate struct {
	ByteLength  uint64 `json:"byteLength" wire:"U64"`
	ContentType string `json:"contentType" wire:"ContentType"`
}

// Seal is artifact.seal: the writer seals what artifact.allocate gave it.
type Seal struct {
	Allocation
	Digest Opt[Digest] `json:"digest"`
}

// RefOwner is the body of artifact.open and artifact.retain.
type RefOwner struct {
	Ref     ArtifactRef `json:"ref"`
	OwnerID OwnerID     `json:"ownerId"`
}

// Release is artifact.release. Decoding reuses OwnerIDs' capacity.
type Release struct {
	OwnerIDs []OwnerID `json:"ownerIds" wire:"[OwnerId 1..64]" codec:"len=1..MaxBatch"`
}
