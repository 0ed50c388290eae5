// Property tests of the strict JSON parser against JSON.parse, the way the
// Go scanner's FuzzScanner checks it against encoding/json: whatever we
// accept, JSON.parse accepts with the same value; whatever JSON.parse accepts
// and we refuse breaks one of our stricter rules, judged by reference checks
// written here without the parser's code. FUZZ_RUNS scales the runs (each
// property runs that many inputs; 2,000 by default).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { isCanonicalInt, JsonSyntaxError, MAX_DEPTH, parseStrict } from "@flybus/client/wire";
import { sharedCases } from "./helpers.js";

const RUNS = Number(process.env.FUZZ_RUNS ?? 2000);
const fatal = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** JSON.parse's reading of the bytes, or undefined where it (or UTF-8 decoding) refuses. */
function reference(bytes: Uint8Array): { text: string; value: unknown } | undefined {
  let text: string;
  try {
    text = fatal.decode(bytes);
  } catch {
    return undefined;
  }
  try {
    return { text, value: JSON.parse(text) };
  } catch {
    return undefined;
  }
}

/** Calls fn on every string (members' names included) in v. */
function strings(v: unknown, fn: (s: string) => void): void {
  if (typeof v === "string") fn(v);
  else if (Array.isArray(v)) for (const x of v) strings(x, fn);
  else if (typeof v === "object" && v !== null) {
    for (const [k, x] of Object.entries(v)) {
      fn(k);
      strings(x, fn);
    }
  }
}

/** The end of the string token starting at text[i] (a quote), past its closing quote. */
function skipString(text: string, i: number): number {
  for (i++; text[i] !== '"'; i++) if (text[i] === "\\") i++;
  return i + 1;
}

/** The deepest container nesting of valid JSON text. */
function depth(text: string): number {
  let d = 0;
  let max = 0;
  for (let i = 0; i < text.length; ) {
    const c = text[i]!;
    if (c === '"') {
      i = skipString(text, i);
      continue;
    }
    if (c === "[" || c === "{") max = Math.max(max, ++d);
    else if (c === "]" || c === "}") d--;
    i++;
  }
  return max;
}

/** Whether some object of valid JSON text repeats a member name, compared after unescaping. */
function hasDuplicateKey(text: string): boolean {
  const stack: Array<Set<string> | null> = [];
  let expectKey = false;
  for (let i = 0; i < text.length; ) {
    const c = text[i]!;
    if (c === '"') {
      const end = skipString(text, i);
      const top = stack[stack.length - 1];
      if (expectKey && top) {
        const k = JSON.parse(text.slice(i, end)) as string;
        if (top.has(k)) return true;
        top.add(k);
      }
      expectKey = false;
      i = end;
      continue;
    }
    if (c === "{") {
      stack.push(new Set());
      expectKey = true;
    } else if (c === "[") {
      stack.push(null);
    } else if (c === "}" || c === "]") {
      stack.pop();
    } else if (c === ",") {
      expectKey = stack[stack.length - 1] instanceof Set;
    }
    i++;
  }
  return false;
}

/** Whether a number of valid JSON text overflows a float64. */
function hasOverflow(text: string): boolean {
  const outside = text.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  return (outside.match(/-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g) ?? []).some((n) => !Number.isFinite(Number(n)));
}

/** The stricter rule valid JSON breaks, or "" when it breaks none. */
function stricterRule(text: string, value: unknown): string {
  let lone = false;
  strings(value, (s) => (lone ||= !s.isWellFormed()));
  if (lone) return "lone surrogate";
  if (depth(text) > MAX_DEPTH) return "nesting";
  if (hasDuplicateKey(text)) return "duplicate key";
  if (hasOverflow(text)) return "overflow";
  return "";
}

/** The differential property on one input. */
function agrees(bytes: Uint8Array): void {
  let ours: unknown;
  let err: unknown;
  try {
    ours = parseStrict(bytes);
  } catch (e) {
    err = e;
  }
  const ref = reference(bytes);
  if (err === undefined) {
    assert.ok(ref !== undefined, "we accept, JSON.parse (or UTF-8) refuses");
    assert.deepStrictEqual(ours, ref.value);
    return;
  }
  assert.ok(err instanceof JsonSyntaxError, `a refusal that is no JsonSyntaxError: ${String(err)}`);
  assert.ok(err.offset >= 0 && err.offset <= bytes.length);
  if (ref !== undefined) {
    assert.notEqual(stricterRule(ref.text, ref.value), "", `we refuse (${err.message}), JSON.parse accepts, and no stricter rule applies`);
  }
}

// Pieces of JSON, valid and not, that random concatenation turns into
// inputs near the rules' edges.
const pieces = fc.constantFrom(
  "{", "}", "[", "]", ",", ":", " ", "\t", '"', '"a"', '"\\u0061"', '"\\ud83d\\ude00"', '"\\ud800"', '"\\udc00"',
  "\\", "\\u", "0", "1", "-", ".", "e", "E", "+", "1e400", "-0", "01", "1.5", "true", "false", "null", "NaN",
  "é", "😀", "\u2028", "\u0000", "\x7f", "a", "u", "d8", "00",
);
const soup = fc.array(pieces, { maxLength: 40 }).map((p) => Buffer.from(p.join(""), "utf8"));

describe("strict JSON properties", () => {
  it("agrees with JSON.parse on random bytes", () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 64 }), agrees), { numRuns: RUNS });
  });

  it("agrees with JSON.parse on random JSON-like text", () => {
    fc.assert(fc.property(soup, agrees), { numRuns: RUNS });
  });

  it("agrees with JSON.parse on mutations of the shared cases", () => {
    const seeds = [...sharedCases("refusals"), ...sharedCases("accepts")].map((c) => c.bytes);
    const mutated = fc
      .tuple(fc.constantFrom(...seeds), fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom("flip", "insert", "delete"))
      .map(([b, at, byte, how]) => {
        const i = b.length === 0 ? 0 : at % b.length;
        if (how === "flip" && b.length > 0) return Buffer.concat([b.subarray(0, i), Buffer.of(byte), b.subarray(i + 1)]);
        if (how === "delete") return Buffer.concat([b.subarray(0, i), b.subarray(i + 1)]);
        return Buffer.concat([b.subarray(0, i), Buffer.of(byte), b.subarray(i)]);
      });
    fc.assert(fc.property(mutated, agrees), { numRuns: RUNS });
  });

  it("accepts whatever JSON.stringify makes of a JSON value, with the same value", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), (v) => {
        const text = JSON.stringify(v);
        assert.deepStrictEqual(parseStrict(Buffer.from(text, "utf8")), JSON.parse(text));
      }),
      { numRuns: RUNS },
    );
  });

  it("refuses a duplicated member wherever it is", () => {
    const obj = fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 }), { minKeys: 1, maxKeys: 6 });
    fc.assert(
      fc.property(obj, fc.nat(), fc.integer({ min: 0, max: 3 }), (o, pick, wrap) => {
        const keys = Object.keys(o);
        const k = keys[pick % keys.length]!;
        let text = `${JSON.stringify(o).slice(0, -1)},${JSON.stringify(k)}:0}`;
        for (let i = 0; i < wrap; i++) text = i % 2 ? `[${text}]` : `{"w":${text}}`;
        assert.throws(() => parseStrict(Buffer.from(text, "utf8")), /duplicate object key/);
      }),
      { numRuns: RUNS },
    );
  });

  it("refuses integers spelled any other way where the schema wants one", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 1e6 }), fc.constantFrom(".0", "e0", "E+0", ".00e0"), (n, tail) => {
        const v = parseStrict(Buffer.from(`{"a":${n}${tail},"b":${n}}`)) as Record<string, unknown>;
        assert.equal(v.a, n);
        assert.equal(isCanonicalInt(v, "a"), false);
        assert.equal(isCanonicalInt(v, "b"), true);
      }),
      { numRuns: RUNS },
    );
  });
});
