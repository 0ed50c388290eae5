// The wire, for tools and tests: framing, strict JSON and the contract's
// schema checks, as the client uses them.

export { encodeFrame, FrameDecoder, MAX_ENVELOPE_BYTES } from "./frame.js";
export { encodeStrict, isCanonicalInt, JsonSyntaxError, MAX_DEPTH, parseStrict, validateStrict } from "./json.js";
export {
  commandFrame,
  decodeRouterEnvelope,
  MAX_ATTACHMENTS,
  parseSerial,
  parseU64,
  PROTOCOL_MAJOR,
  PROTOCOL_MINOR,
  Schema,
  SCHEMA,
} from "./schema.js";
export type { ArtifactRef, RouterEnvelope, WireAttachment } from "./schema.js";
