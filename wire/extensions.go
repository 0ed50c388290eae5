package wire

// Extensions are the optional parts of the protocol (flybus 1.1 on). A
// client lists the ones it wants in bus.hello's extensions; the router
// grants those it knows, in the client's order, and sends an extension's
// notices only on connections that were granted it. A body member that
// belongs to an extension the connection was not granted is refused like
// any unknown member (INVALID_ENVELOPE).
const (
	// ExtAwaitTopic lets subscribe wait for a topic that is not declared
	// yet (awaitTopic:true), and tells such subscriptions when their
	// topic is declared or deleted (subscription.topic).
	ExtAwaitTopic = "await-topic"
	// ExtPresence tells each subscription how many live publishers its
	// topic has (subscription.publishers).
	ExtPresence = "presence"
	// ExtQuietConsume (1.2) answers an accepted delivery.consumed with
	// nothing: the reply, which a client that consumes as it goes never
	// waits for, is a write the router saves per delivery. A refused one
	// is answered as before.
	ExtQuietConsume = "quiet-consume"
)

// Extension says what one extension adds to the contract.
type Extension struct {
	Name    string
	Members []string // body members it adds, as "op.member"
	Notices []Op     // notices it adds
	Minor   uint32   // the minor version that added it: a connection in an older one is not granted it
}

// Extensions lists every extension this package knows, in contract order.
func Extensions() []Extension {
	return []Extension{
		{Name: ExtAwaitTopic, Members: []string{"subscribe.awaitTopic"}, Notices: []Op{OpSubscriptionTopic}, Minor: 1},
		{Name: ExtPresence, Notices: []Op{OpSubscriptionPublishers}, Minor: 1},
		{Name: ExtQuietConsume, Minor: 2},
	}
}

// LookupExtension returns the extension called name, if this contract has
// one.
func LookupExtension(name string) (Extension, bool) {
	for _, e := range Extensions() {
		if e.Name == name {
			return e, true
		}
	}
	return Extension{}, false
}

// KnownExtension reports whether name is an extension of this contract.
func KnownExtension(name string) bool {
	_, ok := LookupExtension(name)
	return ok
}
