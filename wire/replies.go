package wire

import "strconv"

// Replies are {ok:true, value:{...}} or {ok:false, error:{code, message,
// dispatch}}. The value types below are the per-operation reply values.

// ReplyBody wraps a reply for encoding: exactly one of Value and Err is set.
type ReplyBody struct {
	Value Body
	Err   *BusError
}

func (r *ReplyBody) AppendJSON(b []byte) []byte {
	if r.Err != nil {
		b = append(b, `{"ok":false,"error":`...)
		b = appendErrorObject(b, r.Err.Code, r.Err.Message, r.Err.Dispatch)
		return append(b, '}')
	}
	b = append(b, `{"ok":true,"value":`...)
	if r.Value == nil {
		b = append(b, "{}"...)
	} else {
		b = r.Value.AppendJSON(b)
	}
	return append(b, '}')
}

func (r *ReplyBody) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return bodyErr(ctx, "", "decode replies with Envelope.DecodeReply")
}

func appendErrorObject(b []byte, code ErrorCode, msg string, disp Dispatch) []byte {
	b = appendErrorMembers(append(b, '{'), code, msg, disp)
	return append(b, '}')
}

func appendErrorMembers(b []byte, code ErrorCode, msg string, disp Dispatch) []byte {
	b = append(b, `"code":"`...)
	b = append(b, code.String()...)
	b = append(b, `","message":`...)
	b = appendString(b, truncateText(msg, MaxErrorMessageLen))
	b = append(b, `,"dispatch":"`...)
	b = append(b, disp.String()...)
	return append(b, '"')
}

// decodeErrorFields reads {code, message, dispatch} members into e; the
// extra member names (for call.failed's callId) are handled by the caller.
func decodeErrorMember(f *fields, e *BusError) (handled bool, err error) {
	switch string(f.key) {
	case "code":
		var b []byte
		if b, err = f.strTok(); err == nil {
			var ok bool
			if e.Code, ok = parseErrorCodeBytes(b); !ok {
				err = f.fail("unknown error code")
			}
		}
		f.mark(10)
	case "message":
		e.Message, err = f.text(MaxErrorMessageLen)
		f.mark(11)
	case "dispatch":
		var b []byte
		if b, err = f.strTok(); err == nil {
			var ok bool
			if e.Dispatch, ok = parseDispatchBytes(b); !ok {
				err = f.fail("unknown dispatch")
			}
		}
		f.mark(12)
	default:
		return false, nil
	}
	return true, err
}

const errorBits = 1<<10 | 1<<11 | 1<<12

var errorBitNames = []string{10: "code", 11: "message", 12: "dispatch"}

// DecodeReply decodes a reply envelope's body. On {ok:true} it decodes the
// value into v and returns (nil, nil); on {ok:false} it returns the carried
// error as the first result. The second result reports a malformed reply.
func (e *Envelope) DecodeReply(v Body) (*BusError, error) {
	d := e.dec
	f, err := d.object(e.body, d.path(e.Op.String(), " reply"))
	if err != nil {
		return nil, err
	}
	ok, valTok, errTok := false, uint32(0), uint32(0)
	for f.next() {
		switch string(f.key) {
		case "ok":
			ok, err = f.boolean()
			f.mark(0)
		case "value":
			valTok = f.val
			f.mark(1)
		case "error":
			errTok = f.val
			f.mark(2)
		default:
			err = f.unknown()
		}
		if err != nil {
			return nil, err
		}
	}
	if err := f.require(1, "ok"); err != nil {
		return nil, err
	}
	if ok {
		if f.seen != 3 {
			return nil, bodyErr(f.ctx, "", "ok:true needs exactly ok and value")
		}
		return nil, v.decodeJSON(d, valTok, d.path(f.ctx, " value"))
	}
	if f.seen != 5 {
		return nil, bodyErr(f.ctx, "", "ok:false needs exactly ok and error")
	}
	ef, err := d.object(errTok, d.path(f.ctx, " error"))
	if err != nil {
		return nil, err
	}
	be := &BusError{}
	for ef.next() {
		handled, err := decodeErrorMember(&ef, be)
		if !handled {
			err = ef.unknown()
		}
		if err != nil {
			return nil, err
		}
	}
	if err := ef.require(errorBits, errorBitNames...); err != nil {
		return nil, err
	}
	return be, nil
}

// HelloOK is bus.hello's reply value.
type HelloOK struct {
	RouterID       RouterID `json:"routerId"`
	ConnectionID   ConnID   `json:"connectionId"`
	SelectedMajor  uint32   `json:"selectedMajor" wire:"int"`
	SelectedMinor  uint32   `json:"selectedMinor" wire:"int"`
	ContractDigest Digest   `json:"contractDigest"`
	Limits         Limits   `json:"limits"`
}

func (h *HelloOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "routerId":
			var v uint64
			v, err = f.tag("router-")
			h.RouterID = RouterID(v)
			f.mark(0)
		case "connectionId":
			var v uint64
			v, err = f.serial(FamConn)
			h.ConnectionID = ConnID(v)
			f.mark(1)
		case "selectedMajor":
			var n uint64
			n, err = f.integer(0, 65535)
			h.SelectedMajor = uint32(n)
			f.mark(2)
		case "selectedMinor":
			var n uint64
			n, err = f.integer(0, 65535)
			h.SelectedMinor = uint32(n)
			f.mark(3)
		case "contractDigest":
			h.ContractDigest, err = f.digest()
			f.mark(4)
		case "limits":
			err = h.Limits.decodeJSON(d, f.val, d.path(ctx, ".limits"))
			f.mark(5)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(63, "routerId", "connectionId", "selectedMajor", "selectedMinor", "contractDigest", "limits")
}

func (h *HelloOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"routerId":"`...)
	b = appendTag(b, "router-", uint64(h.RouterID))
	b = append(b, `","connectionId":`...)
	b = appendSerialStr(b, FamConn, uint64(h.ConnectionID))
	b = append(b, `,"selectedMajor":`...)
	b = strconv.AppendUint(b, uint64(h.SelectedMajor), 10)
	b = append(b, `,"selectedMinor":`...)
	b = strconv.AppendUint(b, uint64(h.SelectedMinor), 10)
	b = append(b, `,"contractDigest":`...)
	b = appendDigest(b, h.ContractDigest)
	b = append(b, `,"limits":`...)
	b = h.Limits.AppendJSON(b)
	return append(b, '}')
}

// single-member bodies share one decoder and encoder.

func decodeSingle(d *Decoder, ti uint32, ctx, key string, read func(fields) error) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		if string(f.key) != key {
			return f.unknown()
		}
		if err := read(f); err != nil {
			return err
		}
		f.mark(0)
	}
	return f.require(1, key)
}

func decodeBoolBody(d *Decoder, ti uint32, ctx, key string, dst *bool) error {
	return decodeSingle(d, ti, ctx, key, func(f fields) (err error) {
		*dst, err = f.boolean()
		return err
	})
}

func appendBoolBody(b []byte, key string, v bool) []byte {
	b = appendKey(append(b, '{'), key, true)
	b = appendBool(b, v)
	return append(b, '}')
}

// RegisterOK is service.register's reply value.
type RegisterOK struct {
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
}

func (r *RegisterOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeSingle(d, ti, ctx, "serviceIncarnation", func(f fields) error {
		v, err := f.serial(FamSvc)
		r.ServiceIncarnation = ServiceInc(v)
		return err
	})
}

func (r *RegisterOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"serviceIncarnation":`...)
	b = appendSerialStr(b, FamSvc, uint64(r.ServiceIncarnation))
	return append(b, '}')
}

// Removed answers service.unregister and unsubscribe.
type Removed struct {
	Removed bool `json:"removed"`
}

func (r *Removed) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeBoolBody(d, ti, ctx, "removed", &r.Removed)
}
func (r *Removed) AppendJSON(b []byte) []byte { return appendBoolBody(b, "removed", r.Removed) }

// CallOK is rpc.call's reply value.
type CallOK struct {
	Accepted           bool       `json:"accepted"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
}

func (c *CallOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "accepted":
			c.Accepted, err = f.boolean()
			f.mark(0)
		case "serviceIncarnation":
			var v uint64
			v, err = f.serial(FamSvc)
			c.ServiceIncarnation = ServiceInc(v)
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "accepted", "serviceIncarnation")
}

func (c *CallOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"accepted":`...)
	b = appendBool(b, c.Accepted)
	b = append(b, `,"serviceIncarnation":`...)
	b = appendSerialStr(b, FamSvc, uint64(c.ServiceIncarnation))
	return append(b, '}')
}

// Routed is rpc.reply's reply value: false when the caller had detached.
type Routed struct {
	Routed bool `json:"routed"`
}

func (r *Routed) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeBoolBody(d, ti, ctx, "routed", &r.Routed)
}
func (r *Routed) AppendJSON(b []byte) []byte { return appendBoolBody(b, "routed", r.Routed) }

// CancelOK is rpc.cancel's reply value.
type CancelOK struct {
	State CancelState `json:"state" wire:"cancelled-before-dispatch|execution-unknown|completed|call-gone"`
}

func (c *CancelOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeSingle(d, ti, ctx, "state", func(f fields) error {
		v, err := f.enum(cancelNames[:])
		c.State = CancelState(v)
		return err
	})
}

func (c *CancelOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"state":"`...)
	b = append(b, c.State.String()...)
	return append(b, `"}`...)
}

// Released answers rpc.responder.release, delivery.consumed and
// artifact.release: the number of roots newly released.
type Released struct {
	Released uint64 `json:"released" wire:"U64"`
}

func (r *Released) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeSingle(d, ti, ctx, "released", func(f fields) (err error) {
		r.Released, err = f.u64()
		return err
	})
}

func (r *Released) AppendJSON(b []byte) []byte {
	b = append(b, `{"released":`...)
	b = appendU64Str(b, r.Released)
	return append(b, '}')
}

// DeclareOK is topic.declare's reply value.
type DeclareOK struct {
	Declared         bool     `json:"declared"`
	TopicIncarnation TopicInc `json:"topicIncarnation"`
}

func (t *DeclareOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "declared":
			t.Declared, err = f.boolean()
			f.mark(0)
		case "topicIncarnation":
			var v uint64
			v, err = f.serial(FamTop)
			t.TopicIncarnation = TopicInc(v)
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "declared", "topicIncarnation")
}

func (t *DeclareOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"declared":`...)
	b = appendBool(b, t.Declared)
	b = append(b, `,"topicIncarnation":`...)
	b = appendSerialStr(b, FamTop, uint64(t.TopicIncarnation))
	return append(b, '}')
}

// Cleared is topic.clear's reply value.
type Cleared struct {
	Cleared bool `json:"cleared"`
}

func (c *Cleared) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeBoolBody(d, ti, ctx, "cleared", &c.Cleared)
}
func (c *Cleared) AppendJSON(b []byte) []byte { return appendBoolBody(b, "cleared", c.Cleared) }

// Deleted is topic.delete's reply value.
type Deleted struct {
	Deleted bool `json:"deleted"`
}

func (x *Deleted) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeBoolBody(d, ti, ctx, "deleted", &x.Deleted)
}
func (x *Deleted) AppendJSON(b []byte) []byte { return appendBoolBody(b, "deleted", x.Deleted) }

// SubscribeOK is subscribe's reply value.
type SubscribeOK struct {
	SubscriptionID   SubID    `json:"subscriptionId"`
	TopicIncarnation TopicInc `json:"topicIncarnation"`
}

func (s *SubscribeOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		var v uint64
		switch string(f.key) {
		case "subscriptionId":
			v, err = f.serial(FamSub)
			s.SubscriptionID = SubID(v)
			f.mark(0)
		case "topicIncarnation":
			v, err = f.serial(FamTop)
			s.TopicIncarnation = TopicInc(v)
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "subscriptionId", "topicIncarnation")
}

func (s *SubscribeOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"subscriptionId":`...)
	b = appendSerialStr(b, FamSub, uint64(s.SubscriptionID))
	b = append(b, `,"topicIncarnation":`...)
	b = appendSerialStr(b, FamTop, uint64(s.TopicIncarnation))
	return append(b, '}')
}

// PublishOK is publish's reply value.
type PublishOK struct {
	TopicSequence uint64 `json:"topicSequence" wire:"U64"`
	Subscribers   uint64 `json:"subscribers" wire:"U64"`
	Replaced      uint64 `json:"replaced" wire:"U64"`
}

func (p *PublishOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "topicSequence":
			p.TopicSequence, err = f.u64()
			f.mark(0)
		case "subscribers":
			p.Subscribers, err = f.u64()
			f.mark(1)
		case "replaced":
			p.Replaced, err = f.u64()
			f.mark(2)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(7, "topicSequence", "subscribers", "replaced")
}

func (p *PublishOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"topicSequence":`...)
	b = appendU64Str(b, p.TopicSequence)
	b = append(b, `,"subscribers":`...)
	b = appendU64Str(b, p.Subscribers)
	b = append(b, `,"replaced":`...)
	b = appendU64Str(b, p.Replaced)
	return append(b, '}')
}

// AllocateOK is artifact.allocate's reply value.
type AllocateOK struct {
	ArtifactID    ArtifactID `json:"artifactId"`
	Generation    uint64     `json:"generation" wire:"U64"`
	OwnerID       OwnerID    `json:"ownerId"`
	WriteLocation Location   `json:"writeLocation"`
}

func (a *AllocateOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "artifactId":
			var v uint64
			v, err = f.serial(FamArtifact)
			a.ArtifactID = ArtifactID(v)
			f.mark(0)
		case "generation":
			a.Generation, err = f.u64()
			f.mark(1)
		case "ownerId":
			a.OwnerID, err = f.owner()
			f.mark(2)
		case "writeLocation":
			err = a.WriteLocation.decodeJSON(d, f.val, d.path(ctx, ".writeLocation"))
			f.mark(3)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(15, "artifactId", "generation", "ownerId", "writeLocation")
}

func (a *AllocateOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"artifactId":`...)
	b = appendSerialStr(b, FamArtifact, uint64(a.ArtifactID))
	b = append(b, `,"generation":`...)
	b = appendU64Str(b, a.Generation)
	b = append(b, `,"ownerId":`...)
	b = appendOwner(b, a.OwnerID)
	b = append(b, `,"writeLocation":`...)
	b = a.WriteLocation.AppendJSON(b)
	return append(b, '}')
}

// SealOK is artifact.seal's reply value; OwnerID is the writer's own id,
// now an explicit hold.
type SealOK struct {
	Ref     ArtifactRef `json:"ref"`
	OwnerID OwnerID     `json:"ownerId"`
}

func (s *SealOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return (*RefOwner)(s).decodeJSON(d, ti, ctx)
}
func (s *SealOK) AppendJSON(b []byte) []byte { return (*RefOwner)(s).AppendJSON(b) }

// OpenOK is artifact.open's reply value.
type OpenOK struct {
	ReadLocation Location `json:"readLocation"`
}

func (o *OpenOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeSingle(d, ti, ctx, "readLocation", func(f fields) error {
		return o.ReadLocation.decodeJSON(d, f.val, d.path(ctx, ".readLocation"))
	})
}

func (o *OpenOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"readLocation":`...)
	b = o.ReadLocation.AppendJSON(b)
	return append(b, '}')
}

// RetainOK is artifact.retain's reply value: the new hold.
type RetainOK struct {
	OwnerID OwnerID `json:"ownerId"`
}

func (r *RetainOK) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return decodeSingle(d, ti, ctx, "ownerId", func(f fields) (err error) {
		r.OwnerID, err = f.owner()
		return err
	})
}

func (r *RetainOK) AppendJSON(b []byte) []byte {
	b = append(b, `{"ownerId":`...)
	b = appendOwner(b, r.OwnerID)
	return append(b, '}')
}
