//! What a handler is given and what it returns: the handler contract of the SDK.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use hero_protocol::Job;
use tokio_util::sync::CancellationToken;

/// How one attempt of a job ended, as the handler says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Success, with the output to record (text: every reader gives it back as text).
    Done(String),
    /// Success with a value: its MessagePack bytes (the record's `value`, which every language
    /// reads back as the value: a map stays a map, null stays null) and its JSON text (the
    /// record's `output`, for readers older than protocol 33 and the CLI). Make it with
    /// [`Outcome::value`].
    Value(Vec<u8>, String),
    /// Failure: retried with back-off while the job's `retries` budget lasts, then `error`.
    Fail(String),
    /// Try again after this delay (counts against the retry budget), with the reason.
    RetryAfter(Duration, String),
    /// Failure that no retry can fix: ends `error` at once.
    Abort(String),
}

impl Outcome {
    /// Success returning `value`, stored as a value ([`Outcome::Value`]): a producer reads it
    /// back typed (`JobResult::value`, Python's `.get()`, Node's `returnvalue`). A value that
    /// MessagePack or JSON cannot carry (a map with keys that are not text, for JSON) ends the
    /// attempt [`Outcome::Abort`], naming why: a value is never dropped silently.
    pub fn value<T: serde::Serialize + ?Sized>(value: &T) -> Outcome {
        let bytes = match rmp_serde::to_vec_named(value) {
            Ok(b) => b,
            Err(e) => {
                return Outcome::Abort(format!("the handler's value cannot be MessagePack: {e}"))
            }
        };
        match serde_json::to_string(value) {
            Ok(text) => Outcome::Value(bytes, text),
            Err(e) => Outcome::Abort(format!(
                "the handler's value cannot be JSON (the text older readers get): {e}"
            )),
        }
    }
}

/// Handed to the handler with each job.
#[derive(Clone, Debug)]
pub struct JobContext {
    /// Cancelled when the job must stop: its timeout passed, it was stopped, its lease was
    /// lost, or the worker is shutting down. Async handlers are dropped at that point anyway;
    /// blocking handlers should poll [`JobContext::is_cancelled`].
    pub cancel: CancellationToken,
    /// Which delivery this is (1 for the first).
    pub attempt: u32,
    /// What the handler reports, until it is handed to Redis.
    pub(crate) pending: std::sync::Arc<crate::report::Pending>,
}

impl JobContext {
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Reports how far the job is: `percent` from 0 to 100 and a short `message` (cut at
    /// 200 bytes). Cheap to call in a tight loop: the latest report is sent within half a
    /// second with every other job's (coalesced), and shown by `hero status`, the HTTP API
    /// and the dashboard.
    pub fn progress(&self, percent: f64, message: impl AsRef<str>) {
        self.pending.progress(percent, message.as_ref());
    }

    /// This attempt failed with `e`: [`Outcome::Fail`] with its message, and its error chain
    /// (`e`, then each `caused by:` source) stored with the job as the attempt's trace, shown by
    /// `hero status`, the HTTP API and the dashboard. With anyhow: `ctx.fail(err.as_ref())`.
    pub fn fail(&self, e: &(dyn std::error::Error + 'static)) -> Outcome {
        self.trace(error_chain(e));
        Outcome::Fail(e.to_string())
    }

    /// As [`JobContext::fail`], for a failure no retry can fix: [`Outcome::Abort`].
    pub fn abort(&self, e: &(dyn std::error::Error + 'static)) -> Outcome {
        self.trace(error_chain(e));
        Outcome::Abort(e.to_string())
    }

    /// Stores `trace` with the job if this attempt fails (kept as its record's `trace`, at
    /// most 16 KiB; a success ignores it): for a handler that builds its own.
    pub fn trace(&self, trace: impl Into<String>) {
        self.pending.set_trace(trace.into());
    }

    /// Appends a line to the job's log (the job keeps its last 100 lines, each cut at 1,000
    /// bytes). Lines are sent in batches, like progress.
    pub fn log(&self, line: impl AsRef<str>) {
        self.pending.log(line.as_ref());
    }
}

/// `e` and each of its sources, one a line: `e`, then `caused by: <source>`, as a failed
/// attempt's trace.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str("\ncaused by: ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

pub type BoxFuture = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

/// Runs one job. Any `Fn(Job, JobContext) -> impl Future<Output = Outcome>` is a handler.
pub trait Handler: Send + Sync + 'static {
    fn call(&self, job: Job, ctx: JobContext) -> BoxFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(Job, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn call(&self, job: Job, ctx: JobContext) -> BoxFuture {
        Box::pin(self(job, ctx))
    }
}

/// A payload that is missing or of the wrong shape ends the job `error` with the reason: no
/// retry can change its bytes.
impl From<hero_protocol::PayloadError> for Outcome {
    fn from(e: hero_protocol::PayloadError) -> Self {
        Outcome::Abort(e.to_string())
    }
}
