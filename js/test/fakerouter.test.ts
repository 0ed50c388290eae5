// The client against a fake router that breaks the contract: every
// violation closes the client with a ProtocolError (or the typed refusal the
// router announced), as the Go SDK and the Python binding do.

import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import {
  CONTRACT_DIGEST,
  connect,
  EXTENSIONS,
  HandleClosedError,
  InvalidEnvelopeError,
  NoStoreRootError,
  ProtocolError,
  QuotaExceededError,
  RouterLostError,
  StoreRootError,
  SubscriptionClosedError,
  VersionMismatchError,
} from "@flybus/client";
import { encodeFrame, FrameDecoder, SCHEMA } from "@flybus/client/wire";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "flybus-js-fake-"));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
let n = 0;

type Script = (sock: net.Socket, hello: Record<string, any>, frames: AsyncIterator<Record<string, any>>) => Promise<void> | void;

/** A router on a fresh socket that runs script on its one connection. */
async function fake(script: Script): Promise<{ socket: string; server: net.Server }> {
  const socket = path.join(dir, `fake-${++n}.sock`);
  const server = net.createServer((sock) => {
    const dec = new FrameDecoder();
    const queue: Array<Record<string, any>> = [];
    let wake: (() => void) | undefined;
    sock.on("data", (c) => {
      for (const f of dec.push(c)) queue.push(JSON.parse(f.toString()));
      wake?.();
    });
    sock.on("error", () => undefined);
    const frames: AsyncIterator<Record<string, any>> = {
      async next() {
        while (queue.length === 0) await new Promise<void>((r) => (wake = r));
        return { value: queue.shift()!, done: false };
      },
    };
    void (async () => {
      const hello = (await frames.next()).value;
      await script(sock, hello, frames);
    })();
  });
  await new Promise<void>((r) => server.listen(socket, r));
  after(() => server.close());
  return { socket, server };
}

function env(id: number, kind: string, op: string, body: unknown, replyTo: string | null = null): Record<string, unknown> {
  return { protocol: "flybus", major: 1, minor: 1, id: `bus-${id}`, replyTo, kind, op, body, attachments: [] };
}

function send(sock: net.Socket, v: unknown): void {
  sock.write(encodeFrame(Buffer.from(typeof v === "string" ? v : JSON.stringify(v))));
}

const STORE_ID = "store-0011223344556677";

/**
 * A 1.1 router's hello reply: it grants the extensions the hello asked for
 * (all that this fake knows), unless change says otherwise.
 */
function helloReply(hello: Record<string, any>, change: Record<string, unknown> = {}): Record<string, unknown> {
  const limits = Object.fromEntries(SCHEMA.named.get("Limits")!.map(([name, t]) => [name, t === "U64" ? "1048576" : 64]));
  const value = {
    routerId: "router-0011223344556677",
    connectionId: "conn-1",
    selectedMajor: 1,
    selectedMinor: 1,
    contractDigest: CONTRACT_DIGEST,
    limits,
    extensions: hello.body.extensions ?? [],
    storeId: STORE_ID,
    ...change,
  };
  return env(1, "reply", "bus.hello", { ok: true, value }, hello.id);
}

/** Connects to a fake router whose hello is fine (with change), then runs then. */
async function afterHello(then: Script, change: Record<string, unknown> = {}) {
  const { socket } = await fake(async (sock, hello, frames) => {
    send(sock, helloReply(hello, change));
    await then(sock, hello, frames);
  });
  return connect({ socket, clientId: "js-fake" });
}

/** Answers the next command, which must be op, with value; returns the command. */
async function answer(sock: net.Socket, frames: AsyncIterator<Record<string, any>>, id: number, op: string, value: unknown): Promise<Record<string, any>> {
  const cmd = (await frames.next()).value;
  assert.equal(cmd.op, op);
  send(sock, env(id, "reply", op, { ok: true, value }, cmd.id));
  return cmd;
}

describe("a router that breaks the contract", () => {
  it("is refused at hello when its contract digest differs", async () => {
    const { socket } = await fake((sock, hello) => send(sock, helloReply(hello, { contractDigest: "f".repeat(64) })));
    await assert.rejects(connect({ socket, clientId: "js-fake" }), (e: VersionMismatchError) => {
      return e instanceof VersionMismatchError && e.code === "VERSION_MISMATCH" && /contract digest/.test(e.message);
    });
  });

  it("is refused at hello when it selects another version", async () => {
    for (const [major, minor] of [[1, 0], [1, 2]]) {
      const { socket } = await fake((sock, hello) => send(sock, helloReply(hello, { selectedMajor: major, selectedMinor: minor })));
      await assert.rejects(connect({ socket, clientId: "js-fake" }), (e: VersionMismatchError) => {
        return e instanceof VersionMismatchError && e.message.includes(`selected version ${major}.${minor}`);
      });
    }
  });

  it("is refused at hello when it grants an extension nobody asked for", async () => {
    for (const extensions of [["presence", "telepathy"], ["presence", "presence"]]) {
      const { socket } = await fake((sock, hello) => send(sock, helloReply(hello, { extensions })));
      await assert.rejects(connect({ socket, clientId: "js-fake" }), (e: Error) => {
        return e instanceof ProtocolError && /granted extension/.test(e.message);
      });
    }
  });

  it("can refuse a connection at accept with a typed error", async () => {
    const { socket } = await fake((sock) => {
      send(sock, env(1, "notice", "connection.closing", { code: "QUOTA_EXCEEDED", message: "maxClients reached" }));
      sock.end();
    });
    await assert.rejects(connect({ socket, clientId: "js-fake" }), QuotaExceededError);
  });

  const violations: Array<[string, Script, RegExp]> = [
    ["a duplicate key", async (sock, _h, frames) => {
      const cmd = (await frames.next()).value;
      send(sock, `{"protocol":"flybus","major":1,"minor":0,"id":"bus-2","replyTo":"${cmd.id}","kind":"reply","op":"topic.clear","body":{"ok":true,"value":{"cleared":true,"cleared":false}},"attachments":[]}`);
    }, /duplicate object key/],
    ["a lone surrogate", async (sock, _h, frames) => {
      const cmd = (await frames.next()).value;
      send(sock, env(2, "reply", "topic.clear", { ok: false, error: { code: "NO_TOPIC", message: "\ud800", dispatch: "not-dispatched" } }, cmd.id));
    }, /surrogate/],
    ["an unknown member", async (sock, _h, frames) => {
      const cmd = (await frames.next()).value;
      send(sock, env(2, "reply", "topic.clear", { ok: true, value: { cleared: true, why: "x" } }, cmd.id));
    }, /unknown member "why"/],
    ["a reply to another op", async (sock, _h, frames) => {
      const cmd = (await frames.next()).value;
      send(sock, env(2, "reply", "topic.delete", { ok: true, value: { deleted: true } }, cmd.id));
    }, /answers a topic.clear/],
    ["a reply to no command", async (sock) => {
      send(sock, env(2, "reply", "topic.clear", { ok: true, value: { cleared: true } }, "msg-99"));
    }, /unknown command msg-99/],
    ["a router id that does not increase", async (sock) => {
      send(sock, env(1, "notice", "route.removed", { name: "a", serviceIncarnation: "svc-1", reason: "unregistered" }));
    }, /must increase/],
    ["a frame length of 0", async (sock) => {
      sock.write(Buffer.alloc(4));
    }, /frame length of 0/],
    ["a stream that ends inside a frame", async (sock) => {
      sock.end(encodeFrame(Buffer.from("{}")).subarray(0, 5));
    }, /inside a frame/],
  ];
  for (const [name, script, why] of violations) {
    it(`closes the client on ${name}`, async () => {
      const c = await afterHello(script);
      // Taken at once: the violation may come before this command is sent.
      const pending = c.clearTopic("t").then(
        () => undefined,
        (e: unknown) => e,
      );
      const lost = await c.done;
      assert.ok(lost instanceof ProtocolError, `${lost.constructor.name}: ${lost.message}`);
      assert.match(lost.message, why);
      assert.ok((await pending) instanceof ProtocolError);
      await c.close();
    });
  }

  it("closes the client on an extension's notice where it was not granted", async () => {
    const c = await afterHello(async (sock, _h, frames) => {
      const cmd = await answer(sock, frames, 2, "subscribe", { subscriptionId: "sub-1", topicIncarnation: "top-1" });
      assert.equal("awaitTopic" in cmd.body, false);
      send(sock, env(3, "notice", "subscription.publishers", { subscriptionId: "sub-1", topic: "t", publishers: 1 }));
    }, { extensions: [] });
    assert.deepStrictEqual(c.info.extensions, []);
    const sub = await c.subscribe("t");
    const lost = await c.done;
    assert.ok(lost instanceof ProtocolError, `${lost.constructor.name}: ${lost.message}`);
    assert.match(lost.message, /not granted extension presence/);
    await assert.rejects(sub.waitPublishers(() => true), ProtocolError);
    await c.close();
  });

  it("refuses awaitTopic, unsent, where await-topic was not granted", async () => {
    const c = await afterHello(async (sock, _h, frames) => {
      // The next command this fake sees is the clear, not a subscribe.
      await answer(sock, frames, 2, "topic.clear", { cleared: false });
    }, { extensions: ["presence"] });
    await assert.rejects(c.subscribe("t", { awaitTopic: true }), (e: InvalidEnvelopeError) => {
      return e instanceof InvalidEnvelopeError && e.dispatch === "not-dispatched" && /await-topic/.test(e.message);
    });
    assert.equal(await c.clearTopic("t"), false);
    assert.equal(c.lost, undefined);
    await c.close();
  });

  it("fails what is in flight with ROUTER_LOST when the connection drops", async () => {
    const c = await afterHello(async (sock, _h, frames) => {
      await frames.next();
      sock.destroy();
    });
    await assert.rejects(c.clearTopic("t"), (e: RouterLostError) => e instanceof RouterLostError && e.dispatch === "unknown");
    await c.close();
  });
});

describe("a 1.1 router", () => {
  it("is asked for await-topic and presence in a 1.1 hello, and tells its grants and store", async () => {
    let seen!: Record<string, any>;
    const { socket } = await fake((sock, hello) => {
      seen = hello;
      send(sock, helloReply(hello, { extensions: ["presence"] }));
    });
    const c = await connect({ socket, clientId: "js-fake" });
    assert.deepStrictEqual([seen.major, seen.minor, seen.op], [1, 1, "bus.hello"]);
    assert.deepStrictEqual(seen.body.extensions, ["await-topic", "presence"]);
    assert.deepStrictEqual(seen.body.extensions, [...EXTENSIONS]);
    assert.deepStrictEqual(seen.body.supportedMajors, [1]);
    assert.deepStrictEqual(c.info.extensions, ["presence"]);
    assert.equal(c.info.storeId, STORE_ID);
    assert.deepStrictEqual([c.info.selectedMajor, c.info.selectedMinor], [1, 1]);
    await c.close();
  });

  it("is refused at connect when storeRoot does not hold its store", async () => {
    const root = fs.mkdtempSync(path.join(dir, "root-"));
    const hello = async () => (await fake((sock, h) => send(sock, helloReply(h)))).socket;
    await assert.rejects(connect({ socket: await hello(), clientId: "js-fake", storeRoot: root }), (e: StoreRootError) => {
      return (
        e instanceof StoreRootError &&
        e instanceof NoStoreRootError &&
        e.storeRoot === root &&
        e.storeId === STORE_ID &&
        e.message.includes(`storeRoot ${root}`) &&
        e.message.includes("flybus serve --store")
      );
    });
    // A file of that name is no store either.
    fs.writeFileSync(path.join(root, STORE_ID), "");
    await assert.rejects(connect({ socket: await hello(), clientId: "js-fake", storeRoot: root }), StoreRootError);
    fs.rmSync(path.join(root, STORE_ID));
    fs.mkdirSync(path.join(root, STORE_ID));
    const c = await connect({ socket: await hello(), clientId: "js-fake", storeRoot: root });
    await c.close();
    // Without storeRoot nothing is checked.
    const d = await connect({ socket: await hello(), clientId: "js-fake" });
    await d.close();
  });

  it("follows an awaiting subscription through its notices, to a close with a null incarnation", async () => {
    let step!: () => void;
    const steps: Array<() => Promise<void> | void> = [];
    const c = await afterHello(async (sock, _h, frames) => {
      const cmd = await answer(sock, frames, 2, "subscribe", { subscriptionId: "sub-1", topicIncarnation: null });
      assert.equal(cmd.body.awaitTopic, true);
      let id = 3;
      const notice = (op: string, body: unknown) => send(sock, env(id++, "notice", op, body));
      steps.push(
        () => notice("subscription.publishers", { subscriptionId: "sub-1", topic: "t", publishers: 0 }),
        () => {
          notice("subscription.topic", { subscriptionId: "sub-1", topic: "t", topicIncarnation: "top-4" });
          notice("subscription.publishers", { subscriptionId: "sub-1", topic: "t", publishers: 1 });
        },
        () => {
          // Two changes in one chunk: a wait gets the count it waited for.
          sock.write(Buffer.concat([
            encodeFrame(Buffer.from(JSON.stringify(env(id++, "notice", "subscription.publishers", { subscriptionId: "sub-1", topic: "t", publishers: 2 })))),
            encodeFrame(Buffer.from(JSON.stringify(env(id++, "notice", "subscription.publishers", { subscriptionId: "sub-1", topic: "t", publishers: 1 })))),
          ]));
        },
        () => {
          notice("subscription.topic", { subscriptionId: "sub-1", topic: "t", topicIncarnation: null });
          notice("subscription.publishers", { subscriptionId: "sub-1", topic: "t", publishers: 0 });
        },
        () => {
          // A notice for a subscription the client does not know is ignored.
          notice("subscription.publishers", { subscriptionId: "sub-9", topic: "u", publishers: 3 });
          notice("subscription.closed", { subscriptionId: "sub-1", topic: "t", topicIncarnation: null, reason: "router-shutdown" });
        },
      );
      step = () => void steps.shift()!();
    });
    const sub = await c.subscribe("t", { awaitTopic: true });
    assert.equal(sub.topicIncarnation, null);
    assert.equal(sub.publishers, null, "no count before the router's first notice");
    const first = sub.waitPublishers((n) => n === 0);
    step();
    assert.equal(await first, 0);
    const declared = sub.waitTopic();
    const deleted = sub.waitTopic({ declared: false }); // already true: resolves at once
    assert.equal(await deleted, null);
    step();
    assert.equal(await declared, "top-4");
    assert.equal(sub.publishers, 1);
    const two = sub.waitPublishers((n) => n === 2);
    const throwing = assert.rejects(
      // A predicate that throws in the reader's turn fails its own wait only.
      sub.waitPublishers((n) => {
        if (n === 2) throw new RangeError("the program's own");
        return false;
      }),
      RangeError,
    );
    step();
    assert.equal(await two, 2);
    await throwing;
    assert.equal(sub.publishers, 1);
    const change = sub.nextPublishers();
    const gone = sub.waitTopic({ declared: false });
    step();
    assert.equal(await change, 0);
    assert.equal(await gone, null);
    // Taken before the close, so its rejection is never unhandled.
    const forever = assert.rejects(sub.waitPublishers((n) => n > 0), SubscriptionClosedError);
    step();
    await assert.rejects(sub.next(), (e: SubscriptionClosedError) => e instanceof SubscriptionClosedError && e.reason === "router-shutdown");
    await forever;
    assert.equal(sub.topicIncarnation, null);
    assert.equal(sub.closedReason, "router-shutdown");
    assert.equal(c.lost, undefined);
    await sub.close();
    await assert.rejects(sub.waitTopic(), HandleClosedError);
    await c.close();
  });
});
