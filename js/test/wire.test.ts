// Framing and the checks of every envelope the router sends.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CONTRACT, ERROR_CLASSES, WireError } from "@flybus/client";
import { commandFrame, decodeRouterEnvelope, encodeFrame, FrameDecoder, PROTOCOL_MAJOR, PROTOCOL_MINOR, SCHEMA } from "@flybus/client/wire";

const REF = {
  storeId: "store-00112233445566ff",
  artifactId: "a-7",
  generation: "1",
  byteLength: "1228800",
  contentType: "image/x-rgba",
  digest: null,
};

function env(members: Record<string, unknown>): Record<string, unknown> {
  return { protocol: "flybus", major: 1, minor: 1, id: "bus-5", replyTo: null, kind: "notice", op: "connection.closing", body: { code: "ROUTER_LOST", message: "bye" }, attachments: [], ...members };
}

const message = env({
  kind: "delivery",
  op: "topic.message",
  body: { deliveryId: "dlv-3", subscriptionId: "sub-1", topic: "cam.front", topicIncarnation: "top-1", topicSequence: "9", replaced: "0", payload: { any: [1, "x"] } },
  attachments: [{ name: "frame", ref: REF, ownerId: "dlv-3" }],
});

const reply = env({ kind: "reply", replyTo: "msg-4", op: "publish", body: { ok: true, value: { topicSequence: "1", subscribers: "2", replaced: "0" } } });

const LIMITS: Record<string, unknown> = Object.fromEntries(SCHEMA.named.get("Limits")!.map(([n, t]) => [n, t === "U64" ? "65536" : 64]));

/** A 1.1 hello reply, with value's members replaced by those of change (undefined: left out). */
function helloReply(change: Record<string, unknown> = {}): Record<string, unknown> {
  const value: Record<string, unknown> = {
    routerId: "router-00112233445566ff",
    connectionId: "conn-1",
    selectedMajor: 1,
    selectedMinor: 1,
    contractDigest: "0".repeat(64),
    limits: LIMITS,
    extensions: ["await-topic", "presence"],
    storeId: "store-00112233445566ff",
  };
  for (const [k, v] of Object.entries(change)) {
    if (v === undefined) delete value[k];
    else value[k] = v;
  }
  return env({ kind: "reply", replyTo: "msg-1", op: "bus.hello", body: { ok: true, value } });
}

const topicNotice = (inc: unknown) => env({ op: "subscription.topic", body: { subscriptionId: "sub-2", topic: "cam.front", topicIncarnation: inc } });
const publishersNotice = (n: unknown) => env({ op: "subscription.publishers", body: { subscriptionId: "sub-2", topic: "cam.front", publishers: n } });
const closedNotice = (inc: unknown) => env({ op: "subscription.closed", body: { subscriptionId: "sub-2", topic: "cam.front", topicIncarnation: inc, reason: "router-shutdown" } });

/** The JSON text of v, with text spliced in for each {"$raw": text} member value. */
function text(v: unknown): string {
  return JSON.stringify(v, null, 0).replace(/\{"\$raw":"((?:[^"\\]|\\.)*)"\}/g, (_m, s: string) => JSON.parse(`"${s}"`) as string);
}

function decode(v: unknown) {
  return decodeRouterEnvelope(Buffer.from(typeof v === "string" ? v : text(v), "utf8"));
}

describe("framing", () => {
  it("reads frames in any pieces", () => {
    const frames = [Buffer.from('{"a":1}'), Buffer.alloc(65536, 0x20), Buffer.from("[]")].map(encodeFrame);
    const stream = Buffer.concat(frames);
    for (const step of [1, 3, 7, stream.length]) {
      const d = new FrameDecoder();
      const got: Buffer[] = [];
      for (let i = 0; i < stream.length; i += step) got.push(...d.push(stream.subarray(i, i + step)));
      assert.deepStrictEqual(got.map((f) => f.length), [7, 65536, 2]);
      assert.equal(d.pending, false);
    }
  });

  it("refuses a length out of 1..65536 before buffering it", () => {
    for (const n of [0, 65537, 0xffffffff]) {
      const prefix = Buffer.alloc(4);
      prefix.writeUInt32LE(n);
      const d = new FrameDecoder();
      // The frames before a bad length still count; nothing after it does.
      const got = d.push(Buffer.concat([encodeFrame(Buffer.from("[]")), prefix, encodeFrame(Buffer.from("{}"))]));
      assert.deepStrictEqual(got.map(String), ["[]"]);
      assert.ok(d.error instanceof WireError);
      assert.deepStrictEqual(d.push(encodeFrame(Buffer.from("{}"))), []);
      assert.equal(d.pending, false);
    }
    assert.throws(() => encodeFrame(Buffer.alloc(0)), WireError);
    assert.throws(() => encodeFrame(Buffer.alloc(65537)), WireError);
  });

  it("knows a stream that ends inside a frame", () => {
    const d = new FrameDecoder();
    d.push(encodeFrame(Buffer.from("{}")).subarray(0, 5));
    assert.equal(d.pending, true);
  });

  it("encodes commands as strict JSON within the bound, as version 1.1", () => {
    const f = commandFrame(7, "publish", { topic: "t", payload: { s: "é" } });
    assert.equal(f.readUInt32LE(0), f.length - 4);
    const e = JSON.parse(f.subarray(4).toString());
    assert.deepStrictEqual([e.id, e.major, e.minor], ["msg-7", 1, 1]);
    // The contract's first line is where the version comes from.
    assert.deepStrictEqual([PROTOCOL_MAJOR, PROTOCOL_MINOR], [1, 1]);
    assert.ok(CONTRACT.startsWith("flybus contract 1.1\n"));
    assert.throws(() => commandFrame(8, "publish", { topic: "t", payload: { s: "x".repeat(65536) } }), /outside 1..65536/);
    assert.throws(() => commandFrame(9, "publish", { topic: "t", payload: { n: NaN } }), WireError);
  });
});

describe("router envelopes", () => {
  it("accepts a delivery, a reply and a notice", () => {
    const m = decode(message);
    assert.equal(m.kind, "delivery");
    assert.equal(m.busId, 5n);
    assert.equal(m.attachments[0]!.ref.artifactId, "a-7");
    const r = decode(reply);
    assert.equal(r.replyTo, 4);
    assert.equal(decode(env({})).op, "connection.closing");
  });

  it("accepts a 1.1 hello reply, with its extensions and storeId", () => {
    const h = decode(helloReply());
    assert.deepStrictEqual((h.body.value as Record<string, unknown>).extensions, ["await-topic", "presence"]);
    assert.equal((h.body.value as Record<string, unknown>).storeId, "store-00112233445566ff");
    // A router may grant none of them.
    assert.deepStrictEqual((decode(helloReply({ extensions: [] })).body.value as Record<string, unknown>).extensions, []);
  });

  it("accepts the notices of the extensions, and a null incarnation where 1.1 allows one", () => {
    assert.equal(decode(topicNotice("top-3")).body.topicIncarnation, "top-3");
    assert.equal(decode(topicNotice(null)).body.topicIncarnation, null);
    assert.equal(decode(publishersNotice(0)).body.publishers, 0);
    assert.equal(decode(publishersNotice(2147483647)).body.publishers, 2147483647);
    assert.equal(decode(closedNotice(null)).body.topicIncarnation, null);
    assert.equal(decode(closedNotice("top-3")).body.topicIncarnation, "top-3");
  });

  it("knows what each extension adds, from the contract", () => {
    assert.deepStrictEqual(Object.fromEntries(SCHEMA.extensions), {
      "await-topic": { members: ["subscribe.awaitTopic"], notices: ["subscription.topic"] },
      presence: { members: [], notices: ["subscription.publishers"] },
    });
    assert.equal(SCHEMA.noticeExtension.get("subscription.publishers"), "presence");
    assert.equal(SCHEMA.noticeExtension.get("subscription.closed"), undefined);
  });

  it("takes the optional members of 1.1 commands as optional, never null", () => {
    const subscribe = SCHEMA.objectCheck(SCHEMA.commands.get("subscribe")!.body);
    const plain = { topic: "t", mode: "latest", maxQueued: 1, maxInFlight: 1, replayLatest: false };
    assert.equal(subscribe(plain, {}, ""), undefined);
    assert.equal(subscribe({ ...plain, awaitTopic: true }, {}, ""), undefined);
    assert.match(subscribe({ ...plain, awaitTopic: null }, {}, "") ?? "", /awaitTopic/);
    const hello = SCHEMA.objectCheck(SCHEMA.commands.get("bus.hello")!.body);
    const h = { clientId: "a", clientIncarnation: "b", supportedMajors: [1] };
    assert.equal(hello(h, {}, ""), undefined);
    assert.equal(hello({ ...h, extensions: ["await-topic", "presence"] }, {}, ""), undefined);
    assert.match(hello({ ...h, extensions: ["Not An Id"] }, {}, "") ?? "", /extensions\[0\]/);
  });

  const refused: Array<[string, unknown, RegExp]> = [
    ["an unknown envelope member", { ...message, extra: 1 }, /unknown member "extra"/],
    ["a missing envelope member", (({ attachments: _a, ...rest }) => rest)(message), /missing member "attachments"/],
    ["an unknown body member", env({ body: { code: "ROUTER_LOST", message: "", why: 1 } }), /unknown member "why"/],
    ["a missing body member", env({ body: { code: "ROUTER_LOST" } }), /missing member "message"/],
    ["an unknown member of a reference", { ...message, attachments: [{ name: "frame", ref: { ...REF, path: "/etc" }, ownerId: "dlv-3" }] }, /unknown member "path"/],
    ["an unknown member of a reply value", env({ kind: "reply", replyTo: "msg-1", op: "topic.clear", body: { ok: true, value: { cleared: true, more: 1 } } }), /unknown member "more"/],
    ["an unknown member of a reply error", env({ kind: "reply", replyTo: "msg-1", op: "topic.clear", body: { ok: false, error: { code: "NO_TOPIC", message: "", dispatch: "not-dispatched", hint: "" } } }), /unknown member "hint"/],
    ["a third member beside ok and value", env({ kind: "reply", replyTo: "msg-1", op: "topic.clear", body: { ok: true, value: { cleared: true }, error: null } }), /exactly ok and value/],
    ["major 1.0", { ...message, major: { $raw: "1.0" } }, /version 1.1/],
    ["major 1e0", { ...message, major: { $raw: "1e0" } }, /version 1.1/],
    ["minor 1.0", { ...message, minor: { $raw: "1.0" } }, /version 1.1/],
    // A client may send 1.0; the router writes only 1.1.
    ["minor 0", { ...message, minor: 0 }, /version 1.1/],
    ["minor 2", { ...message, minor: 2 }, /version 1.1/],
    ["major 2", { ...message, major: 2 }, /version 1.1/],
    ["another protocol", { ...message, protocol: "nats" }, /protocol/],
    ["a command", { ...message, kind: "command", id: "bus-5" }, /router sent a command/],
    ["a client id", { ...message, id: "msg-5" }, /router id/],
    ["a non-canonical id", { ...message, id: "bus-05" }, /router id/],
    ["a replyTo on a delivery", { ...message, replyTo: "msg-1" }, /replyTo/],
    ["a reply without replyTo", { ...reply, replyTo: null }, /replyTo/],
    ["a reply with attachments", { ...reply, attachments: message.attachments }, /reply with attachments/],
    ["attachments on a notice", env({ attachments: message.attachments }), /with attachments/],
    ["an attachment owned by another owner", { ...message, attachments: [{ name: "frame", ref: REF, ownerId: "dlv-2" }] }, /owned by/],
    ["two attachments of one name", { ...message, attachments: [{ name: "frame", ref: REF, ownerId: "dlv-3" }, { name: "frame", ref: REF, ownerId: "dlv-3" }] }, /two attachments/],
    ["a U64 with a leading zero", { ...message, body: { ...(message.body as object), topicSequence: "09" } }, /topicSequence/],
    ["a U64 past 2^64-1", { ...message, body: { ...(message.body as object), topicSequence: "18446744073709551616" } }, /topicSequence/],
    ["a U64 as a number", { ...message, body: { ...(message.body as object), topicSequence: 9 } }, /topicSequence/],
    ["a payload that is no object", { ...message, body: { ...(message.body as object), payload: [1] } }, /payload/],
    ["an unknown error code", env({ body: { code: "OOPS", message: "" } }), /code/],
    ["an unknown notice", env({ op: "bus.gossip" }), /notice with op/],
    ["an unknown kind", env({ kind: "gossip" }), /kind/],
    ["a reply to a notice op", env({ kind: "reply", replyTo: "msg-1", op: "call.failed", body: { ok: true, value: {} } }), /no command/],
    ["an int limit spelled 64.0", helloReply({ limits: { ...LIMITS, maxClients: { $raw: "64.0" } } }), /maxClients/],
    ["a 1.0 hello reply (no extensions, no storeId)", helloReply({ extensions: undefined, storeId: undefined, selectedMinor: 0 }), /missing member "extensions"/],
    ["a hello reply without storeId", helloReply({ storeId: undefined }), /missing member "storeId"/],
    ["a storeId that is not store-<16 hex>", helloReply({ storeId: "store-0011" }), /storeId/],
    ["a router id as storeId", helloReply({ storeId: "router-00112233445566ff" }), /storeId/],
    ["extensions that are not ids", helloReply({ extensions: ["Await Topic"] }), /extensions\[0\]/],
    ["extensions as a string", helloReply({ extensions: "await-topic" }), /extensions/],
    ["17 extensions", helloReply({ extensions: Array.from({ length: 17 }, (_, i) => `x${i}`) }), /17 elements/],
    ["a negative publisher count", publishersNotice(-1), /publishers/],
    ["a publisher count past 2^31-1", publishersNotice(2147483648), /publishers/],
    ["a publisher count as a string", publishersNotice("1"), /publishers/],
    ["a publisher count spelled 1.0", publishersNotice({ $raw: "1.0" }), /publishers/],
    ["a subscription.topic without topicIncarnation", env({ op: "subscription.topic", body: { subscriptionId: "sub-2", topic: "cam.front" } }), /missing member "topicIncarnation"/],
    ["a subscription.topic naming no topic incarnation", topicNotice("sub-3"), /topicIncarnation/],
    ["a subscription.closed with an empty incarnation", closedNotice(""), /topicIncarnation/],
    ["a null incarnation on a message", { ...message, body: { ...(message.body as object), topicIncarnation: null } }, /topicIncarnation/],
    ["a duplicate member deep in a payload", text(message).replace('"any":[1,"x"]', '"any":[{"k":1,"\\u006b":2}]'), /duplicate object key/],
    ["not an object", "[]", /an envelope is an object/],
  ];
  for (const [name, v, why] of refused) {
    it(`refuses ${name}`, () => assert.throws(() => decode(v), (e: Error) => e instanceof WireError && why.test(e.message)));
  }

  it("has an error class for every code of the contract, and no other", () => {
    assert.deepStrictEqual(Object.keys(ERROR_CLASSES).sort(), [...SCHEMA.errors].sort());
    for (const [code, cls] of Object.entries(ERROR_CLASSES)) {
      const e = new cls(code as never, "m", "dispatched");
      assert.equal(e.code, code);
      assert.equal(e.dispatch, "dispatched");
    }
  });
});
