//! A job's outcome on its way from its task to the completer: what the completion function
//! needs of it, and the slot it frees once recorded. Both the job task and the completer (and
//! the fetch that hands jobs to tasks) read it; it reads neither.

use hero_protocol::JobId;
use tokio::sync::OwnedSemaphorePermit;

use crate::outcome::Outcome;

/// One job's outcome on its way to Redis.
pub(crate) struct Finished {
    pub job_id: JobId,
    pub stream: usize,
    pub lease: String,
    /// The job's `reply` field as read with its record ('' when it has none).
    pub reply: String,
    pub outcome: Outcome,
    pub attempt: u32,
    /// The queue policy's delay before a retry of a failure (else the default back-off).
    pub retry_in: Option<std::time::Duration>,
    /// The queue policy's retry budget retries this failure, whatever the job's own says.
    pub again: bool,
    /// The queue policy's retention (ms), when it sets one: the ended job expires then.
    pub retention_ms: Option<u64>,
    /// The failed attempt's trace, when the handler gave one (stored only with a failure).
    pub trace: Option<String>,
    /// How long the attempt ran: the sample of the queue's run-time histogram.
    pub ran: std::time::Duration,
    /// Released once the outcome is recorded.
    pub permit: OwnedSemaphorePermit,
}
