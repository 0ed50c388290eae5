// The contract's shapes, compiled from its text (contract.ts) into checks, so
// this package has no table of its own to drift from the router's; and the
// check of every envelope the router sends (docs/protocol.md §14).

import { Buffer } from "node:buffer";
import { CONTRACT } from "../contract.js";
import { WireError } from "../errors.js";
import { encodeStrict, isCanonicalInt, parseStrict } from "./json.js";
import { encodeFrame } from "./frame.js";

/** At most this many attachments per envelope. */
export const MAX_ATTACHMENTS = 32;
const MAX_U64 = (1n << 64n) - 1n;

// A check returns undefined when v fits, else what is wrong, starting with
// the path below v (".member", "[3]") so that the caller can prefix its own.
type Check = (v: unknown, holder: object, key: string) => string | undefined;

const ID = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const NAME = /^[a-z0-9._-]{1,192}$/;
const PRINTABLE = /^[\x20-\x7e]+$/;
const REL_COMPONENT = /^[A-Za-z0-9._-]+$/;
const HEX16 = /^[0-9a-f]{16}$/;
const DIGEST = /^[0-9a-f]{64}$/;
const U64 = /^(0|[1-9][0-9]{0,19})$/;

/** The number of a canonical U64 string ("0", or digits without a leading zero, at most 2^64-1), or undefined. */
export function parseU64(s: unknown): bigint | undefined {
  if (typeof s !== "string" || !U64.test(s)) return undefined;
  if (s.length < 20) return BigInt(s);
  const n = BigInt(s);
  return n <= MAX_U64 ? n : undefined;
}

/** The number of a serial id "<prefix><U64>", or undefined. */
export function parseSerial(s: unknown, prefix: string): bigint | undefined {
  if (typeof s !== "string" || !s.startsWith(prefix)) return undefined;
  return parseU64(s.slice(prefix.length));
}

/** A U64 string as a JS number; exact up to 2^53. */
export function u64Number(s: string): number {
  return Number(s);
}

export function validName(s: unknown): s is string {
  if (typeof s !== "string" || !NAME.test(s)) return false;
  return !s.startsWith(".") && !s.endsWith(".") && !s.includes("..");
}

export function validId(s: unknown): s is string {
  return typeof s === "string" && ID.test(s);
}

export function validRelPath(s: unknown): s is string {
  if (typeof s !== "string" || s.length === 0 || s.length > 255) return false;
  for (const c of s.split("/")) {
    if (c === "" || c === "." || c === ".." || !REL_COMPONENT.test(c)) return false;
  }
  return true;
}

const SERIALS: Record<string, string> = {
  MsgId: "msg-",
  BusId: "bus-",
  ConnId: "conn-",
  SvcId: "svc-",
  TopicId: "top-",
  SubId: "sub-",
  CallId: "call-",
  ArtifactId: "a-",
  DeliveryId: "dlv-",
};

function show(v: unknown): string {
  let s: string;
  try {
    s = v === undefined ? "undefined" : JSON.stringify(v);
  } catch {
    s = String(v);
  }
  return s.length <= 60 ? s : `${s.slice(0, 57)}...`;
}

function scalar(test: (v: unknown) => boolean, typ: string): Check {
  return (v) => (test(v) ? undefined : `: ${show(v)} is not ${typ}`);
}

const SCALARS: Record<string, (v: unknown) => boolean> = {
  Id: validId,
  Name: validName,
  Method: (v) => typeof v === "string" && v.length <= 128 && PRINTABLE.test(v),
  ContentType: (v) => typeof v === "string" && v.length <= 127 && PRINTABLE.test(v),
  // The longest text the router sends is an error message; reasons are 128.
  Text: (v) => typeof v === "string" && (v.length <= 341 || Buffer.byteLength(v, "utf8") <= 1024),
  RelPath: validRelPath,
  U64: (v) => parseU64(v) !== undefined,
  bool: (v) => typeof v === "boolean",
  object: (v) => typeof v === "object" && v !== null && !Array.isArray(v),
  Digest: (v) => typeof v === "string" && DIGEST.test(v),
  StoreId: (v) => typeof v === "string" && v.startsWith("store-") && HEX16.test(v.slice(6)),
  RouterId: (v) => typeof v === "string" && v.startsWith("router-") && HEX16.test(v.slice(7)),
  OwnerId: (v) => parseSerial(v, "own-") !== undefined || parseSerial(v, "dlv-") !== undefined,
};
for (const [t, prefix] of Object.entries(SERIALS)) SCALARS[t] = (v) => parseSerial(v, prefix) !== undefined;

function intCheck(lo: number, hi: number): Check {
  return (v, holder, key) => {
    if (typeof v === "number" && v >= lo && v <= hi && isCanonicalInt(holder, key)) return undefined;
    return `: ${show(v)} is not an int in ${lo}..${hi}`;
  };
}

/** Splits s at sep outside braces and brackets. */
function splitTop(s: string, sep: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = "";
  for (let i = 0; i < s.length; ) {
    const c = s[i]!;
    if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") depth--;
    if (depth === 0 && s.startsWith(sep, i)) {
      out.push(cur.trim());
      cur = "";
      i += sep.length;
      continue;
    }
    cur += c;
    i++;
  }
  out.push(cur.trim());
  return out;
}

// A member's name, its type, and whether it may be left out (written
// name?:type in the contract).
type Fields = Array<[string, string, boolean]>;

function parseFields(s: string): Fields {
  s = s.trim();
  if (!s.startsWith("{") || !s.endsWith("}")) throw new Error(`contract: not an object shape: ${s}`);
  const out: Fields = [];
  for (const part of splitTop(s.slice(1, -1), ",")) {
    if (part === "") continue;
    const i = part.indexOf(":");
    const name = part.slice(0, i).trim();
    const optional = name.endsWith("?");
    out.push([optional ? name.slice(0, -1) : name, part.slice(i + 1).trim(), optional]);
  }
  return out;
}

const ENUM_WORD = /^[a-z][a-z-]*$/;

/** The contract's shapes, read from its text. */
export class Schema {
  readonly named = new Map<string, Fields>();
  readonly commands = new Map<string, { body: Fields; reply: Fields }>();
  readonly deliveries = new Map<string, Fields>();
  readonly notices = new Map<string, Fields>();
  readonly withAttachments = new Set<string>();
  readonly errors: string[] = [];
  readonly dispatch: string[] = [];
  /** Each extension (§15) with the body members ("op.member") and notices it adds. */
  readonly extensions = new Map<string, { members: string[]; notices: string[] }>();
  /** The extension each extension notice belongs to. */
  readonly noticeExtension = new Map<string, string>();
  private readonly compiled = new Map<string, Check>();

  constructor(text: string) {
    for (const line of text.split("\n")) {
      const sp = line.indexOf(" ");
      if (sp < 0) continue;
      const head = line.slice(0, sp);
      const rest = line.slice(sp + 1);
      if (head === "command" || head === "delivery" || head === "notice") {
        const sp2 = rest.indexOf(" ");
        const op = rest.slice(0, sp2);
        const shape = rest.slice(sp2 + 1);
        if (head === "command") {
          const [body, reply] = shape.split(" -> ");
          this.commands.set(op, { body: parseFields(body!), reply: parseFields(reply!) });
        } else if (head === "delivery") {
          this.deliveries.set(op, parseFields(shape));
        } else {
          this.notices.set(op, parseFields(shape));
        }
      } else if (head === "attachments") {
        for (const op of rest.split(" ")) this.withAttachments.add(op);
      } else if (head === "errors") {
        this.errors.push(...rest.split(" "));
      } else if (head === "dispatch") {
        this.dispatch.push(...rest.split(" "));
      } else if (head === "extension") {
        const [name, ...adds] = rest.split(" ");
        this.extensions.set(name!, { members: adds, notices: [] });
      } else if (/^[A-Z]/.test(head) && rest.startsWith("{")) {
        this.named.set(head, parseFields(rest));
      }
    }
    // What an extension adds is a notice, or a member written op.member of a command.
    for (const [name, ext] of this.extensions) {
      const adds = ext.members;
      ext.members = adds.filter((a) => !this.notices.has(a));
      ext.notices = adds.filter((a) => this.notices.has(a));
      for (const m of ext.members) {
        if (!this.commands.has(m.slice(0, m.lastIndexOf(".")))) throw new Error(`contract: extension ${name} adds ${m}, no notice or command member`);
      }
      for (const op of ext.notices) this.noticeExtension.set(op, name);
    }
  }

  /** The check of a contract type, compiled once. */
  check(typ: string): Check {
    let c = this.compiled.get(typ);
    if (c === undefined) {
      c = this.compile(typ);
      this.compiled.set(typ, c);
    }
    return c;
  }

  /** The check of an object with exactly these fields (any order). */
  objectCheck(fields: Array<[string, string, boolean?]>): Check {
    const names = new Set(fields.map(([n]) => n));
    const checks = fields.map(([n, t, optional]) => [n, this.check(t), optional === true] as const);
    return (v) => {
      if (typeof v !== "object" || v === null || Array.isArray(v)) return `: ${show(v)} is not an object`;
      let count = 0;
      for (const [n, check, optional] of checks) {
        if (!Object.prototype.hasOwnProperty.call(v, n)) {
          if (optional) continue;
          return `: missing member ${JSON.stringify(n)}`;
        }
        count++;
        const r = check((v as Record<string, unknown>)[n], v, n);
        if (r !== undefined) return `.${n}${r}`;
      }
      if (Object.keys(v).length !== count) {
        for (const k of Object.keys(v)) if (!names.has(k)) return `: unknown member ${JSON.stringify(k)}`;
      }
      return undefined;
    };
  }

  private compile(typ: string): Check {
    const alts = splitTop(typ, "|");
    if (alts.length > 1) {
      const nullable = alts.includes("null");
      const words = alts.filter((a) => ENUM_WORD.test(a) && !(a in SCALARS) && a !== "null" && a !== "int");
      const others = alts.filter((a) => a !== "null" && !words.includes(a)).map((a) => this.check(a));
      const wordSet = new Set(words);
      return (v, holder, key) => {
        if (nullable && v === null) return undefined;
        if (typeof v === "string" && wordSet.has(v)) return undefined;
        for (const c of others) if (c(v, holder, key) === undefined) return undefined;
        return `: ${show(v)} is not ${typ}`;
      };
    }
    if (typ.startsWith("[")) {
      const inner = typ.slice(1, -1).trim();
      const sp = inner.lastIndexOf(" ");
      const elem = this.check(inner.slice(0, sp));
      const [lo, hi] = inner.slice(sp + 1).split("..").map(Number) as [number, number];
      return (v) => {
        if (!Array.isArray(v)) return `: ${show(v)} is not an array`;
        if (v.length < lo || v.length > hi) return `: ${v.length} elements, not ${lo}..${hi}`;
        for (let i = 0; i < v.length; i++) {
          const r = elem(v[i], v, String(i));
          if (r !== undefined) return `[${i}]${r}`;
        }
        return undefined;
      };
    }
    if (typ === "int") return intCheck(0, Number.MAX_SAFE_INTEGER);
    if (typ.startsWith("int ")) {
      const [lo, hi] = typ.slice(4).split("..").map(Number) as [number, number];
      return intCheck(lo, hi);
    }
    if (typ.startsWith('"')) {
      const lit = typ.slice(1, -1);
      return (v) => (v === lit ? undefined : `: ${show(v)} is not ${typ}`);
    }
    if (typ.startsWith("{")) return this.objectCheck(parseFields(typ));
    const named = this.named.get(typ);
    if (named !== undefined) {
      // Compiled on first use: named shapes refer to each other.
      let c: Check | undefined;
      return (v, h, k) => (c ??= this.objectCheck(named))(v, h, k);
    }
    if (typ === "ErrorCode") {
      const set = new Set(this.errors);
      return scalar((v) => typeof v === "string" && set.has(v), typ);
    }
    if (typ === "Dispatch") {
      const set = new Set(this.dispatch);
      return scalar((v) => typeof v === "string" && set.has(v), typ);
    }
    if (typ === "Op") {
      return scalar((v) => typeof v === "string" && (this.commands.has(v) || this.deliveries.has(v) || this.notices.has(v)), typ);
    }
    const s = SCALARS[typ];
    if (s !== undefined) return scalar(s, typ);
    if (ENUM_WORD.test(typ)) return (v) => (v === typ ? undefined : `: ${show(v)} is not ${typ}`);
    throw new Error(`contract: unknown type ${typ}`);
  }
}

/** The schema of the contract this package was built against. */
export const SCHEMA = new Schema(CONTRACT);

// The version this package speaks, from the contract's first line
// ("flybus contract 1.1"): every envelope carries it both ways. The router
// takes a client's minor 0 or 1 but writes only its own, so nothing else is
// accepted from it.
const VERSION = /^flybus contract (\d+)\.(\d+)$/.exec(CONTRACT.slice(0, CONTRACT.indexOf("\n")));
if (VERSION === null) throw new Error("contract: no version on its first line");
/** The protocol's major version, as the contract states it. */
export const PROTOCOL_MAJOR = Number(VERSION[1]);
/** The protocol's minor version, as the contract states it. */
export const PROTOCOL_MINOR = Number(VERSION[2]);

const ENVELOPE_KEYS = ["protocol", "major", "minor", "id", "replyTo", "kind", "op", "body", "attachments"];
const ENVELOPE_KEY_SET = new Set(ENVELOPE_KEYS);

/** One artifact reference, as the wire spells it. */
export interface ArtifactRef {
  storeId: string;
  artifactId: string;
  generation: string;
  byteLength: string;
  contentType: string;
  digest: string | null;
}

/** One attachment as the wire spells it. */
export interface WireAttachment {
  name: string;
  ref: ArtifactRef;
  ownerId: string;
}

/** A router envelope, checked. */
export interface RouterEnvelope {
  kind: "reply" | "delivery" | "notice";
  op: string;
  /** The router's id, bus-<busId>. */
  busId: bigint;
  /** For a reply: the msg-<n> it answers. */
  replyTo: number;
  body: Record<string, unknown>;
  attachments: WireAttachment[];
}

const attachmentsCheck = SCHEMA.check(`[Attachment 0..${MAX_ATTACHMENTS}]`);
const errorCheck = SCHEMA.objectCheck([
  ["code", "ErrorCode"],
  ["message", "Text"],
  ["dispatch", "Dispatch"],
]);
const replyValueChecks = new Map<string, Check>();
for (const [op, { reply }] of SCHEMA.commands) replyValueChecks.set(op, SCHEMA.objectCheck(reply));
const bodyChecks = new Map<string, Check>();
for (const [op, f] of SCHEMA.deliveries) bodyChecks.set(`delivery ${op}`, SCHEMA.objectCheck(f));
for (const [op, f] of SCHEMA.notices) bodyChecks.set(`notice ${op}`, SCHEMA.objectCheck(f));

function fail(what: string): never {
  throw new WireError(what);
}

/**
 * Parses and checks one envelope from the router: strict JSON, exactly the
 * nine members, the contract's version (PROTOCOL_MAJOR.PROTOCOL_MINOR), a bus- id, a router-side kind, and the body,
 * reply value or notice against the contract, unknown members refused at
 * every level. Throws WireError.
 */
export function decodeRouterEnvelope(payload: Uint8Array): RouterEnvelope {
  const env = parseStrict(payload);
  if (typeof env !== "object" || env === null || Array.isArray(env)) fail("an envelope is an object");
  const e = env as Record<string, unknown>;
  for (const k of ENVELOPE_KEYS) if (!Object.prototype.hasOwnProperty.call(e, k)) fail(`envelope: missing member ${JSON.stringify(k)}`);
  if (Object.keys(e).length !== ENVELOPE_KEYS.length) {
    for (const k of Object.keys(e)) if (!ENVELOPE_KEY_SET.has(k)) fail(`envelope: unknown member ${JSON.stringify(k)}`);
  }
  if (e.protocol !== "flybus") fail("envelope: protocol is not flybus");
  if (e.major !== PROTOCOL_MAJOR || e.minor !== PROTOCOL_MINOR || !isCanonicalInt(e, "major") || !isCanonicalInt(e, "minor")) {
    fail(`router envelope is not version ${PROTOCOL_MAJOR}.${PROTOCOL_MINOR}`);
  }
  const busId = parseSerial(e.id, "bus-");
  if (busId === undefined) fail(`envelope: id ${show(e.id)} is not a router id (bus-N)`);
  const { kind, op, body } = e;
  if (typeof op !== "string") fail(`envelope: op ${show(op)} is not a string`);
  if (typeof body !== "object" || body === null || Array.isArray(body)) fail(`${op}: body ${show(body)} is not an object`);
  const ar = attachmentsCheck(e.attachments, e, "attachments");
  if (ar !== undefined) fail(`${op} attachments${ar}`);
  const atts = e.attachments as WireAttachment[];
  const b = body as Record<string, unknown>;
  if (kind === "reply") {
    const replyTo = parseSerial(e.replyTo, "msg-");
    if (replyTo === undefined) fail("a reply names no command (replyTo)");
    const valueCheck = replyValueChecks.get(op);
    if (valueCheck === undefined) fail(`a reply to op ${show(op)}, which is no command`);
    if (atts.length > 0) fail("reply with attachments");
    if (typeof b.ok !== "boolean") fail(`${op} reply: ok is not a boolean`);
    const keys = Object.keys(b);
    if (b.ok) {
      if (keys.length !== 2 || !("value" in b)) fail(`${op} reply: ok:true needs exactly ok and value`);
      const r = valueCheck(b.value, b, "value");
      if (r !== undefined) fail(`${op} reply value${r}`);
    } else {
      if (keys.length !== 2 || !("error" in b)) fail(`${op} reply: ok:false needs exactly ok and error`);
      const r = errorCheck(b.error, b, "error");
      if (r !== undefined) fail(`${op} reply error${r}`);
    }
    // Command ids of this client stay far below 2^53.
    return { kind, op, busId, replyTo: Number(replyTo), body: b, attachments: atts };
  }
  if (kind === "delivery" || kind === "notice") {
    if (e.replyTo !== null) fail(`a ${kind} with a replyTo`);
    const check = bodyChecks.get(`${kind} ${op}`);
    if (check === undefined) fail(`${kind} with op ${show(op)}`);
    if (atts.length > 0 && !SCHEMA.withAttachments.has(op)) fail(`${op} with attachments`);
    const r = check(b, e, "body");
    if (r !== undefined) fail(`${op}${r}`);
    const names = new Set<string>();
    for (const a of atts) {
      // The recipient owns what a delivery attaches through that delivery.
      if (a.ownerId !== b.deliveryId) {
        fail(`${op}: attachment ${show(a.name)} is owned by ${show(a.ownerId)}, not the delivery ${show(b.deliveryId)}`);
      }
      if (names.has(a.name)) fail(`${op}: two attachments named ${show(a.name)}`);
      names.add(a.name);
    }
    return { kind, op, busId, replyTo: 0, body: b, attachments: atts };
  }
  if (kind === "command") fail("router sent a command");
  return fail(`envelope: kind ${show(kind)}`);
}

/** The frame of one client command, checked to be strict JSON within the size bound. */
export function commandFrame(msgId: number, op: string, body: unknown, attachments: readonly WireAttachment[] = []): Buffer {
  const env = {
    protocol: "flybus",
    major: PROTOCOL_MAJOR,
    minor: PROTOCOL_MINOR,
    id: `msg-${msgId}`,
    replyTo: null,
    kind: "command",
    op,
    body,
    attachments,
  };
  return encodeFrame(encodeStrict(env));
}
