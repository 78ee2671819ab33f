//! The producer API (SPEC §7): connect, then submit jobs (alone or many in one round trip),
//! run one and wait, ask a job's status, read its record, or stop it. Listing and other
//! read-side questions are the [`crate::inspect`] module's.

use std::time::{Duration, Instant};

use redis::Value;

use crate::answer::{JobResult, StopOutcome, Submitted};
use crate::conn::Redis;
use crate::error::{DecodeError, Error, Result, ServerCode};
use crate::function;
use crate::function::SubmitReply;
use crate::job::{Job, Placement, Status, PLACEMENT_FIELDS};
use crate::keys::Keyspace;
use crate::name::{ConsumerName, JobId, Namespace};
use crate::new_job::NewJob;

/// Connection options.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub url: String,
    pub namespace: String,
    /// Redis Cluster: the URL's hosts are seeds, the namespace is wrapped in a hash tag and the
    /// calls go to the node that owns its slot (implied by a `redis+cluster://` URL).
    pub cluster: bool,
    /// Certificates for a `rediss://` URL (else the system's roots, and no client certificate).
    pub tls: crate::conn::Tls,
    /// Replicated acknowledgements: a call that writes returns Ok only once this many replicas
    /// hold it (`WAIT`), else [`crate::Error::NotReplicated`] (0: off).
    pub replicas: crate::conn::Replicas,
    /// Connections for blocking waits (a worker holds two per namespace; each `Client::wait`
    /// and event follower one while it waits).
    pub pool_size: usize,
}

impl ClientOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            namespace: "hero".into(),
            cluster: false,
            tls: crate::conn::Tls::default(),
            replicas: crate::conn::Replicas::default(),
            pool_size: crate::conn::DEFAULT_POOL_SIZE,
        }
    }
}

/// The producer handle. Cheap to clone; clones share one connection (the lane, or one
/// multiplexed redis-rs connection) and open dedicated ones only for blocking waits.
#[derive(Clone)]
pub struct Client {
    redis: Redis,
    keys: Keyspace,
    /// Group commit of single submits, started by the first one (see `coalesce`).
    coalescer: std::sync::Arc<std::sync::OnceLock<crate::coalesce::Coalescer>>,
}

impl Client {
    /// Connects to `url` in the `hero` namespace.
    pub async fn connect(url: &str) -> Result<Client> {
        Self::with_options(ClientOptions::new(url)).await
    }

    pub async fn with_options(opts: ClientOptions) -> Result<Client> {
        let ns = Namespace::new(opts.namespace)?;
        let cluster = opts.cluster || crate::conn::names_cluster(&opts.url);
        let keys = if cluster {
            Keyspace::cluster(&ns)
        } else {
            Keyspace::new(&ns)
        };
        let mut redis =
            Redis::open(&opts.url, &opts.tls, cluster, keys.prefix(), opts.pool_size).await?;
        redis.set_replicas(opts.replicas)?;
        Ok(Client {
            redis,
            keys,
            coalescer: std::sync::Arc::default(),
        })
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    /// The control list of the worker whose `worker_id` is `worker`, for a job queued at `at`;
    /// `None` when `worker` names no worker of ours (a legacy one, or none).
    pub(crate) fn control_list(&self, at: &Placement, worker: &str) -> Option<String> {
        let c = ConsumerName::parse(worker).ok()?;
        Some(
            self.keys
                .ctl_instance(&at.target.script_type, &c.group, &c.instance),
        )
    }

    /// The read side of the same namespace: listings (and, later, stats and the audit).
    pub fn inspector(&self) -> crate::inspect::Inspector {
        crate::inspect::Inspector::new(self.redis.clone(), self.keys.clone())
    }

    /// Submits one job. An id that exists already is not changed (`created` is false).
    /// Submits made at the same moment from several tasks share one server call (group commit,
    /// see `coalesce`): a lone submit is sent at once.
    pub async fn submit(&self, job: &NewJob) -> Result<Submitted> {
        let coalescer = self.coalescer.get_or_init(|| {
            crate::coalesce::Coalescer::start(self.redis.clone(), self.keys.clone())
        });
        if let Some(answer) = coalescer.submit(job.clone()).await {
            return answer;
        }
        let mut one = self.submit_many(std::slice::from_ref(job)).await?;
        one.pop()
            .unwrap_or_else(|| Err(Error::protocol("hero_submit answered no job")))
    }

    /// Submits many jobs in one call (one round trip, one function call); one result per job,
    /// in order.
    pub async fn submit_many(&self, jobs: &[NewJob]) -> Result<Vec<Result<Submitted>>> {
        crate::coalesce::submit_many(&self.redis, &self.keys, jobs).await
    }

    /// Submits `job` and waits up to `wait` for it to end, through its reply list; when the
    /// reply is gone (it expired, or the job had ended before), the job hash answers.
    pub async fn run(&self, job: &NewJob, wait: Duration) -> Result<JobResult> {
        let v: Value = self
            .redis
            .query(&function::submit(
                &self.keys,
                std::slice::from_ref(job),
                true,
            ))
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
                    job: id.to_string(),
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
            return Err(Error::JobNotFound(id.to_string()));
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
        let status: Option<Vec<u8>> = self
            .redis
            .query(redis::cmd("HGET").arg(self.keys.job(id)).arg("status"))
            .await?;
        let status = status.ok_or_else(|| Error::JobNotFound(id.to_string()))?;
        let status = String::from_utf8(status).map_err(|e| {
            Error::InvalidJob(DecodeError {
                key: self.keys.job(id),
                field: "status".into(),
                reason: format!("is not UTF-8 text ({} bytes)", e.as_bytes().len()),
            })
        })?;
        Status::parse(&status).ok_or_else(|| {
            Error::InvalidJob(DecodeError {
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
        let record = crate::reply::record(
            self.redis
                .query::<redis::Value>(redis::cmd("HGETALL").arg(&key))
                .await?,
        )?;
        if record.0.is_empty() && record.1.is_none() {
            return Err(Error::JobNotFound(id.to_string()));
        }
        Ok(Job::from_record(&key, record)?)
    }

    /// Stops a job: a queued or delayed one never starts; a running one ends `error`/`stopped`
    /// at once and its worker is told to interrupt the handler.
    pub async fn stop(&self, id: &JobId) -> Result<StopOutcome> {
        for _ in 0..5 {
            match self
                .stop_as(id, function::StopWhy::Operator, None)
                .await?
                .as_str()
            {
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

    /// Ends a running job past its time limit `error`/`timeout` (the broker's time-limit pass):
    /// only while `worker` still runs it; its worker is told to interrupt the handler, and its
    /// late completion is fenced. True when this call ended it.
    pub async fn end_overdue(&self, id: &JobId, worker: &str) -> Result<bool> {
        Ok(self
            .stop_as(id, function::StopWhy::Timeout, Some(worker))
            .await?
            == "timeout")
    }

    /// One `hero_stop` call for `id`, for the worker its record names (or `expected`, when the
    /// record names another: the call then answers `changed`).
    async fn stop_as(
        &self,
        id: &JobId,
        why: function::StopWhy,
        expected: Option<&str>,
    ) -> Result<String> {
        let key = self.keys.job(id);
        let mut fields = PLACEMENT_FIELDS.to_vec();
        fields.push("worker_id");
        let f: Vec<Option<String>> = self
            .redis
            .query(redis::cmd("HMGET").arg(&key).arg(&fields))
            .await?;
        let placement = Placement::read(&f);
        let worker = f
            .get(PLACEMENT_FIELDS.len())
            .cloned()
            .flatten()
            .unwrap_or_default();
        let worker = expected.unwrap_or(&worker);
        // A job without a valid target was never queued by us: its stream key is unused.
        let stream = match &placement {
            Some(p) => self.keys.work(&p.target, p.priority),
            None => key.clone(),
        };
        let ctl = placement
            .as_ref()
            .and_then(|p| self.control_list(p, worker));
        let seen = ctl.as_deref().map(|ctl| (ctl, worker));
        let cmd = function::stop(
            &self.keys,
            id,
            &stream,
            seen,
            self.redis.caps().xackdel_flag(),
            why,
        );
        match self.redis.query(&cmd).await {
            Err(Error::Server {
                code: ServerCode::JobNotFound,
                ..
            }) => Err(Error::JobNotFound(id.to_string())),
            other => other,
        }
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
