package wire

import "crypto/sha256"

// Shape ties an operation, delivery or notice to its Go body type and, for
// commands, to its reply value type.
type Shape struct {
	Op    Op
	Kind  EnvKind // KindCommand, KindDelivery or KindNotice
	Body  Body
	Reply Body // commands only
}

// Shapes lists every shape of the contract in contract order. The Body and
// Reply values are fresh zero values, useful as decode targets.
func Shapes() []Shape {
	return []Shape{
		{OpHello, KindCommand, &Hello{}, &HelloOK{}},
		{OpServiceRegister, KindCommand, &Register{}, &RegisterOK{}},
		{OpServiceUnregister, KindCommand, &Unregister{}, &Removed{}},
		{OpRPCCall, KindCommand, &Call{}, &CallOK{}},
		{OpRPCReply, KindCommand, &Reply{}, &Routed{}},
		{OpRPCCancel, KindCommand, &Cancel{}, &CancelOK{}},
		{OpRPCResponderRelease, KindCommand, &ResponderRelease{}, &Released{}},
		{OpTopicDeclare, KindCommand, &Declare{}, &DeclareOK{}},
		{OpTopicClear, KindCommand, &TopicName{}, &Cleared{}},
		{OpTopicDelete, KindCommand, &TopicName{}, &Deleted{}},
		{OpSubscribe, KindCommand, &Subscribe{}, &SubscribeOK{}},
		{OpUnsubscribe, KindCommand, &Unsubscribe{}, &Removed{}},
		{OpPublish, KindCommand, &Publish{}, &PublishOK{}},
		{OpDeliveryConsumed, KindCommand, &Consumed{}, &Released{}},
		{OpArtifactAllocate, KindCommand, &Allocate{}, &AllocateOK{}},
		{OpArtifactSeal, KindCommand, &Seal{}, &SealOK{}},
		{OpArtifactOpen, KindCommand, &RefOwner{}, &OpenOK{}},
		{OpArtifactRetain, KindCommand, &RefOwner{}, &RetainOK{}},
		{OpArtifactRelease, KindCommand, &Release{}, &Released{}},
		{OpRPCRequest, KindDelivery, &Request{}, nil},
		{OpRPCResult, KindDelivery, &Result{}, nil},
		{OpTopicMessage, KindDelivery, &TopicMessage{}, nil},
		{OpCallFailed, KindNotice, &CallFailed{}, nil},
		{OpRouteRemoved, KindNotice, &RouteRemoved{}, nil},
		{OpSubscriptionClosed, KindNotice, &SubscriptionClosed{}, nil},
		{OpSubscriptionTopic, KindNotice, &SubscriptionTopic{}, nil},
		{OpSubscriptionPublishers, KindNotice, &SubscriptionPublishers{}, nil},
		{OpConnectionClosing, KindNotice, &ConnectionClosing{}, nil},
	}
}

// Contract is the text listing of every operation, delivery and notice
// shape of flybus 1.2, and of the extensions: which members and notices
// each adds. A member written key?:label is optional. Its SHA-256 is the
// contractDigest exchanged in bus.hello; a test renders the Go body types
// and fails when they and this text disagree, so a schema change cannot
// ship without a digest change.
const Contract = `flybus contract 1.2
envelope {protocol:"flybus", major:int, minor:int, id:MsgId|BusId, replyTo:MsgId|null, kind:command|reply|delivery|notice, op:Op, body:object, attachments:[Attachment 0..32]}
reply {ok:true, value:object} | {ok:false, error:{code:ErrorCode, message:Text, dispatch:Dispatch}}
ArtifactRef {storeId:StoreId, artifactId:ArtifactId, generation:U64, byteLength:U64, contentType:ContentType, digest:Digest|null}
Attachment {name:Id, ref:ArtifactRef, ownerId:OwnerId}
Location {storeId:StoreId, relativePath:RelPath}
Identity {clientId:Id, clientIncarnation:Id}
Limits {maxEnvelopeBytes:U64, maxAttachments:int, maxBatch:int, maxClients:int, maxServices:int, maxTopics:int, maxSubscriptionsPerClient:int, maxSubscriptions:int, maxActiveCallsPerClient:int, maxServiceQueued:int, maxServiceInFlight:int, maxLatestInFlight:int, maxBoundedQueued:int, maxBoundedInFlight:int, maxOwnersPerClient:int, reservedOwnersPerClient:int, maxControlFrames:int, maxStoreBytes:U64, maxArtifactBytes:U64, maxRetainedBytes:U64, maxQueuedBytesPerClient:U64, maxControlBytes:U64}
command bus.hello {clientId:Id, clientIncarnation:Id, supportedMajors:[int 1..65535], extensions?:[Id 0..16]} -> {routerId:RouterId, connectionId:ConnId, selectedMajor:int, selectedMinor:int, contractDigest:Digest, limits:Limits, extensions:[Id 0..16], storeId:StoreId}
command service.register {name:Name, maxQueued:int 1..65535, maxInFlight:int 1..65535} -> {serviceIncarnation:SvcId}
command service.unregister {name:Name, serviceIncarnation:SvcId} -> {removed:bool}
command rpc.call {callId:CallId, target:Name, expectedIncarnation:SvcId|null, method:Method, payload:object} -> {accepted:bool, serviceIncarnation:SvcId}
command rpc.reply {callId:CallId, requestDeliveryId:DeliveryId, outcome:object} -> {routed:bool}
command rpc.cancel {callId:CallId} -> {state:cancelled-before-dispatch|execution-unknown|completed|call-gone}
command rpc.responder.release {callId:CallId, requestDeliveryId:DeliveryId} -> {released:U64}
command topic.declare {name:Name, retained:none|latest} -> {declared:bool, topicIncarnation:TopicId}
command topic.clear {name:Name} -> {cleared:bool}
command topic.delete {name:Name} -> {deleted:bool}
command subscribe {topic:Name, mode:latest|bounded, maxQueued:int 1..65535, maxInFlight:int 1..65535, replayLatest:bool, awaitTopic?:bool} -> {subscriptionId:SubId, topicIncarnation:TopicId|null}
command unsubscribe {subscriptionId:SubId} -> {removed:bool}
command publish {topic:Name, payload:object} -> {topicSequence:U64, subscribers:U64, replaced:U64}
command delivery.consumed {deliveryIds:[DeliveryId 1..64]} -> {released:U64}
command artifact.allocate {byteLength:U64, contentType:ContentType} -> {artifactId:ArtifactId, generation:U64, ownerId:OwnerId, writeLocation:Location}
command artifact.seal {artifactId:ArtifactId, generation:U64, ownerId:OwnerId, digest:Digest|null} -> {ref:ArtifactRef, ownerId:OwnerId}
command artifact.open {ref:ArtifactRef, ownerId:OwnerId} -> {readLocation:Location}
command artifact.retain {ref:ArtifactRef, ownerId:OwnerId} -> {ownerId:OwnerId}
command artifact.release {ownerIds:[OwnerId 1..64]} -> {released:U64}
delivery rpc.request {deliveryId:DeliveryId, callId:CallId, caller:Identity, target:Name, serviceIncarnation:SvcId, method:Method, payload:object}
delivery rpc.result {deliveryId:DeliveryId, callId:CallId, responder:Identity, serviceIncarnation:SvcId, outcome:object}
delivery topic.message {deliveryId:DeliveryId, subscriptionId:SubId, topic:Name, topicIncarnation:TopicId, topicSequence:U64, replaced:U64, payload:object}
notice call.failed {callId:CallId, code:ErrorCode, message:Text, dispatch:Dispatch}
notice route.removed {name:Name, serviceIncarnation:SvcId, reason:Text}
notice subscription.closed {subscriptionId:SubId, topic:Name, topicIncarnation:TopicId|null, reason:Text}
notice subscription.topic {subscriptionId:SubId, topic:Name, topicIncarnation:TopicId|null}
notice subscription.publishers {subscriptionId:SubId, topic:Name, publishers:int 0..2147483647}
notice connection.closing {code:ErrorCode, message:Text}
extension await-topic subscribe.awaitTopic subscription.topic
extension presence subscription.publishers
extension quiet-consume
attachments rpc.call rpc.reply publish rpc.request rpc.result topic.message
errors INVALID_ENVELOPE VERSION_MISMATCH NOT_AUTHORIZED NO_SERVICE TARGET_CHANGED BACKPRESSURE CALL_GONE ARTIFACT_UNSEALED ARTIFACT_GONE OWNER_INVALID QUOTA_EXCEEDED STORE_FAILURE ROUTER_LOST CONFLICT NO_TOPIC ARTIFACT_MISMATCH
dispatch not-dispatched dispatched unknown
`

var contractDigest = Digest(sha256.Sum256([]byte(Contract)))

// ContractDigest is the SHA-256 of Contract, as 64 lowercase hex digits.
func ContractDigest() string { return contractDigest.String() }

// ContractDigestValue is the same digest as a Digest.
func ContractDigestValue() Digest { return contractDigest }

// contract11 is flybus 1.1's contract, as 1.1 clients were built against
// it: a router answers a client that speaks 1.1 in 1.1, with this digest.
const contract11 = `flybus contract 1.1
envelope {protocol:"flybus", major:int, minor:int, id:MsgId|BusId, replyTo:MsgId|null, kind:command|reply|delivery|notice, op:Op, body:object, attachments:[Attachment 0..32]}
reply {ok:true, value:object} | {ok:false, error:{code:ErrorCode, message:Text, dispatch:Dispatch}}
ArtifactRef {storeId:StoreId, artifactId:ArtifactId, generation:U64, byteLength:U64, contentType:ContentType, digest:Digest|null}
Attachment {name:Id, ref:ArtifactRef, ownerId:OwnerId}
Location {storeId:StoreId, relativePath:RelPath}
Identity {clientId:Id, clientIncarnation:Id}
Limits {maxEnvelopeBytes:U64, maxAttachments:int, maxBatch:int, maxClients:int, maxServices:int, maxTopics:int, maxSubscriptionsPerClient:int, maxSubscriptions:int, maxActiveCallsPerClient:int, maxServiceQueued:int, maxServiceInFlight:int, maxLatestInFlight:int, maxBoundedQueued:int, maxBoundedInFlight:int, maxOwnersPerClient:int, reservedOwnersPerClient:int, maxControlFrames:int, maxStoreBytes:U64, maxArtifactBytes:U64, maxRetainedBytes:U64, maxQueuedBytesPerClient:U64, maxControlBytes:U64}
command bus.hello {clientId:Id, clientIncarnation:Id, supportedMajors:[int 1..65535], extensions?:[Id 0..16]} -> {routerId:RouterId, connectionId:ConnId, selectedMajor:int, selectedMinor:int, contractDigest:Digest, limits:Limits, extensions:[Id 0..16], storeId:StoreId}
command service.register {name:Name, maxQueued:int 1..65535, maxInFlight:int 1..65535} -> {serviceIncarnation:SvcId}
command service.unregister {name:Name, serviceIncarnation:SvcId} -> {removed:bool}
command rpc.call {callId:CallId, target:Name, expectedIncarnation:SvcId|null, method:Method, payload:object} -> {accepted:bool, serviceIncarnation:SvcId}
command rpc.reply {callId:CallId, requestDeliveryId:DeliveryId, outcome:object} -> {routed:bool}
command rpc.cancel {callId:CallId} -> {state:cancelled-before-dispatch|execution-unknown|completed|call-gone}
command rpc.responder.release {callId:CallId, requestDeliveryId:DeliveryId} -> {released:U64}
command topic.declare {name:Name, retained:none|latest} -> {declared:bool, topicIncarnation:TopicId}
command topic.clear {name:Name} -> {cleared:bool}
command topic.delete {name:Name} -> {deleted:bool}
command subscribe {topic:Name, mode:latest|bounded, maxQueued:int 1..65535, maxInFlight:int 1..65535, replayLatest:bool, awaitTopic?:bool} -> {subscriptionId:SubId, topicIncarnation:TopicId|null}
command unsubscribe {subscriptionId:SubId} -> {removed:bool}
command publish {topic:Name, payload:object} -> {topicSequence:U64, subscribers:U64, replaced:U64}
command delivery.consumed {deliveryIds:[DeliveryId 1..64]} -> {released:U64}
command artifact.allocate {byteLength:U64, contentType:ContentType} -> {artifactId:ArtifactId, generation:U64, ownerId:OwnerId, writeLocation:Location}
command artifact.seal {artifactId:ArtifactId, generation:U64, ownerId:OwnerId, digest:Digest|null} -> {ref:ArtifactRef, ownerId:OwnerId}
command artifact.open {ref:ArtifactRef, ownerId:OwnerId} -> {readLocation:Location}
command artifact.retain {ref:ArtifactRef, ownerId:OwnerId} -> {ownerId:OwnerId}
command artifact.release {ownerIds:[OwnerId 1..64]} -> {released:U64}
delivery rpc.request {deliveryId:DeliveryId, callId:CallId, caller:Identity, target:Name, serviceIncarnation:SvcId, method:Method, payload:object}
delivery rpc.result {deliveryId:DeliveryId, callId:CallId, responder:Identity, serviceIncarnation:SvcId, outcome:object}
delivery topic.message {deliveryId:DeliveryId, subscriptionId:SubId, topic:Name, topicIncarnation:TopicId, topicSequence:U64, replaced:U64, payload:object}
notice call.failed {callId:CallId, code:ErrorCode, message:Text, dispatch:Dispatch}
notice route.removed {name:Name, serviceIncarnation:SvcId, reason:Text}
notice subscription.closed {subscriptionId:SubId, topic:Name, topicIncarnation:TopicId|null, reason:Text}
notice subscription.topic {subscriptionId:SubId, topic:Name, topicIncarnation:TopicId|null}
notice subscription.publishers {subscriptionId:SubId, topic:Name, publishers:int 0..2147483647}
notice connection.closing {code:ErrorCode, message:Text}
extension await-topic subscribe.awaitTopic subscription.topic
extension presence subscription.publishers
attachments rpc.call rpc.reply publish rpc.request rpc.result topic.message
errors INVALID_ENVELOPE VERSION_MISMATCH NOT_AUTHORIZED NO_SERVICE TARGET_CHANGED BACKPRESSURE CALL_GONE ARTIFACT_UNSEALED ARTIFACT_GONE OWNER_INVALID QUOTA_EXCEEDED STORE_FAILURE ROUTER_LOST CONFLICT NO_TOPIC ARTIFACT_MISMATCH
dispatch not-dispatched dispatched unknown
`

var contract11Digest = Digest(sha256.Sum256([]byte(contract11)))

// OldestMinor is the oldest minor version of this major a router answers
// in: a hello written in minor 1 is answered as 1.1 (a 1.0 client's too,
// as before 1.2), so clients built against 1.1 work unchanged.
const OldestMinor = 1

// ContractDigestFor is the contract digest of minor m of this major, for
// m from OldestMinor to Minor.
func ContractDigestFor(m uint32) (Digest, bool) {
	switch m {
	case Minor:
		return contractDigest, true
	case 1:
		return contract11Digest, true
	}
	return Digest{}, false
}

// ContractFor is the contract text of minor m, as ContractDigestFor.
func ContractFor(m uint32) (string, bool) {
	switch m {
	case Minor:
		return Contract, true
	case 1:
		return contract11, true
	}
	return "", false
}
