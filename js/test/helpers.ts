// What the tests share: the repository, binaries built from it, a real
// `flybus serve` per test, and children whose output lines are awaited (never
// a sleep).

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

/** The repository root: the directory above js/ that holds go.mod. */
export const REPO = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, "go.mod"))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error("no go.mod above the tests");
    dir = up;
  }
  return dir;
})();

const binDir = fs.mkdtempSync(path.join(os.tmpdir(), "flybus-js-bin-"));
process.on("exit", () => fs.rmSync(binDir, { recursive: true, force: true }));
const built = new Map<string, string>();

// Binaries given instead of built: FLYBUS_BIN (flybus), FLYBUS_INTEROP_BIN
// (the Go peer), for a run against binaries built elsewhere.
const given: Record<string, string | undefined> = {
  "./cmd/flybus": process.env.FLYBUS_BIN,
  "./internal/interop": process.env.FLYBUS_INTEROP_BIN,
};

/** Builds the Go package pkg (./cmd/flybus, ./internal/interop) once per test process, unless given. */
export function goBinary(pkg: string): string {
  const g = given[pkg];
  if (g) return g;
  let out = built.get(pkg);
  if (out === undefined) {
    out = path.join(binDir, path.basename(pkg));
    execFileSync("go", ["build", "-o", out, pkg], { cwd: REPO, stdio: ["ignore", "inherit", "inherit"] });
    built.set(pkg, out);
  }
  return out;
}

/** The lines a child prints on stdout, awaited one at a time. */
export class Lines {
  private buf: string[] = [];
  private waiters: Array<(l: string | undefined) => void> = [];
  private ended = false;
  readonly all: string[] = [];

  constructor(stream: NodeJS.ReadableStream) {
    const rl = readline.createInterface({ input: stream });
    rl.on("line", (l) => {
      this.all.push(l);
      const w = this.waiters.shift();
      if (w) w(l);
      else this.buf.push(l);
    });
    rl.on("close", () => {
      this.ended = true;
      for (const w of this.waiters.splice(0)) w(undefined);
    });
  }

  /** The next line, or undefined at the end of the stream. */
  next(): Promise<string | undefined> {
    const l = this.buf.shift();
    if (l !== undefined) return Promise.resolve(l);
    if (this.ended) return Promise.resolve(undefined);
    return new Promise((r) => this.waiters.push(r));
  }

  /** The next line as JSON; throws at the end of the stream. */
  async json(): Promise<any> {
    const l = await this.next();
    if (l === undefined) throw new Error("the stream ended; lines so far:\n" + this.all.join("\n"));
    return JSON.parse(l);
  }
}

/** A child process whose stdout lines and stderr are kept. */
export class Child {
  readonly proc: ChildProcess;
  readonly lines: Lines;
  stderr = "";
  readonly exited: Promise<number | null>;

  constructor(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}) {
    this.proc = spawn(cmd, args, { stdio: ["pipe", "pipe", "pipe"], env: opts.env ?? process.env, cwd: opts.cwd ?? REPO });
    this.lines = new Lines(this.proc.stdout!);
    this.proc.stderr!.setEncoding("utf8");
    this.proc.stderr!.on("data", (d: string) => (this.stderr += d));
    this.exited = new Promise((r) => this.proc.once("exit", (code) => r(code)));
  }

  /** Closes its stdin (the Go service peer stops then). */
  endInput(): void {
    this.proc.stdin!.end();
  }

  kill(): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill("SIGKILL");
  }
}

export type StoreMode = "pool" | "files";

/** Options of a router: a store mode, and a config file's policy instead of --open. */
export interface RouterOptions {
  mode?: StoreMode;
  /** The "policy" member of a --config file; --open without it. */
  policy?: unknown;
  limits?: Record<string, number>;
}

/** `flybus serve` in a fresh directory: socket, store root, ready line. */
export class Router {
  readonly dir: string;
  readonly socket: string;
  readonly store: string;
  readonly mode: StoreMode;
  readonly child: Child;
  ready!: { routerId: string; storeId: string };

  private constructor(opts: RouterOptions) {
    this.mode = opts.mode ?? "pool";
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "flybus-js-"));
    this.socket = path.join(this.dir, "bus.sock");
    this.store = path.join(this.dir, "store");
    const args = ["serve", "--store", this.store, "--store-mode", this.mode, "--log-format", "json"];
    if (opts.policy !== undefined || opts.limits !== undefined) {
      const cfgPath = path.join(this.dir, "config.json");
      const cfg: Record<string, unknown> = {};
      if (opts.policy !== undefined) {
        // A closed policy binds each client to a socket of its own.
        const ids = Object.keys((opts.policy as { clients?: object }).clients ?? {});
        cfg.listen = ids.map((id) => ({ path: this.socketFor(id), client: id }));
        cfg.policy = opts.policy;
      } else {
        cfg.listen = [{ path: this.socket, client: null }];
        cfg.policy = { open: true };
      }
      if (opts.limits !== undefined) cfg.limits = opts.limits;
      fs.writeFileSync(cfgPath, JSON.stringify(cfg));
      args.push("--config", cfgPath);
    } else {
      args.push("--open", "--listen", this.socket);
    }
    this.child = new Child(goBinary("./cmd/flybus"), args);
  }

  /** The socket bound to client id, under a closed policy. */
  socketFor(id: string): string {
    return path.join(this.dir, `${id}.sock`);
  }

  /** Starts a router and waits for its ready line. */
  static async start(opts: RouterOptions = {}): Promise<Router> {
    const r = new Router(opts);
    const line = await r.child.lines.json().catch(() => {
      throw new Error(`flybus serve did not start: ${r.child.stderr}`);
    });
    if (line.ready !== true) throw new Error(`flybus serve said ${JSON.stringify(line)}`);
    r.ready = line;
    return r;
  }

  /** Shuts the router down (SIGTERM), waits for it and removes its directory. */
  async stop(): Promise<void> {
    if (this.child.proc.exitCode === null && this.child.proc.signalCode === null) this.child.proc.kill("SIGTERM");
    await this.child.exited;
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  /** Starts the Go peer (internal/interop) in role with args against this router. */
  go(role: string, args: string[], socket = this.socket): Child {
    return new Child(goBinary("./internal/interop"), [role, "--socket", socket, "--store", this.store, ...args]);
  }

  /** Starts a Python peer script of js/test/peers against this router, with the repository's python package. */
  python(script: string, args: string[], socket = this.socket): Child {
    // FLYBUS_PYTHON_SRC: another tree's package, to pair with FLYBUS_BIN.
    const src = process.env.FLYBUS_PYTHON_SRC ?? path.join(REPO, "python", "src");
    const env = { ...process.env, PYTHONPATH: src, PYTHONUNBUFFERED: "1" };
    return new Child("python3", [path.join(REPO, "js", "test", "peers", script), "--socket", socket, "--store", this.store, ...args], {
      env,
    });
  }
}

/** Both store modes, for tests that must pass in each. */
export const MODES: StoreMode[] = ["pool", "files"];

/** A deterministic frame of n bytes, different for each seed. */
export function frameBytes(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    if ((i & 3) === 0) {
      x ^= x << 13;
      x >>>= 0;
      x ^= x >>> 17;
      x ^= x << 5;
      x >>>= 0;
    }
    b[i] = (x >>> ((i & 3) * 8)) & 0xff;
  }
  return b;
}

interface CaseFile {
  comment: string;
  groups: Array<{ name: string; why: string; cases: Array<{ name: string; in?: string; hex?: string }> }>;
}

/** The shared cases of wire/testdata/scanner/<name>.json, each as bytes. */
export function sharedCases(name: "refusals" | "accepts"): Array<{ group: string; why: string; name: string; bytes: Buffer }> {
  const f = JSON.parse(fs.readFileSync(path.join(REPO, "wire", "testdata", "scanner", `${name}.json`), "utf8")) as CaseFile;
  const out = [];
  for (const g of f.groups) {
    for (const c of g.cases) {
      assert.ok((c.in === undefined) !== (c.hex === undefined), `${g.name}/${c.name} needs exactly one of in and hex`);
      const bytes = c.in !== undefined ? Buffer.from(c.in, "utf8") : Buffer.from(c.hex!, "hex");
      out.push({ group: g.name, why: g.why, name: c.name, bytes });
    }
  }
  return out;
}

