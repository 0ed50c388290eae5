// The strict JSON rules, checked with the Go scanner's own cases
// (wire/testdata/scanner, shared as data) and a few of the client's own.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { encodeStrict, isCanonicalInt, JsonSyntaxError, parseStrict } from "@flybus/client/wire";
import { WireError } from "@flybus/client";
import { sharedCases } from "./helpers.js";

describe("the Go scanner's refusals", () => {
  const cases = sharedCases("refusals");
  it("are all there", () => assert.ok(cases.length >= 150, `${cases.length} cases`));
  for (const c of cases) {
    it(`${c.group}/${c.name}`, () => {
      let err: unknown;
      try {
        parseStrict(c.bytes);
      } catch (e) {
        err = e;
      }
      assert.ok(err instanceof JsonSyntaxError, `accepted ${JSON.stringify(c.bytes.toString("latin1").slice(0, 80))}`);
      assert.ok(err.reason.includes(c.why), `refused for "${err.reason}", want "${c.why}"`);
      assert.ok(err.offset >= 0 && err.offset <= c.bytes.length, `offset ${err.offset} outside ${c.bytes.length} bytes`);
      assert.ok(err instanceof WireError);
    });
  }
});

describe("the Go scanner's acceptances", () => {
  const cases = sharedCases("accepts");
  it("are all there", () => assert.ok(cases.length >= 50, `${cases.length} cases`));
  for (const c of cases) {
    it(`${c.group}/${c.name}`, () => {
      const got = parseStrict(c.bytes);
      // Acceptance is a subset of JSON.parse's, with the same value.
      assert.deepStrictEqual(got, JSON.parse(c.bytes.toString("utf8")));
    });
  }
});

describe("strict JSON beyond the scanner's cases", () => {
  it("keeps __proto__ as an own member, as JSON.parse does", () => {
    const v = parseStrict(Buffer.from('{"__proto__":{"x":1},"a":2}')) as Record<string, unknown>;
    assert.deepStrictEqual(Object.keys(v), ["__proto__", "a"]);
    assert.equal(Object.getPrototypeOf(v), Object.prototype);
    assert.throws(() => parseStrict(Buffer.from('{"__proto__":1,"__proto__":2}')), /duplicate object key/);
  });

  it("tells canonical integers from other spellings of the same number", () => {
    const v = parseStrict(Buffer.from('{"a":1,"b":1.0,"c":1e0,"d":-0,"e":0,"f":-1,"g":10}')) as Record<string, unknown>;
    const canonical = Object.keys(v).filter((k) => isCanonicalInt(v, k));
    assert.deepStrictEqual(canonical, ["a", "e", "g"]);
  });

  it("reports a syntax error before a duplicate in the same object, as Go does", () => {
    assert.throws(() => parseStrict(Buffer.from('{"a":1,"a":2')), (e: JsonSyntaxError) => e.reason === "unterminated object");
  });

  it("refuses to encode what the strict rules refuse", () => {
    assert.throws(() => encodeStrict({ x: NaN }), WireError);
    assert.throws(() => encodeStrict({ x: [Infinity] }), WireError);
    assert.throws(() => encodeStrict({ x: 1n }), WireError);
    assert.throws(() => encodeStrict({ x: "\ud800" }), /surrogate/);
    assert.throws(() => encodeStrict({ ["\udc00"]: 1 }), /surrogate/);
    let deep: unknown = 1;
    for (let i = 0; i < 128; i++) deep = [deep];
    assert.doesNotThrow(() => encodeStrict(deep));
    assert.throws(() => encodeStrict([deep]), /nesting too deep/);
    assert.deepStrictEqual(parseStrict(encodeStrict({ s: "é😀\u2028", n: -0.5e-10 })), { s: "é😀\u2028", n: -0.5e-10 });
  });
});
