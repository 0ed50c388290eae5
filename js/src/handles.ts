// What every owning handle shares: close once, refuse use after close, and
// the leak net that releases a handle the program forgot to close.

import { HandleClosedError } from "./errors.js";
import type { WireAttachment } from "./wire/schema.js";

/** How a command waits: an AbortSignal, attachments, and what to do with an answer nobody waits for. */
export interface RequestOptions {
  signal?: AbortSignal | undefined;
  attachments?: readonly WireAttachment[];
  /** Runs as the answer is dispatched, before any later frame: a subscription is known before its first delivery. */
  then?: (value: any) => void;
  /** Takes an answer that arrives after the caller gave up (its signal aborted). */
  orphan?: (value: any, err: Error | undefined) => void;
}

/** What a handle needs of its client. Implemented by Client; internal. */
export interface Core {
  /** Set once the connection has ended: the router released everything then. */
  readonly lost: Error | undefined;
  /** Sends a command whose answer matters only as a refusal (counted in stats().controlErrors). */
  fire(op: string, body: unknown): void;
  /** The leak net's bookkeeping: a handle collected unclosed. */
  leaked(what: string): void;
  readonly net: FinalizationRegistry<LeakRecord>;
  /** Open owning handles, for the stalled-subscription warning. */
  openHandles: number;
  /** Sends a command and resolves with its reply value, or rejects with its refusal. */
  request<T = Record<string, unknown>>(op: string, body: unknown, opts?: RequestOptions): Promise<T>;
  /** The store root, or NoStoreRootError. */
  storeRoot(): string;
  /** A hold on the router (own-N), released when its last handle lets go. */
  holdGuard(owner: string): Guard;
  /** Pool mode's descriptor per slot, unless turned off. */
  readonly slots: import("./artifacts.js").SlotCache | undefined;
  /** Counters for stats(). */
  readonly counts: { artifactOpens: number };
}

/**
 * The part of a handle its release needs. The leak net holds this, never the
 * handle itself, so that the handle can be collected.
 */
export interface LeakRecord {
  core: Core;
  what: string;
  release: () => void;
  done: boolean;
}

/** Runs a leak record: the handle was collected without close. */
export function runLeaked(rec: LeakRecord): void {
  if (rec.done) return;
  rec.done = true;
  rec.core.openHandles--;
  if (rec.core.lost !== undefined) return; // the router released everything already
  rec.core.leaked(rec.what);
  rec.release();
}

/**
 * One owner on the router (a delivery or a hold) shared by several handles:
 * a message and the artifacts and views taken from it. The last handle to
 * let go releases it.
 */
export class Guard {
  private refs = 1;
  /** Runs after the release, if set: a subscription's credit coming back. */
  after: (() => void) | undefined;
  constructor(
    readonly owner: string,
    private readonly release: () => void,
  ) {}

  /** One more handle shares the owner; false once it was released. */
  add(): boolean {
    if (this.refs === 0) return false;
    this.refs++;
    return true;
  }

  drop(): void {
    if (this.refs === 0) return;
    if (--this.refs === 0) {
      this.release();
      this.after?.();
    }
  }

  get released(): boolean {
    return this.refs === 0;
  }
}

/**
 * A handle that owns something the router keeps for it. close() releases it
 * once, however often it is called; a handle collected unclosed is released
 * by the leak net, counted in stats().leaked and warned about. Correctness
 * never depends on the net: collection may come late or not at all.
 */
export abstract class Owning {
  #rec: LeakRecord | undefined;
  #closed = false;
  /** What the handle is called in messages ("artifact", "message"). */
  protected abstract readonly kind: string;

  /** Starts owning: release runs once, at close() or when the handle is collected unclosed. */
  protected own(core: Core, what: string, release: () => void): void {
    const rec: LeakRecord = { core, what, release, done: false };
    this.#rec = rec;
    core.openHandles++;
    core.net.register(this, rec, rec);
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Throws HandleClosedError after close(). */
  protected live(): void {
    if (this.#closed) throw new HandleClosedError(`this ${this.kind} was already closed`);
  }

  /** Releases what the handle owns. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const rec = this.#rec;
    if (rec === undefined || rec.done) return;
    rec.done = true;
    rec.core.openHandles--;
    rec.core.net.unregister(rec);
    rec.release();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}
