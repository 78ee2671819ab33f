//! A job to submit: [`NewJob`] and its builder, which checks every name, the priority, the
//! script size, the log path and the environment before anything is sent.

use std::collections::BTreeMap;
use std::path::{Component, Path};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock;
use crate::error::{Error, Result};
use crate::job::Job;
use crate::name::{GroupName, InstanceName, JobId, Priority, ScriptType, Target};

/// Scripts larger than this are refused at submit (SPEC §4.7); a job queue is no blob store.
pub const MAX_SCRIPT_BYTES: usize = 1 << 20;

/// A job to submit, checked when built: names, priority, script size and log path are valid.
#[derive(Clone, Debug)]
pub struct NewJob {
    job: Job,
    target: Target,
    run_at_ms: Option<u64>,
    /// The route key that picks its shard in a sharded namespace (not stored in the record).
    route: Option<String>,
    /// The caller chose the id (a generated one is replaced by one naming the job's shard).
    id_chosen: bool,
}

impl NewJob {
    /// Starts a job of `script_type` running `script`; call [`NewJobBuilder::build`] to check it.
    pub fn builder(script_type: impl Into<String>, script: impl Into<String>) -> NewJobBuilder {
        NewJobBuilder {
            script_type: script_type.into(),
            script: script.into(),
            ..Default::default()
        }
    }

    /// The id it is submitted with. In a sharded namespace a generated id is replaced at submit
    /// by one naming the job's shard: the submit's answer (`Submitted::id`) has the id to keep.
    pub fn id(&self) -> &JobId {
        &self.job.id
    }

    /// The record it will be submitted as.
    pub fn job(&self) -> &Job {
        &self.job
    }

    pub fn record(&self) -> &Job {
        &self.job
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The route key (`NewJobBuilder::route`).
    pub fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }

    /// Whether the caller chose the id (`NewJobBuilder::id`) rather than taking a generated one.
    pub fn id_chosen(&self) -> bool {
        self.id_chosen
    }

    /// Gives a job with a generated id another one (the id naming its shard, in a sharded
    /// namespace); a prerequisite that named the old id is renamed by the caller.
    pub fn set_generated_id(&mut self, id: JobId) {
        if !self.id_chosen {
            self.job.id = id;
        }
    }

    /// Renames prerequisite `from` to `to` (a job of the same submit whose id was replaced).
    pub fn rename_prerequisite(&mut self, from: &str, to: &str) {
        for p in &mut self.job.prerequisites {
            if p == from {
                *p = to.to_string();
            }
        }
    }

    /// Adds a prerequisite to a built job (a flow's parent names its children); a prerequisite
    /// named twice is kept once.
    pub fn add_prerequisite(&mut self, id: &str) {
        if !self.job.prerequisites.iter().any(|p| p == id) {
            self.job.prerequisites.push(id.to_string());
        }
    }

    /// When it may start (ms since the epoch); `None`: at once.
    pub fn run_at_ms(&self) -> Option<u64> {
        self.run_at_ms
    }

    /// The same job as a member of batch `name`.
    pub fn in_batch(mut self, name: &crate::name::BatchName) -> NewJob {
        self.job.batch = Some(name.to_string());
        self
    }
}

/// Builder of [`NewJob`]. Setters take plain values; [`NewJobBuilder::build`] checks them all.
#[derive(Clone, Debug, Default)]
pub struct NewJobBuilder {
    script_type: String,
    script: String,
    id: Option<String>,
    group: Option<String>,
    instance: Option<String>,
    priority: Option<u8>,
    timeout: Option<Duration>,
    retries: u32,
    tags: Vec<String>,
    env: BTreeMap<String, String>,
    caller_id: String,
    context_id: String,
    log_path: Option<String>,
    traceparent: Option<String>,
    unique: Option<(String, Option<Duration>)>,
    limit_key: Option<String>,
    batch: Option<String>,
    route: Option<String>,
    delay: Option<Duration>,
    run_at: Option<SystemTime>,
    prerequisites: Vec<String>,
    /// MessagePack bytes, or why the value would not encode (reported by build)
    payload: Option<std::result::Result<Vec<u8>, String>>,
    backoff: Option<crate::policy::Backoff>,
    keep: Option<Duration>,
    keep_failed: Option<Duration>,
}

impl NewJobBuilder {
    /// Chooses the id (default: a random UUID). Submitting an id that exists changes nothing.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
    /// Dispatches to this group's queue.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }
    /// Dispatches to one instance (in `group`, or the `default` group).
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }
    /// 0 (highest) to 9 (lowest); 5 by default.
    pub fn priority(mut self, level: u8) -> Self {
        self.priority = Some(level);
        self
    }
    /// How long a handler may run before it is interrupted and the attempt fails with `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// How many more attempts after the first a failing handler gets.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }
    pub fn caller_id(mut self, id: impl Into<String>) -> Self {
        self.caller_id = id.into();
        self
    }
    pub fn context_id(mut self, id: impl Into<String>) -> Self {
        self.context_id = id.into();
        self
    }
    /// A log file, relative to the worker's log directory (no absolute paths, no `..`).
    pub fn log_path(mut self, path: impl Into<String>) -> Self {
        self.log_path = Some(path.into());
        self
    }
    /// W3C trace context to carry to the worker (`00-<32 hex>-<16 hex>-<2 hex>`); set from the
    /// current span at submit when the producer traces with OpenTelemetry.
    pub fn traceparent(mut self, tp: impl Into<String>) -> Self {
        self.traceparent = Some(tp.into());
        self
    }
    /// A uniqueness key: while a job holding it is queued or running, this submit queues
    /// nothing and answers that job's id (`Submitted::duplicate`). Distinct from the id: many
    /// jobs may share a key over time, one at a time.
    pub fn unique(mut self, key: impl Into<String>) -> Self {
        let ttl = self.unique.take().and_then(|(_, t)| t);
        self.unique = Some((key.into(), ttl));
        self
    }
    /// The key its queue's `key_rate` counts it under (a customer, an account): at most so
    /// many jobs sharing it start in a window, whatever worker takes them. 1 to 200 bytes.
    pub fn limit_key(mut self, key: impl Into<String>) -> Self {
        self.limit_key = Some(key.into());
        self
    }

    /// A payload already encoded as MessagePack (a recurring job's template keeps it so).
    pub fn payload_bytes(mut self, bytes: Vec<u8>) -> Self {
        self.payload = Some(Ok(bytes));
        self
    }

    /// Its own back-off between failed attempts (`Backoff::parse("exponential:1s:1m")`): the
    /// server applies the longer of it and its queue policy's, whatever worker runs it.
    pub fn backoff(mut self, backoff: crate::policy::Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// How long it is kept once finished (BullMQ's `removeOnComplete`): `Duration::ZERO` for
    /// as soon as a waiting caller can no longer miss it (10 s). Its queue policy's retention
    /// applies when longer (docs/operations.md).
    pub fn keep(mut self, d: Duration) -> Self {
        self.keep = Some(d);
        self
    }

    /// How long it is kept once it ended error (BullMQ's `removeOnFail`), as [`Self::keep`].
    pub fn keep_failed(mut self, d: Duration) -> Self {
        self.keep_failed = Some(d);
        self
    }

    /// Makes it a member of batch `name` (`Client::batch`): its end is counted there, and the
    /// batch's callbacks run once every member ended.
    pub fn batch(mut self, name: impl Into<String>) -> Self {
        self.batch = Some(name.into());
        self
    }

    /// A route key: in a sharded namespace every job with this key goes to one shard and starts
    /// in submit order within its priority, as on an unsharded queue (`docs/sharding.md`). 1 to
    /// 200 bytes; no effect on an unsharded namespace.
    pub fn route(mut self, key: impl Into<String>) -> Self {
        self.route = Some(key.into());
        self
    }

    /// How long the uniqueness key is held at most (default: the broker's retention time).
    pub fn unique_ttl(mut self, ttl: Duration) -> Self {
        let key = self.unique.take().map(|(k, _)| k).unwrap_or_default();
        self.unique = Some((key, Some(ttl)));
        self
    }
    /// Starts no earlier than `delay` from now.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }
    /// Starts no earlier than `at`.
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = Some(at);
        self
    }

    /// A typed payload beside the script: `value` encoded with rmp-serde (MessagePack, with
    /// field names, so a handler's struct may gain optional fields), read back by a handler
    /// with [`Job::payload`]. A value that does not encode fails [`NewJobBuilder::build`].
    pub fn payload<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        self.payload = Some(rmp_serde::to_vec_named(value).map_err(|e| e.to_string()));
        self
    }

    /// A prerequisite: this job waits (status `waiting`) until job `id` has finished, and ends
    /// `error` (`dependency failed: <id>`) if that one does. Repeatable. The prerequisite must
    /// exist when this job is submitted, or come before it in the same batch (see
    /// [`crate::Flow`]); one that finished already counts as done.
    pub fn after(mut self, id: impl Into<String>) -> Self {
        self.prerequisites.push(id.into());
        self
    }

    pub fn build(self) -> Result<NewJob> {
        let script_type = ScriptType::new(self.script_type)?;
        let group = self.group.map(GroupName::new).transpose()?;
        let instance = self.instance.map(InstanceName::new).transpose()?;
        let target = Target::new(script_type, group, instance);
        let id_chosen = self.id.is_some();
        let id = match self.id {
            Some(id) => JobId::new(id)?,
            None => JobId::random(),
        };
        if let Some(r) = &self.route {
            if r.is_empty() || r.len() > 200 {
                return Err(Error::InvalidInput(format!(
                    "route key {r:?} must be 1 to 200 bytes"
                )));
            }
        }
        if self.script.len() > MAX_SCRIPT_BYTES {
            return Err(Error::InvalidInput(format!(
                "script is {} bytes, the limit is {MAX_SCRIPT_BYTES}: store large data elsewhere and pass a reference",
                self.script.len()
            )));
        }
        if let Some(p) = &self.log_path {
            let path = Path::new(p);
            if p.is_empty()
                || path
                    .components()
                    .any(|c| !matches!(c, Component::Normal(_)))
            {
                return Err(Error::InvalidInput(format!(
                    "log_path {p:?} is outside the log directory: give a relative path without `..`"
                )));
            }
        }
        if let Some(k) = self.env.keys().find(|k| k.is_empty() || k.contains('=')) {
            return Err(Error::InvalidInput(format!(
                "environment variable name {k:?} is empty or contains '='"
            )));
        }
        let mut job = Job::new(id, &target, self.script);
        if let Some(level) = self.priority {
            job.priority = Priority::new(level)?;
        }
        if let Some(t) = self.timeout {
            if t.as_secs() == 0 {
                return Err(Error::InvalidInput(
                    "timeout must be at least one second".into(),
                ));
            }
            job.timeout = Some(t);
        }
        job.retries = self.retries;
        for p in &self.prerequisites {
            JobId::new(p.as_str())?;
        }
        // a zero delay is no delay (BullMQ's `delay: 0`), not a trip through the delayed set
        let delay = self.delay.filter(|d| !d.is_zero());
        if !self.prerequisites.is_empty() && (delay.is_some() || self.run_at.is_some()) {
            return Err(Error::InvalidInput(
                "a job with prerequisites cannot also be delayed: it starts when they finish"
                    .into(),
            ));
        }
        job.prerequisites = self.prerequisites;
        if let Some(p) = self.payload {
            let bytes = p.map_err(|e| {
                Error::InvalidInput(format!("payload does not encode as MessagePack: {e}"))
            })?;
            if bytes.len() > MAX_SCRIPT_BYTES {
                return Err(Error::InvalidInput(format!(
                    "payload is {} bytes, the limit is {MAX_SCRIPT_BYTES}: store large data elsewhere and pass a reference",
                    bytes.len()
                )));
            }
            job.payload = Some(bytes);
        }
        job.tags = self.tags;
        job.env_vars = self.env;
        job.caller_id = self.caller_id;
        job.context_id = self.context_id;
        job.log_path = self.log_path;
        if let Some(tp) = &self.traceparent {
            if !is_traceparent(tp) {
                return Err(Error::InvalidInput(format!(
                    "traceparent {tp:?} is not W3C trace context: give 00-<32 hex>-<16 hex>-<2 hex>"
                )));
            }
        }
        if let Some((key, ttl)) = self.unique {
            if key.is_empty() || key.len() > 200 {
                return Err(Error::InvalidInput(format!(
                    "uniqueness key {key:?} must be 1 to 200 bytes (unique_ttl needs a unique key)"
                )));
            }
            if ttl.is_some_and(|t| t.as_millis() == 0) {
                return Err(Error::InvalidInput(
                    "unique_ttl must be at least a millisecond".into(),
                ));
            }
            job.unique = Some(key);
            job.unique_ttl = ttl;
        }
        if let Some(name) = self.batch {
            job.batch = Some(crate::name::BatchName::new(name)?.to_string());
        }
        if let Some(b) = self.backoff {
            if !(0.0..=1.0).contains(&b.jitter) {
                return Err(Error::InvalidInput(format!(
                    "back-off jitter {} is not from 0 to 1",
                    b.jitter
                )));
            }
            job.backoff = Some(b);
        }
        job.keep = self.keep;
        job.keep_failed = self.keep_failed;
        if let Some(key) = self.limit_key {
            if key.is_empty() || key.len() > 200 {
                return Err(Error::InvalidInput(format!(
                    "limit key {key:?} must be 1 to 200 bytes"
                )));
            }
            job.limit_key = Some(key);
        }
        // the span the job is built in, when it belongs to a trace: the worker's handler span
        // joins it
        job.traceparent = self.traceparent.or_else(crate::trace::current_traceparent);
        let run_at_ms = match (self.run_at, delay) {
            (Some(at), _) => Some(
                at.duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
            ),
            (None, Some(d)) => Some(clock::now_ms() + d.as_millis() as u64),
            (None, None) => None,
        };
        Ok(NewJob {
            job,
            target,
            run_at_ms,
            route: self.route,
            id_chosen,
        })
    }
}

/// `00-<32 hex>-<16 hex>-<2 hex>`, lowercase hex (the form hero_submit checks).
pub fn is_traceparent(tp: &str) -> bool {
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
}
