package wire

// Replies are {ok:true, value:{...}} or {ok:false, error:{code, message,
// dispatch}}. The value types below are the per-operation reply values;
// their codecs, like every body's, are generated (codecs_gen.go). The reply
// wrapper itself is written here: which of value and error must be present
// depends on ok, which no member-by-member codec expresses.

// ReplyBody wraps a reply for encoding: exactly one of Value and Err is set.
type ReplyBody struct {
	Value Body
	Err   *BusError
}

// AppendJSON appends the reply object.
func (r *ReplyBody) AppendJSON(b []byte) []byte {
	if r.Err != nil {
		b = append(b, `{"ok":false,"error":`...)
		b = (*errorBody)(r.Err).AppendJSON(b)
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

func (r *ReplyBody) decodeJSON(d *Decoder, ti uint32, ctx string) *BusError {
	return bodyErr(ctx, "", "decode replies with Envelope.DecodeReply")
}

// errorBody is a reply's error object. It has BusError's fields in
// BusError's order, so a *BusError converts to an *errorBody and borrows
// its generated codec.
type errorBody struct {
	Code     ErrorCode `json:"code" wire:"ErrorCode"`
	Message  string    `json:"message" wire:"Text" codec:"max=MaxErrorMessageLen"`
	Dispatch Dispatch  `json:"dispatch" wire:"Dispatch"`
}

// DecodeReply decodes a reply envelope's body. On {ok:true} it decodes the
// value into v and returns (nil, nil); on {ok:false} it returns the carried
// error as the first result. The second result reports a malformed reply.
func (e *Envelope) DecodeReply(v Body) (*BusError, error) {
	d := e.dec
	f, err := d.object(e.body, d.path(e.Op.String(), " reply"))
	if err != nil {
		return nil, err
	}
	hasOK, ok := false, false
	var valTok, errTok uint32 // 0, the envelope's own token, when absent
	for f.next() {
		switch string(f.key) {
		case "ok":
			ok, err = f.boolean()
			hasOK = true
		case "value":
			valTok = f.val
		case "error":
			errTok = f.val
		default:
			err = f.unknown()
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case !hasOK:
		return nil, bodyErr(f.ctx, "ok", "missing")
	case ok && (valTok == 0 || errTok != 0):
		return nil, bodyErr(f.ctx, "", "ok:true needs exactly ok and value")
	case ok:
		if err := v.decodeJSON(d, valTok, d.path(f.ctx, " value")); err != nil {
			return nil, err
		}
		return nil, nil
	case errTok == 0 || valTok != 0:
		return nil, bodyErr(f.ctx, "", "ok:false needs exactly ok and error")
	}
	be := &BusError{}
	if err := (*errorBody)(be).decodeJSON(d, errTok, d.path(f.ctx, " error")); err != nil {
		return nil, err
	}
	return be, nil
}

// HelloOK is bus.hello's reply value. Extensions are the ones the router
// granted, in the hello's order; StoreID names the router's store, the
// directory under the store root where its artifacts live.
type HelloOK struct {
	RouterID       RouterID `json:"routerId"`
	ConnectionID   ConnID   `json:"connectionId"`
	SelectedMajor  uint32   `json:"selectedMajor" wire:"int" codec:"range=0..65535"`
	SelectedMinor  uint32   `json:"selectedMinor" wire:"int" codec:"range=0..65535"`
	ContractDigest Digest   `json:"contractDigest"`
	Limits         Limits   `json:"limits"`
	Extensions     []string `json:"extensions" wire:"[Id 0..16]" codec:"len=0..MaxExtensions"`
	StoreID        StoreID  `json:"storeId"`
}

// RegisterOK is service.register's reply value.
type RegisterOK struct {
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
}

// Removed answers service.unregister and unsubscribe.
type Removed struct {
	Removed bool `json:"removed"`
}

// CallOK is rpc.call's reply value.
type CallOK struct {
	Accepted           bool       `json:"accepted"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
}

// Routed is rpc.reply's reply value: false when the caller had detached.
type Routed struct {
	Routed bool `json:"routed"`
}

// CancelOK is rpc.cancel's reply value.
type CancelOK struct {
	State CancelState `json:"state" wire:"cancelled-before-dispatch|execution-unknown|completed|call-gone"`
}

// Released answers rpc.responder.release, delivery.consumed and
// artifact.release: the number of roots newly released.
type Released struct {
	Released uint64 `json:"released" wire:"U64"`
}

// DeclareOK is topic.declare's reply value.
type DeclareOK struct {
	Declared         bool     `json:"declared"`
	TopicIncarnation TopicInc `json:"topicIncarnation"`
}

// Cleared is topic.clear's reply value.
type Cleared struct {
	Cleared bool `json:"cleared"`
}

// Deleted is topic.delete's reply value.
type Deleted struct {
	Deleted bool `json:"deleted"`
}

// SubscribeOK is subscribe's reply value. TopicIncarnation is null when
// the subscription awaits a topic not declared yet (awaitTopic).
type SubscribeOK struct {
	SubscriptionID   SubID         `json:"subscriptionId"`
	TopicIncarnation Opt[TopicInc] `json:"topicIncarnation"`
}

// PublishOK is publish's reply value.
type PublishOK struct {
	TopicSequence uint64 `json:"topicSequence" wire:"U64"`
	Subscribers   uint64 `json:"subscribers" wire:"U64"`
	Replaced      uint64 `json:"replaced" wire:"U64"`
}

// AllocateOK is artifact.allocate's reply value: the allocation, which
// artifact.seal quotes back, and where to write.
type AllocateOK struct {
	Allocation
	WriteLocation Location `json:"writeLocation"`
}

// SealOK is artifact.seal's reply value; OwnerID is the writer's own id,
// now an explicit hold.
type SealOK struct {
	Ref     ArtifactRef `json:"ref"`
	OwnerID OwnerID     `json:"ownerId"`
}

// OpenOK is artifact.open's reply value.
type OpenOK struct {
	ReadLocation Location `json:"readLocation"`
}

// RetainOK is artifact.retain's reply value: the new hold.
type RetainOK struct {
	OwnerID OwnerID `json:"ownerId"`
}
