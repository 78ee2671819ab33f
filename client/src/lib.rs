//! hero-client: the protocol of hero-broker and its producer API.
//!
//! # Layout
//! - [`name`]: checked identifiers (script type, group, instance, job id, priority, consumer).
//! - [`keys`]: every key string; nothing else in the workspace formats one.
//! - [`job`]: the job record, its statuses, where it is queued, and the hash codec.
//! - [`function`]: the Redis Functions library (`function/*.lua`), how it is loaded, and one
//!   call builder per function; no FCALL is assembled anywhere else.
//! - [`reply`]: typed forms of the functions' replies.
//! - [`conn`]: connections (the lane, a multiplexed redis-rs one, dedicated ones for blocking
//!   calls) and server capabilities; `wire` is the lane's socket and RESP2 decoder.
//! - [`new_job`]: a job to submit and its checked builder.
//! - [`client`]: the producer API ([`Client`]); [`answer`]: what its calls answer.
//! - `coalesce`: group commit of single submits (calls made at once share one `hero_submit`).
//! - [`flow`]: a job and the jobs it waits on, flattened into one submit batch.
//! - [`queue`]: an operator's controls of a queue as a whole: pause/resume and the per-queue
//!   policy (time limit, retries, back-off, lease, retention, concurrency limit).
//! - [`cron`]: recurring jobs: the spec, the list, and the broker's pass over due ticks.
//! - [`trace`]: W3C trace context carried from the submit into the worker's span.
//! - [`stats`]: the stats kept on write (counters, histograms, per-minute rates): their field
//!   names and their reading.
//! - [`event`]: the kinds of event the functions log ([`EventKind`]).
//! - [`inspect`]: the read side ([`Inspector`]): listings, the event log, queue stats and
//!   history, workers live and gone, dead letters, the audit.
//! - [`recovery`]: the cursor loop that takes deliveries back (broker recovery, worker hand-back).
//! - [`repair`]: the operator's repairs (dead letters retried or purged), one function call each.
//! - [`clock`]: the time the functions are given.
//! - [`process`]: what a latency-sensitive process sets on itself at start (huge pages off).
//! - [`error`]: the crate's error type; it depends on no other module.

pub mod answer;
pub mod batch;
pub mod client;
pub mod clock;
mod coalesce;
pub mod conn;
pub mod cron;
pub mod error;
pub mod event;
pub mod flow;
pub mod function;
pub mod inspect;
pub mod job;
pub mod keys;
pub mod name;
pub mod new_job;
pub mod process;
pub mod queue;
pub mod recovery;
pub mod repair;
pub mod reply;
pub mod stats;
pub mod trace;
mod wire;

pub use answer::{JobResult, StopOutcome, Submitted};
pub use client::{Client, ClientOptions};
pub use conn::{Capabilities, Redis};
pub use error::{DecodeError, Error, Result, ServerCode};
pub use event::EventKind;
pub use flow::Flow;
pub use inspect::{Inspector, JobSummary, ListFilter, Page};
pub use job::{
    clip, Job, PayloadError, Placement, Progress, Status, DEFAULT_TIMEOUT, LOG_LINES,
    LOG_LINE_BYTES, PROGRESS_MESSAGE_BYTES,
};
pub use keys::{Keyspace, LegacyQueue};
pub use name::{
    BatchName, ConsumerName, GroupName, InstanceName, JobId, Namespace, Priority, ScriptType,
    Target,
};
pub use new_job::{NewJob, NewJobBuilder, MAX_SCRIPT_BYTES};
