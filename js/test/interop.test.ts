// Node against Go and Python clients through one `flybus serve` built from
// this repository, in both store modes: frames from a Node producer checked
// by digest in Go and Python consumers, RPC both ways between Node and Go,
// grants refused alike, and a router shutdown seen as the same error. The Go
// peer is internal/interop, the Python peer test/peers/py_peer.py (the
// repository's python package); every wait is on what a peer prints.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type BusError,
  type Client,
  connect,
  NotAuthorizedError,
  RouterLostError,
  SubscriptionClosedError,
} from "@flybus/client";
import { type Child, frameBytes, MODES, Router } from "./helpers.js";

const sha = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");
const SIZE = 640 * 480 * 4;

/** Waits for a peer's ready line; its stderr says why when it is not. */
async function ready(peer: Child): Promise<any> {
  const line = await peer.lines.json().catch((e: Error) => {
    throw new Error(`${e.message}\n${peer.stderr}`);
  });
  assert.equal(line.ready, true, `${JSON.stringify(line)}\n${peer.stderr}`);
  return line;
}

/** A reversed copy: what the services answer with. */
function reversed(b: Uint8Array): Buffer {
  return Buffer.from(b).reverse();
}

/**
 * Registers a Node service answering as the Go peer does: Echo, and Digest
 * with the frame reversed. serving settles when the service or client closes.
 */
async function nodeService(c: Client, name: string): Promise<{ serving: Promise<void> }> {
  const svc = await c.register<Record<string, unknown>>(name);
  const serving = svc.serve(async (req) => {
    if (req.method !== "Digest") {
      await req.reply({ got: req.payload, by: "node" });
      return;
    }
    using art = req.artifact("frame");
    const data = await art.readAll();
    const back = reversed(data);
    const w = await c.allocate(back.length, "application/octet-stream");
    w.write(back);
    using out = await w.seal({ digest: sha(back) });
    await req.reply({ sha256: sha(data), bytes: data.length, by: "node" }, { attachments: { frame: out } });
  });
  return { serving };
}

for (const mode of MODES) {
  describe(`interop (${mode} store)`, () => {
    let router: Router;
    const peers: Child[] = [];
    const clients: Client[] = [];
    const dial = async (clientId: string): Promise<Client> => {
      const c = await connect({ socket: router.socket, clientId, storeRoot: router.store });
      clients.push(c);
      return c;
    };
    const peer = (p: Child): Child => {
      peers.push(p);
      return p;
    };

    before(async () => {
      router = await Router.start({ mode });
    });
    after(async () => {
      for (const p of peers) p.kill();
      for (const c of clients) await c.close();
      await router.stop();
    });

    it("a Node producer's frames reach Go and Python consumers, digests checked", async () => {
      const cam = await dial("js-camera");
      await cam.declareTopic("cam.interop");
      const count = 5;
      const go = peer(router.go("consume", ["--topic", "cam.interop", "--count", String(count), "--client", "go-viewer"]));
      const py = peer(router.python("py_peer.py", ["consume", "--topic", "cam.interop", "--count", String(count), "--client", "py-viewer"]));
      await ready(go);
      await ready(py);
      const sent: string[] = [];
      for (let i = 0; i < count; i++) {
        const px = frameBytes(SIZE, 100 + i);
        const w = await cam.allocate(SIZE, "image/x-rgba");
        w.write(px);
        using frame = await w.seal({ digest: sha(px) });
        const r = await cam.publish("cam.interop", { seq: i, width: 640, height: 480 }, { attachments: { frame } });
        assert.equal(r.subscribers, 2);
        sent.push(sha(px));
      }
      for (const [name, p] of [["go", go], ["python", py]] as const) {
        for (let i = 0; i < count; i++) {
          const line = await p.lines.json();
          assert.deepStrictEqual(line.payload, { seq: i, width: 640, height: 480 }, name);
          assert.equal(line.bytes, SIZE, name);
          assert.equal(line.sha256, sent[i], `${name} read other bytes than frame ${i}`);
          assert.equal(line.digest, sent[i], name);
        }
        assert.deepStrictEqual(await p.lines.json(), { end: "done" });
        assert.equal(await p.exited, 0, p.stderr);
      }
    });

    it("Go and Python consumers awaiting a topic get a Node producer's frames once it declares it", async () => {
      const count = 3;
      const args = (client: string) => ["consume", "--await", "--topic", "cam.later", "--count", String(count), "--client", client];
      const go = peer(router.go("consume", args("go-later").slice(1)));
      const py = peer(router.python("py_peer.py", args("py-later")));
      // Subscribed, and waiting: the topic does not exist yet.
      assert.equal((await ready(go)).topicIncarnation, "");
      assert.equal((await ready(py)).topicIncarnation, null);
      const cam = await dial("js-later");
      const { topicIncarnation } = await cam.declareTopic("cam.later");
      assert.match(topicIncarnation, /^top-\d+$/);
      const sent: string[] = [];
      for (let i = 0; i < count; i++) {
        const px = frameBytes(SIZE, 200 + i);
        const w = await cam.allocate(SIZE, "image/x-rgba");
        w.write(px);
        using frame = await w.seal({ digest: sha(px) });
        // Each awaiting subscription was told of the declaration before the
        // reply, so every publication after it reaches both.
        const r = await cam.publish("cam.later", { seq: i }, { attachments: { frame } });
        assert.equal(r.subscribers, 2);
        sent.push(sha(px));
      }
      for (const [name, p] of [["go", go], ["python", py]] as const) {
        for (let i = 0; i < count; i++) {
          const line = await p.lines.json();
          assert.deepStrictEqual([line.seq, line.payload, line.bytes], [i + 1, { seq: i }, SIZE], name);
          assert.equal(line.sha256, sent[i], `${name} read other bytes than frame ${i}`);
        }
        assert.deepStrictEqual(await p.lines.json(), { end: "done" });
        assert.equal(await p.exited, 0, p.stderr);
      }
    });

    it("a Node subscription awaits a Go producer's topic, and counts it until it exits", async () => {
      const viewer = await dial("js-awaiting");
      const sub = await viewer.subscribe("cam.go", { mode: "bounded", awaitTopic: true });
      assert.equal(sub.topicIncarnation, null);
      assert.equal(await sub.waitPublishers((n) => n === 0), 0);
      const counted = sub.waitPublishers((n) => n === 1);
      const declared = sub.waitTopic();
      const size = 64 * 1024;
      const go = peer(router.go("produce", ["--topic", "cam.go", "--count", "3", "--hz", "500", "--size", String(size), "--client", "go-producer"]));
      assert.match((await declared)!, /^top-\d+$/);
      assert.equal(await counted, 1);
      const into = Buffer.alloc(size);
      for (let i = 0; i < 3; i++) {
        using msg = await sub.next();
        assert.deepStrictEqual([msg.topicIncarnation, msg.payload], [sub.topicIncarnation, { seq: i }]);
        using frame = msg.artifact("frame");
        using view = await frame.view();
        assert.equal(sha(view.read(into)), frame.ref.digest, `frame ${i}`);
      }
      assert.deepStrictEqual(await go.lines.json(), { published: 3 });
      assert.equal(await go.exited, 0, go.stderr);
      // Its connection closed with it: no live publisher is left.
      assert.equal(await sub.waitPublishers((n) => n === 0), 0);
      await sub.close();
    });

    it("Node calls a Go service, with frames both ways", async () => {
      const svc = peer(router.go("serve", ["--name", "go.echo"]));
      await ready(svc);
      const c = await dial("js-caller");
      using echo = await c.callAndWait("go.echo", "Echo", { n: 1, s: "é😀", x: [1.5, null] });
      assert.deepStrictEqual(echo.outcome, { got: { n: 1, s: "é😀", x: [1.5, null] }, by: "go" });
      assert.equal(echo.responder.clientId, "go-serve");
      const px = frameBytes(SIZE, 7);
      const w = await c.allocate(SIZE, "image/x-rgba");
      w.write(px);
      const frame = await w.seal();
      using res = await c.callAndWait("go.echo", "Digest", {}, { attachments: { frame } });
      frame.close();
      assert.deepStrictEqual(res.outcome, { sha256: sha(px), bytes: SIZE, by: "go" });
      using back = res.artifact("frame");
      assert.equal(back.ref.digest, sha(reversed(px)));
      await back.verify();
      assert.equal(sha(await back.readAll()), sha(reversed(px)));
      svc.endInput();
      assert.deepStrictEqual(await svc.lines.json(), { end: "done" });
    });

    it("Go (and Python) call a Node service, with frames both ways", async () => {
      const c = await dial("js-service");
      await nodeService(c, "node.echo"); // serves until the client closes
      const px = frameBytes(SIZE, 9);
      const file = path.join(router.dir, "frame.bin");
      fs.writeFileSync(file, px);
      const goDigest = peer(router.go("call", ["--target", "node.echo", "--method", "Digest", "--frame", file, "--client", "go-caller"]));
      const line = await goDigest.lines.json();
      assert.deepStrictEqual(line, { outcome: { sha256: sha(px), bytes: SIZE, by: "node" }, responder: "js-service", sha256: sha(reversed(px)) }, goDigest.stderr);
      assert.equal(await goDigest.exited, 0);
      const goEcho = peer(router.go("call", ["--target", "node.echo", "--payload", '{"k":[1,"x"]}', "--client", "go-caller"]));
      assert.deepStrictEqual(await goEcho.lines.json(), { outcome: { got: { k: [1, "x"] }, by: "node" }, responder: "js-service" });
      const pyEcho = peer(router.python("py_peer.py", ["call", "--target", "node.echo", "--payload", '{"k":2}', "--client", "py-caller"]));
      assert.deepStrictEqual(await pyEcho.lines.json(), { outcome: { got: { k: 2 }, by: "node" }, responder: "js-service" });
    });
  });
}

describe("grants refused alike", () => {
  let router: Router;
  before(async () => {
    const all = { register: ["*"], call: ["*"], publish: ["*"], subscribe: ["*"], manageTopics: ["*"] };
    const none = {};
    router = await Router.start({
      policy: { clients: { "js-admin": all, "js-guest": none, "go-guest": none, "py-guest": none } },
    });
  });
  after(() => router.stop());

  it("refuses Node, Go and Python guests with NOT_AUTHORIZED, not dispatched", async () => {
    const admin = await connect({ socket: router.socketFor("js-admin"), clientId: "js-admin", storeRoot: router.store });
    await admin.declareTopic("grant.topic");
    const { serving } = await nodeService(admin, "grant.svc");
    const guest = await connect({ socket: router.socketFor("js-guest"), clientId: "js-guest", storeRoot: router.store });
    const seen: Record<string, unknown> = {};
    await guest.subscribe("grant.topic").catch((e: BusError) => {
      assert.ok(e instanceof NotAuthorizedError);
      seen.nodeSubscribe = { code: e.code, dispatch: e.dispatch };
    });
    await guest.call("grant.svc", "Echo", {}).catch((e: BusError) => {
      assert.ok(e instanceof NotAuthorizedError);
      seen.nodeCall = { code: e.code, dispatch: e.dispatch };
    });
    await assert.rejects(guest.publish("grant.topic", {}), NotAuthorizedError);
    const sub = (l: any) => ({ code: l.end, dispatch: l.dispatch });
    const call = (l: any) => ({ code: l.error, dispatch: l.dispatch });
    // One at a time per id: a second live connection of a client id is CONFLICT.
    const goSocket = router.socketFor("go-guest");
    const pySocket = router.socketFor("py-guest");
    const goSub = router.go("consume", ["--topic", "grant.topic", "--client", "go-guest"], goSocket);
    seen.goSubscribe = sub(await goSub.lines.json());
    await goSub.exited;
    const goCall = router.go("call", ["--target", "grant.svc", "--client", "go-guest"], goSocket);
    seen.goCall = call(await goCall.lines.json());
    await goCall.exited;
    const pySub = router.python("py_peer.py", ["consume", "--topic", "grant.topic", "--client", "py-guest"], pySocket);
    seen.pySubscribe = sub(await pySub.lines.json());
    await pySub.exited;
    const pyCall = router.python("py_peer.py", ["call", "--target", "grant.svc", "--client", "py-guest"], pySocket);
    seen.pyCall = call(await pyCall.lines.json());
    await pyCall.exited;
    const want = { code: "NOT_AUTHORIZED", dispatch: "not-dispatched" };
    assert.deepStrictEqual(seen, Object.fromEntries(Object.keys(seen).map((k) => [k, want])));
    assert.equal(Object.keys(seen).length, 6);
    await guest.close();
    await admin.close();
    await serving;
  });
});

describe("a router shutdown, seen alike", () => {
  for (const mode of MODES) {
    it(`ends subscriptions with router-shutdown and services with ROUTER_LOST in Node, Go and Python (${mode})`, async () => {
      const router = await Router.start({ mode });
      const c = await connect({ socket: router.socket, clientId: "js-late", storeRoot: router.store });
      await c.declareTopic("end.topic");
      const sub = await c.subscribe("end.topic");
      const svc = await c.register("end.svc");
      const goSub = router.go("consume", ["--topic", "end.topic", "--client", "go-late"]);
      const goSvc = router.go("serve", ["--name", "end.go", "--client", "go-svc"]);
      const pySub = router.python("py_peer.py", ["consume", "--topic", "end.topic", "--client", "py-late"]);
      await Promise.all([ready(goSub), ready(goSvc), ready(pySub)]);
      const nodeSub = sub.next().then(
        () => "a message",
        (e: Error) => (e instanceof SubscriptionClosedError ? `SUBSCRIPTION_CLOSED ${e.reason}` : e.message),
      );
      const nodeSvc = svc.serve(() => undefined).then(
        () => "served",
        (e: Error) => (e instanceof RouterLostError ? e.code : e.message),
      );
      await router.stop();
      const goSubEnd = await goSub.lines.json();
      const pySubEnd = await pySub.lines.json();
      const seen = {
        nodeSubscription: await nodeSub,
        goSubscription: `${goSubEnd.end} ${/router-shutdown/.test(goSubEnd.error) ? "router-shutdown" : goSubEnd.error}`,
        pySubscription: `${pySubEnd.end} ${pySubEnd.reason}`,
        nodeService: await nodeSvc,
        goService: (await goSvc.lines.json()).end,
      };
      assert.deepStrictEqual(seen, {
        nodeSubscription: "SUBSCRIPTION_CLOSED router-shutdown",
        goSubscription: "SUBSCRIPTION_CLOSED router-shutdown",
        pySubscription: "SUBSCRIPTION_CLOSED router-shutdown",
        nodeService: "ROUTER_LOST",
        goService: "ROUTER_LOST",
      });
      await c.close();
      for (const p of [goSub, goSvc, pySub]) await p.exited;
    });
  }
});
