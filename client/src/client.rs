//! The producer API (SPEC §7): build a job with [`NewJob::builder`], then submit it (alone or
//! many in one round trip), run it and wait, ask its status, fetch its record, stop it, or list
//! jobs by status or queue with a cursor.

use std::collections::BTreeMap;
use std::path::{Component, Path};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::clock;
use crate::conn::Redis;
use crate::error::{Error, Result};
use crate::function::Function;
use crate::job::{Job, Status};
use crate::keys::{Keyspace, CONSUMER_GROUP, ENTRY_JOB_FIELD};
use crate::name::{
    ConsumerName, GroupName, InstanceName, JobId, Namespace, Priority, ScriptType, Target,
};
use crate::reply::{self, SubmitReply};

/// Scripts larger than this are refused at submit (SPEC §4.7); a job queue is no blob store.
pub const MAX_SCRIPT_BYTES: usize = 1 << 20;

/// A job to submit, checked when built: names, priority, script size and log path are valid.
#[derive(Clone, Debug)]
pub struct NewJob {
    job: Job,
    target: Target,
    run_at_ms: Option<u64>,
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

    pub fn id(&self) -> &JobId {
        &self.job.id
    }

    pub fn record(&self) -> &Job {
        &self.job
    }

    pub fn target(&self) -> &Target {
        &self.target
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
    delay: Option<Duration>,
    run_at: Option<SystemTime>,
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

    pub fn build(self) -> Result<NewJob> {
        let script_type = ScriptType::new(self.script_type)?;
        let group = self.group.map(GroupName::new).transpose()?;
        let instance = self.instance.map(InstanceName::new).transpose()?;
        let target = Target::new(script_type, group, instance);
        let id = match self.id {
            Some(id) => JobId::new(id)?,
            None => JobId::random(),
        };
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
            job.timeout = t;
        }
        job.retries = self.retries;
        job.tags = self.tags;
        job.env_vars = self.env;
        job.caller_id = self.caller_id;
        job.context_id = self.context_id;
        job.log_path = self.log_path;
        let run_at_ms = match (self.run_at, self.delay) {
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
        })
    }
}

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

/// Which jobs [`Client::list`] returns.
#[derive(Clone, Debug)]
pub enum ListFilter {
    /// Every job hash with this status (a SCAN over job keys, never KEYS).
    Status(Status),
    /// Every job hash.
    All,
    /// The entries of one work stream, oldest first.
    Queue(Target, Priority),
}

/// A job in a listing: the fields an operator scans for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSummary {
    pub id: String,
    pub status: String,
    pub script_type: String,
    pub attempts: String,
    pub updated_at: String,
    pub error: String,
}

/// One page of a listing; pass `next` back to continue, `None` means the end.
#[derive(Clone, Debug, Default)]
pub struct Page {
    pub jobs: Vec<JobSummary>,
    pub next: Option<String>,
}

/// Connection options.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub url: String,
    pub namespace: String,
    /// Wrap the namespace in a hash tag (Redis Cluster).
    pub cluster: bool,
}

impl ClientOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            namespace: "hero".into(),
            cluster: false,
        }
    }
}

/// The producer handle. Cheap to clone; all clones share one connection pool.
#[derive(Clone)]
pub struct Client {
    redis: Redis,
    keys: Keyspace,
}

impl Client {
    /// Connects to `url` in the `hero` namespace.
    pub async fn connect(url: &str) -> Result<Client> {
        Self::with_options(ClientOptions::new(url)).await
    }

    pub async fn with_options(opts: ClientOptions) -> Result<Client> {
        let ns = Namespace::new(opts.namespace)?;
        let keys = if opts.cluster {
            Keyspace::cluster(&ns)
        } else {
            Keyspace::new(&ns)
        };
        let redis = Redis::connect(&opts.url).await?;
        Ok(Client { redis, keys })
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    /// One `hero_submit` call for all of `jobs`; `reply` asks for a run-and-wait reply.
    fn submit_cmd(&self, jobs: &[NewJob], reply: bool) -> redis::Cmd {
        let mut keys = Vec::with_capacity(3 + 2 * jobs.len());
        keys.push(self.keys.delayed());
        keys.push(self.keys.queues());
        keys.push(self.keys.bridge_registry());
        let mut fields = Vec::with_capacity(jobs.len());
        for job in jobs {
            keys.push(self.keys.job(job.id()));
            keys.push(self.keys.work(job.target(), job.job.priority));
            fields.push(job.job.to_submit_fields());
        }
        let mut cmd = Function::Submit.call(&keys);
        cmd.arg(CONSUMER_GROUP);
        for (job, fields) in jobs.iter().zip(fields) {
            let extra = if reply { 2 } else { 0 };
            cmd.arg(job.id().as_str())
                .arg(job.run_at_ms.unwrap_or(0))
                .arg(2 * fields.len() + extra);
            for (field, value) in fields {
                cmd.arg(field).arg(value);
            }
            if reply {
                cmd.arg("reply").arg("1");
            }
        }
        cmd
    }

    /// Submits one job. An id that exists already is not changed (`created` is false).
    pub async fn submit(&self, job: &NewJob) -> Result<Submitted> {
        let mut all = self.submit_many(std::slice::from_ref(job)).await?;
        all.pop()
            .unwrap_or_else(|| Err(Error::protocol("hero_submit answered no job")))
    }

    /// Submits many jobs in one call (one round trip, one function call); one result per job,
    /// in order.
    pub async fn submit_many(&self, jobs: &[NewJob]) -> Result<Vec<Result<Submitted>>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let v: Value = self.redis.query(&self.submit_cmd(jobs, false)).await?;
        let replies = SubmitReply::decode_many(&v, jobs.len())?;
        Ok(jobs
            .iter()
            .zip(replies)
            .map(|(job, r)| {
                Ok(Submitted {
                    id: job.id().clone(),
                    created: r.created,
                    status: r.status,
                })
            })
            .collect())
    }

    /// Submits `job` and waits up to `wait` for it to end, through its reply list; when the
    /// reply is gone (it expired, or the job had ended before), the job hash answers.
    pub async fn run(&self, job: &NewJob, wait: Duration) -> Result<JobResult> {
        let v: Value = self
            .redis
            .query(&self.submit_cmd(std::slice::from_ref(job), true))
            .await?;
        SubmitReply::decode_many(&v, 1)?;
        self.wait(job.id(), wait).await
    }

    /// Waits up to `wait` for a job to end (see [`Client::run`]).
    pub async fn wait(&self, id: &JobId, wait: Duration) -> Result<JobResult> {
        let deadline = Instant::now() + wait;
        let slice = Duration::from_secs(1);
        let mut conn = self.redis.dedicated(slice).await?;
        let reply_key = self.keys.reply(id);
        loop {
            if let Some(result) = self.result_from_hash(id).await? {
                return Ok(result);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let status = self
                    .status(id)
                    .await
                    .map(|s| s.to_string())
                    .unwrap_or_else(|_| "unknown".into());
                return Err(Error::WaitTimedOut {
                    job: id.clone(),
                    waited: wait,
                    status,
                });
            }
            let block = left.min(slice).as_secs_f64().max(0.01);
            let popped: Option<(String, String)> = redis::cmd("BLPOP")
                .arg(&reply_key)
                .arg(block)
                .query_async(&mut conn)
                .await?;
            if let Some((_, payload)) = popped {
                return parse_reply(id, &payload);
            }
        }
    }

    async fn result_from_hash(&self, id: &JobId) -> Result<Option<JobResult>> {
        let (status, output, error): (Option<String>, Option<String>, Option<String>) = self
            .redis
            .query(
                redis::cmd("HMGET")
                    .arg(self.keys.job(id))
                    .arg("status")
                    .arg("output")
                    .arg("error"),
            )
            .await?;
        let Some(status) = status else {
            return Err(Error::JobNotFound(id.clone()));
        };
        match Status::parse(&status) {
            Some(s) if s.is_terminal() => Ok(Some(JobResult {
                id: id.clone(),
                status: s,
                output: output.unwrap_or_default(),
                error: error.unwrap_or_default(),
            })),
            _ => Ok(None),
        }
    }

    /// The job's status.
    pub async fn status(&self, id: &JobId) -> Result<Status> {
        let status: Option<String> = self
            .redis
            .query(redis::cmd("HGET").arg(self.keys.job(id)).arg("status"))
            .await?;
        let status = status.ok_or_else(|| Error::JobNotFound(id.clone()))?;
        Status::parse(&status).ok_or_else(|| {
            Error::InvalidJob(crate::job::DecodeError {
                key: self.keys.job(id),
                field: "status".into(),
                reason: format!(
                    "is {status:?}; expected one of waiting, dispatched, started, finished, error"
                ),
            })
        })
    }

    /// The whole job record.
    pub async fn get(&self, id: &JobId) -> Result<Job> {
        let key = self.keys.job(id);
        let fields: Vec<(String, String)> =
            self.redis.query(redis::cmd("HGETALL").arg(&key)).await?;
        if fields.is_empty() {
            return Err(Error::JobNotFound(id.clone()));
        }
        Ok(Job::from_fields(&key, fields)?)
    }

    /// Stops a job: a queued or delayed one never starts; a running one ends `error`/`stopped`
    /// at once and its worker is told to interrupt the handler.
    pub async fn stop(&self, id: &JobId) -> Result<StopOutcome> {
        let key = self.keys.job(id);
        for _ in 0..5 {
            let f: Vec<Option<String>> = self
                .redis
                .query(redis::cmd("HMGET").arg(&key).arg(&[
                    "script_type",
                    "group",
                    "instance",
                    "priority",
                    "worker_id",
                ]))
                .await?;
            let get = |i: usize| f.get(i).cloned().flatten().unwrap_or_default();
            let (script_type, group, instance, priority, worker) =
                (get(0), get(1), get(2), get(3), get(4));
            // A job without a valid target was never queued by us: its stream key is unused.
            let target = ScriptType::new(&script_type).ok().map(|t| {
                Target::new(
                    t,
                    GroupName::new(&group).ok(),
                    InstanceName::new(&instance).ok(),
                )
            });
            let priority = priority
                .parse()
                .ok()
                .and_then(|p| Priority::new(p).ok())
                .unwrap_or_default();
            let stream = match &target {
                Some(t) => self.keys.work(t, priority),
                None => key.clone(),
            };
            let ctl = match (ConsumerName::parse(&worker), &target) {
                (Ok(c), Some(t)) => self
                    .keys
                    .ctl_instance(&t.script_type, &c.group, &c.instance),
                _ => String::new(),
            };
            let mut cmd = Function::Stop.call(&[
                key.clone(),
                stream,
                self.keys.delayed(),
                self.keys.reply(id),
                self.keys.config(),
                if ctl.is_empty() {
                    self.keys.config()
                } else {
                    ctl.clone()
                },
                self.keys.retention(),
            ]);
            cmd.arg(CONSUMER_GROUP)
                .arg(if ctl.is_empty() { "" } else { worker.as_str() })
                .arg(clock::now_iso())
                .arg(self.redis.caps().xackdel_flag())
                .arg(id.as_str());
            let answer: String = match self.redis.query(&cmd).await {
                Err(Error::Server {
                    code: crate::function::ServerCode::JobNotFound,
                    ..
                }) => return Err(Error::JobNotFound(id.clone())),
                other => other?,
            };
            match answer.as_str() {
                "cancelled" => return Ok(StopOutcome::Cancelled),
                "interrupted" => return Ok(StopOutcome::Interrupted),
                "already_completed" => return Ok(StopOutcome::AlreadyCompleted),
                "changed" => continue,
                other => return Err(Error::protocol(format!("hero_stop answered {other:?}"))),
            }
        }
        Err(Error::InvalidInput(format!(
            "job {id} kept changing hands while it was being stopped, or its worker_id does not name a worker; try again"
        )))
    }

    /// One page of jobs; start with `cursor` `None`, continue with the page's `next`.
    pub async fn list(
        &self,
        filter: &ListFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let limit = limit.clamp(1, 10_000);
        let (ids, next): (Vec<String>, Option<String>) = match filter {
            ListFilter::Queue(target, priority) => {
                let stream = self.keys.work(target, *priority);
                let start = match cursor {
                    Some(c) => format!("({c}"),
                    None => "-".to_string(),
                };
                let entries: Vec<(String, Vec<(String, String)>)> = self
                    .redis
                    .query(
                        redis::cmd("XRANGE")
                            .arg(&stream)
                            .arg(start)
                            .arg("+")
                            .arg("COUNT")
                            .arg(limit),
                    )
                    .await?;
                let next = if entries.len() == limit {
                    entries.last().map(|e| e.0.clone())
                } else {
                    None
                };
                let ids = entries
                    .into_iter()
                    .filter_map(|(_, f)| {
                        f.into_iter()
                            .find(|(k, _)| k == ENTRY_JOB_FIELD)
                            .map(|(_, v)| v)
                    })
                    .collect();
                (ids, next)
            }
            ListFilter::Status(_) | ListFilter::All => {
                let prefix = self.keys.job_prefix();
                let (next, keys): (String, Vec<String>) = self
                    .redis
                    .query(
                        redis::cmd("SCAN")
                            .arg(cursor.unwrap_or("0"))
                            .arg("MATCH")
                            .arg(self.keys.job_pattern())
                            .arg("COUNT")
                            .arg(limit)
                            .arg("TYPE")
                            .arg("hash"),
                    )
                    .await?;
                let ids = keys
                    .into_iter()
                    .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
                    .collect();
                (ids, if next == "0" { None } else { Some(next) })
            }
        };
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET").arg(self.keys.job_unchecked(id)).arg(&[
                "status",
                "script_type",
                "attempts",
                "updated_at",
                "error",
            ]);
        }
        let rows = self.redis.pipeline(&pipe).await?;
        let mut jobs = Vec::with_capacity(ids.len());
        for (id, row) in ids.into_iter().zip(rows) {
            let values = reply::array(&row?)?
                .iter()
                .map(|v| reply::text(v).unwrap_or_default())
                .collect::<Vec<_>>();
            let get = |i: usize| values.get(i).cloned().unwrap_or_default();
            let summary = JobSummary {
                id,
                status: get(0),
                script_type: get(1),
                attempts: get(2),
                updated_at: get(3),
                error: get(4),
            };
            if summary.status.is_empty() {
                continue; // expired between the scan and the read
            }
            if let ListFilter::Status(s) = filter {
                if summary.status != s.as_str() {
                    continue;
                }
            }
            jobs.push(summary);
        }
        Ok(Page { jobs, next })
    }
}

fn parse_reply(id: &JobId, payload: &str) -> Result<JobResult> {
    #[derive(serde::Deserialize)]
    struct Reply {
        status: String,
        #[serde(default)]
        output: String,
        #[serde(default)]
        error: String,
    }
    let r: Reply = serde_json::from_str(payload)
        .map_err(|e| Error::protocol(format!("reply of job {id} is not the expected JSON: {e}")))?;
    let status = Status::parse(&r.status)
        .ok_or_else(|| Error::protocol(format!("reply of job {id} has status {:?}", r.status)))?;
    Ok(JobResult {
        id: id.clone(),
        status,
        output: r.output,
        error: r.error,
    })
}
