// @flybus/client: a Node client of the flybus local bus. It speaks the
// router's wire directly over its Unix socket (RPC, pub/sub, and immutable
// file-backed artifacts through the router's store), with no runtime
// dependency.

export { connect, Client, EXTENSIONS } from "./client.js";
export type {
  CallOptions,
  ClientInfo,
  ClientStats,
  ConnectOptions,
  DeclareOptions,
  Limits,
  PublishOptions,
  PublishReceipt,
  RegisterOptions,
} from "./client.js";
export { Artifact, ArtifactWriter, View } from "./artifacts.js";
export type { Location, SealOptions, WaitOptions } from "./artifacts.js";
export { Message, PendingCall, Request, Responder, Result, Service, Subscription } from "./streams.js";
export type {
  Attachments,
  CancelState,
  Identity,
  JsonObject,
  ReplyOptions,
  ServeOptions,
  SubscribeOptions,
  WaitTopicOptions,
} from "./streams.js";
export * from "./errors.js";
export { CONTRACT, CONTRACT_DIGEST } from "./contract.js";
export type { ArtifactRef } from "./wire/schema.js";
