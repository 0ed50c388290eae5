// Reads MCAP files with @mcap/core, an implementation independent of
// flybus, and writes one in flybus's layout; record/interop_test.go runs it.
//
//   node interop.js read FILE...   one JSON line per file: counts seen by
//                                  the streaming and the indexed reader
//   node interop.js write FILE     writes a flybus-layout recording and
//                                  prints what it holds as JSON
"use strict";
const fs = require("fs");
const { McapStreamReader, McapIndexedReader, McapWriter } = require("@mcap/core");
const { crc32 } = require("@foxglove/crc");
const fzstd = require("fzstd");

const decompressHandlers = {
  zstd: (data, size) => fzstd.decompress(data, new Uint8Array(Number(size))),
};

async function read(file) {
  const bytes = new Uint8Array(fs.readFileSync(file));
  // The streaming reader checks every chunk's CRC.
  const stream = new McapStreamReader({ decompressHandlers, validateCrcs: true });
  stream.append(bytes);
  const channels = new Map();
  const byTopic = {};
  let messages = 0;
  let dataEnd;
  for (let rec; (rec = stream.nextRecord()); ) {
    if (rec.type === "Channel") channels.set(rec.id, rec);
    if (rec.type === "Message") {
      messages++;
      const t = channels.get(rec.channelId).topic;
      byTopic[t] = (byTopic[t] || 0) + 1;
    }
    if (rec.type === "DataEnd") dataEnd = rec;
  }
  if (!stream.done()) throw new Error(`${file}: the streaming reader did not reach the footer`);

  // The indexed reader goes through the summary, chunk and message indexes.
  const readable = {
    size: async () => BigInt(bytes.length),
    read: async (offset, size) => bytes.subarray(Number(offset), Number(offset + size)),
  };
  const indexed = await McapIndexedReader.Initialize({ readable, decompressHandlers });
  let indexedMessages = 0;
  for await (const _ of indexed.readMessages({ validateCrcs: true })) indexedMessages++;
  const metadata = [];
  for await (const m of indexed.readMetadata()) metadata.push(m.name);
  let dataCrcOk = null;
  if (indexed.dataSectionCrc) {
    dataCrcOk = crc32(bytes.subarray(0, Number(indexed.dataEndOffset))) === indexed.dataSectionCrc;
  }
  return {
    file,
    profile: indexed.header.profile,
    messages,
    byTopic,
    indexedMessages,
    statisticsMessages: indexed.statistics ? Number(indexed.statistics.messageCount) : -1,
    chunks: indexed.chunkIndexes.length,
    metadata,
    dataCrcOk,
    dataEndSeen: dataEnd !== undefined,
  };
}

async function write(file) {
  const chunks = [];
  let position = 0n;
  const writable = {
    position: () => position,
    write: async (buf) => {
      chunks.push(Buffer.from(buf));
      position += BigInt(buf.byteLength);
    },
  };
  const w = new McapWriter({ writable, chunkSize: 4096 });
  await w.start({ profile: "flybus", library: "@mcap/core interop" });
  const schemaId = await w.registerSchema({ name: "flybus.Publication", encoding: "jsonschema", data: new TextEncoder().encode('{"type":"object"}') });
  const pub = await w.registerChannel({
    schemaId, topic: "js.camera", messageEncoding: "json",
    metadata: new Map([["flybus.kind", "publication"], ["flybus.topic", "js.camera"], ["flybus.retention", "latest"], ["flybus.mode", "bounded"]]),
  });
  const art = await w.registerChannel({
    schemaId: 0, topic: "js.camera/frame", messageEncoding: "application/octet-stream",
    metadata: new Map([["flybus.kind", "artifact"], ["flybus.topic", "js.camera"], ["flybus.attachment", "frame"], ["flybus.contentType", "application/octet-stream"]]),
  });
  // A channel that is not flybus's: the flybus reader skips it.
  const other = await w.registerChannel({ schemaId: 0, topic: "other", messageEncoding: "text", metadata: new Map() });
  const out = { publications: [] };
  for (let i = 1; i <= 5; i++) {
    const frame = new Uint8Array(1000 * i);
    for (let k = 0; k < frame.length; k++) frame[k] = (k * 31 + i) & 0xff;
    const t = BigInt(1700000000000000000) + BigInt(i) * 1000000n;
    const env = { topic: "js.camera", topicSequence: i, replaced: 0, payload: { i },
      artifacts: [{ name: "frame", contentType: "application/octet-stream", byteLength: frame.length }] };
    await w.addMessage({ channelId: pub, sequence: i, logTime: t, publishTime: t, data: new TextEncoder().encode(JSON.stringify(env)) });
    await w.addMessage({ channelId: art, sequence: i, logTime: t, publishTime: t, data: frame });
    await w.addMessage({ channelId: other, sequence: i, logTime: t, publishTime: t, data: new TextEncoder().encode("hello") });
    out.publications.push({ i, bytes: frame.length, sum: require("crypto").createHash("sha256").update(frame).digest("hex") });
  }
  await w.end();
  fs.writeFileSync(file, Buffer.concat(chunks));
  return out;
}

async function main() {
  const [mode, ...files] = process.argv.slice(2);
  if (mode === "read") {
    for (const f of files) console.log(JSON.stringify(await read(f)));
  } else if (mode === "write" && files.length === 1) {
    console.log(JSON.stringify(await write(files[0])));
  } else {
    console.error("usage: node interop.js read FILE... | write FILE");
    process.exit(2);
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
