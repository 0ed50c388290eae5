// Artifacts: immutable bytes in the router's store, written with pwrite and
// read with pread.
//
// Node has no mmap, so where the Go SDK maps a frame read-only and hands out
// its pages, a View here copies the bytes with one pread into a buffer the
// program passes (view.read(into)) and can reuse frame after frame. In pool
// mode the client keeps one read-only descriptor per slot it has viewed, as
// the Go SDK keeps one mapping: a later generation of that slot costs no
// artifact.open round trip and no open(2), only the pread. What keeps a
// generation from being reused under a view is the view's share of its
// delivery or hold, as in files mode.

import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { DigestMismatchError, FlybusError, HandleClosedError, NoDigestError } from "./errors.js";
import { type Core, type Guard, Owning } from "./handles.js";
import { type ArtifactRef, validRelPath } from "./wire/schema.js";

const STORE_ID = /^store-[0-9a-f]{16}$/;
const SLOT_NAME = /^slot-[0-9a-f]{16}$/;

/** A Location grant: a file in the store. */
export interface Location {
  storeId: string;
  relativePath: string;
}

// Directories already checked to be real directories (no symlink) beneath
// a store root. The store directory is the router's, 0700; the check keeps
// a misconfigured or tampered tree from leading the client elsewhere.
const checkedDirs = new Set<string>();

/**
 * Opens <root>/<storeId>/<relativePath> with flags, following no symbolic
 * link beneath root, and insists on a regular file. Node has no openat(2),
 * so the directories are checked with lstat (once per process) and the file
 * itself is opened with O_NOFOLLOW.
 */
export function openBeneath(root: string, loc: Location, flags: number): number {
  if (!STORE_ID.test(loc.storeId) || !validRelPath(loc.relativePath)) {
    throw new FlybusError(`the router granted an invalid location ${JSON.stringify(loc)}`);
  }
  const parts = [loc.storeId, ...loc.relativePath.split("/")];
  let dir = root;
  for (const part of parts.slice(0, -1)) {
    dir = path.join(dir, part);
    if (!checkedDirs.has(dir)) {
      const st = fs.lstatSync(dir);
      if (!st.isDirectory()) throw new FlybusError(`${dir} is not a directory (a symbolic link is refused)`);
      checkedDirs.add(dir);
    }
  }
  const file = path.join(dir, parts[parts.length - 1]!);
  const { O_NOFOLLOW, O_NONBLOCK } = fs.constants;
  // O_NONBLOCK: a FIFO planted in the store must not hang the open.
  const fd = fs.openSync(file, flags | O_NOFOLLOW | O_NONBLOCK);
  try {
    if (!fs.fstatSync(fd).isFile()) throw new FlybusError(`${file} is not a regular file`);
  } catch (e) {
    fs.closeSync(fd);
    throw e;
  }
  return fd;
}

/** The number of bytes of fd's file. */
function fileSize(fd: number): number {
  return fs.fstatSync(fd).size;
}

/** Reads exactly n bytes at position 0 of fd into dst. */
function preadFull(fd: number, dst: Uint8Array, n: number): void {
  let off = 0;
  while (off < n) {
    const got = fs.readSync(fd, dst, off, n - off, off);
    if (got === 0) throw new FlybusError(`the artifact's file ended after ${off} of its ${n} bytes`);
    off += got;
  }
}

/** One slot's cached descriptor, and how many views use it. */
interface SlotEntry {
  key: string;
  fd: number;
  size: number;
  views: number;
  used: number;
  evicted: boolean;
}

/**
 * Pool mode's read-only descriptors, one per slot viewed. Slot ids are never
 * reused within a store, so a descriptor cached for a-7 always shows a-7.
 * Descriptors go when the client closes, when more than MAX slots are cached
 * (least recently viewed first) and when a slot has not been viewed for IDLE
 * ms: the router unlinks idle slots, and a descriptor must not pin their
 * pages for ever.
 */
export class SlotCache {
  static MAX = 64;
  static IDLE_MS = 30_000;
  private readonly entries = new Map<string, SlotEntry>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  hits = 0;
  opens = 0;
  closes = 0;

  get size(): number {
    return this.entries.size;
  }

  /** The cached slot with a view counted on it, if it holds at least size bytes. */
  get(key: string, size: number): SlotEntry | undefined {
    const e = this.entries.get(key);
    if (e === undefined || e.size < size) return undefined;
    e.views++;
    e.used = Date.now();
    this.hits++;
    return e;
  }

  /** Caches a freshly opened slot descriptor with one view counted on it. */
  put(key: string, fd: number, size: number): SlotEntry {
    this.opens++;
    const e: SlotEntry = { key, fd, size, views: 1, used: Date.now(), evicted: false };
    if (this.closed) {
      e.evicted = true;
      return e;
    }
    const old = this.entries.get(key);
    if (old !== undefined) this.evict(old);
    this.entries.set(key, e);
    if (this.entries.size > SlotCache.MAX) {
      let lru: SlotEntry | undefined;
      for (const x of this.entries.values()) if (x.views === 0 && (lru === undefined || x.used < lru.used)) lru = x;
      if (lru !== undefined) this.evict(lru);
    }
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.sweep(), SlotCache.IDLE_MS);
      this.timer.unref();
    }
    return e;
  }

  /** Ends one view of e. */
  release(e: SlotEntry): void {
    e.views--;
    if (e.views === 0 && e.evicted) this.closeFd(e);
  }

  /** Closes every descriptor nobody views; the others go with their last view. */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    for (const e of [...this.entries.values()]) this.evict(e);
  }

  private sweep(): void {
    const now = Date.now();
    for (const e of [...this.entries.values()]) if (e.views === 0 && now - e.used >= SlotCache.IDLE_MS) this.evict(e);
    if (this.entries.size === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  private evict(e: SlotEntry): void {
    this.entries.delete(e.key);
    e.evicted = true;
    if (e.views === 0) this.closeFd(e);
  }

  private closeFd(e: SlotEntry): void {
    this.closes++;
    try {
      fs.closeSync(e.fd);
    } catch {
      // already closed: nothing holds the slot
    }
  }
}

/** Options of a command that can wait. */
export interface WaitOptions {
  /** Gives up waiting (the promise rejects with its reason); nothing is undone on the router. */
  signal?: AbortSignal;
}

/**
 * A read-only handle on an immutable artifact, holding an owner on the
 * router (a delivery shared with the message it came from, or a hold of its
 * own). Close it when done; the bytes stay while any owner remains.
 */
export class Artifact extends Owning {
  protected readonly kind = "artifact";
  readonly ref: Readonly<ArtifactRef>;
  readonly #core: Core;
  readonly #guard: Guard;

  /** @internal */
  constructor(core: Core, ref: ArtifactRef, guard: Guard) {
    super();
    this.#core = core;
    this.ref = Object.freeze({ ...ref });
    this.#guard = guard;
    this.own(core, "Artifact", () => guard.drop());
  }

  /** The owner id this handle holds the artifact through (dlv-N or own-N). */
  get ownerId(): string {
    return this.#guard.owner;
  }

  /** The artifact's length in bytes. */
  get size(): number {
    return Number(this.ref.byteLength);
  }

  get contentType(): string {
    return this.ref.contentType;
  }

  /** @internal Counts one more user of the owner, for an attachment or a view; throws after close. */
  take(): Guard {
    this.live();
    if (!this.#guard.add()) throw new HandleClosedError("this artifact was already closed");
    return this.#guard;
  }

  /** An independent hold (own-N) on the artifact, which outlives this handle and the delivery it came from. */
  async retain(opts: WaitOptions = {}): Promise<Artifact> {
    const g = this.take();
    try {
      const v = await this.#core.request<{ ownerId: string }>(
        "artifact.retain",
        { ref: this.ref, ownerId: g.owner },
        {
          signal: opts.signal,
          orphan: (val: { ownerId: string } | undefined, err) => {
            if (err === undefined && val !== undefined) this.#core.fire("artifact.release", { ownerIds: [val.ownerId] });
          },
        },
      );
      return new Artifact(this.#core, this.ref as ArtifactRef, this.#core.holdGuard(v.ownerId));
    } finally {
      g.drop();
    }
  }

  /**
   * A view of the bytes: view.read(into) copies them with pread. In pool mode
   * the slot's descriptor is kept open by the client, so a view of a slot seen
   * before needs no round trip. The view holds the artifact's owner until it
   * is closed.
   */
  async view(opts: WaitOptions = {}): Promise<View> {
    const g = this.take();
    const core = this.#core;
    const size = this.size;
    try {
      if (size === 0) return new View(core, this, g, -1, undefined);
      const slots = core.slots;
      const key = `${this.ref.storeId}/${this.ref.artifactId}`;
      const hit = slots?.get(key, size);
      if (hit !== undefined) return new View(core, this, g, hit.fd, hit);
      const root = core.storeRoot();
      core.counts.artifactOpens++;
      const v = await core.request<{ readLocation: Location }>(
        "artifact.open",
        { ref: this.ref, ownerId: g.owner },
        { signal: opts.signal },
      );
      const loc = v.readLocation;
      const fd = openBeneath(root, loc, fs.constants.O_RDONLY);
      try {
        const have = fileSize(fd);
        const pooled = slots !== undefined && SLOT_NAME.test(loc.relativePath);
        if (pooled ? have < size : have !== size) {
          throw new FlybusError(`${this.ref.artifactId}'s file holds ${have} bytes, not its ${size}`);
        }
        if (pooled) {
          // Another view may have cached the slot while this one waited.
          const raced = slots.get(key, size);
          if (raced !== undefined) {
            fs.closeSync(fd);
            return new View(core, this, g, raced.fd, raced);
          }
          const e = slots.put(key, fd, have);
          return new View(core, this, g, fd, e);
        }
      } catch (e) {
        fs.closeSync(fd);
        throw e;
      }
      return new View(core, this, g, fd, undefined);
    } catch (e) {
      g.drop();
      throw e;
    }
  }

  /** A copy of the bytes, in a new Buffer. */
  async readAll(opts: WaitOptions = {}): Promise<Buffer> {
    const v = await this.view(opts);
    try {
      return v.read();
    } finally {
      v.close();
    }
  }

  /** The SHA-256 of the bytes, in lowercase hex. */
  async sha256(opts: WaitOptions = {}): Promise<string> {
    return createHash("sha256").update(await this.readAll(opts)).digest("hex");
  }

  /**
   * Checks that the bytes still hash to the digest the artifact was sealed
   * with: throws DigestMismatchError if not, NoDigestError if it was sealed
   * without one. A program running as the router's user can change a sealed
   * file; this detects it as of now (docs/integrity.md).
   */
  async verify(opts: WaitOptions = {}): Promise<void> {
    const want = this.ref.digest;
    if (want === null) throw new NoDigestError(this.ref.artifactId);
    const got = await this.sha256(opts);
    if (got !== want) throw new DigestMismatchError(this.ref.artifactId, want, got);
  }
}

/**
 * The bytes of an artifact, read with pread. Holds the artifact's owner
 * until closed: while it is open its generation cannot be reused, so every
 * read shows the artifact's own bytes.
 */
export class View extends Owning {
  protected readonly kind = "view";
  /** The artifact's length in bytes: what read() returns. */
  readonly size: number;
  readonly ref: Readonly<ArtifactRef>;
  readonly #fd: number;

  /** @internal */
  constructor(core: Core, artifact: Artifact, guard: Guard, fd: number, slot: SlotEntry | undefined) {
    super();
    this.size = artifact.size;
    this.ref = artifact.ref;
    this.#fd = fd;
    const slots = core.slots;
    this.own(core, "View", () => {
      if (slot !== undefined) slots?.release(slot);
      else if (fd >= 0) fs.closeSync(fd);
      guard.drop();
    });
  }

  /**
   * Copies the artifact's bytes into into (at least size bytes; a Buffer or
   * any Uint8Array, reused frame after frame), or into a new Buffer, and
   * returns them as a Buffer of exactly size bytes over that memory. One
   * pread(2) on the calling thread: for a 1.2 MB frame, a memory copy.
   */
  read(into?: Uint8Array): Buffer {
    this.live();
    const n = this.size;
    let dst: Buffer;
    if (into === undefined) {
      dst = Buffer.allocUnsafe(n);
    } else {
      if (into.byteLength < n) throw new RangeError(`the buffer holds ${into.byteLength} bytes; the artifact has ${n}`);
      dst = Buffer.isBuffer(into) ? into : Buffer.from(into.buffer, into.byteOffset, into.byteLength);
    }
    if (n > 0) preadFull(this.#fd, dst, n);
    return dst.subarray(0, n);
  }

  /** Checks the bytes against the sealed digest, as Artifact.verify does. */
  verify(into?: Uint8Array): void {
    const want = this.ref.digest;
    if (want === null) throw new NoDigestError(this.ref.artifactId);
    const got = createHash("sha256").update(this.read(into)).digest("hex");
    if (got !== want) throw new DigestMismatchError(this.ref.artifactId, want, got);
  }
}

/** What artifact.allocate granted. */
export interface Allocation {
  artifactId: string;
  generation: string;
  ownerId: string;
  writeLocation: Location;
}

/** Options of seal(). */
export interface SealOptions extends WaitOptions {
  /** 64 lowercase hex digits of SHA-256: the router checks the bytes against it (ARTIFACT_MISMATCH). */
  digest?: string;
}

/**
 * A staging file being filled with pwrite. Seal it to make the bytes an
 * immutable Artifact, or close it to abandon the allocation.
 */
export class ArtifactWriter extends Owning {
  protected readonly kind = "artifact writer";
  readonly artifactId: string;
  readonly generation: string;
  readonly ownerId: string;
  readonly size: number;
  readonly contentType: string;
  readonly #core: Core;
  readonly #st: { fd: number; sealing: boolean };
  #offset = 0;

  /** @internal */
  constructor(core: Core, a: Allocation, size: number, contentType: string, fd: number) {
    super();
    this.#core = core;
    this.artifactId = a.artifactId;
    this.generation = a.generation;
    this.ownerId = a.ownerId;
    this.size = size;
    this.contentType = contentType;
    const st = (this.#st = { fd, sealing: false });
    const owner = a.ownerId;
    this.own(core, "ArtifactWriter", () => {
      if (st.fd >= 0) fs.closeSync(st.fd);
      st.fd = -1;
      if (!st.sealing) core.fire("artifact.release", { ownerIds: [owner] });
    });
  }

  /** Writes data at the current offset (pwrite) and moves the offset past it; returns the bytes written. */
  write(data: Uint8Array): number {
    const n = this.writeAt(data, this.#offset);
    this.#offset += n;
    return n;
  }

  /** Writes data at offset (pwrite); the staging file's length never changes. */
  writeAt(data: Uint8Array, offset: number): number {
    this.live();
    if (!Number.isInteger(offset) || offset < 0 || offset + data.byteLength > this.size) {
      throw new RangeError(`a write of ${data.byteLength} bytes at ${offset} is outside the artifact's ${this.size}`);
    }
    let done = 0;
    while (done < data.byteLength) {
      done += fs.writeSync(this.#st.fd, data, done, data.byteLength - done, offset + done);
    }
    return done;
  }

  /**
   * Closes the staging file and seals it: the router proves no writer is
   * left, so the bytes are immutable from here. Returns the Artifact, held by
   * the writer's id (now a hold). On a refusal the allocation is released.
   */
  async seal(opts: SealOptions = {}): Promise<Artifact> {
    this.live();
    opts.signal?.throwIfAborted();
    const core = this.#core;
    this.#st.sealing = true;
    this.close(); // closes the descriptor before the seal, so the router seals by lease
    const owner = this.ownerId;
    const body = { artifactId: this.artifactId, generation: this.generation, ownerId: owner, digest: opts.digest ?? null };
    let v: { ref: ArtifactRef; ownerId: string };
    try {
      v = await core.request("artifact.seal", body, {
        signal: opts.signal,
        orphan: () => core.fire("artifact.release", { ownerIds: [owner] }),
      });
    } catch (e) {
      if (!(opts.signal?.aborted ?? false)) core.fire("artifact.release", { ownerIds: [owner] });
      throw e;
    }
    return new Artifact(core, v.ref, core.holdGuard(v.ownerId));
  }
}
