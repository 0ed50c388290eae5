// The client against a real `flybus serve`, in both store modes: hello,
// pub/sub, RPC, artifacts and views, handles and their close, the leak net,
// the stalled-subscription warning and a router shutdown.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setImmediate as tick } from "node:timers/promises";
import v8 from "node:v8";
import vm from "node:vm";
import {
  ArtifactMismatchError,
  BusError,
  CallGoneError,
  type Client,
  CONTRACT,
  CONTRACT_DIGEST,
  connect,
  type ConnectOptions,
  EXTENSIONS,
  HandleClosedError,
  NoRouterError,
  NoServiceError,
  NoStoreRootError,
  NoTopicError,
  RouterLostError,
  StoreRootError,
  type Subscription,
  SubscriptionClosedError,
  TargetChangedError,
  ConflictError,
} from "@flybus/client";
import { frameBytes, goBinary, MODES, Router } from "./helpers.js";
import { PROTOCOL_MINOR } from "@flybus/client/wire";

const sha = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");

v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;

for (const mode of MODES) {
  describe(`client (${mode} store)`, () => {
    let router: Router;
    const clients: Client[] = [];
    let n = 0;
    const dial = async (opts: Partial<ConnectOptions> = {}): Promise<Client> => {
      const c = await connect({ socket: router.socket, clientId: `js-${++n}`, storeRoot: router.store, ...opts });
      clients.push(c);
      return c;
    };

    before(async () => {
      router = await Router.start({ mode });
    });
    after(async () => {
      for (const c of clients) await c.close();
      await router.stop();
    });

    it("says hello and knows the router", async () => {
      const c = await dial();
      assert.equal(c.info.routerId, router.ready.routerId);
      assert.equal(c.info.contractDigest, CONTRACT_DIGEST);
      assert.equal(c.info.limits.maxEnvelopeBytes, 65536);
      assert.equal(c.info.limits.maxBoundedQueued, 64);
      assert.deepStrictEqual([c.info.selectedMajor, c.info.selectedMinor], [1, 1]);
      assert.deepStrictEqual(c.info.extensions, [...EXTENSIONS]);
      assert.equal(c.info.storeId, router.ready.storeId);
    });

    it("checks at connect that storeRoot holds the router's store", async () => {
      // The router's directory (it holds store/, not the store), and the
      // store's own directory (one level too deep), are both wrong.
      const storeDir = path.join(router.store, router.ready.storeId);
      for (const wrong of [router.dir, storeDir, path.join(router.dir, "nowhere")]) {
        await assert.rejects(dial({ storeRoot: wrong }), (e: StoreRootError) => {
          return (
            e instanceof StoreRootError &&
            e instanceof NoStoreRootError &&
            e.storeRoot === wrong &&
            e.storeId === router.ready.storeId &&
            e.message.includes(`storeRoot ${wrong}`) &&
            e.message.includes("flybus serve --store")
          );
        });
      }
      // The right root, with a trailing slash: artifacts work at once.
      const c = await dial({ storeRoot: `${router.store}/` });
      const w = await c.allocate(3, "text/plain");
      w.write(Buffer.from("abc"));
      using a = await w.seal();
      assert.equal((await a.readAll()).toString(), "abc");
    });

    it("awaits a topic declared later, and carries frames once it is", async () => {
      const viewer = await dial();
      const cam = await dial();
      await assert.rejects(viewer.subscribe("js.await"), NoTopicError);
      await using sub = await viewer.subscribe("js.await", { mode: "bounded", awaitTopic: true });
      assert.equal(sub.topicIncarnation, null);
      assert.equal(await sub.waitPublishers((n) => n === 0), 0, "an awaiting subscription counts 0 publishers");
      const declaring = sub.waitTopic();
      const { topicIncarnation: inc1 } = await cam.declareTopic("js.await");
      assert.equal(await declaring, inc1);
      assert.equal(sub.topicIncarnation, inc1);
      const size = 64 * 1024;
      const sent: string[] = [];
      for (let i = 0; i < 3; i++) {
        const px = frameBytes(size, 40 + i);
        const w = await cam.allocate(size, "image/x-rgba");
        w.write(px);
        using frame = await w.seal({ digest: sha(px) });
        await cam.publish("js.await", { i }, { attachments: { frame } });
        sent.push(sha(px));
      }
      assert.equal(await sub.waitPublishers((n) => n === 1), 1);
      const into = Buffer.alloc(size);
      for (let i = 0; i < 3; i++) {
        using msg = await sub.next();
        assert.deepStrictEqual([msg.topicIncarnation, msg.topicSequence, msg.payload], [inc1, i + 1, { i }]);
        using art = msg.artifact("frame");
        using view = await art.view();
        assert.equal(sha(view.read(into)), sent[i]);
      }
      await cam.close();
      assert.equal(await sub.waitPublishers((n) => n === 0), 0, "the producer's close ends its count");
      // Only awaiting subscriptions hold the topic: it can be deleted, and
      // they wait for the next declaration, which starts afresh.
      const deleting = sub.waitTopic({ declared: false });
      assert.equal(await viewer.deleteTopic("js.await"), true);
      assert.equal(await deleting, null);
      const cam2 = await dial();
      const { topicIncarnation: inc2 } = await cam2.declareTopic("js.await");
      assert.notEqual(inc2, inc1);
      assert.equal(await sub.waitTopic(), inc2);
      const w = await cam2.allocate(5, "text/plain");
      w.write(Buffer.from("again"));
      using note = await w.seal();
      await cam2.publish("js.await", { again: true }, { attachments: { note } });
      using msg = await sub.next();
      assert.deepStrictEqual([msg.topicIncarnation, msg.topicSequence, msg.payload], [inc2, 1, { again: true }]);
      using got = msg.artifact("note");
      assert.equal((await got.readAll()).toString(), "again");
      assert.equal(await sub.waitPublishers((n) => n === 1), 1);
    });

    it("counts live publishers and tells each change without polling", async () => {
      const watcher = await dial();
      const p1 = await dial();
      const p2 = await dial();
      const { topicIncarnation } = await watcher.declareTopic("js.presence");
      const sub: Subscription = await watcher.subscribe("js.presence", { mode: "bounded" });
      assert.equal(sub.topicIncarnation, topicIncarnation);
      assert.equal(await sub.waitPublishers((n) => n === 0), 0);
      // Declaring does not count: publishing does.
      await p1.declareTopic("js.presence");
      let change = sub.nextPublishers();
      await p1.publish("js.presence", { from: 1 });
      assert.equal(await change, 1);
      change = sub.nextPublishers();
      await p1.publish("js.presence", { from: 1 }); // no change: p1 counts already
      await p2.publish("js.presence", { from: 2 });
      assert.equal(await change, 2);
      assert.equal(sub.publishers, 2);
      change = sub.nextPublishers();
      await p2.close();
      assert.equal(await change, 1);
      await p1.close();
      assert.equal(await sub.waitPublishers((n) => n === 0), 0);
      for (let i = 0; i < 3; i++) (await sub.next()).close();
      // A wait gives up with its signal, and ends with the subscription.
      const ac = new AbortController();
      const never = sub.waitPublishers((n) => n > 5, { signal: ac.signal });
      ac.abort();
      await assert.rejects(never, { name: "AbortError" });
      const pending = assert.rejects(sub.nextPublishers(), HandleClosedError);
      await sub.close();
      await pending;
      await assert.rejects(sub.waitTopic(), HandleClosedError);
    });

    it("speaks the contract of the flybus built from this repository, in the minor it knows", () => {
      // The router answers a client in the minor its hello was written in.
      const out = execFileSync(goBinary("./cmd/flybus"), ["contract", "--minor", String(PROTOCOL_MINOR)], { encoding: "utf8" });
      const digestLine = `contractDigest ${CONTRACT_DIGEST}\n`;
      assert.equal(out, CONTRACT + digestLine, "src/contract.ts is stale: run npm run contract");
    });

    it("refuses a second connection of one client id with CONFLICT", async () => {
      await dial({ clientId: "js-twice" });
      await assert.rejects(dial({ clientId: "js-twice" }), (e: BusError) => e instanceof ConflictError && e.code === "CONFLICT");
    });

    it("names the socket when nothing listens", async () => {
      await assert.rejects(connect({ socket: `${router.dir}/nobody.sock`, clientId: "x" }), (e: NoRouterError) => {
        return e instanceof NoRouterError && e.path.endsWith("nobody.sock") && /flybus serve/.test(e.message);
      });
    });

    it("publishes and delivers, bounded and latest, with replay", async () => {
      const pub = await dial();
      const sub = await dial();
      await pub.declareTopic("js.ps", { retained: "latest" });
      await pub.publish("js.ps", { step: 0 });
      await using bounded = await sub.subscribe<{ i: number; x: unknown[] }>("js.ps", { mode: "bounded" });
      await using replayed = await sub.subscribe<{ step: number }>("js.ps", { replay: true, inFlight: 1 });
      // The replay holds the latest subscription's only credit while five
      // more are published: they coalesce in its one queued slot.
      const first = await replayed.next();
      assert.deepStrictEqual([first.topicSequence, first.payload], [1, { step: 0 }]);
      for (let i = 0; i < 5; i++) {
        const r = await pub.publish("js.ps", { i, x: [1.5, null, "é"] });
        assert.deepStrictEqual(r, { topicSequence: i + 2, subscribers: 2, replaced: i === 0 ? 0 : 1 });
      }
      let i = 0;
      for await (using m of bounded) {
        assert.deepStrictEqual([m.topicSequence, m.payload], [i + 2, { i, x: [1.5, null, "é"] }]);
        if (++i === 5) break;
      }
      assert.equal(bounded.tryNext(), undefined);
      // The latest subscription kept only the newest value, counting what it skipped.
      first.close();
      using last = await replayed.next();
      assert.deepStrictEqual([last.topicSequence, last.replaced], [6, 4]);
    });

    it("refuses with typed errors carrying code and dispatch", async () => {
      const c = await dial();
      await assert.rejects(c.publish("js.nowhere", {}), (e: BusError) => {
        return e instanceof NoTopicError && e instanceof BusError && e.code === "NO_TOPIC" && e.dispatch === "not-dispatched";
      });
      await assert.rejects(c.call("js.nobody", "M", {}), (e: BusError) => e instanceof NoServiceError && e.code === "NO_SERVICE");
      await assert.rejects(c.publish("js.ps", [] as unknown), TypeError);
      await assert.rejects(c.publish("js.ps", { bad: NaN }), /NaN/);
    });

    it("serves RPC between Node clients, with pins, responders and cancels", async () => {
      const warnings: string[] = [];
      const agent = await dial({ onWarning: (m) => warnings.push(m) });
      const coord = await dial();
      const svc = await agent.register<{ n: number }>("js.counter", { inFlight: 4 });
      let total = 0;
      let gate = Promise.resolve();
      const ac = new AbortController();
      const serving = svc.serve(
        async (req) => {
          if (req.method === "Later") {
            const r = req.responder(); // answers after the request is closed
            setImmediate(() => void r.reply({ later: true }).finally(() => r.close()));
            return;
          }
          if (req.method === "Throw") throw new Error("handler failed");
          if (req.method === "Gate") {
            await gate;
            await req.reply({ gated: true });
            return;
          }
          total += req.payload.n;
          await req.reply({ total, caller: req.caller.clientId });
        },
        { signal: ac.signal },
      );
      for (const k of [2, 3]) {
        const p = await coord.call("js.counter", "Counter.Add", { n: k }, { pin: svc.incarnation });
        using res = await p.result();
        assert.deepStrictEqual(res.outcome, { total: total, caller: coord.clientId });
        assert.equal(res.responder.clientId, agent.clientId);
        p.close();
      }
      assert.equal(total, 5);
      using later = await coord.callAndWait("js.counter", "Later", {});
      assert.deepStrictEqual(later.outcome, { later: true });
      await assert.rejects(coord.callAndWait("js.counter", "Throw", {}), (e: BusError) => {
        return e instanceof CallGoneError && e.dispatch === "dispatched";
      });
      assert.match(warnings.join("\n"), /the handler of js.counter threw on Throw: Error: handler failed/);
      // A result awaited with a signal that aborts can be awaited again.
      let open!: () => void;
      gate = new Promise<void>((r) => (open = r));
      const p = await coord.call("js.counter", "Gate", {});
      const ac2 = new AbortController();
      const waiting = p.result({ signal: ac2.signal });
      ac2.abort();
      await assert.rejects(waiting, { name: "AbortError" });
      open();
      using again = await p.result();
      assert.deepStrictEqual(again.outcome, { gated: true });
      p.close();
      ac.abort();
      await serving;
      await svc.close();
      await assert.rejects(coord.call("js.counter", "Counter.Add", { n: 1 }, { pin: svc.incarnation }), NoServiceError);
      const svc2 = await agent.register("js.counter", { inFlight: 1 });
      await assert.rejects(coord.call("js.counter", "Counter.Add", { n: 1 }, { pin: svc.incarnation }), TargetChangedError);
      // The only credit taken by a request held open, a second call waits in
      // the queue: cancelled before dispatch, its caller sees CALL_GONE, not
      // dispatched; the held one may have run.
      const first = await coord.call("js.counter", "Hold", {});
      const held = await svc2.next();
      const q = await coord.call("js.counter", "Slow", {});
      assert.equal(await q.cancel(), "cancelled-before-dispatch");
      await assert.rejects(q.result(), (e: BusError) => e instanceof CallGoneError && e.dispatch === "not-dispatched");
      assert.equal(await first.cancel(), "execution-unknown");
      assert.equal(await held.reply({}), false, "a reply to a detached caller is not routed");
      held.close();
      await svc2.close();
    });

    it("moves artifacts: write, seal with a digest, attach, view into a reused buffer", async () => {
      const cam = await dial();
      const viewer = await dial();
      await cam.declareTopic("js.frames");
      await using sub = await viewer.subscribe("js.frames", { mode: "bounded" });
      const size = 640 * 480 * 4;
      const sent: string[] = [];
      for (let i = 0; i < 4; i++) {
        const px = frameBytes(size, i);
        const w = await cam.allocate(size, "image/x-rgba");
        assert.equal(w.write(px.subarray(0, 1000)), 1000);
        w.writeAt(px.subarray(1000), 1000);
        sent.push(sha(px));
        using frame = await w.seal({ digest: sha(px) });
        assert.equal(frame.ref.digest, sha(px));
        await cam.publish("js.frames", { i }, { attachments: { frame } });
      }
      const into = Buffer.alloc(size + 16);
      const before = viewer.stats();
      for (let i = 0; i < 4; i++) {
        using msg = await sub.next();
        assert.deepStrictEqual(msg.attachments, ["frame"]);
        using art = msg.artifact("frame");
        using view = await art.view();
        const got = view.read(into);
        assert.equal(got.buffer, into.buffer, "read into the program's buffer");
        assert.equal(got.length, size);
        assert.equal(sha(got), sent[i]);
        view.verify(into);
        await art.verify();
      }
      const st = viewer.stats();
      if (mode === "pool") {
        // One descriptor per slot: a second view of a slot needs no round trip.
        assert.ok(st.cachedSlots >= 1 && st.cachedSlots <= 4, `cached ${st.cachedSlots}`);
        assert.ok(st.slotHits > before.slotHits, "no view was served from a cached slot");
        assert.equal(st.slotOpens, st.artifactOpens);
      } else {
        assert.equal(st.cachedSlots, 0);
        assert.ok(st.artifactOpens >= 4);
      }
    });

    it("keeps an artifact by a hold after its message, and refuses a bad digest", async () => {
      const a = await dial();
      const b = await dial();
      await a.declareTopic("js.hold");
      await using sub = await b.subscribe("js.hold", { mode: "bounded" });
      const w = await a.allocate(5, "text/plain");
      w.write(Buffer.from("hello"));
      const art = await w.seal();
      assert.equal(art.ref.digest, null);
      await a.publish("js.hold", {}, { attachments: { note: art } });
      art.close();
      const msg = await sub.next();
      const shared = msg.artifact("note");
      const kept = await shared.retain();
      shared.close();
      msg.close();
      assert.equal((await kept.readAll()).toString(), "hello");
      await assert.rejects(kept.verify(), /without a digest/);
      kept.close();
      const bad = await a.allocate(3, "text/plain");
      bad.write(Buffer.from("abc"));
      await assert.rejects(bad.seal({ digest: "0".repeat(64) }), ArtifactMismatchError);
      const abandoned = await a.allocate(3, "text/plain");
      abandoned.close();
      assert.throws(() => abandoned.write(Buffer.from("x")), HandleClosedError);
    });

    it("refuses use after close with HandleClosedError, and closes idempotently", async () => {
      const a = await dial();
      await a.declareTopic("js.closed");
      const sub = await a.subscribe("js.closed", { mode: "bounded" });
      const w = await a.allocate(4, "application/octet-stream");
      w.write(Buffer.from([1, 2, 3, 4]));
      const art = await w.seal();
      await a.publish("js.closed", {}, { attachments: { x: art } });
      assert.throws(() => w.write(Buffer.from([1])), HandleClosedError);
      await assert.rejects(w.seal(), HandleClosedError);
      const msg = await sub.next();
      const got = msg.artifact("x");
      const view = await got.view();
      view.close();
      view.close();
      assert.throws(() => view.read(), (e: Error) => e instanceof HandleClosedError && /view was already closed/.test(e.message));
      got.close();
      await assert.rejects(got.view(), HandleClosedError);
      msg.close();
      assert.throws(() => msg.artifact("x"), HandleClosedError);
      art.close();
      await assert.rejects(art.retain(), HandleClosedError);
      await sub.close();
      await assert.rejects(sub.next(), HandleClosedError);
      const b = await dial({ storeRoot: undefined as unknown as string });
      await assert.rejects(b.allocate(1, "x/y"), NoStoreRootError);
    });

    it("releases a handle collected unclosed, counts it and warns", async () => {
      const warnings: string[] = [];
      const a = await dial();
      const b = await dial({ onWarning: (m) => warnings.push(m) });
      await a.declareTopic("js.leak");
      const sub = await b.subscribe("js.leak", { inFlight: 1 });
      await a.publish("js.leak", { n: 1 });
      await sub.next(); // taken and dropped unclosed: it holds the only credit
      for (let i = 0; b.stats().leaked === 0; i++) {
        assert.ok(i < 200, "the leaked message was never collected");
        gc();
        await tick();
      }
      assert.match(warnings.join("\n"), /a Message was garbage-collected without close/);
      // The credit came back with the leaked delivery: the next message arrives.
      await a.publish("js.leak", { n: 2 });
      using m = await sub.next();
      assert.deepStrictEqual(m.payload, { n: 2 });
      await sub.close();
    });

    it("warns when a subscription's credits are all held unconsumed", async () => {
      let warned!: (m: string) => void;
      const warning = new Promise<string>((r) => (warned = r));
      const a = await dial();
      const b = await dial({ heldWarnAfterMs: 20, onWarning: (m, code) => code === "FLYBUS_STALLED" && warned(m) });
      await a.declareTopic("js.stall");
      const sub = await b.subscribe("js.stall", { mode: "bounded", inFlight: 2 });
      await a.publish("js.stall", {});
      await a.publish("js.stall", {});
      const held = [await sub.next(), await sub.next()];
      assert.match(await warning, /has held all 2 in-flight credits unconsumed/);
      assert.equal(b.stats().stalledSubscriptions, 1);
      for (const m of held) m.close();
      await sub.close();
    });
  });
}

describe("router shutdown", () => {
  for (const mode of MODES) {
    it(`ends subscriptions and calls with typed errors (${mode})`, async () => {
      const router = await Router.start({ mode });
      const a = await connect({ socket: router.socket, clientId: "js-a", storeRoot: router.store });
      const b = await connect({ socket: router.socket, clientId: "js-b", storeRoot: router.store });
      await a.declareTopic("js.end");
      const sub = await b.subscribe("js.end");
      // One that still awaits its topic is closed too, with a null incarnation.
      const awaiting = await b.subscribe("js.never", { awaitTopic: true });
      const declared = assert.rejects(awaiting.waitTopic(), SubscriptionClosedError);
      const svc = await a.register("js.hang");
      const pending = await b.call("js.hang", "Wait", {});
      const iterated = (async () => {
        for await (const m of sub) m.close();
      })();
      const ended = assert.rejects(iterated, (e: SubscriptionClosedError) => e instanceof SubscriptionClosedError && e.reason === "router-shutdown");
      await router.stop();
      await ended;
      await assert.rejects(awaiting.next(), (e: SubscriptionClosedError) => e instanceof SubscriptionClosedError && e.reason === "router-shutdown");
      await declared;
      assert.equal(awaiting.topicIncarnation, null);
      assert.equal(awaiting.closedReason, "router-shutdown");
      await assert.rejects(pending.result(), (e: BusError) => e instanceof RouterLostError && e.dispatch === "unknown");
      await assert.rejects(svc.next(), RouterLostError);
      const lost = await b.done;
      assert.ok(lost instanceof RouterLostError);
      await assert.rejects(b.publish("js.end", {}), (e: BusError) => e instanceof RouterLostError && e.dispatch === "not-dispatched" && /not sent/.test(e.message));
      await a.close();
      await b.close();
    });
  }
});
