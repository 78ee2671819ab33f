//! hero-worker: the SDK an actor embeds to take and run hero-broker jobs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hero_worker::Error> {
//! use hero_worker::{Outcome, Worker};
//! let client = hero_client::Client::connect("redis://127.0.0.1:6379").await?;
//! Worker::builder(client)
//!     .types(["osis"])
//!     .concurrency(8)
//!     .handler(|job: hero_client::Job, _ctx| async move { Outcome::Done(job.script.len().to_string()) })
//!     .build()?
//!     .run_until_signal()
//!     .await
//! # }
//! ```
//!
//! # Layout
//! - [`worker`]: builder, fetch loop (precedence + wake-ups), job tasks, shutdown.
//! - [`outcome`]: the handler contract ([`Handler`], [`JobContext`], [`Outcome`]).
//! - `complete`: batched, fenced recording of outcomes.
//! - `lease`: heartbeat, lease renewal, control list, hand-back.
//! - [`inflight`]: the running jobs and why one was interrupted.
//! - `backoff`: reconnect and retry delays.

mod backoff;
mod complete;
mod error;
pub mod inflight;
mod lease;
pub mod outcome;
pub mod worker;

pub use error::{Error, Result};
pub use inflight::CancelReason;
pub use outcome::{Handler, JobContext, Outcome};
pub use worker::{Worker, WorkerBuilder, WorkerEvent};
