//! What a worker reports to the program embedding it: [`WorkerEvent`], for logs, tests and
//! dashboards of its own.

use hero_protocol::function::Completion;
use hero_protocol::JobId;

use crate::inflight::CancelReason;

/// Something a worker did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerEvent {
    /// Presence is registered and the worker is fetching.
    Ready {
        consumer: String,
    },
    Started {
        job_id: JobId,
        attempt: u32,
    },
    /// What `hero_complete` answered for a job's outcome: `completion` is whether this
    /// delivery's outcome was recorded (`Completed`: it ended the job; `Retrying`: a failure
    /// parked for another attempt), `failed` whether the handler's outcome was a failure. A job
    /// that ended `error` is `Completed` with `failed: true`, never a success.
    Completed {
        job_id: JobId,
        completion: Completion,
        failed: bool,
    },
    /// A job's handler was interrupted and its result not recorded.
    Interrupted {
        job_id: JobId,
        reason: CancelReason,
    },
    /// A stream entry was not run: `missing` (names no job hash), `foreign` (its job key is not
    /// a hash), `stale`, `legacy`, or `invalid_id` (see [`hero_protocol::function::Dropped`]). The
    /// id is what the entry named, which need not be a valid [`JobId`].
    Dropped {
        job_id: String,
        reason: String,
    },
    /// Shutdown finished: `handed_back` jobs went back to their queues.
    Stopped {
        handed_back: u64,
    },
}
