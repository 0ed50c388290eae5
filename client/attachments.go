package client

import (
	"errors"
	"fmt"
	"sync/atomic"

	json "github.com/goccy/go-json"

	"github.com/flybus/flybus/wire"
)

// Attachment names an artifact an envelope carries.
type Attachment struct {
	Name     string
	Artifact *Artifact
}

// Attach pairs a name with an artifact for Publish, Call and Reply.
func Attach(name string, a *Artifact) Attachment { return Attachment{Name: name, Artifact: a} }

// wireAttachments takes a reference on every artifact's owner for the
// duration of an admission, so no source guard is dropped while the
// operation might still be admitted. The returned func gives them back.
func wireAttachments(atts []Attachment) ([]wire.Attachment, func(), error) {
	out := make([]wire.Attachment, 0, len(atts))
	var held []*guard
	undo := func() {
		for _, g := range held {
			g.drop()
		}
	}
	for _, a := range atts {
		if a.Artifact == nil {
			undo()
			return nil, nil, fmt.Errorf("flybus: attachment %q has no artifact", a.Name)
		}
		if err := a.Artifact.take(); err != nil {
			undo()
			return nil, nil, fmt.Errorf("flybus: attachment %q: %w", a.Name, err)
		}
		held = append(held, a.Artifact.g)
		ref := a.Artifact.ref
		if s := a.Artifact.seal; s != nil {
			// In flight, the expected reference (see sendAttached).
			if sealed, err, answered := s.get(); answered {
				if err != nil {
					undo()
					return nil, nil, fmt.Errorf("flybus: attachment %q: %w", a.Name, sealFailed(err))
				}
				ref = sealed
			}
		}
		out = append(out, wire.Attachment{Name: a.Name, Ref: ref, OwnerID: a.Artifact.g.owner})
	}
	return out, undo, nil
}

// sendAttached runs send with the attachments in wire form, their owners
// held for the admission; undo, passed to send for its orphan handler,
// gives them back. A refusal caused by an attachment's seal sent without
// waiting reports the seal's error. If such a seal put its artifact
// elsewhere than expected (a pooled store copies when a writer kept the
// slot open), the command is sent once more with the sealed references.
func sendAttached[T any](c *conn, atts []Attachment, send func(watts []wire.Attachment, undo func()) (T, error)) (T, error) {
	for retried := false; ; retried = true {
		watts, undo, err := wireAttachments(atts)
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := send(watts, undo)
		if isCtxErr(err) {
			return v, err // the orphan handler gives the owners back
		}
		undo() // admitted or refused: the router holds its own roots now
		if err == nil {
			if c != nil {
				c.prepareWanted() // the frame is out: its successor's allocation is off its way
			}
			return v, nil
		}
		retry, err := sealOutcome(atts, watts, err)
		if !retry || retried {
			return v, err
		}
	}
}

// sealOutcome explains a refusal of a command that attached artifacts of
// a NoWait seal: the router answers a seal before the command behind it, so
// by now every such seal is settled.
func sealOutcome(atts []Attachment, sent []wire.Attachment, err error) (retry bool, _ error) {
	var be *wire.BusError
	if !errors.As(err, &be) || be.Code == wire.ErrRouterLost {
		return false, err
	}
	for i, a := range atts {
		s := a.Artifact.seal
		if s == nil {
			continue
		}
		sealed, err, answered := s.get()
		if !answered {
			continue // not sent ahead of this command after all
		}
		if err != nil {
			return false, fmt.Errorf("flybus: attachment %q: %w", a.Name, sealFailed(err))
		}
		retry = retry || sealed != sent[i].Ref
	}
	if retry {
		return true, nil
	}
	return false, err
}

// attachSet is a delivery's attachments in envelope order (at most 32, so
// lookups scan).
type attachSet []wire.Attachment

func (s attachSet) ref(name string) (wire.ArtifactRef, bool) {
	for _, a := range s {
		if a.Name == name {
			return a.Ref, true
		}
	}
	return wire.ArtifactRef{}, false
}

func (s attachSet) names() []string {
	out := make([]string, len(s))
	for i, a := range s {
		out[i] = a.Name
	}
	return out
}

// deliveryArtifacts checks a delivery's attachments (each must be owned by
// the delivery itself) and keeps a copy.
func deliveryArtifacts(d wire.DeliveryID, atts []wire.Attachment) (attachSet, error) {
	if len(atts) == 0 {
		return nil, nil
	}
	for _, a := range atts {
		if a.OwnerID != wire.DeliveryOwner(d) {
			return nil, fmt.Errorf("delivery %s carries an attachment owned by %s", d, a.OwnerID)
		}
	}
	return append(attachSet(nil), atts...), nil
}

// artifactFrom extracts a named artifact sharing a delivery's guard, for
// the handle d (what names it in errors), refused once d is closed.
func (c *conn) artifactFrom(d *delivered, refs attachSet, name string) (*Artifact, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	if err := c.stale(); err != nil {
		return nil, err
	}
	ref, ok := refs.ref(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q (it carries %q)", ErrNoAttachment, name, refs.names())
	}
	if !d.g.add() {
		return nil, closedHandle(d.what)
	}
	return c.newArtifact(ref, d.g), nil
}

// delivery is what a Message, a Request and a Result hold besides their
// fields: one share of a delivery and the artifacts it carries.
type delivery struct {
	c    *conn
	d    delivered
	arts attachSet
}

// Artifact extracts a named attachment. It shares the delivery it came
// with: the delivery (and with it the subscription's or the service's
// credit) is consumed only when the message, request or result and every
// artifact and view taken from it are closed. Take what you need before
// closing the handle.
func (x *delivery) Artifact(name string) (*Artifact, error) {
	return x.c.artifactFrom(&x.d, x.arts, name)
}

// Attachments lists the names of the artifacts the delivery carries, in
// the order the sender attached them.
func (x *delivery) Attachments() []string { return x.arts.names() }

// Close releases this handle's share of its delivery; it is consumed once
// every artifact taken from it is closed too. Idempotent.
func (x *delivery) Close() error {
	x.d.close()
	return nil
}

// delivered is the share of a delivery held by the message, request or
// result it arrived as: closed once, released by the safety net if the
// program forgets.
type delivered struct {
	what    string // "message", "request", "result"
	g       *guard
	closed  atomic.Bool
	cleanup handleWatch
}

// live reports an error once the handle is closed.
func (d *delivered) live() error {
	if d.closed.Load() {
		return closedHandle(d.what)
	}
	return nil
}

// decode unmarshals the handle's JSON (payload or outcome) into v while
// the handle is open.
func (d *delivered) decode(raw wire.RawJSON, v any) error {
	if err := d.live(); err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// close drops the share once; false if it was already closed.
func (d *delivered) close() bool {
	if d.closed.Swap(true) {
		return false
	}
	d.cleanup.Stop()
	d.g.drop()
	return true
}
