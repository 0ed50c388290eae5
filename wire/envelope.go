package wire

import (
	"fmt"
	"strconv"
)

// Protocol constants of flybus v1.
const (
	ProtocolName     = "flybus"
	Major            = 1
	Minor            = 2
	MaxEnvelopeBytes = 65536
	MaxAttachments   = 32
	MaxBatch         = 64
	MaxCredit        = 65535
	// MaxSupportedMajors bounds bus.hello's supportedMajors list.
	MaxSupportedMajors = 16
	// MaxExtensions bounds the extensions a hello asks for and its reply
	// grants.
	MaxExtensions = 16
)

// EnvKind is an envelope's kind.
type EnvKind uint8

const (
	KindCommand EnvKind = iota + 1
	KindReply
	KindDelivery
	KindNotice
)

var envKindNames = [...]string{KindCommand: "command", KindReply: "reply", KindDelivery: "delivery", KindNotice: "notice"}

func (k EnvKind) String() string {
	if k != 0 && int(k) < len(envKindNames) {
		return envKindNames[k]
	}
	return fmt.Sprintf("EnvKind(%d)", uint8(k))
}

// Op is an operation, delivery or notice name.
type Op uint8

const (
	OpUnknown Op = iota
	// Commands, and the replies that answer them.
	OpHello
	OpServiceRegister
	OpServiceUnregister
	OpRPCCall
	OpRPCReply
	OpRPCCancel
	OpRPCResponderRelease
	OpTopicDeclare
	OpTopicClear
	OpTopicDelete
	OpSubscribe
	OpUnsubscribe
	OpPublish
	OpDeliveryConsumed
	OpArtifactAllocate
	OpArtifactSeal
	OpArtifactOpen
	OpArtifactRetain
	OpArtifactRelease
	// Deliveries.
	OpRPCRequest
	OpRPCResult
	OpTopicMessage
	// Notices.
	OpCallFailed
	OpRouteRemoved
	OpSubscriptionClosed
	OpSubscriptionTopic      // extension await-topic
	OpSubscriptionPublishers // extension presence
	OpConnectionClosing
	numOps
)

var opNames = [numOps]string{
	OpHello: "bus.hello", OpServiceRegister: "service.register", OpServiceUnregister: "service.unregister",
	OpRPCCall: "rpc.call", OpRPCReply: "rpc.reply", OpRPCCancel: "rpc.cancel",
	OpRPCResponderRelease: "rpc.responder.release", OpTopicDeclare: "topic.declare",
	OpTopicClear: "topic.clear", OpTopicDelete: "topic.delete", OpSubscribe: "subscribe",
	OpUnsubscribe: "unsubscribe", OpPublish: "publish", OpDeliveryConsumed: "delivery.consumed",
	OpArtifactAllocate: "artifact.allocate", OpArtifactSeal: "artifact.seal",
	OpArtifactOpen: "artifact.open", OpArtifactRetain: "artifact.retain",
	OpArtifactRelease: "artifact.release", OpRPCRequest: "rpc.request", OpRPCResult: "rpc.result",
	OpTopicMessage: "topic.message", OpCallFailed: "call.failed", OpRouteRemoved: "route.removed",
	OpSubscriptionClosed: "subscription.closed", OpSubscriptionTopic: "subscription.topic",
	OpSubscriptionPublishers: "subscription.publishers", OpConnectionClosing: "connection.closing",
}

func (o Op) String() string {
	if o > OpUnknown && o < numOps {
		return opNames[o]
	}
	return "unknown"
}

// IsCommand reports whether clients may send o as a command.
func (o Op) IsCommand() bool { return o >= OpHello && o <= OpArtifactRelease }

// IsDelivery and IsNotice classify router-initiated ops.
func (o Op) IsDelivery() bool { return o >= OpRPCRequest && o <= OpTopicMessage }
func (o Op) IsNotice() bool   { return o >= OpCallFailed && o <= OpConnectionClosing }

// CarriesAttachments reports whether envelopes of op o may have attachments.
func (o Op) CarriesAttachments() bool {
	switch o {
	case OpRPCCall, OpRPCReply, OpPublish, OpRPCRequest, OpRPCResult, OpTopicMessage:
		return true
	}
	return false
}

func lookupOp(b []byte) Op {
	for o := OpHello; o < numOps; o++ {
		if opNames[o] == string(b) {
			return o
		}
	}
	return OpUnknown
}

// ArtifactRef identifies an immutable artifact; it is an identity, never an
// address or an authority to read.
type ArtifactRef struct {
	StoreID     StoreID     `json:"storeId"`
	ArtifactID  ArtifactID  `json:"artifactId"`
	Generation  uint64      `json:"generation" wire:"U64"`
	ByteLength  uint64      `json:"byteLength" wire:"U64"`
	ContentType string      `json:"contentType" wire:"ContentType"`
	Digest      Opt[Digest] `json:"digest"`
}

// Attachment names one artifact an envelope carries and the sender's owner
// root for it. In deliveries the owner is the recipient's delivery id.
type Attachment struct {
	Name    string      `json:"name" wire:"Id"`
	Ref     ArtifactRef `json:"ref"`
	OwnerID OwnerID     `json:"ownerId"`
}

// Envelope is the decoded header of one frame plus its attachments; the
// body stays on the decoder's tape until DecodeBody or DecodeReply reads it.
type Envelope struct {
	Major, Minor uint32
	// ID is the serial of the envelope id: msg-<ID> on commands, bus-<ID>
	// on everything the router sends.
	ID      uint64
	ReplyTo Opt[MsgID]
	Kind    EnvKind
	Op      Op
	// Attachments reuses its capacity across decodes; entries hold no
	// references into the frame.
	Attachments []Attachment

	body uint32
	dec  *Decoder
	err  *BusError // deferred body-level error found in the attachments
}

// Header is what an encoder needs besides the body and attachments.
type Header struct {
	ID      uint64
	ReplyTo Opt[MsgID]
	Kind    EnvKind
	Op      Op
	// Minor is the version written in the envelope: a router writes the
	// minor each connection selected. Unset: this package's Minor.
	Minor Opt[uint32]
}

// Header returns the envelope's header.
func (e *Envelope) Header() Header {
	return Header{ID: e.ID, ReplyTo: e.ReplyTo, Kind: e.Kind, Op: e.Op}
}

// envFieldNames are the envelope's members in order, all required.
var envFieldNames = []string{"protocol", "major", "minor", "id", "replyTo", "kind", "op", "body", "attachments"}

// Trim lets go of a tape grown past what a decoder keeps between frames
// (see Scanner.Trim). The last envelope's body can no longer be decoded.
func (d *Decoder) Trim() { d.sc.Trim() }

// Decode parses one frame payload (the JSON after the length prefix) into
// env. It returns a *ProtocolError for frame- and envelope-level violations,
// after which the connection must close, and a *BusError (INVALID_ENVELOPE)
// for body-level problems found in the attachments or the op name, in which
// case env's header is valid and a reply can be sent.
//
// Decode checks shape only. Whether the kind, direction, version and id
// order suit the connection is the caller's decision.
//
// Unlike the bodies' codecs it is written by hand: the id's family and
// replyTo's form depend on kind, so those two are read in a second pass,
// and its refusals are protocol errors.
func (d *Decoder) Decode(frame []byte, env *Envelope) error {
	env.Attachments = env.Attachments[:0]
	env.dec, env.err, env.Op = d, nil, OpUnknown
	if len(frame) == 0 || len(frame) > MaxEnvelopeBytes {
		return protoErr("frame length out of range")
	}
	if err := d.sc.Scan(frame); err != nil {
		return protoErr(err.Error())
	}
	if d.kind(0) != KindObject {
		return protoErr("envelope is not an object")
	}
	f, _ := d.object(0, "envelope")
	var opTok, attTok uint32
	for f.next() {
		var err *BusError
		switch string(f.key) {
		case "protocol":
			var b []byte
			if b, err = f.strTok(); err == nil && string(b) != ProtocolName {
				err = f.fail(`want "flybus"`)
			}
		case "major":
			env.Major, err = f.u32(0, 65535)
		case "minor":
			env.Minor, err = f.u32(0, 65535)
		case "id", "replyTo": // their families depend on kind: read in the second pass
		case "kind":
			var b []byte
			if b, err = f.strTok(); err == nil {
				switch string(b) {
				case "command":
					env.Kind = KindCommand
				case "reply":
					env.Kind = KindReply
				case "delivery":
					env.Kind = KindDelivery
				case "notice":
					env.Kind = KindNotice
				default:
					err = f.fail("unknown kind")
				}
			}
		case "op":
			if d.kind(f.val) != KindString {
				err = f.fail("want a string")
			}
			opTok = f.val
		case "body":
			if d.kind(f.val) != KindObject {
				err = f.fail("want an object")
			}
			env.body = f.val
		case "attachments":
			if d.kind(f.val) != KindArray {
				err = f.fail("want an array")
			}
			attTok = f.val
		default:
			err = f.unknown()
		}
		if err != nil {
			return protoErr(err.Error())
		}
	}
	if err := f.require(envFieldNames...); err != nil {
		return protoErr(err.Error())
	}
	// Second pass over the two fields whose meaning depends on kind.
	f, _ = d.object(0, "envelope")
	for f.next() {
		var err *BusError
		switch string(f.key) {
		case "id":
			fam := FamBus
			if env.Kind == KindCommand {
				fam = FamMsg
			}
			env.ID, err = f.serial(fam)
		case "replyTo":
			if env.Kind == KindReply {
				var n uint64
				n, err = f.serial(FamMsg)
				env.ReplyTo = Some(MsgID(n))
			} else if d.kind(f.val) != KindNull {
				err = f.fail("must be null unless kind is reply")
			} else {
				env.ReplyTo = Opt[MsgID]{}
			}
		default:
			continue
		}
		if err != nil {
			return protoErr(err.Error())
		}
	}
	env.Op = lookupOp(d.strBytes(opTok))
	if env.Op == OpUnknown {
		env.err = bodyErr("envelope", "op", "unknown operation")
	} else {
		env.err = d.decodeAttachments(attTok, env)
	}
	if env.err != nil {
		return env.err
	}
	return nil
}

func (d *Decoder) decodeAttachments(ti uint32, env *Envelope) *BusError {
	t := &d.sc.toks[ti]
	if t.count == 0 {
		return nil
	}
	if !env.Op.CarriesAttachments() {
		return bodyErr(env.Op.String(), "attachments", "not allowed on this operation")
	}
	if t.count > MaxAttachments {
		return bodyErr(env.Op.String(), "attachments", "more than 32")
	}
	for i := ti + 1; i < t.next; i = d.nextElem(i) {
		var a Attachment
		if err := a.decodeJSON(d, i, "attachment"); err != nil {
			return err
		}
		for _, prev := range env.Attachments {
			if prev.Name == a.Name {
				return bodyErr("attachments", "name", "duplicate attachment name "+a.Name)
			}
		}
		env.Attachments = append(env.Attachments, a)
	}
	return nil
}

// DecodeBody decodes the body of the envelope last returned by this
// decoder's Decode into b. Body-level problems come back as a *BusError
// (INVALID_ENVELOPE) ready to refuse the command with. Callers that pass
// the result on as an error must test it for nil first: a nil *BusError
// in an error interface is not a nil error.
func (e *Envelope) DecodeBody(b Body) *BusError {
	return b.decodeJSON(e.dec, e.body, e.Op.String())
}

// RawBody returns the body object's bytes (valid until the next Decode).
func (e *Envelope) RawBody() RawJSON { return RawJSON(e.dec.raw(e.body)) }

// Body is any command, reply value, delivery or notice body.
type Body interface {
	// AppendJSON appends the body as a JSON object.
	AppendJSON(b []byte) []byte
	decodeJSON(d *Decoder, ti uint32, ctx string) *BusError
}

// envelopeHead opens every envelope this package writes: version Major.Minor.
var envelopeHead = `{"protocol":"flybus","major":` + strconv.Itoa(Major) + `,"minor":` + strconv.Itoa(Minor) + `,"id":`

// AppendEnvelope appends the JSON of one envelope (no length prefix).
func AppendEnvelope(b []byte, h Header, body Body, atts []Attachment) []byte {
	if h.Minor.Valid && h.Minor.V != Minor {
		b = append(b, `{"protocol":"flybus","major":`+strconv.Itoa(Major)+`,"minor":`...)
		b = strconv.AppendUint(b, uint64(h.Minor.V), 10)
		b = append(b, `,"id":`...)
	} else {
		b = append(b, envelopeHead...)
	}
	if h.Kind == KindCommand {
		b = appendSerialStr(b, FamMsg, h.ID)
	} else {
		b = appendSerialStr(b, FamBus, h.ID)
	}
	b = append(b, `,"replyTo":`...)
	if h.ReplyTo.Valid {
		b = appendSerialStr(b, FamMsg, uint64(h.ReplyTo.V))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"kind":"`...)
	b = append(b, h.Kind.String()...)
	b = append(b, `","op":"`...)
	b = append(b, h.Op.String()...)
	b = append(b, `","body":`...)
	if body == nil {
		b = append(b, "{}"...)
	} else {
		b = body.AppendJSON(b)
	}
	b = append(b, `,"attachments":[`...)
	for i := range atts {
		if i > 0 {
			b = append(b, ',')
		}
		b = atts[i].AppendJSON(b)
	}
	return append(b, "]}"...)
}
