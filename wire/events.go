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

// ReplyCapability is the capability r gives the service it is delivered
// to, which its Reply or ResponderRelease quotes.
func (r *Request) ReplyCapability() ReplyCapability {
	return ReplyCapability{CallID: r.CallID, RequestDeliveryID: r.DeliveryID}
}

// Result is the rpc.result delivery.
type Result struct {
	DeliveryID         DeliveryID `json:"deliveryId"`
	CallID             CallID     `json:"callId"`
	Responder          Identity   `json:"responder"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
	Outcome            RawJSON    `json:"outcome"`
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

// CallFailed is the call.failed notice: the terminal failure of a call.
type CallFailed struct {
	CallID   CallID    `json:"callId"`
	Code     ErrorCode `json:"code" wire:"ErrorCode"`
	Message  string    `json:"message" wire:"Text" codec:"max=MaxErrorMessageLen"`
	Dispatch Dispatch  `json:"dispatch" wire:"Dispatch"`
}

// Err returns the failure as a *BusError.
func (c *CallFailed) Err() *BusError {
	return &BusError{Code: c.Code, Message: c.Message, Dispatch: c.Dispatch}
}

// MaxReasonLen bounds a notice's reason.
const MaxReasonLen = 128

// RouteRemoved is the route.removed notice.
type RouteRemoved struct {
	Name               string     `json:"name" wire:"Name"`
	ServiceIncarnation ServiceInc `json:"serviceIncarnation"`
	Reason             string     `json:"reason" wire:"Text" codec:"max=MaxReasonLen"`
}

// SubscriptionClosed is the subscription.closed notice. TopicIncarnation
// is null for a subscription that was awaiting its topic.
type SubscriptionClosed struct {
	SubscriptionID   SubID         `json:"subscriptionId"`
	Topic            string        `json:"topic" wire:"Name"`
	TopicIncarnation Opt[TopicInc] `json:"topicIncarnation"`
	Reason           string        `json:"reason" wire:"Text" codec:"max=MaxReasonLen"`
}

// SubscriptionTopic is the subscription.topic notice (extension
// await-topic): an awaiting subscription's topic was declared (the new
// incarnation) or deleted (null, and the subscription awaits the next
// declaration).
type SubscriptionTopic struct {
	SubscriptionID   SubID         `json:"subscriptionId"`
	Topic            string        `json:"topic" wire:"Name"`
	TopicIncarnation Opt[TopicInc] `json:"topicIncarnation"`
}

// MaxPublishers bounds subscription.publishers' count: at most one per
// connection, and maxClients fits an int32.
const MaxPublishers = 1<<31 - 1

// SubscriptionPublishers is the subscription.publishers notice (extension
// presence): how many open connections have published on the
// subscription's topic, its current incarnation, at least once.
type SubscriptionPublishers struct {
	SubscriptionID SubID  `json:"subscriptionId"`
	Topic          string `json:"topic" wire:"Name"`
	Publishers     uint32 `json:"publishers" wire:"int 0..2147483647"`
}

// ConnectionClosing is the connection.closing notice that precedes every
// router-initiated close.
type ConnectionClosing struct {
	Code    ErrorCode `json:"code" wire:"ErrorCode"`
	Message string    `json:"message" wire:"Text" codec:"max=MaxErrorMessageLen"`
}
