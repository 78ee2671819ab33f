//! What the producer's calls answer: a submit, a job's end, a stop.

use crate::job::Status;
use crate::name::JobId;

/// What a submit did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submitted {
    pub id: JobId,
    /// False when a job with this id existed already; nothing was changed then.
    pub created: bool,
    pub status: String,
}

/// The end of a job as a caller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobResult {
    pub id: JobId,
    pub status: Status,
    pub output: String,
    pub error: String,
}

/// What a stop did (SPEC §5 stop and cancel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// It was queued or delayed; it will never start.
    Cancelled,
    /// It was running; it ended `error`/`stopped` and its worker interrupts the handler.
    Interrupted,
    /// It had already ended.
    AlreadyCompleted,
}
