// The producer and the consumer of docs/guide/node.md, run as written
// against a real router in both store modes.

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Child, MODES, REPO, Router } from "./helpers.js";

// The guide's Node page has them; the repository's README may show them too
// (its Node section), and then they run from there as well.
const docs = ["docs/guide/node.md", "README.md"];

/** The ```js block of text whose first line is `// name`, if any. */
function program(text: string, name: string): string | undefined {
  for (const m of text.matchAll(/```js\n([\s\S]*?)```/g)) {
    if (m[1]!.startsWith(`// ${name}\n`)) return m[1]!;
  }
  return undefined;
}

// Written beside the compiled tests, inside the package, so that their
// import of "@flybus/client" resolves to this package.
const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "docs-programs");
const found: Array<{ doc: string; dir: string }> = [];
for (const doc of docs) {
  const text = fs.readFileSync(path.join(REPO, doc), "utf8");
  const producer = program(text, "producer.mjs");
  const consumer = program(text, "consumer.mjs");
  if (producer === undefined && consumer === undefined && doc !== docs[0]) continue;
  assert.ok(producer !== undefined && consumer !== undefined, `${doc} needs both js blocks, // producer.mjs and // consumer.mjs`);
  const dir = path.join(root, doc.replace(/[/.]/g, "_"));
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "producer.mjs"), producer);
  fs.writeFileSync(path.join(dir, "consumer.mjs"), consumer);
  found.push({ doc, dir });
}

for (const { doc, dir } of found) {
  describe(`the producer and consumer of ${doc}`, () => {
    for (const mode of MODES) {
      it(`run as written (${mode} store)`, async () => {
        const router = await Router.start({ mode });
        try {
          const env = { ...process.env, FLYBUS_SOCKET: router.socket, FLYBUS_STORE: router.store, FRAMES: "3" };
          const consumer = new Child(process.execPath, [path.join(dir, "consumer.mjs")], { env });
          assert.equal(await consumer.lines.next(), "subscribed", consumer.stderr);
          const producer = new Child(process.execPath, [path.join(dir, "producer.mjs")], { env });
          assert.equal(await producer.exited, 0, producer.stderr);
          assert.equal(await consumer.exited, 0, consumer.stderr);
          assert.deepStrictEqual(producer.lines.all, [0, 1, 2].map((i) => `published frame ${i} as #${i + 1} to 1 subscriber(s)`));
          assert.deepStrictEqual(consumer.lines.all.slice(1), [0, 1, 2].map((i) => `frame ${i}: 1228800 bytes, digest matches`));
        } finally {
          await router.stop();
        }
      });
    }
  });
}
