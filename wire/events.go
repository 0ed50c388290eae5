package wire

// Deliveries and notices: what the router sends without being asked.

// Request is the rpc.request delivery.
type Request struct {
	DeliveryID         DeliveryID `json:"deliveryId"`
	CallID             CallID     `json:"callId"`
	Caller             Identity   `json:"caller"`
	Target             string     `json:"target" wire:"Name"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
	Method             string     `json:"method" wire:"Method"`
	Payload            RawJSON    `json:"payload"`
}

func (r *Request) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		var v uint64
		switch string(f.key) {
		case "deliveryId":
			v, err = f.serial(FamDelivery)
			r.DeliveryID = DeliveryID(v)
			f.mark(0)
		case "callId":
			v, err = f.serial(FamCall)
			r.CallID = CallID(v)
			f.mark(1)
		case "caller":
			err = r.Caller.decodeJSON(d, f.val, d.path(ctx, ".caller"))
			f.mark(2)
		case "target":
			r.Target, err = f.name()
			f.mark(3)
		case "serviceIncarnation":
			v, err = f.serial(FamSvc)
			r.ServiceIncarnation = ServiceInc(v)
			f.mark(4)
		case "method":
			r.Method, err = f.method()
			f.mark(5)
		case "payload":
			r.Payload, err = f.rawObject()
			f.mark(6)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(127, "deliveryId", "callId", "caller", "target", "serviceIncarnation", "method", "payload")
}

func (r *Request) AppendJSON(b []byte) []byte {
	b = append(b, `{"deliveryId":`...)
	b = appendSerialStr(b, FamDelivery, uint64(r.DeliveryID))
	b = append(b, `,"callId":`...)
	b = appendSerialStr(b, FamCall, uint64(r.CallID))
	b = append(b, `,"caller":`...)
	b = r.Caller.AppendJSON(b)
	b = append(b, `,"target":`...)
	b = appendString(b, r.Target)
	b = append(b, `,"serviceIncarnation":`...)
	b = appendSerialStr(b, FamSvc, uint64(r.ServiceIncarnation))
	b = append(b, `,"method":`...)
	b = appendString(b, r.Method)
	b = append(b, `,"payload":`...)
	b = appendRaw(b, r.Payload)
	return append(b, '}')
}

// Result is the rpc.result delivery.
type Result struct {
	DeliveryID         DeliveryID `json:"deliveryId"`
	CallID             CallID     `json:"callId"`
	Responder          Identity   `json:"responder"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
	Outcome            RawJSON    `json:"outcome"`
}

func (r *Result) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		var v uint64
		switch string(f.key) {
		case "deliveryId":
			v, err = f.serial(FamDelivery)
			r.DeliveryID = DeliveryID(v)
			f.mark(0)
		case "callId":
			v, err = f.serial(FamCall)
			r.CallID = CallID(v)
			f.mark(1)
		case "responder":
			err = r.Responder.decodeJSON(d, f.val, d.path(ctx, ".responder"))
			f.mark(2)
		case "serviceIncarnation":
			v, err = f.serial(FamSvc)
			r.ServiceIncarnation = ServiceInc(v)
			f.mark(3)
		case "outcome":
			r.Outcome, err = f.rawObject()
			f.mark(4)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(31, "deliveryId", "callId", "responder", "serviceIncarnation", "outcome")
}

func (r *Result) AppendJSON(b []byte) []byte {
	b = append(b, `{"deliveryId":`...)
	b = appendSerialStr(b, FamDelivery, uint64(r.DeliveryID))
	b = append(b, `,"callId":`...)
	b = appendSerialStr(b, FamCall, uint64(r.CallID))
	b = append(b, `,"responder":`...)
	b = r.Responder.AppendJSON(b)
	b = append(b, `,"serviceIncarnation":`...)
	b = appendSerialStr(b, FamSvc, uint64(r.ServiceIncarnation))
	b = append(b, `,"outcome":`...)
	b = appendRaw(b, r.Outcome)
	return append(b, '}')
}

// TopicMessage is the topic.message delivery.
type TopicMessage struct {
	DeliveryID       DeliveryID `json:"deliveryId"`
	SubscriptionID   SubID      `json:"subscriptionId"`
	Topic            string     `json:"topic" wire:"Name"`
	TopicIncarnation TopicInc   `json:"topicIncarnation"`
	TopicSequence    uint64     `json:"topicSequence" wire:"U64"`
	Replaced         uint64     `json:"replaced" wire:"U64"`
	Payload          RawJSON    `json:"payload"`
}

func (m *TopicMessage) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		var v uint64
		switch string(f.key) {
		case "deliveryId":
			v, err = f.serial(FamDelivery)
			m.DeliveryID = DeliveryID(v)
			f.mark(0)
		case "subscriptionId":
			v, err = f.serial(FamSub)
			m.SubscriptionID = SubID(v)
			f.mark(1)
		case "topic":
			m.Topic, err = f.name()
			f.mark(2)
		case "topicIncarnation":
			v, err = f.serial(FamTop)
			m.TopicIncarnation = TopicInc(v)
			f.mark(3)
		case "topicSequence":
			m.TopicSequence, err = f.u64()
			f.mark(4)
		case "replaced":
			m.Replaced, err = f.u64()
			f.mark(5)
		case "payload":
			m.Payload, err = f.rawObject()
			f.mark(6)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(127, "deliveryId", "subscriptionId", "topic", "topicIncarnation", "topicSequence", "replaced", "payload")
}

func (m *TopicMessage) AppendJSON(b []byte) []byte {
	b = append(b, `{"deliveryId":`...)
	b = appendSerialStr(b, FamDelivery, uint64(m.DeliveryID))
	b = append(b, `,"subscriptionId":`...)
	b = appendSerialStr(b, FamSub, uint64(m.SubscriptionID))
	b = append(b, `,"topic":`...)
	b = appendString(b, m.Topic)
	b = append(b, `,"topicIncarnation":`...)
	b = appendSerialStr(b, FamTop, uint64(m.TopicIncarnation))
	b = append(b, `,"topicSequence":`...)
	b = appendU64Str(b, m.TopicSequence)
	b = append(b, `,"replaced":`...)
	b = appendU64Str(b, m.Replaced)
	b = append(b, `,"payload":`...)
	b = appendRaw(b, m.Payload)
	return append(b, '}')
}

// CallFailed is the call.failed notice: the terminal failure of a call.
type CallFailed struct {
	CallID   CallID    `json:"callId"`
	Code     ErrorCode `json:"code" wire:"ErrorCode"`
	Message  string    `json:"message" wire:"Text"`
	Dispatch Dispatch  `json:"dispatch" wire:"Dispatch"`
}

// Err returns the failure as a *BusError.
func (c *CallFailed) Err() *BusError {
	return &BusError{Code: c.Code, Message: c.Message, Dispatch: c.Dispatch}
}

func (c *CallFailed) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	var be BusError
	for f.next() {
		if string(f.key) == "callId" {
			var v uint64
			v, err = f.serial(FamCall)
			c.CallID = CallID(v)
			f.mark(0)
		} else if handled, e := decodeErrorMember(&f, &be); !handled {
			err = f.unknown()
		} else {
			err = e
		}
		if err != nil {
			return err
		}
	}
	c.Code, c.Message, c.Dispatch = be.Code, be.Message, be.Dispatch
	return f.require(1|errorBits, callFailedNames...)
}

func (c *CallFailed) AppendJSON(b []byte) []byte {
	b = append(b, `{"callId":`...)
	b = appendSerialStr(b, FamCall, uint64(c.CallID))
	b = append(b, ',')
	b = appendErrorMembers(b, c.Code, c.Message, c.Dispatch)
	return append(b, '}')
}

var callFailedNames = append([]string{"callId"}, errorBitNames[1:]...)

// MaxReasonLen bounds a notice's reason.
const MaxReasonLen = 128

// RouteRemoved is the route.removed notice.
type RouteRemoved struct {
	Name               string     `json:"name" wire:"Name"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
	Reason             string     `json:"reason" wire:"Text"`
}

func (r *RouteRemoved) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "name":
			r.Name, err = f.name()
			f.mark(0)
		case "serviceIncarnation":
			var v uint64
			v, err = f.serial(FamSvc)
			r.ServiceIncarnation = ServiceInc(v)
			f.mark(1)
		case "reason":
			r.Reason, err = f.text(MaxReasonLen)
			f.mark(2)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(7, "name", "serviceIncarnation", "reason")
}

func (r *RouteRemoved) AppendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, r.Name)
	b = append(b, `,"serviceIncarnation":`...)
	b = appendSerialStr(b, FamSvc, uint64(r.ServiceIncarnation))
	b = append(b, `,"reason":`...)
	b = appendString(b, truncateText(r.Reason, MaxReasonLen))
	return append(b, '}')
}

// SubscriptionClosed is the subscription.closed notice.
type SubscriptionClosed struct {
	SubscriptionID   SubID    `json:"subscriptionId"`
	Topic            string   `json:"topic" wire:"Name"`
	TopicIncarnation TopicInc `json:"topicIncarnation"`
	Reason           string   `json:"reason" wire:"Text"`
}

func (s *SubscriptionClosed) decodeJSON(d *Decoder, ti uint32, ctx string) error {
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
		case "topic":
			s.Topic, err = f.name()
			f.mark(1)
		case "topicIncarnation":
			v, err = f.serial(FamTop)
			s.TopicIncarnation = TopicInc(v)
			f.mark(2)
		case "reason":
			s.Reason, err = f.text(MaxReasonLen)
			f.mark(3)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(15, "subscriptionId", "topic", "topicIncarnation", "reason")
}

func (s *SubscriptionClosed) AppendJSON(b []byte) []byte {
	b = append(b, `{"subscriptionId":`...)
	b = appendSerialStr(b, FamSub, uint64(s.SubscriptionID))
	b = append(b, `,"topic":`...)
	b = appendString(b, s.Topic)
	b = append(b, `,"topicIncarnation":`...)
	b = appendSerialStr(b, FamTop, uint64(s.TopicIncarnation))
	b = append(b, `,"reason":`...)
	b = appendString(b, truncateText(s.Reason, MaxReasonLen))
	return append(b, '}')
}

// ConnectionClosing is the connection.closing notice that precedes every
// router-initiated close.
type ConnectionClosing struct {
	Code    ErrorCode `json:"code" wire:"ErrorCode"`
	Message string    `json:"message" wire:"Text"`
}

func (c *ConnectionClosing) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	var be BusError
	for f.next() {
		if string(f.key) == "dispatch" {
			return f.unknown()
		}
		handled, e := decodeErrorMember(&f, &be)
		if !handled {
			e = f.unknown()
		}
		if e != nil {
			return e
		}
	}
	c.Code, c.Message = be.Code, be.Message
	return f.require(1<<10|1<<11, errorBitNames...)
}

func (c *ConnectionClosing) AppendJSON(b []byte) []byte {
	b = append(b, `{"code":"`...)
	b = append(b, c.Code.String()...)
	b = append(b, `","message":`...)
	b = appendString(b, truncateText(c.Message, MaxErrorMessageLen))
	return append(b, '}')
}
