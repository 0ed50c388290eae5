// The client: one connection to a router over its Unix socket.
//
// Every frame the router sends is decoded and checked here, on the socket's
// data events, without running program code: replies settle the promises of
// their commands, deliveries go onto per-subscription and per-service
// inboxes, notices settle calls. A violation of the router's side of the
// contract closes the client with a ProtocolError.

import { randomBytes } from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import process from "node:process";
import { Artifact, ArtifactWriter, type Allocation, SlotCache, type WaitOptions, openBeneath } from "./artifacts.js";
import { CONTRACT_DIGEST } from "./contract.js";
import {
  BusError,
  ClosedError,
  type Dispatch,
  type ErrorCode,
  FlybusError,
  NoRouterError,
  NoStoreRootError,
  ProtocolError,
  StoreRootError,
  SubscriptionClosedError,
  WireError,
} from "./errors.js";
import { Guard, type LeakRecord, type RequestOptions, runLeaked } from "./handles.js";
import {
  type Attachments,
  type Bus,
  type Identity,
  type JsonObject,
  PendingCall,
  Message,
  Request,
  Result,
  Service,
  Subscription,
  type SubscribeOptions,
  jsonObject,
} from "./streams.js";
import { FrameDecoder } from "./wire/frame.js";
import {
  PROTOCOL_MAJOR,
  PROTOCOL_MINOR,
  type RouterEnvelope,
  SCHEMA,
  type WireAttachment,
  commandFrame,
  decodeRouterEnvelope,
} from "./wire/schema.js";

/**
 * The protocol extensions (docs/protocol.md §15) this client asks for at
 * hello, and implements: subscriptions that wait for their topic
 * (subscribe's awaitTopic) and live publisher counts (Subscription.publishers).
 */
export const EXTENSIONS: readonly string[] = Object.freeze(["await-topic", "presence"]);

/** Options of connect(). */
export interface ConnectOptions {
  /** The router's Unix socket (flybus serve --listen PATH). */
  socket: string;
  /** This client's id: ^[a-z0-9][a-z0-9._-]{0,63}$. On a bound socket, the id it is bound to. */
  clientId: string;
  /**
   * The router's store root (flybus serve --store DIR); artifacts need it.
   * When given, connect() checks that it holds the router's store (a
   * directory named info.storeId) and throws StoreRootError if not.
   */
  storeRoot?: string;
  /** This connection's incarnation; a fresh one by default (a router refuses one reused). */
  clientIncarnation?: string;
  /** Gives up connecting and saying hello. */
  signal?: AbortSignal;
  /** Gives up connecting and saying hello after this many ms (10,000 by default). */
  timeoutMs?: number;
  /**
   * Warn (once per episode) when a subscription's in-flight credits have all
   * been held by messages the program took and did not close for this many
   * ms; 0 turns it off. 5,000 by default.
   */
  heldWarnAfterMs?: number;
  /** In pool mode, keep one read-only descriptor per slot viewed (true by default). */
  slotDescriptors?: boolean;
  /** Where warnings go (leaked handles, stalled subscriptions); process.emitWarning by default. */
  onWarning?: (message: string, code: string) => void;
}

/** The router's limits, as bus.hello announced them (byte sizes are U64 strings on the wire, numbers here). */
export interface Limits {
  maxEnvelopeBytes: number;
  maxAttachments: number;
  maxBatch: number;
  maxClients: number;
  maxServices: number;
  maxTopics: number;
  maxSubscriptionsPerClient: number;
  maxSubscriptions: number;
  maxActiveCallsPerClient: number;
  maxServiceQueued: number;
  maxServiceInFlight: number;
  maxLatestInFlight: number;
  maxBoundedQueued: number;
  maxBoundedInFlight: number;
  maxOwnersPerClient: number;
  reservedOwnersPerClient: number;
  maxControlFrames: number;
  maxStoreBytes: number;
  maxArtifactBytes: number;
  maxRetainedBytes: number;
  maxQueuedBytesPerClient: number;
  maxControlBytes: number;
}

/** What bus.hello told about the router and this connection. */
export interface ClientInfo {
  routerId: string;
  connectionId: string;
  identity: Identity;
  selectedMajor: number;
  selectedMinor: number;
  contractDigest: string;
  limits: Limits;
  /** The extensions the router granted this connection, of those asked for (EXTENSIONS). */
  extensions: readonly string[];
  /** The router's store: its artifacts live in the directory of this name under the store root. */
  storeId: string;
}

/** Counters of what the client did on the program's behalf. */
export interface ClientStats {
  /** Handles garbage-collected without close, released by the leak net. */
  leaked: number;
  /** Fire-and-forget commands (consumes, releases) the router refused. */
  controlErrors: number;
  /** Warnings of subscriptions stalled by held deliveries. */
  stalledSubscriptions: number;
  /** Owning handles open now. */
  openHandles: number;
  /** artifact.open round trips made by views. */
  artifactOpens: number;
  /** Pool mode: slot descriptors cached now, views served from them, descriptors opened and closed. */
  cachedSlots: number;
  slotHits: number;
  slotOpens: number;
  slotCloses: number;
}

/** publish's answer. */
export interface PublishReceipt {
  /** The router's acceptance order on the topic, from 1. */
  topicSequence: number;
  /** Subscriptions that got an entry. */
  subscribers: number;
  /** Latest subscriptions whose undelivered value this one replaced. */
  replaced: number;
}

/** Options of publish(). */
export interface PublishOptions extends WaitOptions {
  attachments?: Attachments;
}

/** Options of call(). */
export interface CallOptions extends WaitOptions {
  /** A service incarnation (svc-N): only that registration may take the call (TARGET_CHANGED otherwise). */
  pin?: string;
  attachments?: Attachments;
}

/** Options of register(). */
export interface RegisterOptions extends WaitOptions {
  /** Calls that may wait for dispatch (16 by default, at most the router's maxServiceQueued). */
  queued?: number;
  /** Requests delivered and not yet closed (16 by default, at most maxServiceInFlight). */
  inFlight?: number;
}

/** Options of declareTopic(). */
export interface DeclareOptions extends WaitOptions {
  /** latest keeps the last publication (artifacts included) for later subscribers' replay. */
  retained?: "none" | "latest";
}

interface Waiter {
  op: string;
  resolve: (v: any) => void;
  reject: (e: Error) => void;
  then: ((v: any) => void) | undefined;
  orphan: ((v: any, err: Error | undefined) => void) | undefined;
  abandoned: boolean;
}

const LIMIT_U64 = new Set(["maxEnvelopeBytes", "maxStoreBytes", "maxArtifactBytes", "maxRetainedBytes", "maxQueuedBytesPerClient", "maxControlBytes"]);

/**
 * Connects to the router listening on opts.socket and says hello, asking for
 * the extensions of EXTENSIONS. The router's contract digest must equal this
 * package's (VersionMismatchError otherwise). Rejects with NoRouterError when
 * nothing listens there, and with StoreRootError when opts.storeRoot does not
 * hold the router's store.
 */
export async function connect(opts: ConnectOptions): Promise<Client> {
  const timeout = AbortSignal.timeout(opts.timeoutMs ?? 10_000);
  const signal = opts.signal === undefined ? timeout : AbortSignal.any([opts.signal, timeout]);
  signal.throwIfAborted();
  const sock = net.createConnection({ path: opts.socket });
  try {
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      sock.once("connect", () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      });
      sock.once("error", (e: NodeJS.ErrnoException) => {
        signal.removeEventListener("abort", onAbort);
        if (e.code === "ENOENT" || e.code === "ECONNREFUSED") {
          reject(
            new NoRouterError(
              `no router is listening on ${opts.socket} (is flybus serve running, with --listen ${opts.socket}?): ${e.message}`,
              opts.socket,
              { cause: e },
            ),
          );
        } else {
          reject(e);
        }
      });
    });
  } catch (e) {
    sock.destroy();
    throw e;
  }
  const c = new Client(sock, opts);
  try {
    await c.hello(signal);
  } catch (e) {
    sock.destroy();
    throw e;
  }
  return c;
}

/** Throws StoreRootError unless root (when given) holds the router's store storeId. */
function checkStoreRoot(root: string | undefined, storeId: string): void {
  if (root === undefined || root === "") return;
  const dir = path.join(root, storeId);
  let isDir = false;
  try {
    isDir = fs.statSync(dir).isDirectory();
  } catch {
    // missing or unreadable: the same answer
  }
  if (!isDir) {
    throw new StoreRootError(
      `storeRoot ${root} does not hold the router's store ${storeId} (no directory ${dir}): ` +
        `pass the directory the router was started with (flybus serve --store DIR)`,
      root,
      storeId,
    );
  }
}

/**
 * One connection to a router. Close it (or `await using`) when done: the
 * router then releases everything the connection held.
 */
export class Client implements Bus {
  readonly clientId: string;
  readonly clientIncarnation: string;
  /** What bus.hello told; set once connect() resolves. */
  info!: ClientInfo;
  /** Resolves with the error that ended the connection: ClosedError after close(), RouterLostError, ProtocolError. */
  readonly done: Promise<Error>;
  readonly heldWarnAfterMs: number;
  readonly slots: SlotCache | undefined;
  readonly counts = { artifactOpens: 0 };
  readonly net: FinalizationRegistry<LeakRecord>;
  openHandles = 0;

  readonly #sock: net.Socket;
  readonly #decoder = new FrameDecoder();
  readonly #opts: ConnectOptions;
  readonly #waiters = new Map<number, Waiter>();
  readonly #subs = new Map<string, Subscription<any>>();
  readonly #services = new Map<string, Service<any>>();
  readonly #calls = new Map<string, PendingCall<any>>();
  #nextMsg = 0;
  #nextCall = 0;
  #lastBus = 0n;
  #granted = new Set<string>();
  #lost: Error | undefined;
  #closing = false;
  #hello: { resolve: (v: any) => void; reject: (e: Error) => void } | undefined;
  #closed: Promise<void>;
  #resolveDone!: (e: Error) => void;
  #stats = { leaked: 0, controlErrors: 0, stalledSubscriptions: 0 };

  /** @internal Use connect(). */
  constructor(sock: net.Socket, opts: ConnectOptions) {
    this.#sock = sock;
    this.#opts = opts;
    this.clientId = opts.clientId;
    this.clientIncarnation = opts.clientIncarnation ?? `js-${process.pid}-${randomBytes(6).toString("hex")}`;
    this.heldWarnAfterMs = opts.heldWarnAfterMs ?? 5000;
    this.slots = opts.slotDescriptors === false ? undefined : new SlotCache();
    this.net = new FinalizationRegistry(runLeaked);
    this.done = new Promise((resolve) => (this.#resolveDone = resolve));
    this.#closed = new Promise((resolve) => sock.once("close", () => resolve()));
    sock.setNoDelay(true);
    sock.on("data", (chunk: Buffer) => this.#onData(chunk));
    sock.on("end", () => {
      const err = this.#decoder.pending
        ? new ProtocolError("the router's stream ended inside a frame")
        : BusError.of("ROUTER_LOST", "the router closed the connection", "unknown");
      this.#fail(err);
    });
    sock.on("error", (e) => this.#fail(BusError.of("ROUTER_LOST", `the connection to the router failed: ${e.message}`, "unknown")));
    sock.on("close", () => this.#fail(BusError.of("ROUTER_LOST", "the router closed the connection", "unknown")));
  }

  // ---- lifetime ------------------------------------------------------

  /** @internal Says hello and checks the answer. */
  async hello(signal: AbortSignal): Promise<void> {
    const body = {
      clientId: this.clientId,
      clientIncarnation: this.clientIncarnation,
      supportedMajors: [PROTOCOL_MAJOR],
      extensions: [...EXTENSIONS],
    };
    const answer = new Promise<any>((resolve, reject) => (this.#hello = { resolve, reject }));
    const onAbort = (): void => this.#hello?.reject(signal.reason instanceof Error ? signal.reason : new FlybusError(String(signal.reason)));
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      this.#write(commandFrame(++this.#nextMsg, "bus.hello", body));
      const v = await answer;
      if (v.contractDigest !== CONTRACT_DIGEST) {
        throw BusError.of(
          "VERSION_MISMATCH",
          `the router's contract digest ${v.contractDigest} is not this package's ${CONTRACT_DIGEST}: they speak different versions of the wire`,
        );
      }
      if (v.selectedMajor !== PROTOCOL_MAJOR || v.selectedMinor !== PROTOCOL_MINOR) {
        throw BusError.of(
          "VERSION_MISMATCH",
          `the router selected version ${v.selectedMajor}.${v.selectedMinor}; this package speaks ${PROTOCOL_MAJOR}.${PROTOCOL_MINOR}`,
        );
      }
      // The router grants only what the hello asked for, each once.
      const granted = v.extensions as string[];
      for (const [i, x] of granted.entries()) {
        if (!EXTENSIONS.includes(x) || granted.indexOf(x) !== i) {
          throw new ProtocolError(`the router granted extension ${JSON.stringify(x)}, which the hello did not ask for`);
        }
      }
      checkStoreRoot(this.#opts.storeRoot, v.storeId as string);
      this.#granted = new Set(granted);
      const limits: Record<string, number> = {};
      for (const [k, x] of Object.entries(v.limits as Record<string, unknown>)) limits[k] = LIMIT_U64.has(k) ? Number(x) : (x as number);
      this.info = {
        routerId: v.routerId,
        connectionId: v.connectionId,
        identity: { clientId: this.clientId, clientIncarnation: this.clientIncarnation },
        selectedMajor: v.selectedMajor,
        selectedMinor: v.selectedMinor,
        contractDigest: v.contractDigest,
        limits: limits as unknown as Limits,
        extensions: Object.freeze([...granted]),
        storeId: v.storeId,
      };
    } catch (e) {
      this.#fail(e instanceof Error ? e : new FlybusError(String(e)));
      throw e;
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#hello = undefined;
    }
  }

  /** The error that ended the connection, if it has ended. */
  get lost(): Error | undefined {
    return this.#lost;
  }

  /**
   * Shuts the write side and waits (up to timeoutMs, 5,000 by default) until
   * the router has closed its side, having released everything this
   * connection held, so the same client id can connect again at once.
   * Pending commands and calls then fail with ClosedError. Idempotent.
   */
  async close(timeoutMs = 5000): Promise<void> {
    if (!this.#closing) {
      this.#closing = true;
      if (this.#lost === undefined) this.#sock.end();
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.#closed, new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
    this.#sock.destroy();
    this.#fail(new ClosedError("the client was closed"));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  [Symbol.dispose](): void {
    void this.close();
  }

  /** Counters of what the client did on the program's behalf, zeros included. */
  stats(): ClientStats {
    const s = this.slots;
    return {
      ...this.#stats,
      openHandles: this.openHandles,
      artifactOpens: this.counts.artifactOpens,
      cachedSlots: s?.size ?? 0,
      slotHits: s?.hits ?? 0,
      slotOpens: s?.opens ?? 0,
      slotCloses: s?.closes ?? 0,
    };
  }

  #fail(err: Error): void {
    if (this.#lost !== undefined) return;
    if (this.#closing && !(err instanceof ProtocolError)) err = new ClosedError("the client was closed");
    this.#lost = err;
    this.#hello?.reject(err);
    const quiet = err instanceof ClosedError;
    const waiters = [...this.#waiters.values()];
    this.#waiters.clear();
    const subs = [...this.#subs.values()];
    this.#subs.clear();
    const services = [...this.#services.values()];
    this.#services.clear();
    const calls = [...this.#calls.values()];
    this.#calls.clear();
    this.#sock.destroy();
    for (const w of waiters) {
      if (w.abandoned) w.orphan?.(undefined, err);
      else w.reject(err);
    }
    for (const s of subs) s.ended(err, quiet);
    for (const s of services) s.ended(err, quiet);
    for (const p of calls) p.finish(undefined, err);
    this.slots?.close(); // descriptors still viewed go with their last view
    this.#resolveDone(err);
  }

  /** The loss, for a command made after it: never sent. */
  #notSent(): Error {
    const lost = this.#lost;
    if (lost === undefined) return new ClosedError("the client is closing");
    return lost instanceof BusError ? lost.notSent() : lost;
  }

  // ---- writing -------------------------------------------------------

  #write(frame: Buffer): void {
    // Frames written in one turn of the event loop (a consume and the next
    // call, a seal and its publish) go out in one writev.
    if (!this.#corked) {
      this.#corked = true;
      this.#sock.cork();
      process.nextTick(this.#uncork);
    }
    this.#sock.write(frame);
  }

  #corked = false;
  readonly #uncork = (): void => {
    this.#corked = false;
    this.#sock.uncork();
  };

  /** @internal */
  request<T = Record<string, unknown>>(op: string, body: unknown, opts: RequestOptions = {}): Promise<T> {
    if (this.#lost !== undefined || this.#closing) return Promise.reject(this.#notSent());
    const signal = opts.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const n = ++this.#nextMsg;
    let frame: Buffer;
    try {
      frame = commandFrame(n, op, body, opts.attachments);
    } catch (e) {
      return Promise.reject(e);
    }
    return new Promise<T>((resolve, reject) => {
      const w: Waiter = { op, resolve, reject, then: opts.then, orphan: opts.orphan, abandoned: false };
      if (signal !== undefined) {
        const onAbort = (): void => {
          w.abandoned = true;
          reject(signal.reason);
        };
        signal.addEventListener("abort", onAbort, { once: true });
        w.resolve = (v) => {
          signal.removeEventListener("abort", onAbort);
          resolve(v);
        };
        w.reject = (e) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        };
      }
      this.#waiters.set(n, w);
      this.#write(frame);
    });
  }

  /** @internal */
  fire(op: string, body: unknown): void {
    if (this.#lost !== undefined || this.#closing) return; // the router releases everything with the connection
    this.request(op, body).catch((e) => {
      if (e instanceof BusError && this.#lost === undefined) this.#stats.controlErrors++;
    });
  }

  /** @internal */
  leaked(what: string): void {
    this.#stats.leaked++;
    this.warn(`flybus: a ${what} was garbage-collected without close; released what it held`, "FLYBUS_LEAKED");
  }

  /** @internal */
  warn(message: string, code: string): void {
    if (code === "FLYBUS_STALLED") this.#stats.stalledSubscriptions++;
    if (this.#opts.onWarning !== undefined) this.#opts.onWarning(message, code);
    else process.emitWarning(message, { type: "FlybusWarning", code });
  }

  /** @internal */
  storeRoot(): string {
    const root = this.#opts.storeRoot;
    if (root === undefined || root === "") {
      throw new NoStoreRootError(
        "artifacts need storeRoot, the directory the router keeps its store under (flybus serve --store DIR)",
      );
    }
    return root;
  }

  /** @internal */
  holdGuard(owner: string): Guard {
    return new Guard(owner, () => this.fire("artifact.release", { ownerIds: [owner] }));
  }

  /** @internal */
  wireAttachments(atts: Attachments | undefined): { wire: WireAttachment[]; done: () => void } {
    const held: Guard[] = [];
    const wire: WireAttachment[] = [];
    const done = (): void => {
      for (const g of held) g.drop();
    };
    try {
      for (const [name, a] of Object.entries(atts ?? {})) {
        if (!(a instanceof Artifact)) throw new TypeError(`attachment ${JSON.stringify(name)} is not an Artifact`);
        const g = a.take();
        held.push(g);
        wire.push({ name, ref: { ...a.ref }, ownerId: g.owner });
      }
    } catch (e) {
      done();
      throw e;
    }
    return { wire, done };
  }

  /** @internal */
  forgetSubscription(id: string, sub: Subscription<any>): void {
    if (this.#subs.get(id) === sub) this.#subs.delete(id);
  }

  /** @internal */
  forgetService(name: string, svc: Service<any>): void {
    if (this.#services.get(name) === svc) this.#services.delete(name);
  }

  // ---- reading -------------------------------------------------------

  #onData(chunk: Buffer): void {
    if (this.#lost !== undefined) return;
    try {
      for (const f of this.#decoder.push(chunk)) {
        const env = decodeRouterEnvelope(f);
        if (env.busId <= this.#lastBus) throw new WireError("router envelope ids must increase");
        this.#lastBus = env.busId;
        this.#dispatch(env);
        if (this.#lost !== undefined) return;
      }
      if (this.#decoder.error !== undefined) throw this.#decoder.error;
    } catch (e) {
      if (!(e instanceof WireError)) throw e;
      this.#fail(new ProtocolError(`the client refused a frame from the router: ${e.message}`));
    }
  }

  #dispatch(env: RouterEnvelope): void {
    const { kind, op, body } = env;
    if (kind === "reply") {
      const w = this.#waiters.get(env.replyTo);
      if (w === undefined) {
        if (this.#hello !== undefined && env.replyTo === 1 && op === "bus.hello") {
          return this.#helloAnswer(body);
        }
        throw new WireError(`a reply to unknown command msg-${env.replyTo}`);
      }
      this.#waiters.delete(env.replyTo);
      if (w.op !== op) {
        w.reject(new ProtocolError(`the client refused a frame from the router: reply op ${op} answers a ${w.op}`));
        throw new WireError(`reply op ${op} answers a ${w.op}`);
      }
      if (body.ok === true) {
        const value = body.value;
        w.then?.(value);
        if (w.abandoned) w.orphan?.(value, undefined);
        else w.resolve(value);
      } else {
        const e = body.error as { code: ErrorCode; message: string; dispatch: Dispatch };
        const err = BusError.of(e.code, e.message, e.dispatch);
        if (w.abandoned) w.orphan?.(undefined, err);
        else w.reject(err);
      }
      return;
    }
    if (this.#hello !== undefined) {
      // Before hello only connection.closing may come: refused at accept.
      if (op === "connection.closing") {
        this.#hello.reject(BusError.of(body.code as ErrorCode, body.message as string, "not-dispatched"));
        this.#hello = undefined;
        return;
      }
      throw new WireError(`a ${kind} ${op} before the hello reply`);
    }
    switch (op) {
      case "topic.message": {
        const m = new Message(this, body, env.attachments);
        const sub = this.#subs.get(body.subscriptionId as string);
        if (sub === undefined || !sub.deliver(m)) m.close();
        return;
      }
      case "rpc.request": {
        const r = new Request(this, body, env.attachments);
        const svc = this.#services.get(body.target as string);
        if (svc === undefined || !svc.deliver(r)) r.close();
        return;
      }
      case "rpc.result": {
        const res = new Result(this, body, env.attachments);
        const p = this.#calls.get(body.callId as string);
        this.#calls.delete(body.callId as string);
        if (p === undefined) res.close();
        else p.finish(res, undefined);
        return;
      }
      case "call.failed": {
        const p = this.#calls.get(body.callId as string);
        this.#calls.delete(body.callId as string);
        p?.finish(undefined, BusError.of(body.code as ErrorCode, body.message as string, body.dispatch as Dispatch));
        return;
      }
      case "route.removed":
        return; // for callers; the call.failed notices that follow settle their calls
      case "subscription.topic":
      case "subscription.publishers": {
        // The router sends an extension's notices only where it granted it.
        const ext = SCHEMA.noticeExtension.get(op)!;
        if (!this.#granted.has(ext)) throw new WireError(`a ${op} notice on a connection not granted extension ${ext}`);
        const s = this.#subs.get(body.subscriptionId as string);
        if (s === undefined) return; // unsubscribed meanwhile
        if (op === "subscription.topic") s.topicChanged(body.topicIncarnation as string | null);
        else s.publishersChanged(body.publishers as number);
        return;
      }
      case "subscription.closed": {
        // topicIncarnation is null for a subscription awaiting its topic.
        const s = this.#subs.get(body.subscriptionId as string);
        if (s !== undefined) {
          this.#subs.delete(body.subscriptionId as string);
          const reason = body.reason as string;
          s.ended(
            new SubscriptionClosedError(`the router closed subscription ${s.id} of ${s.topic}: ${reason}`, reason),
            false,
            reason,
          );
        }
        return;
      }
      case "connection.closing": {
        // The last frame: the router closes the connection after it.
        const code = body.code as ErrorCode;
        let msg = "the router closed the connection";
        if (code !== "ROUTER_LOST") msg += ` with ${code}`;
        if (body.message !== "") msg += `: ${body.message as string}`;
        this.closedWith = code;
        this.#fail(BusError.of("ROUTER_LOST", msg, "unknown"));
        return;
      }
    }
  }

  /** The code of the router's connection.closing, if it sent one. */
  closedWith: ErrorCode | undefined;

  #helloAnswer(body: Record<string, unknown>): void {
    const h = this.#hello!;
    if (body.ok === true) {
      h.resolve(body.value);
    } else {
      const e = body.error as { code: ErrorCode; message: string; dispatch: Dispatch };
      h.reject(BusError.of(e.code, e.message, e.dispatch));
    }
    this.#hello = undefined;
  }

  // ---- topics --------------------------------------------------------

  /** Declares a topic (idempotent with the same retention; CONFLICT with the other). */
  async declareTopic(name: string, opts: DeclareOptions = {}): Promise<{ declared: boolean; topicIncarnation: string }> {
    return this.request("topic.declare", { name, retained: opts.retained ?? "none" }, opts);
  }

  /** Drops a topic's retained value; resolves to whether there was one. */
  async clearTopic(name: string, opts: WaitOptions = {}): Promise<boolean> {
    return (await this.request<{ cleared: boolean }>("topic.clear", { name }, opts)).cleared;
  }

  /** Deletes a topic (CONFLICT while it has subscriptions); resolves to whether it existed. */
  async deleteTopic(name: string, opts: WaitOptions = {}): Promise<boolean> {
    return (await this.request<{ deleted: boolean }>("topic.delete", { name }, opts)).deleted;
  }

  /**
   * Publishes payload (a JSON object) with attachments (`{frame: artifact}`:
   * every subscriber gets an owner, never a copy of the bytes). The
   * attachments stay the program's: close them when done.
   */
  async publish(topic: string, payload: unknown, opts: PublishOptions = {}): Promise<PublishReceipt> {
    const { wire, done } = this.wireAttachments(opts.attachments);
    try {
      const v = await this.request<Record<string, string>>(
        "publish",
        { topic, payload: jsonObject(payload, "a payload") },
        { signal: opts.signal, attachments: wire },
      );
      return { topicSequence: Number(v.topicSequence), subscribers: Number(v.subscribers), replaced: Number(v.replaced) };
    } finally {
      done();
    }
  }

  /**
   * Subscribes to a declared topic (NoTopicError otherwise), or with
   * awaitTopic to a topic that may not be declared yet: the subscription
   * then waits for its declaration (topicIncarnation null until it comes).
   */
  async subscribe<T = JsonObject>(topic: string, opts: SubscribeOptions = {}): Promise<Subscription<T>> {
    const mode = opts.mode ?? "latest";
    if (mode !== "latest" && mode !== "bounded") throw new TypeError(`mode is latest or bounded, not ${String(mode)}`);
    const awaitTopic = opts.awaitTopic === true;
    if (awaitTopic && !this.#granted.has("await-topic")) {
      // The router would refuse the member anyway; say why, and send nothing.
      throw BusError.of("INVALID_ENVELOPE", "the router did not grant extension await-topic: awaitTopic needs it");
    }
    const lim = this.info.limits;
    const queued = opts.queued ?? (mode === "latest" ? 1 : lim.maxBoundedQueued);
    const inFlight = opts.inFlight ?? (mode === "latest" ? lim.maxLatestInFlight : lim.maxBoundedInFlight);
    const sub = new Subscription<T>(this, topic, inFlight);
    const body: Record<string, unknown> = { topic, mode, maxQueued: queued, maxInFlight: inFlight, replayLatest: opts.replay ?? false };
    if (awaitTopic) body.awaitTopic = true; // a plain subscription leaves the 1.1 member out
    await this.request("subscribe", body, {
      signal: opts.signal,
      // Registered as the reply is dispatched, before any notice or delivery behind it.
      then: (v: { subscriptionId: string; topicIncarnation: string | null }) => {
        sub.id = v.subscriptionId;
        sub.topicIncarnation = v.topicIncarnation;
        this.#subs.set(sub.id, sub);
      },
      orphan: (_v, err) => {
        if (err === undefined) void sub.close();
      },
    });
    return sub;
  }

  // ---- RPC -----------------------------------------------------------

  /** Registers a service: one live registration owns a name (CONFLICT otherwise). */
  async register<T = JsonObject>(name: string, opts: RegisterOptions = {}): Promise<Service<T>> {
    if (this.#services.has(name)) throw new FlybusError(`service ${name} is already registered on this client`);
    opts.signal?.throwIfAborted();
    const lim = this.info.limits;
    const svc = new Service<T>(this, name);
    this.#services.set(name, svc);
    const body = {
      name,
      maxQueued: opts.queued ?? Math.min(16, lim.maxServiceQueued),
      maxInFlight: opts.inFlight ?? Math.min(16, lim.maxServiceInFlight),
    };
    try {
      const v = await this.request<{ serviceIncarnation: string }>("service.register", body, {
        signal: opts.signal,
        orphan: (val: { serviceIncarnation: string } | undefined, err) => {
          if (err !== undefined || val === undefined) {
            this.forgetService(name, svc);
            return;
          }
          svc.incarnation = val.serviceIncarnation;
          void svc.close();
        },
      });
      svc.incarnation = v.serviceIncarnation;
      return svc;
    } catch (e) {
      if (!(opts.signal?.aborted ?? false)) this.forgetService(name, svc);
      throw e;
    }
  }

  /**
   * Admits a call of method on target with payload (a JSON object) and
   * attachments; resolves to its PendingCall once the router accepted it.
   * If opts.signal aborts first, the call is abandoned (best-effort cancel).
   */
  async call<T = JsonObject>(target: string, method: string, payload: unknown, opts: CallOptions = {}): Promise<PendingCall<T>> {
    if (this.#lost !== undefined || this.#closing) throw this.#notSent();
    opts.signal?.throwIfAborted();
    const { wire, done } = this.wireAttachments(opts.attachments);
    const id = `call-${++this.#nextCall}`;
    const p = new PendingCall<T>(this, id);
    this.#calls.set(id, p);
    try {
      const body = { callId: id, target, expectedIncarnation: opts.pin ?? null, method, payload: jsonObject(payload, "a payload") };
      const v = await this.request<{ serviceIncarnation: string }>("rpc.call", body, {
        signal: opts.signal,
        attachments: wire,
        orphan: (_v, err) => {
          if (err === undefined) p.close();
          else this.#calls.delete(id);
        },
      });
      p.incarnation = v.serviceIncarnation;
      return p;
    } catch (e) {
      if (!(opts.signal?.aborted ?? false) && this.#calls.get(id) === p) this.#calls.delete(id);
      throw e;
    } finally {
      done();
    }
  }

  /** Calls and waits for the Result in one step (close the Result). */
  async callAndWait<T = JsonObject>(target: string, method: string, payload: unknown, opts: CallOptions = {}): Promise<Result<T>> {
    const p = await this.call<T>(target, method, payload, opts);
    try {
      return await p.result(opts);
    } finally {
      if (!p.settled) p.close();
    }
  }

  /** @internal An abandoned call: cancel it, and forget it unless a result or failure is still to come. */
  abandonCall(id: string): void {
    if (this.#lost !== undefined || this.#closing) return;
    this.request<{ state: string }>("rpc.cancel", { callId: id }).then(
      (v) => {
        // Only a completed call still has a result to come (consumed on arrival).
        if (v.state !== "completed") this.#calls.delete(id);
      },
      () => undefined,
    );
  }

  // ---- artifacts -----------------------------------------------------

  /** Reserves a staging file of exactly size bytes (zeros until written) and opens it for pwrite. */
  async allocate(size: number, contentType: string, opts: WaitOptions = {}): Promise<ArtifactWriter> {
    const root = this.storeRoot();
    if (!Number.isSafeInteger(size) || size < 0) throw new RangeError(`an artifact size is a non-negative integer, not ${size}`);
    const v = await this.request<Allocation>(
      "artifact.allocate",
      { byteLength: String(size), contentType },
      {
        signal: opts.signal,
        orphan: (val: Allocation | undefined, err) => {
          if (err === undefined && val !== undefined) this.fire("artifact.release", { ownerIds: [val.ownerId] });
        },
      },
    );
    let fd: number;
    try {
      fd = openBeneath(root, v.writeLocation, fs.constants.O_RDWR);
    } catch (e) {
      this.fire("artifact.release", { ownerIds: [v.ownerId] });
      throw e;
    }
    return new ArtifactWriter(this, v, size, contentType, fd);
  }
}
