//! hero-protocol: what every hero process speaks, whatever its role: the names, the keys, the
//! job record and its codec, the connections, the Redis Functions library and one call builder
//! per function, and the types of the events and stats the functions write. Producers
//! (`hero-client`), workers (`hero-worker`), the operator's side (`hero-admin`) and the broker
//! build on it; it knows none of them.
//!
//! # Layout
//! - [`name`]: checked identifiers (script type, group, instance, job id, priority, consumer).
//! - [`keys`]: every key string; nothing else in the workspace formats one.
//! - [`job`]: the job record, its statuses, where it is queued, and the hash codec.
//! - [`new_job`]: a job to submit and its checked builder (what `hero_submit` takes).
//! - [`function`]: the Redis Functions library (`function/*.lua`), how it is loaded, and one
//!   call builder per function; no FCALL is assembled anywhere else.
//! - [`reply`]: readers of Redis replies, each naming what it expected when a reply is not it.
//! - [`conn`]: connections (the lane, a multiplexed redis-rs one, dedicated ones for blocking
//!   calls), server capabilities, and [`ConnectOptions`]; `wire` is the lane's socket and
//!   RESP2 decoder; [`shown_url`], a URL with its password as `***`, the one way any hero
//!   process prints a URL.
//! - [`policy`]: a queue's policy as workers, brokers and the functions read it.
//! - [`batch`]: a batch's hash as it reads back; [`cron`]: a recurring job's spec and state.
//! - [`recovery`]: the cursor loop that takes deliveries back (broker recovery, worker hand-back).
//! - [`timestamp`]: MessagePack's timestamp extension and `bin` as Rust values ([`timestamp::Timestamp`],
//!   [`timestamp::Bin`]), for payloads a Node `Date` / `Buffer` or a Python `datetime` / `bytes` wrote.
//! - [`trace`]: W3C trace context carried from the submit into the worker's span.
//! - [`stats`]: the stats kept on write: their field names and their reading.
//! - [`event`]: the kinds of event the functions log ([`EventKind`]).
//! - [`clock`]: the time the functions are given.
//! - [`outage`]: back-off and the log of a failing loop (warn once, then every 30 s, recovered).
//! - [`process`]: what a latency-sensitive process sets on itself at start (huge pages off).
//! - [`error`]: the error type every hero crate returns; it depends on no other module.

pub mod batch;
pub mod clock;
pub mod conn;
pub mod cron;
pub mod duties;
pub mod error;
pub mod event;
pub mod event_log;
pub mod fleet;
pub mod function;
pub mod health;
pub mod job;
pub mod keys;
pub mod memory;
pub mod name;
pub mod new_job;
pub mod outage;
pub mod policy;
pub mod process;
pub mod recovery;
pub mod reply;
pub mod shard;
pub mod stats;
pub mod timestamp;
pub mod trace;
mod wire;

pub use conn::{shown_url, Capabilities, ConnectOptions, Redis};
pub use error::{DecodeError, Error, Result, ServerCode};
pub use event::EventKind;
pub use job::{
    clip, ChildResult, Job, PayloadError, Placement, Progress, Status, DEFAULT_TIMEOUT, LOG_LINES,
    LOG_LINE_BYTES, PROGRESS_MESSAGE_BYTES,
};
pub use keys::{Keyspace, LegacyQueue};
pub use name::{
    BatchName, ConsumerName, GroupName, InstanceName, JobId, Namespace, Priority, ScriptType,
    Target,
};
pub use new_job::{NewJob, NewJobBuilder, MAX_SCRIPT_BYTES};
pub use policy::{Backoff, BackoffKind};
