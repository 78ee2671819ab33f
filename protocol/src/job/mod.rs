//! The job record (SPEC §3): its fields, its statuses, and where it is queued. The codec to and
//! from the Redis hash is `codec`, over the one table of the record's fields in `fields`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::clock;

mod codec;
mod fields;
#[cfg(test)]
mod fuzz;
pub mod value;
use crate::name::{GroupName, InstanceName, JobId, Priority, ScriptType, Target};

/// A job's typed payload is missing or is not of the type asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("payload of job {job}: {reason}")]
pub struct PayloadError {
    pub job: String,
    pub reason: String,
}

/// Where a job is in its life. The wire form is [`Status::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Delayed, in retry back-off, or waiting for prerequisites.
    Waiting,
    /// In a work stream, not yet taken.
    Dispatched,
    /// Leased by one worker.
    Started,
    Finished,
    Error,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Waiting,
        Status::Dispatched,
        Status::Started,
        Status::Finished,
        Status::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Waiting => "waiting",
            Status::Dispatched => "dispatched",
            Status::Started => "started",
            Status::Finished => "finished",
            Status::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Finished | Status::Error)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fields of a record that say where it is queued, in the order [`Placement::read`] takes
/// their values (as an HMGET of them answers).
pub const PLACEMENT_FIELDS: [&str; 4] = ["script_type", "group", "instance", "priority"];

/// Where a job is queued: its target and priority level, as its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub target: Target,
    pub priority: Priority,
}

impl Placement {
    /// Reads the values of [`PLACEMENT_FIELDS`] (missing ones `None`). `None` when the record
    /// names no valid script type: such a job was never queued by us. An invalid group, instance
    /// or priority reads as absent, which is where such a job was queued.
    pub fn read(values: &[Option<String>]) -> Option<Placement> {
        let get = |i: usize| values.get(i).and_then(Option::as_deref).unwrap_or_default();
        let script_type = ScriptType::new(get(0)).ok()?;
        let target = Target::new(
            script_type,
            GroupName::new(get(1)).ok(),
            InstanceName::new(get(2)).ok(),
        );
        let priority = get(3)
            .parse()
            .ok()
            .and_then(|p| Priority::new(p).ok())
            .unwrap_or_default();
        Some(Placement { target, priority })
    }
}

/// The job record. Optional seed-001 fields stay empty strings or `None` when absent, so a
/// record written by a legacy producer decodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub id: JobId,
    pub script: String,
    /// `None` only for legacy records that never named one.
    pub script_type: Option<ScriptType>,
    pub group: Option<GroupName>,
    pub instance: Option<InstanceName>,
    pub priority: Priority,
    pub caller_id: String,
    pub context_id: String,
    /// The consumer that runs (or last ran) it.
    pub worker_id: String,
    /// The handler's time limit the job names; `None`: it names none, and its queue's policy
    /// or [`DEFAULT_TIMEOUT`] applies ([`Job::time_limit`]). A job naming exactly the default
    /// still names it: its queue's policy does not replace it.
    pub timeout: Option<Duration>,
    /// How many more attempts after the first a failing handler gets.
    pub retries: u32,
    pub concurrent: bool,
    pub log_path: Option<String>,
    /// W3C trace context of the span that submitted it (`00-<trace id>-<span id>-<flags>`): the
    /// worker runs the handler in a span of that trace.
    pub traceparent: Option<String>,
    /// Uniqueness key: while a job holding it is queued or running, a submit with the same key
    /// queues nothing and answers that job's id.
    pub unique: Option<String>,
    /// How long the key is held at most (default: the broker's retention time).
    pub unique_ttl: Option<Duration>,
    /// The key a queue's `key_rate` counts the job under (one customer, one account): at most
    /// so many jobs sharing it start in a window.
    pub limit_key: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub status: Status,
    pub env_vars: BTreeMap<String, String>,
    pub prerequisites: Vec<String>,
    pub dependents: Vec<String>,
    pub tags: Vec<String>,
    /// Its output as text: a plain-text result as returned, a value's JSON (protocol 33).
    pub output: Option<String>,
    /// The value its handler returned, as MessagePack bytes (the record's `value`, since
    /// protocol 33), when it returned one rather than text: read it with [`Job::output_as`].
    pub value: Option<Vec<u8>>,
    pub error: Option<String>,
    /// The last failed attempt's trace, as its worker gave it (a Rust error chain, a Python
    /// traceback, a Node stack; at most 16 KiB): written by `hero_complete` with each failure it
    /// records, kept when a retry then succeeds.
    pub trace: Option<String>,
    /// Deliveries so far (incremented when a worker takes it).
    pub attempts: u32,
    /// The fencing token of the current delivery: its stream entry id.
    pub lease: Option<String>,
    /// The job's current work-stream entry id.
    pub entry: Option<String>,
    /// When a waiting job becomes due (ms since the epoch).
    pub run_at_ms: Option<u64>,
    /// A caller waits on the reply list.
    pub reply: bool,
    /// A typed payload: MessagePack bytes (rmp-serde) beside the script; read it with
    /// [`Job::payload`].
    pub payload: Option<Vec<u8>>,
    /// While it waits on prerequisites: how many have not finished yet.
    pub prerequisites_left: u32,
    /// The batch it is a member of (`Client::batch`): its end counts there.
    pub batch: Option<String>,
    /// What its handler last reported of its progress, while it runs and after.
    pub progress: Option<Progress>,
    /// The last lines its handler logged ([`LOG_LINES`] at most, each at most
    /// [`LOG_LINE_BYTES`]).
    pub log: Vec<String>,
    /// Its own back-off between failed attempts (the longer of it and its queue policy's
    /// applies: docs/operations.md).
    pub backoff: Option<crate::policy::Backoff>,
    /// How long it is kept once finished (its own retention; at least 10 s, and its queue
    /// policy's when that is longer). `None`: the queue's or the broker's.
    pub keep: Option<Duration>,
    /// How long it is kept once it ended error (as `keep`).
    pub keep_failed: Option<Duration>,
    /// Its prerequisites' results, by id, as each one's end wrote them into this record
    /// (`result:<id>`): what a parent reads of its children (`JobContext::children`).
    pub results: BTreeMap<String, ChildResult>,
    /// Fields this version does not know, as read: a newer version wrote them (SPEC §4.7).
    /// They are not bad input; nothing here acts on them, nothing removes them from Redis,
    /// and `hero status` shows them as they are.
    pub unknown_fields: BTreeMap<String, String>,
}

/// A prerequisite's end as its dependent keeps it, or, read by a producer, where a child not
/// yet ended stands (`status` only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildResult {
    pub status: Status,
    pub output: Option<String>,
    /// The value it returned (MessagePack; `value:<id>` in the parent's record), when it
    /// returned one: read it with [`ChildResult::output_as`].
    pub value: Option<Vec<u8>>,
    pub error: Option<String>,
}

impl ChildResult {
    /// The record field's value, `<status>:<output or error>`.
    pub fn parse(value: &str) -> Option<ChildResult> {
        let (status, text) = value.split_once(':')?;
        match status {
            "finished" => Some(ChildResult {
                status: Status::Finished,
                output: Some(text.to_string()),
                value: None,
                error: None,
            }),
            "error" => Some(ChildResult {
                status: Status::Error,
                output: None,
                value: None,
                error: Some(text.to_string()),
            }),
            _ => None,
        }
    }

    /// `output` is its result by the reading rule, as JSON: the value it returned, else its
    /// text (what every language's children's results answer).
    pub fn to_json(&self) -> serde_json::Value {
        let output = match self.value.as_deref().and_then(value::to_json) {
            Some(v) => v,
            None => serde_json::json!(self.output),
        };
        serde_json::json!({"status": self.status.as_str(), "output": output, "error": self.error})
    }

    /// Its output as `T`: the value it returned, else its output text (see [`value::decode`]).
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        value::decode(self.value.as_deref(), self.output.as_deref())
    }
}

/// The record field a prerequisite's result is kept in, `result:<id>`.
pub const RESULT_FIELD_PREFIX: &str = "result:";

/// How far a running job is, as its handler reported it (`JobContext::progress`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// 0 to 100.
    pub percent: f64,
    /// A short word on what it is doing now ([`PROGRESS_MESSAGE_BYTES`] at most).
    #[serde(default)]
    pub message: String,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.percent.fract() == 0.0 {
            write!(f, "{:.0}%", self.percent)?;
        } else {
            write!(f, "{:.1}%", self.percent)?;
        }
        if !self.message.is_empty() {
            write!(f, " {}", self.message)?;
        }
        Ok(())
    }
}

/// A job keeps its last this many log lines: the older ones are dropped as new ones come.
pub const LOG_LINES: usize = 100;
/// A log line longer than this is cut (at a character boundary) when it is reported.
pub const LOG_LINE_BYTES: usize = 1_000;
/// A progress message longer than this is cut when it is reported.
pub const PROGRESS_MESSAGE_BYTES: usize = 200;

/// `text` cut to at most `max` bytes at a character boundary.
pub fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The default handler time limit when a job names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

impl Job {
    /// The time limit the job names, or the default when it names none (a worker that knows
    /// the queue's policy uses the policy's first: `hero_worker`'s `policy::timeout`).
    pub fn time_limit(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT)
    }

    /// The record as the CLI's and the HTTP API's JSON show it.
    pub fn to_json(&self) -> serde_json::Value {
        let job = self;
        serde_json::json!({
            "id": job.id.as_str(),
            "status": job.status.as_str(),
            "script_type": job.script_type.as_ref().map(|t| t.as_str()),
            "group": job.group.as_ref().map(|g| g.as_str()),
            "instance": job.instance.as_ref().map(|i| i.as_str()),
            "priority": job.priority.level(),
            "attempts": job.attempts,
            "retries": job.retries,
            "timeout": job.time_limit().as_secs(),
            "worker_id": job.worker_id,
            "created_at": job.created_at,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "output": job.output,
            "error": job.error,
            "trace": job.trace,
            "tags": job.tags,
            "env_vars": job.env_vars,
            "caller_id": job.caller_id,
            "context_id": job.context_id,
            "updated_at": job.updated_at,
            "run_at_ms": job.run_at_ms,
            "traceparent": job.traceparent,
            "unique": job.unique,
            "limit_key": job.limit_key,
            "batch": job.batch,
            "progress": job.progress,
            "log": job.log,
            "backoff": job.backoff,
            "keep_ms": job.keep.map(|d| d.as_millis() as u64),
            "keep_failed_ms": job.keep_failed.map(|d| d.as_millis() as u64),
            "value": job.value.as_deref().and_then(value::to_json),
            "results": job.results.iter().map(|(k, v)| (k.clone(), v.to_json())).collect::<serde_json::Map<_, _>>(),
            "unknown_fields": job.unknown_fields,
        })
    }

    /// A new job record for `script` to run on `target`; everything else at its default.
    pub fn new(id: JobId, target: &Target, script: impl Into<String>) -> Job {
        let now = clock::now_iso();
        Job {
            id,
            script: script.into(),
            script_type: Some(target.script_type.clone()),
            group: target.group.clone(),
            instance: target.instance.clone(),
            priority: Priority::DEFAULT,
            caller_id: String::new(),
            context_id: String::new(),
            worker_id: String::new(),
            timeout: None,
            retries: 0,
            concurrent: false,
            log_path: None,
            traceparent: None,
            unique: None,
            unique_ttl: None,
            limit_key: None,
            backoff: None,
            keep: None,
            keep_failed: None,
            results: BTreeMap::new(),
            created_at: now.clone(),
            updated_at: now,
            started_at: None,
            finished_at: None,
            status: Status::Dispatched,
            env_vars: BTreeMap::new(),
            prerequisites: Vec::new(),
            dependents: Vec::new(),
            tags: Vec::new(),
            output: None,
            value: None,
            error: None,
            trace: None,
            attempts: 0,
            lease: None,
            entry: None,
            run_at_ms: None,
            reply: false,
            payload: None,
            prerequisites_left: 0,
            batch: None,
            progress: None,
            log: Vec::new(),
            unknown_fields: BTreeMap::new(),
        }
    }

    /// The typed payload, decoded from its MessagePack bytes as `T`. A job without one, or one
    /// whose bytes are not a `T`, is a [`PayloadError`] naming the job and what was wrong.
    pub fn payload<T: serde::de::DeserializeOwned>(&self) -> Result<T, PayloadError> {
        let bytes = self.payload.as_deref().ok_or_else(|| PayloadError {
            job: self.id.to_string(),
            reason: "the job carries no payload (submit it with NewJobBuilder::payload)".into(),
        })?;
        rmp_serde::from_slice(bytes).map_err(|e| PayloadError {
            job: self.id.to_string(),
            reason: format!(
                "its {} payload bytes do not decode as {}: {e}",
                bytes.len(),
                std::any::type_name::<T>()
            ),
        })
    }

    /// Its output as `T` (protocol 33): the value its handler returned (MessagePack), else its
    /// output text (a `String`, or what serde reads from text), else nothing (an `Option` is
    /// `None`). Bytes that are not a `T` are a [`PayloadError`] saying which and why.
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, PayloadError> {
        value::decode(self.value.as_deref(), self.output.as_deref()).map_err(|reason| {
            PayloadError {
                job: self.id.to_string(),
                reason: format!("output: {reason}"),
            }
        })
    }

    /// The dispatch target, when the record names a script type.
    pub fn target(&self) -> Option<Target> {
        self.script_type
            .clone()
            .map(|t| Target::new(t, self.group.clone(), self.instance.clone()))
    }
}
