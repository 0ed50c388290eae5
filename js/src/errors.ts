// Errors of the flybus client.
//
// A refusal by the router is a BusError carrying the wire's code, message
// and dispatch ("not-dispatched", "dispatched" or "unknown": whether the
// operation may have reached its target). Every code has a subclass, so a
// program can test `e instanceof NoTopicError` or compare `e.code`, as the Go
// SDK's errors.Is(err, wire.ErrNoTopic) and Python's `except flybus.NoTopic`.

/** Every error this package throws of its own. */
export class FlybusError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A frame or a body that breaks the contract (or a value that cannot travel as strict JSON). */
export class WireError extends FlybusError {}

/** The router sent something the contract forbids; the client closed the connection. */
export class ProtocolError extends FlybusError {}

/** The client was closed by the program (close()), or ended by the router. */
export class ClosedError extends FlybusError {}

/** A handle was used after its own close(); other handles sharing what it held are unaffected. */
export class HandleClosedError extends FlybusError {}

/** The router ended a subscription; reason says why ("router-shutdown"). */
export class SubscriptionClosedError extends ClosedError {
  readonly reason: string;
  constructor(message: string, reason: string) {
    super(message);
    this.reason = reason;
  }
}

/** Nothing listens on the socket connect() was given: the router may not be running, or listens elsewhere. */
export class NoRouterError extends FlybusError {
  readonly path: string;
  constructor(message: string, path: string, options?: { cause?: unknown }) {
    super(message, options);
    this.path = path;
  }
}

/** Artifacts need the router's store root (connect({storeRoot})), and the client has none. */
export class NoStoreRootError extends FlybusError {}

/**
 * The storeRoot given to connect() does not hold the router's store (a
 * directory named its storeId): it is not the directory the router was
 * started with (flybus serve --store DIR). connect() throws it at once rather
 * than let the first artifact fail. It is a NoStoreRootError, as the Go SDK's
 * matches ErrNoStoreRoot.
 */
export class StoreRootError extends NoStoreRootError {
  constructor(
    message: string,
    readonly storeRoot: string,
    readonly storeId: string,
  ) {
    super(message);
  }
}

/** An artifact's bytes no longer hash to the digest it was sealed with. */
export class DigestMismatchError extends FlybusError {
  constructor(
    readonly artifactId: string,
    readonly expected: string,
    readonly actual: string,
  ) {
    super(`the bytes of ${artifactId} changed after its seal: they hash to sha256 ${actual}, it was sealed with ${expected}`);
  }
}

/** The artifact was sealed without a digest: there is nothing to verify its bytes against. */
export class NoDigestError extends FlybusError {
  constructor(readonly artifactId: string) {
    super(`${artifactId} was sealed without a digest: there is nothing to verify its bytes against`);
  }
}

/** The wire's error codes (docs/protocol.md §6.3). */
export type ErrorCode =
  | "INVALID_ENVELOPE"
  | "VERSION_MISMATCH"
  | "NOT_AUTHORIZED"
  | "NO_SERVICE"
  | "TARGET_CHANGED"
  | "BACKPRESSURE"
  | "CALL_GONE"
  | "ARTIFACT_UNSEALED"
  | "ARTIFACT_GONE"
  | "OWNER_INVALID"
  | "QUOTA_EXCEEDED"
  | "STORE_FAILURE"
  | "ROUTER_LOST"
  | "CONFLICT"
  | "NO_TOPIC"
  | "ARTIFACT_MISMATCH";

/** Whether an operation may have reached its target. */
export type Dispatch = "not-dispatched" | "dispatched" | "unknown";

/**
 * A refusal from the router, or a failure it reported (call.failed,
 * connection.closing), or the connection's loss (ROUTER_LOST, dispatch
 * "unknown" for what was in flight, "not-dispatched" for what was made after
 * it). The subclass matches the code.
 */
export class BusError extends FlybusError {
  readonly code: ErrorCode;
  readonly dispatch: Dispatch;
  /** The router's message, without the code. */
  readonly detail: string;
  constructor(code: ErrorCode, message: string, dispatch: Dispatch = "not-dispatched") {
    // A note on dispatch only when the operation may have reached its target.
    super(`${code}: ${message}${dispatch === "not-dispatched" ? "" : ` (${dispatch})`}`);
    this.code = code;
    this.detail = message;
    this.dispatch = dispatch;
  }

  /** The instance of code's subclass. */
  static of(code: ErrorCode, message: string, dispatch: Dispatch = "not-dispatched"): BusError {
    const cls = byCode[code];
    return cls === undefined ? new BusError(code, message, dispatch) : new cls(code, message, dispatch);
  }

  /** This loss as seen by a command made after it: never sent, so it cannot have reached its target. */
  notSent(): BusError {
    const msg = this.detail.endsWith("; not sent") ? this.detail : `${this.detail}; not sent`;
    return BusError.of(this.code, msg, "not-dispatched");
  }
}

/** INVALID_ENVELOPE: a malformed body, an unknown op, a request over a router limit, a protocol violation. */
export class InvalidEnvelopeError extends BusError {}
/** VERSION_MISMATCH: no common major version, or (locally) a router with another contract digest. */
export class VersionMismatchError extends BusError {}
/** NOT_AUTHORIZED: the policy grants no such right, or hello's identity was refused. */
export class NotAuthorizedError extends BusError {}
/** NO_SERVICE: no live registration of that name, or it went away before the call completed. */
export class NoServiceError extends BusError {}
/** TARGET_CHANGED: the pinned incarnation is not the name's current registration. */
export class TargetChangedError extends BusError {}
/** BACKPRESSURE: a queue or in-flight budget is full; it drains once someone consumes. */
export class BackpressureError extends BusError {}
/** CALL_GONE: no reply capability for that call, or the responder gave it up (or the call was cancelled). */
export class CallGoneError extends BusError {}
/** ARTIFACT_UNSEALED: the artifact is not sealed yet, or a seal is under way. */
export class ArtifactUnsealedError extends BusError {}
/** ARTIFACT_GONE: the artifact no longer exists in this store incarnation. */
export class ArtifactGoneError extends BusError {}
/** OWNER_INVALID: the owner id is not live here, does not root that artifact, or is the wrong kind. */
export class OwnerInvalidError extends BusError {}
/** QUOTA_EXCEEDED: a configured bound is reached. */
export class QuotaExceededError extends BusError {}
/** STORE_FAILURE: artifact store I/O failed, or the router has no store. */
export class StoreFailureError extends BusError {}
/** ROUTER_LOST: the router is shutting down, or the connection was lost. */
export class RouterLostError extends BusError {}
/** CONFLICT: a name is already taken, or the request contradicts existing state. */
export class ConflictError extends BusError {}
/** NO_TOPIC: no topic of that name has been declared. */
export class NoTopicError extends BusError {}
/** ARTIFACT_MISMATCH: the reference disagrees with the artifact, or the sealed bytes' length or digest is wrong. */
export class ArtifactMismatchError extends BusError {}

type BusErrorClass = new (code: ErrorCode, message: string, dispatch: Dispatch) => BusError;

const byCode: Record<ErrorCode, BusErrorClass> = {
  INVALID_ENVELOPE: InvalidEnvelopeError,
  VERSION_MISMATCH: VersionMismatchError,
  NOT_AUTHORIZED: NotAuthorizedError,
  NO_SERVICE: NoServiceError,
  TARGET_CHANGED: TargetChangedError,
  BACKPRESSURE: BackpressureError,
  CALL_GONE: CallGoneError,
  ARTIFACT_UNSEALED: ArtifactUnsealedError,
  ARTIFACT_GONE: ArtifactGoneError,
  OWNER_INVALID: OwnerInvalidError,
  QUOTA_EXCEEDED: QuotaExceededError,
  STORE_FAILURE: StoreFailureError,
  ROUTER_LOST: RouterLostError,
  CONFLICT: ConflictError,
  NO_TOPIC: NoTopicError,
  ARTIFACT_MISMATCH: ArtifactMismatchError,
};

/** The subclass of each code, for a test that every code of the contract has one. */
export const ERROR_CLASSES: Readonly<Record<ErrorCode, BusErrorClass>> = byCode;
