// The Node client's figures for issue 32's Performance section, each beside
// its baseline measured in the same run:
//
//   1. On the 60 Hz 640x480 schedule (a Go producer, internal/interop
//      produce), this process consumes every frame through a latest
//      subscription and times view.read(buf) against a plain fs.readSync of
//      the same slot file into the same buffer (target: within 1.3x), in
//      alternating order per frame.
//   2. This process's CPU per frame over that run (process.cpuUsage: the
//      consumer alone; the producer and the router are other processes).
//   3. A Node RPC round trip (an echo service and a caller, two connections
//      in this process) against the Go SDK's (internal/interop rpcbench,
//      the same shape in one Go process), against the same router.
//
//   npm run bench -- [--frames N] [--calls N] [--quick]
//
// --quick runs a few frames and calls, to check that the script works; the
// figures then mean nothing. It needs pool mode: the baseline opens the slot
// file by its name in the store (slot-<16 hex of the slot number>).

import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { connect } from "@flybus/client";
import { Router } from "../test/helpers.js";

const args = process.argv.slice(2);
const flag = (name: string, dflt: number): number => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const quick = args.includes("--quick");
const FRAMES = flag("--frames", quick ? 20 : 600);
const CALLS = flag("--calls", quick ? 200 : 5000);
const SIZE = 640 * 480 * 4;

function ns(): bigint {
  return process.hrtime.bigint();
}

function summary(xs: number[]): { median: number; p90: number; p99: number; mean: number } {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
  return { median: at(0.5), p90: at(0.9), p99: at(0.99), mean: s.reduce((a, b) => a + b, 0) / s.length };
}

const us = (x: number): string => `${x.toFixed(1)} µs`;

async function frames(router: Router): Promise<string[]> {
  const c = await connect({ socket: router.socket, clientId: "js-bench-viewer", storeRoot: router.store, heldWarnAfterMs: 0 });
  await c.declareTopic("bench.frames");
  const sub = await c.subscribe("bench.frames", { mode: "latest", inFlight: 1 });
  const producer = router.go("produce", ["--topic", "bench.frames", "--count", String(FRAMES), "--client", "go-bench-camera"]);
  const buf = Buffer.alloc(SIZE);
  const baseFds = new Map<string, number>();
  const viewNs: number[] = [];
  const plainNs: number[] = [];
  let received = 0;
  let digestsChecked = 0;
  const cpu0 = process.cpuUsage();
  const wall0 = ns();
  // Latest mode may skip frames under load (counted in replaced); the run
  // ends with the producer's last frame, whose sequence is FRAMES.
  let skipped = 0;
  for (let last = 0; last < FRAMES; ) {
    const msg = await sub.next();
    last = msg.topicSequence;
    skipped += msg.replaced;
    const art = msg.artifact("frame");
    const slotFile = path.join(router.store, art.ref.storeId, `slot-${Number(art.ref.artifactId.slice(2)).toString(16).padStart(16, "0")}`);
    let fd = baseFds.get(slotFile);
    if (fd === undefined) {
      fd = fs.openSync(slotFile, "r");
      baseFds.set(slotFile, fd);
    }
    const v = await art.view();
    const timeView = (): void => {
      const t = ns();
      v.read(buf);
      viewNs.push(Number(ns() - t));
    };
    const timePlain = (): void => {
      const t = ns();
      fs.readSync(fd, buf, 0, SIZE, 0);
      plainNs.push(Number(ns() - t));
    };
    if (received % 2 === 0) {
      timeView();
      timePlain();
    } else {
      timePlain();
      timeView();
    }
    if (received % 30 === 0) {
      v.read(buf);
      if (createHash("sha256").update(buf).digest("hex") !== art.ref.digest) throw new Error("a frame's bytes differ from its digest");
      digestsChecked++;
    }
    v.close();
    art.close();
    msg.close();
    received++;
  }
  const wallS = Number(ns() - wall0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  await producer.lines.json();
  for (const fd of baseFds.values()) fs.closeSync(fd);
  await producer.exited;
  await sub.close();
  const st = c.stats();
  await c.close();
  const view = summary(viewNs.map((x) => x / 1000));
  const plain = summary(plainNs.map((x) => x / 1000));
  const cpuUs = (cpu.user + cpu.system) / received;
  return [
    `## Frames: ${received} of ${FRAMES} 640x480 RGBA frames at 60 Hz (latest subscription, ${skipped} replaced), ${wallS.toFixed(1)} s, ${digestsChecked} digests checked`,
    "",
    "| read of one frame into a reused buffer | median | p90 | p99 | mean |",
    "| --- | --- | --- | --- | --- |",
    `| view.read(buf) (pread on the cached slot descriptor) | ${us(view.median)} | ${us(view.p90)} | ${us(view.p99)} | ${us(view.mean)} |`,
    `| fs.readSync of the same slot file, same buffer | ${us(plain.median)} | ${us(plain.p90)} | ${us(plain.p99)} | ${us(plain.mean)} |`,
    `| ratio (target within 1.3x) | ${(view.median / plain.median).toFixed(2)}x | ${(view.p90 / plain.p90).toFixed(2)}x | ${(view.p99 / plain.p99).toFixed(2)}x | ${(view.mean / plain.mean).toFixed(2)}x |`,
    "",
    `Consumer CPU per frame: ${us(cpuUs)} (user ${us(cpu.user / received)}, system ${us(cpu.system / received)}), ` +
      `the whole consumer: delivery, view, one timed read and one baseline read per frame, consume.`,
    `Views served from a cached slot descriptor: ${st.slotHits}; slot descriptors opened: ${st.slotOpens}; artifact.open round trips: ${st.artifactOpens}.`,
  ];
}

async function rpc(router: Router): Promise<string[]> {
  const server = await connect({ socket: router.socket, clientId: "js-bench-service" });
  const caller = await connect({ socket: router.socket, clientId: "js-bench-caller" });
  const svc = await server.register("js.bench.echo");
  const serving = svc.serve(async (req) => {
    await req.reply({ got: req.payload });
  });
  const once = async (i: number): Promise<void> => {
    const r = await caller.callAndWait("js.bench.echo", "Echo", { i }, { pin: svc.incarnation });
    r.close();
  };
  for (let i = 0; i < 200; i++) await once(i);
  const t = ns();
  for (let i = 0; i < CALLS; i++) await once(i);
  const nodeUs = Number(ns() - t) / 1000 / CALLS;
  await caller.close();
  await server.close();
  await serving;
  const go = router.go("rpcbench", ["--n", String(CALLS)]);
  const line = await go.lines.json();
  await go.exited;
  const goUs = line.nsPerCall / 1000;
  return [
    `## RPC round trip: ${CALLS} echo calls, one at a time (service and caller in one process, two connections)`,
    "",
    "| client | per call |",
    "| --- | --- |",
    `| Node (@flybus/client) | ${us(nodeUs)} |`,
    `| Go SDK (internal/interop rpcbench) | ${us(goUs)} |`,
    `| ratio | ${(nodeUs / goUs).toFixed(2)}x |`,
  ];
}

const router = await Router.start({ mode: "pool" });
try {
  const out = [`# @flybus/client benchmark (Node ${process.version}${quick ? ", --quick: figures meaningless" : ""})`, ""];
  out.push(...(await frames(router)), "");
  out.push(...(await rpc(router)));
  console.log(out.join("\n"));
} finally {
  await router.stop();
}
