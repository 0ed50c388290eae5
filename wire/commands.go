package wire

import "strconv"

// Command bodies, one type per command of docs/protocol.md's Operations
// section. Each decodes strictly (unknown fields refused, every field
// required) and appends itself as JSON.

// Hello is bus.hello.
type Hello struct {
	ClientID          string   `json:"clientId" wire:"Id"`
	ClientIncarnation string   `json:"clientIncarnation" wire:"Id"`
	SupportedMajors   []uint32 `json:"supportedMajors" wire:"[int 1..65535]"`
}

func (h *Hello) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "clientId":
			h.ClientID, err = f.id()
			f.mark(0)
		case "clientIncarnation":
			h.ClientIncarnation, err = f.id()
			f.mark(1)
		case "supportedMajors":
			var first, end uint32
			if first, end, err = f.array(1, MaxSupportedMajors); err == nil {
				h.SupportedMajors = h.SupportedMajors[:0]
				for i := first; i < end && err == nil; i = d.nextElem(i) {
					e := f.elem(i)
					var n uint64
					n, err = e.integer(1, 65535)
					h.SupportedMajors = append(h.SupportedMajors, uint32(n))
				}
			}
			f.mark(2)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(7, "clientId", "clientIncarnation", "supportedMajors")
}

func (h *Hello) AppendJSON(b []byte) []byte {
	b = append(b, `{"clientId":`...)
	b = appendString(b, h.ClientID)
	b = append(b, `,"clientIncarnation":`...)
	b = appendString(b, h.ClientIncarnation)
	b = append(b, `,"supportedMajors":[`...)
	for i, m := range h.SupportedMajors {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(m), 10)
	}
	return append(b, "]}"...)
}

// Register is service.register.
type Register struct {
	Name        string `json:"name" wire:"Name"`
	MaxQueued   uint32 `json:"maxQueued" wire:"int 1..65535"`
	MaxInFlight uint32 `json:"maxInFlight" wire:"int 1..65535"`
}

func (r *Register) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "name":
			r.Name, err = f.name()
			f.mark(0)
		case "maxQueued":
			r.MaxQueued, err = f.credit()
			f.mark(1)
		case "maxInFlight":
			r.MaxInFlight, err = f.credit()
			f.mark(2)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(7, "name", "maxQueued", "maxInFlight")
}

func (r *Register) AppendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, r.Name)
	b = append(b, `,"maxQueued":`...)
	b = strconv.AppendUint(b, uint64(r.MaxQueued), 10)
	b = append(b, `,"maxInFlight":`...)
	b = strconv.AppendUint(b, uint64(r.MaxInFlight), 10)
	return append(b, '}')
}

// Unregister is service.unregister.
type Unregister struct {
	Name               string     `json:"name" wire:"Name"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
}

func (u *Unregister) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "name":
			u.Name, err = f.name()
			f.mark(0)
		case "serviceIncarnation":
			var v uint64
			v, err = f.serial(FamSvc)
			u.ServiceIncarnation = ServiceInc(v)
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "name", "serviceIncarnation")
}

func (u *Unregister) AppendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, u.Name)
	b = append(b, `,"serviceIncarnation":`...)
	b = appendSerialStr(b, FamSvc, uint64(u.ServiceIncarnation))
	return append(b, '}')
}

// Call is rpc.call.
type Call struct {
	CallID              CallID          `json:"callId"`
	Target              string          `json:"target" wire:"Name"`
	ExpectedIncarnation Opt[ServiceInc] `json:"expectedIncarnation"`
	Method              string          `json:"method" wire:"Method"`
	Payload             RawJSON         `json:"payload"`
}

func (c *Call) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "callId":
			var v uint64
			v, err = f.serial(FamCall)
			c.CallID = CallID(v)
			f.mark(0)
		case "target":
			c.Target, err = f.name()
			f.mark(1)
		case "expectedIncarnation":
			var o Opt[uint64]
			o, err = f.optSerial(FamSvc)
			c.ExpectedIncarnation = Opt[ServiceInc]{Valid: o.Valid, V: ServiceInc(o.V)}
			f.mark(2)
		case "method":
			c.Method, err = f.method()
			f.mark(3)
		case "payload":
			c.Payload, err = f.rawObject()
			f.mark(4)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(31, "callId", "target", "expectedIncarnation", "method", "payload")
}

func (c *Call) AppendJSON(b []byte) []byte {
	b = append(b, `{"callId":`...)
	b = appendSerialStr(b, FamCall, uint64(c.CallID))
	b = append(b, `,"target":`...)
	b = appendString(b, c.Target)
	b = append(b, `,"expectedIncarnation":`...)
	if c.ExpectedIncarnation.Valid {
		b = appendSerialStr(b, FamSvc, uint64(c.ExpectedIncarnation.V))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"method":`...)
	b = appendString(b, c.Method)
	b = append(b, `,"payload":`...)
	b = appendRaw(b, c.Payload)
	return append(b, '}')
}

// Reply is rpc.reply.
type Reply struct {
	CallID            CallID     `json:"callId"`
	RequestDeliveryID DeliveryID `json:"requestDeliveryId"`
	Outcome           RawJSON    `json:"outcome"`
}

func (r *Reply) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "callId":
			var v uint64
			v, err = f.serial(FamCall)
			r.CallID = CallID(v)
			f.mark(0)
		case "requestDeliveryId":
			var v uint64
			v, err = f.serial(FamDelivery)
			r.RequestDeliveryID = DeliveryID(v)
			f.mark(1)
		case "outcome":
			r.Outcome, err = f.rawObject()
			f.mark(2)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(7, "callId", "requestDeliveryId", "outcome")
}

func (r *Reply) AppendJSON(b []byte) []byte {
	b = append(b, `{"callId":`...)
	b = appendSerialStr(b, FamCall, uint64(r.CallID))
	b = append(b, `,"requestDeliveryId":`...)
	b = appendSerialStr(b, FamDelivery, uint64(r.RequestDeliveryID))
	b = append(b, `,"outcome":`...)
	b = appendRaw(b, r.Outcome)
	return append(b, '}')
}

// Cancel is rpc.cancel.
type Cancel struct {
	CallID CallID `json:"callId"`
}

func (c *Cancel) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "callId":
			var v uint64
			v, err = f.serial(FamCall)
			c.CallID = CallID(v)
			f.mark(0)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(1, "callId")
}

func (c *Cancel) AppendJSON(b []byte) []byte {
	b = append(b, `{"callId":`...)
	b = appendSerialStr(b, FamCall, uint64(c.CallID))
	return append(b, '}')
}

// ResponderRelease is rpc.responder.release: a service gives up reply
// authority for a dispatched call (docs/protocol.md, rpc.responder.release).
type ResponderRelease struct {
	CallID            CallID     `json:"callId"`
	RequestDeliveryID DeliveryID `json:"requestDeliveryId"`
}

func (r *ResponderRelease) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "callId":
			var v uint64
			v, err = f.serial(FamCall)
			r.CallID = CallID(v)
			f.mark(0)
		case "requestDeliveryId":
			var v uint64
			v, err = f.serial(FamDelivery)
			r.RequestDeliveryID = DeliveryID(v)
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "callId", "requestDeliveryId")
}

func (r *ResponderRelease) AppendJSON(b []byte) []byte {
	b = append(b, `{"callId":`...)
	b = appendSerialStr(b, FamCall, uint64(r.CallID))
	b = append(b, `,"requestDeliveryId":`...)
	b = appendSerialStr(b, FamDelivery, uint64(r.RequestDeliveryID))
	return append(b, '}')
}

// Declare is topic.declare.
type Declare struct {
	Name     string    `json:"name" wire:"Name"`
	Retained Retention `json:"retained" wire:"none|latest"`
}

func (t *Declare) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "name":
			t.Name, err = f.name()
			f.mark(0)
		case "retained":
			var v uint8
			v, err = f.enum(retentionNames)
			t.Retained = Retention(v)
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "name", "retained")
}

func (t *Declare) AppendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, t.Name)
	b = append(b, `,"retained":"`...)
	b = append(b, t.Retained.String()...)
	return append(b, `"}`...)
}

// TopicName is the body of topic.clear and topic.delete.
type TopicName struct {
	Name string `json:"name" wire:"Name"`
}

func (t *TopicName) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "name":
			t.Name, err = f.name()
			f.mark(0)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(1, "name")
}

func (t *TopicName) AppendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, t.Name)
	return append(b, '}')
}

// Subscribe is subscribe.
type Subscribe struct {
	Topic        string `json:"topic" wire:"Name"`
	Mode         Mode   `json:"mode" wire:"latest|bounded"`
	MaxQueued    uint32 `json:"maxQueued" wire:"int 1..65535"`
	MaxInFlight  uint32 `json:"maxInFlight" wire:"int 1..65535"`
	ReplayLatest bool   `json:"replayLatest"`
}

func (s *Subscribe) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "topic":
			s.Topic, err = f.name()
			f.mark(0)
		case "mode":
			var v uint8
			v, err = f.enum(modeNames)
			s.Mode = Mode(v)
			f.mark(1)
		case "maxQueued":
			s.MaxQueued, err = f.credit()
			f.mark(2)
		case "maxInFlight":
			s.MaxInFlight, err = f.credit()
			f.mark(3)
		case "replayLatest":
			s.ReplayLatest, err = f.boolean()
			f.mark(4)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(31, "topic", "mode", "maxQueued", "maxInFlight", "replayLatest")
}

func (s *Subscribe) AppendJSON(b []byte) []byte {
	b = append(b, `{"topic":`...)
	b = appendString(b, s.Topic)
	b = append(b, `,"mode":"`...)
	b = append(b, s.Mode.String()...)
	b = append(b, `","maxQueued":`...)
	b = strconv.AppendUint(b, uint64(s.MaxQueued), 10)
	b = append(b, `,"maxInFlight":`...)
	b = strconv.AppendUint(b, uint64(s.MaxInFlight), 10)
	b = append(b, `,"replayLatest":`...)
	b = appendBool(b, s.ReplayLatest)
	return append(b, '}')
}

// Unsubscribe is unsubscribe.
type Unsubscribe struct {
	SubscriptionID SubID `json:"subscriptionId"`
}

func (u *Unsubscribe) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "subscriptionId":
			var v uint64
			v, err = f.serial(FamSub)
			u.SubscriptionID = SubID(v)
			f.mark(0)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(1, "subscriptionId")
}

func (u *Unsubscribe) AppendJSON(b []byte) []byte {
	b = append(b, `{"subscriptionId":`...)
	b = appendSerialStr(b, FamSub, uint64(u.SubscriptionID))
	return append(b, '}')
}

// Publish is publish.
type Publish struct {
	Topic   string  `json:"topic" wire:"Name"`
	Payload RawJSON `json:"payload"`
}

func (p *Publish) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "topic":
			p.Topic, err = f.name()
			f.mark(0)
		case "payload":
			p.Payload, err = f.rawObject()
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "topic", "payload")
}

func (p *Publish) AppendJSON(b []byte) []byte {
	b = append(b, `{"topic":`...)
	b = appendString(b, p.Topic)
	b = append(b, `,"payload":`...)
	b = appendRaw(b, p.Payload)
	return append(b, '}')
}

// Consumed is delivery.consumed. Decoding reuses DeliveryIDs' capacity.
type Consumed struct {
	DeliveryIDs []DeliveryID `json:"deliveryIds" wire:"[DeliveryId 1..64]"`
}

func (c *Consumed) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "deliveryIds":
			var first, end uint32
			if first, end, err = f.array(1, MaxBatch); err == nil {
				c.DeliveryIDs = c.DeliveryIDs[:0]
				for i := first; i < end && err == nil; i = d.nextElem(i) {
					e := f.elem(i)
					var v uint64
					v, err = e.serial(FamDelivery)
					c.DeliveryIDs = append(c.DeliveryIDs, DeliveryID(v))
				}
			}
			f.mark(0)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(1, "deliveryIds")
}

func (c *Consumed) AppendJSON(b []byte) []byte {
	b = append(b, `{"deliveryIds":[`...)
	for i, id := range c.DeliveryIDs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendSerialStr(b, FamDelivery, uint64(id))
	}
	return append(b, "]}"...)
}

// Allocate is artifact.allocate.
type Allocate struct {
	ByteLength  uint64 `json:"byteLength" wire:"U64"`
	ContentType string `json:"contentType" wire:"ContentType"`
}

func (a *Allocate) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "byteLength":
			a.ByteLength, err = f.u64()
			f.mark(0)
		case "contentType":
			a.ContentType, err = f.contentType()
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "byteLength", "contentType")
}

func (a *Allocate) AppendJSON(b []byte) []byte {
	b = append(b, `{"byteLength":`...)
	b = appendU64Str(b, a.ByteLength)
	b = append(b, `,"contentType":`...)
	b = appendString(b, a.ContentType)
	return append(b, '}')
}

// Seal is artifact.seal.
type Seal struct {
	ArtifactID ArtifactID  `json:"artifactId"`
	Generation uint64      `json:"generation" wire:"U64"`
	OwnerID    OwnerID     `json:"ownerId"`
	Digest     Opt[Digest] `json:"digest"`
}

func (s *Seal) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "artifactId":
			var v uint64
			v, err = f.serial(FamArtifact)
			s.ArtifactID = ArtifactID(v)
			f.mark(0)
		case "generation":
			s.Generation, err = f.u64()
			f.mark(1)
		case "ownerId":
			s.OwnerID, err = f.owner()
			f.mark(2)
		case "digest":
			s.Digest, err = f.optDigest()
			f.mark(3)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(15, "artifactId", "generation", "ownerId", "digest")
}

func (s *Seal) AppendJSON(b []byte) []byte {
	b = append(b, `{"artifactId":`...)
	b = appendSerialStr(b, FamArtifact, uint64(s.ArtifactID))
	b = append(b, `,"generation":`...)
	b = appendU64Str(b, s.Generation)
	b = append(b, `,"ownerId":`...)
	b = appendOwner(b, s.OwnerID)
	b = append(b, `,"digest":`...)
	if s.Digest.Valid {
		b = appendDigest(b, s.Digest.V)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

// RefOwner is the body of artifact.open and artifact.retain.
type RefOwner struct {
	Ref     ArtifactRef `json:"ref"`
	OwnerID OwnerID     `json:"ownerId"`
}

func (r *RefOwner) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "ref":
			err = r.Ref.decodeJSON(d, f.val, d.path(ctx, ".ref"))
			f.mark(0)
		case "ownerId":
			r.OwnerID, err = f.owner()
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "ref", "ownerId")
}

func (r *RefOwner) AppendJSON(b []byte) []byte {
	b = append(b, `{"ref":`...)
	b = r.Ref.AppendJSON(b)
	b = append(b, `,"ownerId":`...)
	b = appendOwner(b, r.OwnerID)
	return append(b, '}')
}

// Release is artifact.release. Decoding reuses OwnerIDs' capacity.
type Release struct {
	OwnerIDs []OwnerID `json:"ownerIds" wire:"[OwnerId 1..64]"`
}

func (r *Release) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "ownerIds":
			var first, end uint32
			if first, end, err = f.array(1, MaxBatch); err == nil {
				r.OwnerIDs = r.OwnerIDs[:0]
				for i := first; i < end && err == nil; i = d.nextElem(i) {
					e := f.elem(i)
					var o OwnerID
					o, err = e.owner()
					r.OwnerIDs = append(r.OwnerIDs, o)
				}
			}
			f.mark(0)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(1, "ownerIds")
}

func (r *Release) AppendJSON(b []byte) []byte {
	b = append(b, `{"ownerIds":[`...)
	for i, o := range r.OwnerIDs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendOwner(b, o)
	}
	return append(b, "]}"...)
}
