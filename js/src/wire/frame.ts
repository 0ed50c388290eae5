// Framing: a u32 little-endian length, then that many bytes of JSON, the
// length 1..65,536 (docs/protocol.md §1).

import { Buffer } from "node:buffer";
import { WireError } from "../errors.js";

/** The largest envelope, in bytes of JSON. */
export const MAX_ENVELOPE_BYTES = 65536;

/** The frame of one envelope: its length prefix and its bytes. */
export function encodeFrame(json: Uint8Array): Buffer {
  const n = json.byteLength;
  if (n < 1 || n > MAX_ENVELOPE_BYTES) {
    throw new WireError(`an envelope of ${n} bytes is outside 1..${MAX_ENVELOPE_BYTES}`);
  }
  const out = Buffer.allocUnsafe(4 + n);
  out.writeUInt32LE(n, 0);
  out.set(json, 4);
  return out;
}

/**
 * Splits a byte stream into frames, in whatever pieces it arrives. A length
 * out of range ends the stream: push returns the frames before it and sets
 * error, and buffers nothing for it.
 */
export class FrameDecoder {
  private buf: Buffer = Buffer.alloc(0);
  /** Set once a frame's length was out of range; nothing more is decoded. */
  error: WireError | undefined;

  /** Adds a chunk and returns every frame it completes (each a view of its own bytes). */
  push(chunk: Buffer): Buffer[] {
    if (this.error !== undefined) return [];
    const b = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const out: Buffer[] = [];
    let p = 0;
    while (b.length - p >= 4) {
      const n = b.readUInt32LE(p);
      if (n < 1 || n > MAX_ENVELOPE_BYTES) {
        this.buf = Buffer.alloc(0);
        this.error = new WireError(`a frame length of ${n} is outside 1..${MAX_ENVELOPE_BYTES}`);
        return out;
      }
      if (b.length - p - 4 < n) break;
      out.push(b.subarray(p + 4, p + 4 + n));
      p += 4 + n;
    }
    // Keep only the incomplete tail; copy it so a large chunk is not pinned.
    this.buf = p === b.length ? Buffer.alloc(0) : Buffer.from(b.subarray(p));
    return out;
  }

  /** Whether part of a frame is buffered: a stream that ends now ends inside a frame. */
  get pending(): boolean {
    return this.buf.length > 0;
  }
}
