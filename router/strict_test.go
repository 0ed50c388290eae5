package router_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// raw speaks the wire protocol by hand, to send what the SDK never would.
type raw struct {
	t   *testing.T
	nc  net.Conn
	fr  *wire.FrameReader
	dec wire.Decoder
	env wire.Envelope
	id  uint64
}

func newRaw(t *testing.T, nc net.Conn) *raw {
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &raw{t: t, nc: nc, fr: wire.NewFrameReader(nc)}
}

func (r *raw) sendBytes(b []byte) {
	r.t.Helper()
	if err := wire.WriteFull(r.nc, b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *raw) command(op wire.Op, body wire.Body) uint64 {
	r.t.Helper()
	return r.commandWith(op, body, nil)
}

// commandWith sends a command carrying attachments and returns its serial.
func (r *raw) commandWith(op wire.Op, body wire.Body, atts []wire.Attachment) uint64 {
	r.t.Helper()
	r.id++
	b, err := wire.AppendFrame(nil, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: op}, body, atts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sendBytes(b)
	return r.id
}

func (r *raw) hello(id string) {
	r.t.Helper()
	r.command(wire.OpHello, &wire.Hello{ClientID: id, ClientIncarnation: "inc-" + id, SupportedMajors: []uint32{1}})
	if be := r.reply(&wire.HelloOK{}); be != nil {
		r.t.Fatalf("hello refused: %v", be)
	}
}

// next reads one frame and decodes its envelope.
func (r *raw) next() error {
	f, err := r.fr.ReadFrame()
	if err != nil {
		return err
	}
	return r.dec.Decode(f, &r.env)
}

// reply reads the next frame, which must be a reply, into v. A reply to an
// unknown op carries op "unknown", which the decoder flags at body level.
func (r *raw) reply(v wire.Body) *wire.BusError {
	r.t.Helper()
	if err := r.next(); err != nil {
		var be *wire.BusError
		if !errors.As(err, &be) || r.env.Kind != wire.KindReply {
			r.t.Fatal(err)
		}
		var any wire.Released
		be, err = r.env.DecodeReply(&any)
		if err != nil || be == nil {
			r.t.Fatalf("reply to an unknown op: %v %v", be, err)
		}
		return be
	}
	if r.env.Kind != wire.KindReply {
		r.t.Fatalf("want a reply, got %s %s", r.env.Kind, r.env.Op)
	}
	be, err := r.env.DecodeReply(v)
	if err != nil {
		r.t.Fatal(err)
	}
	return be
}

// expectClosed reads until connection.closing and then end of stream.
func (r *raw) expectClosed(want wire.ErrorCode) {
	r.t.Helper()
	for {
		if err := r.next(); err != nil {
			r.t.Fatalf("stream ended (%v) before connection.closing", err)
		}
		if r.env.Op == wire.OpConnectionClosing {
			var cc wire.ConnectionClosing
			if err := r.env.DecodeBody(&cc); err != nil {
				r.t.Fatal(err)
			}
			if cc.Code != want {
				r.t.Fatalf("closing code %s (%s), want %s", cc.Code, cc.Message, want)
			}
			break
		}
	}
	if err := r.next(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) {
		r.t.Fatalf("want end of stream after connection.closing, got %v", err)
	}
}

func frameOf(json string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(json)))
	return append(b, json...)
}

const helloJSON = `{"protocol":"flybus","major":1,"minor":0,"id":"msg-1","replyTo":null,"kind":"command","op":"bus.hello","body":{"clientId":"raw","clientIncarnation":"inc-raw","supportedMajors":[1]},"attachments":[]}`

func TestMalformedFramesCloseTheConnection(t *testing.T) {
	cases := map[string][]byte{
		"ZeroLength":         {0, 0, 0, 0},
		"OversizeLength":     binary.LittleEndian.AppendUint32(nil, wire.MaxEnvelopeBytes+1),
		"BadJSON":            frameOf(`{"protocol":`),
		"DuplicateKey":       frameOf(strings.Replace(helloJSON, `"major":1,`, `"major":1,"major":1,`, 1)),
		"UnknownField":       frameOf(strings.Replace(helloJSON, `"minor":0,`, `"minor":0,"extra":1,`, 1)),
		"InvalidUTF8":        frameOf(strings.Replace(helloJSON, `"inc-raw"`, "\"inc-\xff\"", 1)),
		"WrongKind":          frameOf(strings.Replace(helloJSON, `"kind":"command"`, `"kind":"reply"`, 1)),
		"NonNullReplyTo":     frameOf(strings.Replace(helloJSON, `"replyTo":null`, `"replyTo":"msg-1"`, 1)),
		"NonCanonicalID":     frameOf(strings.Replace(helloJSON, `"msg-1"`, `"msg-01"`, 1)),
		"CommandBeforeHello": frameOf(strings.Replace(strings.Replace(helloJSON, `bus.hello`, `topic.clear`, 1), `{"clientId":"raw","clientIncarnation":"inc-raw","supportedMajors":[1]}`, `{"name":"x"}`, 1)),
	}
	for name, frame := range cases {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, open(), func(t *testing.T, h *harness) {
				r := newRaw(t, h.conn(""))
				r.sendBytes(frame)
				r.expectClosed(wire.ErrInvalidEnvelope)
				settle(t, h, "the connection to go", func(s router.Stats) bool { return s.Connections == 0 })
			})
		})
	}
}

func TestViolationsAfterHelloClose(t *testing.T) {
	cases := map[string]func(r *raw){
		"SecondHello": func(r *raw) {
			r.command(wire.OpHello, &wire.Hello{ClientID: "raw", ClientIncarnation: "inc-2", SupportedMajors: []uint32{1}})
		},
		"RepeatedCommandID": func(r *raw) {
			r.id-- // reuse the hello's id
			r.command(wire.OpTopicClear, &wire.TopicName{Name: "x"})
		},
		"WrongMinor": func(r *raw) {
			// 1.0 to 1.2 are accepted after hello; a later minor is not.
			r.sendBytes(frameOf(`{"protocol":"flybus","major":1,"minor":3,"id":"msg-9","replyTo":null,"kind":"command","op":"topic.clear","body":{"name":"x"},"attachments":[]}`))
		},
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, open(), func(t *testing.T, h *harness) {
				r := newRaw(t, h.conn(""))
				r.hello("raw")
				fn(r)
				r.expectClosed(wire.ErrInvalidEnvelope)
			})
		})
	}
}

func TestBodyErrorsKeepTheConnection(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("raw")
		bodies := []string{
			`"op":"no.such.op","body":{}`,
			`"op":"service.register","body":{"name":"a","maxQueued":0,"maxInFlight":1}`,
			`"op":"service.register","body":{"name":"a","maxQueued":1,"maxInFlight":1,"extra":true}`,
			`"op":"rpc.call","body":{"callId":"call-x","target":"a","expectedIncarnation":null,"method":"M","payload":{}}`,
		}
		for i, b := range bodies {
			r.id++
			r.sendBytes(frameOf(`{"protocol":"flybus","major":1,"minor":0,"id":"msg-` + wire.FormatU64(r.id) + `","replyTo":null,"kind":"command",` + b + `,"attachments":[]}`))
			if be := r.reply(&wire.RegisterOK{}); be == nil || be.Code != wire.ErrInvalidEnvelope {
				t.Fatalf("body %d: want INVALID_ENVELOPE, got %v", i, be)
			}
		}
		// Still up: a valid command works.
		rawOK(t, r, wire.OpServiceRegister, &wire.Register{Name: "a", MaxQueued: 1, MaxInFlight: 1}, &wire.RegisterOK{})
	})
}

func TestVersionMismatchRefusesHello(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.command(wire.OpHello, &wire.Hello{ClientID: "raw", ClientIncarnation: "inc-raw", SupportedMajors: []uint32{2, 3}})
		if be := r.reply(&wire.HelloOK{}); be == nil || be.Code != wire.ErrVersionMismatch {
			t.Fatalf("want VERSION_MISMATCH, got %v", be)
		}
		r.expectClosed(wire.ErrVersionMismatch)
	})
}

// A frame written one byte at a time still decodes.
func TestFrameWrittenOneByteAtATime(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		for _, b := range frameOf(helloJSON) {
			r.sendBytes([]byte{b})
		}
		if be := r.reply(&wire.HelloOK{}); be != nil {
			t.Fatal(be)
		}
	})
}

func TestHelloTimeoutClosesPendingConnection(t *testing.T) {
	cfg := open()
	cfg.HelloTimeout = 50 * time.Millisecond
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.expectClosed(wire.ErrInvalidEnvelope)
	})
}

func TestMaxClientsCountsPendingConnections(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxClients = 2
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		newRaw(t, h.conn(""))
		newRaw(t, h.conn(""))
		settle(t, h, "two pending connections", func(s router.Stats) bool { return s.PendingHello == 2 })
		if !h.unix {
			if _, err := h.r.ConnectInMemory(); code(t, err) != wire.ErrQuotaExceeded {
				t.Fatalf("third in-memory connection: %v", err)
			}
			return
		}
		// The third socket is refused, and told why before it is closed.
		newRaw(t, h.conn("")).expectClosed(wire.ErrQuotaExceeded)
	})
}

// A client that never reads exhausts its control lane and is closed; the
// router keeps serving everyone else.
func TestControlLaneExhaustionCloses(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxControlFrames = 4
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("raw")
		// Fill the socket and the lane with replies the client never reads.
		// The commands are written from another goroutine: once the router
		// stops reading us, a blocking write must not hang the test.
		go func() {
			for i := 0; i < 100000; i++ {
				r.id++
				b, _ := wire.AppendFrame(nil, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpRPCCancel},
					&wire.Cancel{CallID: wire.CallID(i + 1)}, nil)
				if wire.WriteFull(r.nc, b) != nil {
					return
				}
			}
		}()
		settle(t, h, "the control overflow", func(s router.Stats) bool { return s.ControlOverflows == 1 })
		other := h.dial("other")
		if other.Err() != nil {
			t.Fatal(other.Err())
		}
	})
}

// Row 5.42: the reply to an op the router does not know carries op
// "unknown" on the wire, and the connection stays up.
func TestUnknownOpReplySpelling(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("raw")
		r.id++
		id := "msg-" + wire.FormatU64(r.id)
		r.sendBytes(frameOf(`{"protocol":"flybus","major":1,"minor":0,"id":"` + id + `","replyTo":null,"kind":"command","op":"no.such.op","body":{},"attachments":[]}`))
		f, err := r.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		text := string(f)
		for _, want := range []string{`"op":"unknown"`, `"kind":"reply"`, `"replyTo":"` + id + `"`, `"INVALID_ENVELOPE"`} {
			if !strings.Contains(text, want) {
				t.Fatalf("reply %s lacks %s", text, want)
			}
		}
		if strings.Contains(text, `"op":"no.such.op"`) {
			t.Fatalf("reply echoes the unknown op: %s", text)
		}
		// Still up: a valid command works.
		rawOK(t, r, wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone}, &wire.DeclareOK{})
	})
}

// A command that names an op the router only sends (a delivery op) is
// refused INVALID_ENVELOPE with a well-formed refusal, never answered with
// an empty delivery body.
func TestDeliveryOpAsCommandIsRefused(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("raw")
		for _, op := range []wire.Op{wire.OpRPCRequest, wire.OpRPCResult, wire.OpTopicMessage} {
			r.id++
			id := "msg-" + wire.FormatU64(r.id)
			r.sendBytes(frameOf(`{"protocol":"flybus","major":1,"minor":0,"id":"` + id + `","replyTo":null,"kind":"command","op":"` +
				op.String() + `","body":{},"attachments":[]}`))
			f, err := r.fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			text := string(f)
			for _, want := range []string{`"kind":"reply"`, `"replyTo":"` + id + `"`, `"ok":false`, `"INVALID_ENVELOPE"`} {
				if !strings.Contains(text, want) {
					t.Fatalf("%s as a command: the reply %s lacks %s", op, text, want)
				}
			}
			if strings.Contains(text, "deliveryId") {
				t.Fatalf("%s as a command: the reply carries a delivery body: %s", op, text)
			}
		}
		rawOK(t, r, wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone}, &wire.DeclareOK{})
	})
}
