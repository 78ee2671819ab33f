//! hero-worker: the SDK an actor embeds to take and run hero-broker jobs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hero_worker::Error> {
//! use hero_worker::{Outcome, Worker};
//! let client = hero_client::Client::connect("redis://127.0.0.1:6379").await?;
//! Worker::builder(client)
//!     .types(["osis"])
//!     .concurrency(8)
//!     .handler(|job: hero_protocol::Job, _ctx| async move { Outcome::Done(job.script.len().to_string()) })
//!     .build()?
//!     .run_until_signal()
//!     .await
//! # }
//! ```
//!
//! Where the types live: the worker is built from a `hero_client::Client` (the connection
//! handle, hero-client); the job it hands the handler is `hero_protocol::Job` (hero-protocol,
//! also re-exported as `hero_client::Job`); this crate holds the worker, the handler contract
//! (`Outcome`, `JobContext`, `Handler`) and its events. It never depends on hero-admin.
//!
//! A process where the time from submit to start matters should call
//! `hero_protocol::process::disable_transparent_huge_pages()` first thing in `main`, as the `hero`
//! binary does: with transparent huge pages `always`, page zeroing stalled a worker 4–5 ms about
//! every 75 ms.
//!
//! # Layout
//! - [`worker`]: the builder, and the run that starts every loop and shuts them down.
//! - `shared`: what every task of one worker shares (names, streams, settings, handler).
//! - `fetch`: the fetch loop (precedence, two fetches under way, wake-ups on XREAD).
//! - `task`: one job: its record (handed back by a short fetch, or read), the handler run
//!   (timeout, stop, panic), its outcome.
//! - `complete`: batched, fenced recording of outcomes; `finished`: one outcome on its way
//!   there.
//! - `presence`: heartbeat and liveness; `lease`: renewal and hand-back; `control`: stop
//!   requests; `report`: what handlers report of themselves (progress, log lines), coalesced
//!   and sent with renewals.
//! - [`event`]: what a worker reports ([`WorkerEvent`]).
//! - [`outcome`]: the handler contract ([`Handler`], [`JobContext`], [`Outcome`]).
//! - [`inflight`]: the running jobs and why one was interrupted.
//! - `backoff`: a failed attempt's retry delay; `policy`: the queue policies' cache (time limits,
//!   retry budgets and back-off, concurrency limits, leases), kept fresh by `refresh`.

mod backoff;
mod complete;
mod control;
mod error;
pub mod event;
mod fetch;
mod finished;
pub mod inflight;
mod lease;
pub mod outcome;
mod policy;
mod presence;
mod refresh;
mod report;
mod shared;
mod task;
mod turns;
pub mod worker;

pub use error::{Error, Result};
pub use event::WorkerEvent;
pub use inflight::CancelReason;
pub use outcome::{Handler, JobContext, Outcome};
pub use worker::{Worker, WorkerBuilder};
