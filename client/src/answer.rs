//! What the producer's calls answer: a submit, a job's end, a stop.

use hero_protocol::job::Status;
use hero_protocol::name::JobId;

/// What a submit did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submitted {
    /// The job's id; for a duplicate, the id of the job holding the uniqueness key.
    pub id: JobId,
    /// False when a job with this id existed already, or the submit was a duplicate; nothing
    /// was changed then.
    pub created: bool,
    pub status: String,
    /// The submit carried a uniqueness key another queued or running job holds: `id` is that
    /// job's.
    pub duplicate: bool,
}

/// The end of a job as a caller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobResult {
    pub id: JobId,
    pub status: Status,
    /// The output as text (a value's JSON).
    pub output: String,
    /// The value the handler returned, as MessagePack bytes, when it returned one (protocol
    /// 33): read it with [`JobResult::output_as`].
    pub value: Option<Vec<u8>>,
    pub error: String,
}

impl JobResult {
    /// The output as `T`: the value the handler returned, else the output text (a `String`, or
    /// what serde reads from text). Bytes that are not a `T` are [`crate::Error::InvalidInput`]
    /// naming the job and why.
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> crate::Result<T> {
        let text =
            (!self.output.is_empty() || self.value.is_none()).then_some(self.output.as_str());
        hero_protocol::job::value::decode(self.value.as_deref(), text)
            .map_err(|why| crate::Error::InvalidInput(format!("job {}: output: {why}", self.id)))
    }
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
