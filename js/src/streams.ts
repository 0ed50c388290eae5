// Deliveries (messages, requests, results), the subscriptions and services
// that queue them, and pending calls.

import { Artifact, type WaitOptions } from "./artifacts.js";
import { BusError, FlybusError, HandleClosedError } from "./errors.js";
import { type Core, Guard, Owning } from "./handles.js";
import type { WireAttachment } from "./wire/schema.js";

/** Artifacts to attach, by attachment name: `{frame: artifact}`. */
export type Attachments = Readonly<Record<string, Artifact>>;

/** A JSON object, as payloads and outcomes are. */
export type JsonObject = { [key: string]: unknown };

/** An authenticated client identity. */
export interface Identity {
  clientId: string;
  clientIncarnation: string;
}

/** What the streams need of their client; internal. */
export interface Bus extends Core {
  forgetSubscription(id: string, sub: Subscription<any>): void;
  forgetService(name: string, svc: Service<any>): void;
  /** Cancels an abandoned call (best effort) and forgets it unless a result is still to come. */
  abandonCall(id: string): void;
  /** The wire form of attachments, each artifact's owner held until done() (after the command's answer). */
  wireAttachments(atts: Attachments | undefined): { wire: WireAttachment[]; done: () => void };
  warn(message: string, code: string): void;
  readonly heldWarnAfterMs: number;
}

interface Waiter<T> {
  resolve: (v: T) => void;
  reject: (e: Error) => void;
}

/**
 * A queue the client's reader fills and the program drains, closed once with
 * the error later takers get. quiet marks an end the program itself asked
 * for, after which iteration stops without an error.
 */
export class Inbox<T> {
  private items: T[] = [];
  private head = 0;
  private waiters: Array<Waiter<T>> = [];
  end: { err: Error; quiet: boolean } | undefined;

  /** Hands item to the next taker; false once closed. */
  push(item: T): boolean {
    if (this.end !== undefined) return false;
    const w = this.waiters.shift();
    if (w !== undefined) w.resolve(item);
    else this.items.push(item);
    return true;
  }

  /** Closes the queue (first reason wins) and returns what nobody took. */
  close(err: Error, quiet: boolean): T[] {
    this.end ??= { err, quiet };
    const left = this.items.slice(this.head);
    this.items = [];
    this.head = 0;
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w.reject(this.end.err);
    return left;
  }

  tryNext(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const v = this.items[this.head]!;
    // Taken items must not stay reachable from here: the leak net could
    // never collect a message the program dropped.
    (this.items as Array<T | undefined>)[this.head++] = undefined;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head > 64 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return v;
  }

  next(signal?: AbortSignal): Promise<T> {
    const v = this.tryNext();
    if (v !== undefined) return Promise.resolve(v);
    if (this.end !== undefined) return Promise.reject(this.end.err);
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<T>((resolve, reject) => {
      const w: Waiter<T> = { resolve, reject };
      if (signal !== undefined) {
        const onAbort = (): void => {
          const i = this.waiters.indexOf(w);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(signal.reason);
        };
        signal.addEventListener("abort", onAbort, { once: true });
        w.resolve = (x) => {
          signal.removeEventListener("abort", onAbort);
          resolve(x);
        };
        w.reject = (e) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        };
      }
      this.waiters.push(w);
    });
  }
}

/**
 * A delivery the program holds: consumed once this handle and every
 * artifact (and view) taken from it are closed.
 */
export abstract class Delivery extends Owning {
  /** This connection's id of the delivery (dlv-N). */
  readonly deliveryId: string;
  /** @internal */
  protected readonly bus: Bus;
  readonly #atts: readonly WireAttachment[];
  /** @internal */
  readonly guard: Guard;

  /** @internal */
  constructor(bus: Bus, deliveryId: string, atts: readonly WireAttachment[], what: string, before?: () => void) {
    super();
    this.bus = bus;
    this.deliveryId = deliveryId;
    this.#atts = atts;
    const guard = (this.guard = new Guard(deliveryId, () => bus.fire("delivery.consumed", { deliveryIds: [deliveryId] })));
    this.own(bus, what, () => {
      before?.();
      guard.drop();
    });
  }

  /** The names of the attached artifacts. */
  get attachments(): string[] {
    return this.#atts.map((a) => a.name);
  }

  /**
   * The attached artifact name, sharing this delivery: take it before closing
   * the delivery, and close it when done.
   */
  artifact(name: string): Artifact {
    this.live();
    const a = this.#atts.find((x) => x.name === name);
    if (a === undefined) {
      throw new FlybusError(`no attachment ${JSON.stringify(name)} (it carries ${JSON.stringify(this.attachments)})`);
    }
    if (!this.guard.add()) throw new HandleClosedError(`this ${this.kind} was already closed`);
    return new Artifact(this.bus, a.ref, this.guard);
  }
}

/** One topic message. Close it (or `using`) to consume it: the subscription's credit comes back. */
export class Message<T = JsonObject> extends Delivery {
  protected readonly kind = "message";
  readonly subscriptionId: string;
  readonly topic: string;
  readonly topicIncarnation: string;
  /** The router's acceptance order on this topic, from 1. */
  readonly topicSequence: number;
  /** Values coalesced on this (latest) subscription since its previous delivery. */
  readonly replaced: number;
  readonly payload: T;

  /** @internal */
  constructor(bus: Bus, body: Record<string, any>, atts: readonly WireAttachment[]) {
    super(bus, body.deliveryId, atts, "Message");
    this.subscriptionId = body.subscriptionId;
    this.topic = body.topic;
    this.topicIncarnation = body.topicIncarnation;
    this.topicSequence = Number(body.topicSequence);
    this.replaced = Number(body.replaced);
    this.payload = body.payload;
  }
}

// A subscription's deliveries the program holds unconsumed, and the timer
// that warns once they have been all of its maxInFlight for too long: the
// router then sends it nothing, and nothing else says so.
class Credits {
  private held = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private since = 0;
  constructor(
    private readonly limit: number,
    private readonly afterMs: number,
    private readonly onStall: (held: number, ms: number) => void,
  ) {}

  take(id: string): void {
    this.held.add(id);
    if (this.afterMs > 0 && this.timer === undefined && this.held.size >= this.limit) {
      this.since = Date.now();
      this.timer = setTimeout(() => this.onStall(this.held.size, Date.now() - this.since), this.afterMs);
      this.timer.unref();
    }
  }

  giveBack(id: string): void {
    this.held.delete(id);
    if (this.timer !== undefined && this.held.size < this.limit) this.stop();
  }

  stop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** Options of subscribe(). */
export interface SubscribeOptions extends WaitOptions {
  /** latest (the default): one replaceable undelivered value, never refuses a publisher. bounded: FIFO without loss. */
  mode?: "latest" | "bounded";
  /** Undelivered messages kept: 1 for latest; up to the router's maxBoundedQueued (the default) for bounded. */
  queued?: number;
  /** Delivered, unconsumed messages at once: the router's maxLatestInFlight or maxBoundedInFlight by default. */
  inFlight?: number;
  /** First deliver the topic's retained value, if it keeps one. */
  replay?: boolean;
  /**
   * Subscribe even if the topic is not declared yet (extension await-topic):
   * the subscription waits for the declaration, then gets every publication
   * made after it. If the topic is deleted, it waits for the next declaration
   * rather than ending. topicIncarnation is null while it waits.
   */
  awaitTopic?: boolean;
}

/** Options of Subscription.waitTopic(). */
export interface WaitTopicOptions extends WaitOptions {
  /** false: wait until the topic is deleted (the subscription awaits the next declaration). true by default. */
  declared?: boolean;
}

// A wait on a subscription's state (its topic, its publishers), settled by
// the notice that makes check() return a value, or by the subscription's end.
// The value is taken then: a later notice may change the state before the
// waiter runs.
interface StateWaiter {
  check: () => { value: unknown } | undefined;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

/**
 * A subscription: iterate it (`for await (using msg of sub)`), or take
 * messages with next(). Close each message when done with it; close the
 * subscription (or `await using`) to unsubscribe. Breaking out of a loop
 * leaves the subscription open.
 */
export class Subscription<T = JsonObject> {
  readonly topic: string;
  /** The router's id of the subscription (sub-N). */
  id = "";
  /** The topic's current incarnation (top-N); null while the subscription awaits its declaration (awaitTopic). */
  topicIncarnation: string | null = null;
  /**
   * How many live publishers the topic has: open connections that have had a
   * publication accepted on its current incarnation. null until the router
   * has said (right after subscribing). A connection counts until it closes,
   * not until it stops publishing; 0 means no open connection produces the
   * topic. waitPublishers() and nextPublishers() wait for a change.
   */
  publishers: number | null = null;
  #stateWaiters: StateWaiter[] = [];
  /** Set when the router ended the subscription: "router-shutdown". */
  closedReason: string | undefined;
  /** @internal */
  readonly inbox = new Inbox<Message<T>>();
  readonly #bus: Bus;
  #credits: Credits;
  #closed = false;

  /** @internal */
  constructor(bus: Bus, topic: string, inFlight: number) {
    this.#bus = bus;
    this.topic = topic;
    this.#credits = new Credits(inFlight, bus.heldWarnAfterMs, (held, ms) => {
      bus.warn(
        `flybus: subscription ${this.id} on topic ${topic} has held all ${held} in-flight credits unconsumed for ${ms}ms; ` +
          `${bus.openHandles} handles are open`,
        "FLYBUS_STALLED",
      );
    });
  }

  /** @internal The reader's hand-off; false when the subscription no longer takes messages. */
  deliver(m: Message<T>): boolean {
    return this.inbox.push(m);
  }

  /** @internal The router ended it (reason), or the connection did. */
  ended(err: Error, quiet: boolean, reason?: string): void {
    if (reason !== undefined) this.closedReason = reason;
    this.#credits.stop();
    for (const m of this.inbox.close(err, quiet)) m.close();
    const ws = this.#stateWaiters;
    this.#stateWaiters = [];
    for (const w of ws) w.reject(this.#endError());
  }

  /** @internal subscription.topic: the awaited topic was declared (its incarnation) or deleted (null). */
  topicChanged(inc: string | null): void {
    this.topicIncarnation = inc;
    this.#stateChanged();
  }

  /** @internal subscription.publishers: the router's count. */
  publishersChanged(n: number): void {
    if (n === this.publishers) return;
    this.publishers = n;
    this.#stateChanged();
  }

  #stateChanged(): void {
    const ws = this.#stateWaiters;
    this.#stateWaiters = [];
    for (const w of ws) {
      let got: { value: unknown } | undefined;
      try {
        got = w.check();
      } catch (e) {
        // The program's predicate threw: its wait fails, the reader goes on.
        w.reject(e instanceof Error ? e : new Error(String(e)));
        continue;
      }
      if (got === undefined) this.#stateWaiters.push(w);
      else w.resolve(got.value);
    }
  }

  /** What a wait on a subscription that has ended rejects with. */
  #endError(): Error {
    const end = this.inbox.end;
    if (this.#closed || end === undefined) return new HandleClosedError("this subscription was already closed");
    return end.err;
  }

  /** Resolves with check()'s value once it has one, checked now and at each change the router tells. */
  #waitState<V>(check: () => { value: V } | undefined, signal: AbortSignal | undefined): Promise<V> {
    if (this.#closed || this.inbox.end !== undefined) return Promise.reject(this.#endError());
    let now: { value: V } | undefined;
    try {
      now = check();
    } catch (e) {
      return Promise.reject(e);
    }
    if (now !== undefined) return Promise.resolve(now.value);
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<V>((resolve, reject) => {
      const w: StateWaiter = { check, resolve: resolve as (v: unknown) => void, reject };
      if (signal !== undefined) {
        const onAbort = (): void => {
          this.#stateWaiters = this.#stateWaiters.filter((x) => x !== w);
          reject(signal.reason);
        };
        signal.addEventListener("abort", onAbort, { once: true });
        w.resolve = (v) => {
          signal.removeEventListener("abort", onAbort);
          resolve(v as V);
        };
        w.reject = (e) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        };
      }
      this.#stateWaiters.push(w);
    });
  }

  /**
   * Resolves with the publisher count once until(count) holds for the
   * router's latest count: at once if it already does. For example
   * `await sub.waitPublishers((n) => n === 0)` returns once no live
   * publisher is left. Rejects when the subscription ends (its error, or
   * HandleClosedError after close()) or opts.signal aborts.
   */
  waitPublishers(until: (publishers: number) => boolean, opts: WaitOptions = {}): Promise<number> {
    return this.#waitState(() => {
      const n = this.publishers;
      return n !== null && until(n) ? { value: n } : undefined;
    }, opts.signal);
  }

  /** Resolves with the publisher count at its next change, as the router tells it. */
  nextPublishers(opts: WaitOptions = {}): Promise<number> {
    const before = this.publishers;
    return this.#waitState(() => {
      const n = this.publishers;
      return n !== before && n !== null ? { value: n } : undefined;
    }, opts.signal);
  }

  /**
   * Resolves with the topic's incarnation once it is declared: at once if it
   * is. With {declared: false}, resolves with null once the topic is deleted
   * (the subscription awaits the next declaration).
   */
  waitTopic(opts: WaitTopicOptions = {}): Promise<string | null> {
    const declared = opts.declared ?? true;
    return this.#waitState(() => {
      const inc = this.topicIncarnation;
      return (inc !== null) === declared ? { value: inc } : undefined;
    }, opts.signal);
  }

  #handOut(m: Message<T>): Message<T> {
    const credits = this.#credits;
    const id = m.deliveryId;
    credits.take(id);
    m.guard.after = () => credits.giveBack(id);
    return m;
  }

  /** The next message; rejects with SubscriptionClosedError when the router ended the subscription. */
  async next(opts: WaitOptions = {}): Promise<Message<T>> {
    if (this.#closed) throw new HandleClosedError("this subscription was already closed");
    return this.#handOut(await this.inbox.next(opts.signal));
  }

  /** The next message if one is queued, without waiting. */
  tryNext(): Message<T> | undefined {
    if (this.#closed) throw new HandleClosedError("this subscription was already closed");
    const m = this.inbox.tryNext();
    return m === undefined ? undefined : this.#handOut(m);
  }

  /** Yields messages until the subscription or its client is closed; throws if the router ended it. */
  async *[Symbol.asyncIterator](): AsyncGenerator<Message<T>, void, undefined> {
    for (;;) {
      let m: Message<T>;
      try {
        m = await this.next();
      } catch (e) {
        if (this.#closed || this.inbox.end?.quiet === true) return;
        throw e;
      }
      yield m;
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Unsubscribes and waits for the router's answer; queued messages are consumed. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#bus.forgetSubscription(this.id, this);
    this.ended(new HandleClosedError("this subscription was already closed"), true);
    // Nothing to undo once the router ended it (closedReason) or the connection is gone.
    if (this.#bus.lost !== undefined || this.id === "" || this.closedReason !== undefined) return;
    try {
      await this.#bus.request("unsubscribe", { subscriptionId: this.id });
    } catch (e) {
      if (!(e instanceof FlybusError)) throw e;
      // The connection is gone: the router dropped the subscription with it.
    }
  }

  [Symbol.dispose](): void {
    void this.close().catch(() => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

// A request's reply capability, shared by the Request and its Responders:
// one reply at most; the last of them to close without a reply releases the
// call (its caller sees CALL_GONE, dispatched).
class ReplyCap {
  private refs = 1;
  replied = false;
  constructor(
    private readonly bus: Bus,
    readonly callId: string,
    readonly deliveryId: string,
  ) {}

  add(): boolean {
    if (this.refs === 0) return false;
    this.refs++;
    return true;
  }

  drop(): void {
    if (this.refs === 0) return;
    if (--this.refs === 0 && !this.replied) {
      this.bus.fire("rpc.responder.release", { callId: this.callId, requestDeliveryId: this.deliveryId });
    }
  }

  async reply(outcome: unknown, opts: ReplyOptions): Promise<boolean> {
    const { wire, done } = this.bus.wireAttachments(opts.attachments);
    try {
      const v = await this.bus.request<{ routed: boolean }>(
        "rpc.reply",
        { callId: this.callId, requestDeliveryId: this.deliveryId, outcome: jsonObject(outcome, "an outcome") },
        { signal: opts.signal, attachments: wire },
      );
      this.replied = true;
      return v.routed;
    } finally {
      done();
    }
  }
}

/** Options of reply(). */
export interface ReplyOptions extends WaitOptions {
  attachments?: Attachments;
}

/** Refuses what is not a JSON object (payloads and outcomes are). */
export function jsonObject(v: unknown, what: string): object {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new TypeError(`${what} is a JSON object, not ${Array.isArray(v) ? "an array" : v === null ? "null" : typeof v}`);
  }
  return v;
}

/**
 * A call delivered to a service. reply() answers it; close() consumes the
 * delivery (the service's credit returns) and, if nothing replied and no
 * Responder is left, releases the call.
 */
export class Request<T = JsonObject> extends Delivery {
  protected readonly kind = "request";
  readonly callId: string;
  readonly method: string;
  readonly payload: T;
  /** Who called, as the router authenticated it at hello. */
  readonly caller: Identity;
  readonly target: string;
  readonly serviceIncarnation: string;
  readonly #cap: ReplyCap;

  /** @internal */
  constructor(bus: Bus, body: Record<string, any>, atts: readonly WireAttachment[]) {
    const cap = new ReplyCap(bus, body.callId, body.deliveryId);
    super(bus, body.deliveryId, atts, "Request", () => cap.drop());
    this.#cap = cap;
    this.callId = body.callId;
    this.method = body.method;
    this.payload = body.payload;
    this.caller = body.caller;
    this.target = body.target;
    this.serviceIncarnation = body.serviceIncarnation;
  }

  /** Answers the call with outcome (a JSON object) and attachments; resolves to whether a caller got it. */
  async reply(outcome: unknown, opts: ReplyOptions = {}): Promise<boolean> {
    this.live();
    return this.#cap.reply(outcome, opts);
  }

  /** A handle that can reply after this request is closed (its credit returned). Close it when done. */
  responder(): Responder {
    this.live();
    if (!this.#cap.add()) throw new HandleClosedError("this request was already closed");
    return new Responder(this.bus, this.#cap);
  }
}

/** Replies to a request after the Request itself was closed. */
export class Responder extends Owning {
  protected readonly kind = "responder";
  readonly callId: string;
  readonly #cap: ReplyCap;

  /** @internal */
  constructor(bus: Bus, cap: ReplyCap) {
    super();
    this.#cap = cap;
    this.callId = cap.callId;
    this.own(bus, "Responder", () => cap.drop());
  }

  async reply(outcome: unknown, opts: ReplyOptions = {}): Promise<boolean> {
    this.live();
    return this.#cap.reply(outcome, opts);
  }
}

/** Options of serve(). */
export interface ServeOptions {
  /** Stops serving (serve resolves); the service stays registered. */
  signal?: AbortSignal;
  /** Requests handled at once, each by its own loop (1 by default; the service's inFlight bounds what arrives). */
  concurrency?: number;
}

/** A registered service: iterate its requests, take them with next(), or serve() them with a handler. */
export class Service<T = JsonObject> {
  readonly name: string;
  /** The router's id of this registration (svc-N): pin calls to it. */
  incarnation = "";
  /** @internal */
  readonly inbox = new Inbox<Request<T>>();
  readonly #bus: Bus;
  #closed = false;

  /** @internal */
  constructor(bus: Bus, name: string) {
    this.#bus = bus;
    this.name = name;
  }

  /** @internal */
  deliver(r: Request<T>): boolean {
    return this.inbox.push(r);
  }

  /** @internal */
  ended(err: Error, quiet: boolean): void {
    for (const r of this.inbox.close(err, quiet)) r.close();
  }

  async next(opts: WaitOptions = {}): Promise<Request<T>> {
    if (this.#closed) throw new HandleClosedError("this service was already closed");
    return this.inbox.next(opts.signal);
  }

  tryNext(): Request<T> | undefined {
    if (this.#closed) throw new HandleClosedError("this service was already closed");
    return this.inbox.tryNext();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Request<T>, void, undefined> {
    for (;;) {
      let r: Request<T>;
      try {
        r = await this.next();
      } catch (e) {
        if (this.#closed || this.inbox.end?.quiet === true) return;
        throw e;
      }
      yield r;
    }
  }

  /**
   * Hands each request to handler and closes it when the handler settles
   * (a handler that throws without replying leaves its caller CALL_GONE,
   * dispatched; the error is warned about). Resolves once opts.signal aborts
   * or the service or client is closed; rejects with the cause otherwise
   * (RouterLostError).
   */
  async serve(handler: (req: Request<T>) => unknown, opts: ServeOptions = {}): Promise<void> {
    const { signal } = opts;
    const loop = async (): Promise<void> => {
      for (;;) {
        let req: Request<T>;
        try {
          req = await this.next({ ...(signal && { signal }) });
        } catch (e) {
          if (signal?.aborted || this.#closed || this.inbox.end?.quiet === true) return;
          throw e;
        }
        try {
          await handler(req);
        } catch (e) {
          this.#bus.warn(`flybus: the handler of ${this.name} threw on ${req.method}: ${String(e)}`, "FLYBUS_HANDLER");
        } finally {
          req.close();
        }
      }
    };
    const n = Math.max(1, opts.concurrency ?? 1);
    await Promise.all(Array.from({ length: n }, loop));
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Unregisters and waits for the router's answer; queued requests are closed (released). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const bus = this.#bus;
    if (bus.lost === undefined && this.incarnation !== "") {
      try {
        await bus.request("service.unregister", { name: this.name, serviceIncarnation: this.incarnation });
      } catch (e) {
        if (!(e instanceof FlybusError)) throw e;
      }
    }
    bus.forgetService(this.name, this);
    this.ended(new HandleClosedError("this service was already closed"), true);
  }

  [Symbol.dispose](): void {
    void this.close().catch(() => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** A call's result. Close it to consume it: the call completes. */
export class Result<T = JsonObject> extends Delivery {
  protected readonly kind = "result";
  readonly callId: string;
  /** Who answered, as the router authenticated it. */
  readonly responder: Identity;
  readonly serviceIncarnation: string;
  readonly outcome: T;

  /** @internal */
  constructor(bus: Bus, body: Record<string, any>, atts: readonly WireAttachment[]) {
    super(bus, body.deliveryId, atts, "Result");
    this.callId = body.callId;
    this.responder = body.responder;
    this.serviceIncarnation = body.serviceIncarnation;
    this.outcome = body.outcome;
  }
}

/** rpc.cancel's answer. */
export type CancelState = "cancelled-before-dispatch" | "execution-unknown" | "completed" | "call-gone";

/**
 * An admitted call. result() waits for its Result (and may be called again
 * after its signal aborted); close() abandons the call: an unfinished one
 * gets a best-effort rpc.cancel, an unclaimed result is consumed.
 */
export class PendingCall<T = JsonObject> {
  /** The call's id on this connection (call-N). */
  readonly id: string;
  /** The registration that admitted the call (svc-N). */
  incarnation = "";
  readonly #bus: Bus;
  #result: Result<T> | undefined;
  #error: Error | undefined;
  #settled = false;
  #taken = false;
  #closed = false;
  #waiters: Array<Waiter<Result<T>>> = [];

  /** @internal */
  constructor(bus: Bus, id: string) {
    this.#bus = bus;
    this.id = id;
  }

  /** @internal The reader settles the call: a result, or the error that ended it. */
  finish(res: Result<T> | undefined, err: Error | undefined): void {
    if (this.#settled) {
      res?.close(); // a second outcome: nobody will take it
      return;
    }
    this.#settled = true;
    this.#result = res;
    this.#error = err;
    if (this.#closed) {
      res?.close();
      return;
    }
    const ws = this.#waiters;
    this.#waiters = [];
    for (const w of ws) {
      if (res !== undefined) {
        this.#taken = true;
        w.resolve(res);
      } else {
        w.reject(err!);
      }
    }
  }

  get settled(): boolean {
    return this.#settled;
  }

  /** The call's Result (close it), or the BusError that ended the call (call.failed, ROUTER_LOST, CALL_GONE after cancel). */
  result(opts: WaitOptions = {}): Promise<Result<T>> {
    if (this.#closed) return Promise.reject(new HandleClosedError("this call was already closed"));
    if (this.#settled) {
      if (this.#result !== undefined) {
        this.#taken = true;
        return Promise.resolve(this.#result);
      }
      return Promise.reject(this.#error);
    }
    const signal = opts.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<Result<T>>((resolve, reject) => {
      const w: Waiter<Result<T>> = { resolve, reject };
      if (signal !== undefined) {
        const onAbort = (): void => {
          this.#waiters = this.#waiters.filter((x) => x !== w);
          reject(signal.reason);
        };
        signal.addEventListener("abort", onAbort, { once: true });
        w.resolve = (x) => {
          signal.removeEventListener("abort", onAbort);
          resolve(x);
        };
        w.reject = (e) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        };
      }
      this.#waiters.push(w);
    });
  }

  /**
   * Asks the router to cancel. Unless the call completed, it ends here:
   * result() rejects with CallGoneError (not dispatched only when it was
   * cancelled before dispatch).
   */
  async cancel(opts: WaitOptions = {}): Promise<CancelState> {
    const v = await this.#bus.request<{ state: CancelState }>("rpc.cancel", { callId: this.id }, opts);
    if (v.state !== "completed") {
      const dispatch = v.state === "cancelled-before-dispatch" ? "not-dispatched" : "unknown";
      this.finish(undefined, BusError.of("CALL_GONE", `call cancelled: ${v.state}`, dispatch));
    }
    return v.state;
  }

  /** Abandons the call (see the class). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const ws = this.#waiters;
    this.#waiters = [];
    for (const w of ws) w.reject(new HandleClosedError("this call was already closed"));
    if (!this.#settled) {
      this.#bus.abandonCall(this.id);
    } else if (this.#result !== undefined && !this.#taken) {
      this.#result.close();
    }
  }

  [Symbol.dispose](): void {
    this.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}
