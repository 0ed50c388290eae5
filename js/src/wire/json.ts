// Strict JSON, as the router and the Go SDK read it (wire/scanner.go).
//
// JSON.parse accepts several things flybus refuses: duplicate keys (the last
// one wins), lone surrogates in \u escapes, numbers that overflow to
// Infinity, and any depth the stack allows; it also cannot see invalid UTF-8
// once the bytes are decoded, nor tell 1 from 1.0. So frames are parsed here,
// from their bytes, in one pass that validates and builds the value. The
// rules, and the messages that name them, follow the Go scanner, whose test
// cases (wire/testdata/scanner) the Node tests share.

import { Buffer } from "node:buffer";
import { WireError } from "../errors.js";

/** The deepest container nesting accepted: 128 nested arrays pass, 129 do not. */
export const MAX_DEPTH = 128;

/** A document refused by the strict JSON rules; offset is a byte offset into it. */
export class JsonSyntaxError extends WireError {
  readonly offset: number;
  readonly reason: string;
  constructor(reason: string, offset: number) {
    super(`json: ${reason} at offset ${offset}`);
    this.name = "JsonSyntaxError";
    this.reason = reason;
    this.offset = offset;
  }
}

// Numbers that are not canonical non-negative integers (1.0, 1e0, -0, -3),
// remembered per object that holds them: after parsing they are plain
// numbers, and the schema's int fields must still refuse them, as Go does.
const oddNumbers = new WeakMap<object, Set<string>>();

/**
 * Whether holder[key] was written as a canonical integer (decimal digits,
 * no sign, fraction, exponent or leading zero) in the document parseStrict
 * built holder from.
 */
export function isCanonicalInt(holder: object, key: string): boolean {
  const v = (holder as Record<string, unknown>)[key];
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) return false;
  const odd = oddNumbers.get(holder);
  return odd === undefined || !odd.has(key);
}

const enum C {
  Tab = 0x09,
  LF = 0x0a,
  CR = 0x0d,
  Space = 0x20,
  Quote = 0x22,
  Plus = 0x2b,
  Comma = 0x2c,
  Minus = 0x2d,
  Dot = 0x2e,
  Slash = 0x2f,
  Zero = 0x30,
  Nine = 0x39,
  Colon = 0x3a,
  UpperE = 0x45,
  LBracket = 0x5b,
  Backslash = 0x5c,
  RBracket = 0x5d,
  LowerE = 0x65,
  LBrace = 0x7b,
  RBrace = 0x7d,
}

function isDigit(c: number): boolean {
  return c >= C.Zero && c <= C.Nine;
}

function hexVal(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
  if (c >= 0x41 && c <= 0x46) return c - 0x41 + 10;
  return -1;
}

/** The length of the valid UTF-8 sequence at b[i] (a byte >= 0x80), or 0. Same rules as Go's utf8.DecodeRune: no overlong forms, surrogates or code points past U+10FFFF. */
function utf8Len(b: Uint8Array, i: number): number {
  const n = b.length;
  const c = b[i]!;
  const cont = (j: number, lo = 0x80, hi = 0xbf): boolean => j < n && b[j]! >= lo && b[j]! <= hi;
  if (c >= 0xc2 && c <= 0xdf) return cont(i + 1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    const lo = c === 0xe0 ? 0xa0 : 0x80;
    const hi = c === 0xed ? 0x9f : 0xbf;
    return cont(i + 1, lo, hi) && cont(i + 2) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    const lo = c === 0xf0 ? 0x90 : 0x80;
    const hi = c === 0xf4 ? 0x8f : 0xbf;
    return cont(i + 1, lo, hi) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}

class Parser {
  private p = 0;
  constructor(private readonly b: Buffer) {}

  fail(reason: string, at = this.p): never {
    throw new JsonSyntaxError(reason, at);
  }

  ws(): void {
    const b = this.b;
    let p = this.p;
    while (p < b.length) {
      const c = b[p]!;
      if (c !== C.Space && c !== C.Tab && c !== C.LF && c !== C.CR) break;
      p++;
    }
    this.p = p;
  }

  document(): unknown {
    this.ws();
    if (this.p >= this.b.length) this.fail("empty document");
    const v = this.value(0);
    this.ws();
    if (this.p !== this.b.length) this.fail("trailing bytes after the document");
    return v;
  }

  // value parses the value at p. holder and key say where it goes, for
  // remembering non-canonical numbers.
  value(depth: number, holder?: object, key?: string): unknown {
    const b = this.b;
    if (this.p >= b.length) this.fail("unexpected end of document");
    const c = b[this.p]!;
    switch (c) {
      case C.LBrace:
        return this.object(depth + 1);
      case C.LBracket:
        return this.array(depth + 1);
      case C.Quote:
        return this.string();
      case 0x74: // t
        return this.literal("true", true);
      case 0x66: // f
        return this.literal("false", false);
      case 0x6e: // n
        return this.literal("null", null);
    }
    if (c === C.Minus || isDigit(c)) return this.number(holder, key);
    return this.fail("invalid character at the start of a value");
  }

  literal<T>(lit: string, v: T): T {
    const b = this.b;
    if (b.length - this.p < lit.length) this.fail("invalid literal");
    for (let i = 0; i < lit.length; i++) {
      if (b[this.p + i] !== lit.charCodeAt(i)) this.fail("invalid literal");
    }
    this.p += lit.length;
    return v;
  }

  object(depth: number): Record<string, unknown> {
    if (depth > MAX_DEPTH) this.fail("nesting too deep");
    const b = this.b;
    const o: Record<string, unknown> = {};
    this.p++;
    this.ws();
    if (this.p < b.length && b[this.p] === C.RBrace) {
      this.p++;
      return o;
    }
    // Go checks duplicates once the object is complete, so a syntax error
    // later in it is what gets reported; the same here.
    let dup = false;
    for (;;) {
      this.ws();
      if (this.p >= b.length || b[this.p] !== C.Quote) this.fail("expected a string key");
      const k = this.string();
      this.ws();
      if (this.p >= b.length || b[this.p] !== C.Colon) this.fail("expected ':' after an object key");
      this.p++;
      this.ws();
      const v = this.value(depth, o, k);
      if (Object.prototype.hasOwnProperty.call(o, k)) {
        dup = true;
      } else if (k === "__proto__") {
        // A plain assignment would set the prototype; JSON.parse makes it
        // an own member, and so does this.
        Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
      } else {
        o[k] = v;
      }
      this.ws();
      if (this.p >= b.length) this.fail("unterminated object");
      const c = b[this.p]!;
      if (c === C.Comma) {
        this.p++;
        continue;
      }
      if (c === C.RBrace) {
        this.p++;
        break;
      }
      this.fail("expected ',' or '}' in an object");
    }
    if (dup) this.fail("duplicate object key");
    return o;
  }

  array(depth: number): unknown[] {
    if (depth > MAX_DEPTH) this.fail("nesting too deep");
    const b = this.b;
    const a: unknown[] = [];
    this.p++;
    this.ws();
    if (this.p < b.length && b[this.p] === C.RBracket) {
      this.p++;
      return a;
    }
    for (;;) {
      this.ws();
      a.push(this.value(depth, a, String(a.length)));
      this.ws();
      if (this.p >= b.length) this.fail("unterminated array");
      const c = b[this.p]!;
      if (c === C.Comma) {
        this.p++;
        continue;
      }
      if (c === C.RBracket) {
        this.p++;
        return a;
      }
      this.fail("expected ',' or ']' in an array");
    }
  }

  string(): string {
    const b = this.b;
    const n = b.length;
    let p = ++this.p; // past the opening quote
    const start = p;
    // Fast path: printable ASCII without escapes, the common case.
    while (p < n) {
      const c = b[p]!;
      if (c < 0x20 || c === C.Quote || c === C.Backslash || c >= 0x80) break;
      p++;
    }
    if (p < n && b[p] === C.Quote) {
      this.p = p + 1;
      return b.toString("latin1", start, p);
    }
    // Slow path: escapes and non-ASCII, built from runs between escapes.
    let out = "";
    let run = start;
    let ascii = true;
    for (;;) {
      if (p >= n) this.fail("unterminated string", p);
      const c = b[p]!;
      if (c === C.Quote) {
        out += ascii ? b.toString("latin1", run, p) : b.toString("utf8", run, p);
        this.p = p + 1;
        return out;
      }
      if (c === C.Backslash) {
        out += ascii ? b.toString("latin1", run, p) : b.toString("utf8", run, p);
        ascii = true;
        this.p = p;
        out += this.escape();
        p = run = this.p;
        continue;
      }
      if (c < 0x20) this.fail("control character in a string", p);
      if (c < 0x80) {
        p++;
        continue;
      }
      const size = utf8Len(b, p);
      if (size === 0) this.fail("invalid UTF-8 in a string", p);
      ascii = false;
      p += size;
    }
  }

  // escape consumes one backslash escape at p and returns what it stands for.
  escape(): string {
    const b = this.b;
    const p = this.p;
    if (p + 1 >= b.length) this.fail("unterminated escape");
    const e = b[p + 1]!;
    let s: string | undefined;
    switch (e) {
      case 0x22:
        s = '"';
        break;
      case 0x5c:
        s = "\\";
        break;
      case 0x2f:
        s = "/";
        break;
      case 0x62:
        s = "\b";
        break;
      case 0x66:
        s = "\f";
        break;
      case 0x6e:
        s = "\n";
        break;
      case 0x72:
        s = "\r";
        break;
      case 0x74:
        s = "\t";
        break;
      case 0x75: // u
        break;
      default:
        this.fail("invalid escape");
    }
    if (s !== undefined) {
      this.p += 2;
      return s;
    }
    const r = this.hex4(p + 2);
    if (r < 0) this.fail("invalid \\u escape");
    this.p += 6;
    if (r >= 0xdc00 && r <= 0xdfff) this.fail("lone low surrogate in \\u escape");
    if (r >= 0xd800 && r <= 0xdbff) {
      const q = this.p;
      if (q + 1 >= b.length || b[q] !== C.Backslash || b[q + 1] !== 0x75) this.fail("lone high surrogate in \\u escape");
      const lo = this.hex4(q + 2);
      if (lo < 0xdc00 || lo > 0xdfff) this.fail("lone high surrogate in \\u escape");
      this.p += 6;
      return String.fromCharCode(r, lo);
    }
    return String.fromCharCode(r);
  }

  hex4(at: number): number {
    const b = this.b;
    if (at + 4 > b.length) return -1;
    let r = 0;
    for (let i = at; i < at + 4; i++) {
      const d = hexVal(b[i]!);
      if (d < 0) return -1;
      r = (r << 4) | d;
    }
    return r;
  }

  number(holder?: object, key?: string): number {
    const b = this.b;
    const n = b.length;
    const start = this.p;
    let p = start;
    let canonical = true; // digits only, no leading zero
    if (b[p] === C.Minus) {
      p++;
      canonical = false;
    }
    if (p < n && b[p] === C.Zero) {
      p++;
      if (p < n && isDigit(b[p]!)) {
        this.p = p;
        this.fail("leading zero in a number");
      }
    } else if (p < n && isDigit(b[p]!)) {
      while (p < n && isDigit(b[p]!)) p++;
    } else {
      this.p = p;
      this.fail("invalid number");
    }
    let big = p - start > 300; // could overflow a float64 without an exponent
    if (p < n && b[p] === C.Dot) {
      canonical = false;
      p++;
      if (p >= n || !isDigit(b[p]!)) {
        this.p = p;
        this.fail("invalid number fraction");
      }
      while (p < n && isDigit(b[p]!)) p++;
    }
    if (p < n && (b[p] === C.LowerE || b[p] === C.UpperE)) {
      canonical = false;
      big = true;
      p++;
      if (p < n && (b[p] === C.Plus || b[p] === C.Minus)) p++;
      if (p >= n || !isDigit(b[p]!)) {
        this.p = p;
        this.fail("invalid number exponent");
      }
      while (p < n && isDigit(b[p]!)) p++;
    }
    const v = Number(b.toString("latin1", start, p));
    if (big && !Number.isFinite(v)) this.fail("number is not finite as a float64", start);
    if (!canonical && holder !== undefined && key !== undefined) {
      let odd = oddNumbers.get(holder);
      if (odd === undefined) oddNumbers.set(holder, (odd = new Set()));
      odd.add(key);
    }
    this.p = p;
    return v;
  }
}

function asBuffer(data: Uint8Array): Buffer {
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/**
 * Parses data as one strict JSON text (RFC 8259 plus flybus's rules:
 * duplicate keys at any depth, invalid UTF-8, lone surrogates, numbers
 * overflowing a float64 and nesting past MAX_DEPTH are refused) and returns
 * its value. Throws JsonSyntaxError.
 */
export function parseStrict(data: Uint8Array): unknown {
  return new Parser(asBuffer(data)).document();
}

/** Throws JsonSyntaxError unless data is one strict JSON text. */
export function validateStrict(data: Uint8Array): void {
  new Parser(asBuffer(data)).document();
}

function finiteNumbers(this: unknown, key: string, v: unknown): unknown {
  if (typeof v === "number" && !Number.isFinite(v)) {
    throw new WireError(`${key === "" ? "the value" : `member ${JSON.stringify(key)}`} is ${v}, which JSON cannot carry`);
  }
  if (typeof v === "bigint") throw new WireError(`member ${JSON.stringify(key)} is a bigint, which JSON cannot carry`);
  return v;
}

/**
 * Encodes v as compact JSON bytes that the strict rules accept, or throws
 * WireError: NaN, Infinity and bigints are refused (JSON.stringify would turn
 * the first two into null), and so are lone surrogates and nesting past
 * MAX_DEPTH, which the router would refuse by closing the connection.
 */
export function encodeStrict(v: unknown): Buffer {
  const text = JSON.stringify(v, finiteNumbers);
  if (text === undefined) throw new WireError("the value has no JSON form");
  const bytes = Buffer.from(text, "utf8");
  try {
    validateStrict(bytes);
  } catch (e) {
    if (e instanceof JsonSyntaxError) throw new WireError(`the value cannot travel as strict JSON: ${e.reason}`);
    throw e;
  }
  return bytes;
}
