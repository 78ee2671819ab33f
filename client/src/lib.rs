//! hero-client: the producer API of hero-broker. Connect, submit jobs (alone, many in one round
//! trip, as a flow, or as a batch), run one and wait for its result, ask a job's status, read
//! its record, stop it, add a recurring job. The protocol under it is `hero-protocol`; the
//! operator's side (inspect, audit, repair, pause, policies) is `hero-admin`.
//!
//! ```no_run
//! # async fn demo() -> hero_client::Result<()> {
//! use hero_client::{Client, NewJob};
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let job = NewJob::builder("rhai", "40 + 2").build()?;
//! let result = client.run(&job, std::time::Duration::from_secs(10)).await?;
//! println!("{}", result.output);
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`client`]: the producer handle ([`Client`]); [`answer`]: what its calls answer.
//! - `coalesce`: group commit of single submits (calls made at once share one `hero_submit`).
//! - `upkeep`: a producer told once when no live process does the queue's upkeep.
//! - [`flow`]: a job and the jobs it waits on, flattened into one submit batch.
//! - [`batch`]: a batch's members and its callback jobs.
//! - [`cron`]: adding a recurring job.
//! - `layout`: a sharded namespace's map and members, and the rules of where a job goes;
//!   `shards`: what the client does with them (routing submits, finding a job's shard).
//!
//! # Moved in 0.2
//! The protocol's modules moved to `hero-protocol`; they are re-exported here under their old
//! paths for one release (`hero_client::keys`, `hero_client::job`, ...), so `use` lines of 0.1
//! keep compiling. The operator's side moved to `hero-admin` (see CHANGELOG.md).

pub mod answer;
pub mod batch;
pub mod client;
mod coalesce;
pub mod cron;
pub mod events;
pub mod fleet;
pub mod flow;
mod layout;
mod retire;
mod shards;
mod upkeep;
mod waiter;

pub use answer::{JobResult, StopOutcome, Submitted};
pub use batch::Batch;
pub use client::Client;
pub use events::{EventStream, Since, Watched};
pub use flow::Flow;
/// The options [`Client::with_options`] takes (`hero_protocol::ConnectOptions`).
pub use hero_protocol::ConnectOptions as ClientOptions;

// What a producer names with every call, from the protocol crate.
pub use hero_protocol::{
    clip, Backoff, BackoffKind, BatchName, Capabilities, ChildResult, ConsumerName, DecodeError,
    Error, EventKind, GroupName, InstanceName, Job, JobId, Keyspace, LegacyQueue, Namespace,
    NewJob, NewJobBuilder, PayloadError, Placement, Priority, Progress, Redis, Result, ScriptType,
    ServerCode, Status, Target, DEFAULT_TIMEOUT, LOG_LINES, LOG_LINE_BYTES, MAX_SCRIPT_BYTES,
    PROGRESS_MESSAGE_BYTES,
};

// The protocol's modules under their 0.1 paths, for one release (deprecated: use hero_protocol).
#[doc(hidden)]
pub use hero_protocol::{
    clock, conn, error, event, function, job, keys, name, new_job, process, recovery, reply, stats,
    trace,
};
