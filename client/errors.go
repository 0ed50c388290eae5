package client

import (
	"errors"
	"strings"

	"github.com/flybus/flybus/wire"
)

// Why an operation could not run, matched with errors.Is. Three causes are
// kept apart because a program reacts to each differently: its own handle
// was closed (a bug in the program), its own Client was closed (shutting
// down), or the router went away (wire.ErrRouterLost: reconnect).
var (
	// ErrHandleClosed is returned by a handle used after its own Close,
	// whatever other handles sharing its delivery or hold still do.
	ErrHandleClosed = errors.New("flybus: handle already closed")
	// ErrClosed is returned once the program closed the Client.
	ErrClosed = errors.New("flybus: the client was closed")
	// ErrSubscriptionClosed is returned by Subscription.Next once the
	// subscription has ended: the router closed it (the error's text gives
	// its reason), it
	// was closed, or its client ended (the error then also matches ErrClosed
	// or wire.ErrRouterLost).
	ErrSubscriptionClosed = errors.New("flybus: subscription closed")
	// ErrStaleHandle is returned by a handle made on a connection that a
	// Dial client has since lost (its messages, requests, results,
	// artifacts, writers and calls belong to that connection; its
	// subscriptions and services move on). It also matches ROUTER_LOST,
	// not dispatched.
	ErrStaleHandle = errors.New("flybus: the handle belongs to a lost connection")
	// ErrWriterDone is returned by an ArtifactWriter after Seal or Close.
	ErrWriterDone = errors.New("flybus: artifact writer already sealed or closed")
	// ErrNoAttachment is returned for a name the delivery does not carry.
	ErrNoAttachment = errors.New("flybus: no attachment by that name")
	// ErrDigestMismatch is returned by ArtifactView.Verify (and, with
	// Config.VerifyReads, by View and ReadAll) when the bytes no longer
	// hash to the digest the artifact was sealed with: they were changed
	// after the seal.
	ErrDigestMismatch = errors.New("flybus: the artifact's bytes differ from its sealed digest")
	// ErrNoDigest is returned where ErrDigestMismatch could be, for an
	// artifact sealed without a digest (no Digest option at Seal).
	ErrNoDigest = errors.New("flybus: the artifact was sealed without a digest")
)

// handleError is a sentence for people that still matches the sentinels
// a program tests for, and unwraps to its cause (a client's end).
type handleError struct {
	msg   string
	kinds []error
	cause error
}

func (e *handleError) Error() string { return e.msg }

func (e *handleError) Is(target error) bool {
	for _, k := range e.kinds {
		if target == k {
			return true
		}
	}
	return false
}

func (e *handleError) Unwrap() error { return e.cause }

// closedHandle is the error of a handle used after its own Close; what
// names it ("message", "artifact"). also lists further sentinels it matches.
func closedHandle(what string, also ...error) error {
	return &handleError{msg: "flybus: this " + what + " was already closed", kinds: append([]error{ErrHandleClosed}, also...)}
}

// lostError is what operations return once the connection has ended for
// err: ErrClosed after the program's own Close, otherwise ROUTER_LOST with
// the dispatch unknown (the command may have been applied).
func lostError(err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	var be *wire.BusError
	if errors.As(err, &be) && be.Code == wire.ErrRouterLost {
		return be
	}
	return &wire.BusError{Code: wire.ErrRouterLost, Dispatch: wire.DispatchUnknown,
		Message: "the connection to the router was lost: " + err.Error()}
}

// notSent is lostError for a command the connection had already lost
// before it was written: it cannot have reached its target, and says so.
func notSent(err error) error {
	e := lostError(err)
	var be *wire.BusError
	if !errors.As(e, &be) {
		return e
	}
	msg := be.Message
	if !strings.HasSuffix(msg, "; not sent") {
		msg += "; not sent"
	}
	return &wire.BusError{Code: be.Code, Dispatch: wire.NotDispatched, Message: msg}
}

// staleHandle is err for a command made through a handle of a connection
// its Client has replaced, or is replacing.
func staleHandle(err error) error {
	return &handleError{msg: "flybus: this handle belongs to a connection that was lost (the client reconnects on its own); not sent",
		kinds: []error{ErrStaleHandle}, cause: err}
}
