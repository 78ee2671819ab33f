// hero-broker for Node.js: the producer (`Client`), the operator's `Queue` and the worker
// (`Worker`) of a hero-broker job queue on Redis.
// docs/from-bullmq.md maps BullMQ's names onto these.
export { Client } from "./client.js";
export { redisUrl } from "./connect.js";
export { MAX_SCRIPT_BYTES } from "./options.js";
export { Worker, WorkerJob, Retry, Abort, UnrecoverableError } from "./worker.js";
export type { Handler, WorkerListener, WorkerOptions } from "./worker.js";
export type { JobOptions, BackoffOptions, KeepJobs } from "./options.js";
export { Queue } from "./queue.js";
export type { QueueOptions, JobCounts, StreamCounts, PolicyOptions, Policy, DeadLetter, RepeatOptions, JobTemplate, CronNextOptions, CleanType, ObliterateOptions, QueueJob, AddOptions, BulkJob, JobTotals, JobType } from "./queue.js";
export type { FairKeys, KeyWaiting } from "./fair.js";
export { Evicting, HeroError, InvalidInput, InvalidJob, JobNotFound, OlderProcesses, OutOfMemory, WaitTimedOut, WorkerFailed } from "./errors.js";
export type { BatchInfo, ChildResult, Job, Progress, Result, Submitted } from "./job.js";
export { Keys } from "./keys.js";
export { QueueEvents, EventLogOff, decodeEntry } from "./events.js";
export type { HeroEvent, QueueEventsListener, QueueEventsOptions } from "./events.js";
export { VERSION as PROTOCOL_VERSION } from "./protocol.js";
export { ShardMap, shardOfId, fnv1a, jump } from "./shards.js";
export { encode as encodePayload, decode as decodePayload, Ext } from "./msgpack.js";
export type { Json, Payload } from "./msgpack.js";
