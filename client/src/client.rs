//! The producer API (SPEC §7): connect, then submit jobs (alone or many in one round trip),
//! run one and wait, ask a job's status, read its record, or stop it. Listing and other
//! read-side questions are the [`crate::inspect`] module's.

use std::time::Duration;

use crate::answer::{JobResult, StopOutcome, Submitted};
use hero_protocol::conn::Redis;
use hero_protocol::error::{DecodeError, Error, Result};
use hero_protocol::function;
use hero_protocol::job::{Job, Status};
use hero_protocol::keys::Keyspace;
use hero_protocol::name::JobId;
use hero_protocol::new_job::NewJob;
use hero_protocol::ConnectOptions as ClientOptions;

use crate::layout::{Layout, Member, Shards};

/// The producer handle. Cheap to clone; clones share one connection (the lane, or one
/// multiplexed redis-rs connection) and open dedicated ones only for blocking waits.
#[derive(Clone)]
pub struct Client {
    redis: Redis,
    keys: Keyspace,
    /// Group commit of single submits, started by the first one (see `coalesce`).
    coalescer: std::sync::Arc<std::sync::OnceLock<crate::coalesce::Coalescer>>,
    /// The namespace's shards (`crate::shards`); `None` for a client bound to one shard.
    shards: Option<std::sync::Arc<Shards<Client>>>,
    /// The fleet as last read, for the checks at submit (`crate::fleet`).
    fleet: std::sync::Arc<hero_protocol::fleet::Cached>,
    /// The waits' shared follower of the event log, started by the first (`crate::waiter`).
    waiter: crate::waiter::Waiter,
    /// Whether anyone does the queue's upkeep, looked at once (`crate::upkeep`).
    upkeep: std::sync::Arc<crate::upkeep::Upkeep>,
}

impl Client {
    /// Connects to `url` in the `hero` namespace.
    pub async fn connect(url: &str) -> Result<Client> {
        Self::with_options(ClientOptions::new(url)).await
    }

    pub async fn with_options(opts: ClientOptions) -> Result<Client> {
        let (redis, keys) = opts.open().await?;
        let mut client = Client::bound_to(redis, keys);
        let shards = Shards::open(opts, &client).await?;
        client.shards = Some(std::sync::Arc::new(shards));
        Ok(client)
    }

    pub(crate) fn fleet_cache(&self) -> &hero_protocol::fleet::Cached {
        &self.fleet
    }

    pub(crate) fn shards(&self) -> Option<&Shards<Client>> {
        self.shards.as_deref()
    }

    /// The layout when the namespace has more than one shard served.
    fn sharded(&self) -> Option<std::sync::Arc<Layout<Client>>> {
        self.layout().filter(|l| l.map.is_sharded())
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    /// Says once (a WARN) when no live process does the queue's upkeep, for what this client
    /// stored that waits on it (`crate::upkeep`).
    pub(crate) async fn upkeep_needed(&self) {
        self.upkeep.needed(&self.redis, &self.keys).await;
    }

    /// Submits one job. An id that exists already is not changed (`created` is false).
    /// Submits made at the same moment from several tasks share one server call (group commit,
    /// see `coalesce`): a lone submit is sent at once.
    pub async fn submit(&self, job: &NewJob) -> Result<Submitted> {
        self.upkeep
            .note(&self.redis, &self.keys, std::slice::from_ref(job))
            .await;
        if self.shards.is_some() {
            self.check_fleet(std::slice::from_ref(job)).await?;
        }
        if let Some(layout) = self.sharded() {
            let (job, member) = self.place_one(&layout, job).await?;
            return Box::pin(member.submit(&job)).await;
        }
        let coalescer = self.coalescer.get_or_init(|| {
            crate::coalesce::Coalescer::start(self.redis.clone(), self.keys.clone())
        });
        if let Some(answer) = coalescer.submit(job.clone()).await {
            return answer;
        }
        let mut one = self.submit_many(std::slice::from_ref(job)).await?;
        one.pop().unwrap_or_else(|| {
            Err(hero_protocol::reply::unexpected(
                "hero_submit answered no job",
            ))
        })
    }

    /// Submits many jobs in one call (one round trip, one function call); one result per job,
    /// in order.
    pub async fn submit_many(&self, jobs: &[NewJob]) -> Result<Vec<Result<Submitted>>> {
        self.upkeep.note(&self.redis, &self.keys, jobs).await;
        if self.shards.is_some() {
            self.check_fleet(jobs).await?;
        }
        if let Some(layout) = self.sharded() {
            return Box::pin(self.submit_sharded(&layout, jobs)).await;
        }
        crate::coalesce::submit_many(&self.redis, &self.keys, jobs).await
    }

    /// Submits `job` and waits up to `wait` for it to end (see [`Client::wait`]).
    pub async fn run(&self, job: &NewJob, wait: Duration) -> Result<JobResult> {
        let submitted = self.submit(job).await?;
        self.wait(&submitted.id, wait).await
    }

    /// Waits up to `wait` for a job to end, whoever runs it, and answers how it ended. It wakes
    /// on the job's end in the event log, read by one task all the client's waits share
    /// (`crate::waiter`), then reads the record: no poll per job. With the event log off it
    /// reads the record every [`crate::waiter::POLL`].
    pub async fn wait(&self, id: &JobId, wait: Duration) -> Result<JobResult> {
        if self.sharded().is_some() {
            return Box::pin(self.for_job(id).await?.wait(id, wait)).await;
        }
        let deadline = tokio::time::Instant::now() + wait;
        let registered = self
            .waiter
            .register(&self.redis, &self.keys, id.as_str())
            .await?;
        loop {
            if let Some(result) = self.result_from_hash(id).await? {
                return Ok(result);
            }
            if tokio::time::timeout_at(deadline, registered.notify.notified())
                .await
                .is_err()
            {
                if let Some(result) = self.result_from_hash(id).await? {
                    return Ok(result);
                }
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
        }
    }

    async fn result_from_hash(&self, id: &JobId) -> Result<Option<JobResult>> {
        type Row = (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<Vec<u8>>,
        );
        let (status, output, error, value): Row = self
            .redis
            .query(
                redis::cmd("HMGET")
                    .arg(self.keys.job(id))
                    .arg("status")
                    .arg("output")
                    .arg("error")
                    .arg("value"),
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
                value,
                error: error.unwrap_or_default(),
            })),
            _ => Ok(None),
        }
    }

    /// The job's status.
    pub async fn status(&self, id: &JobId) -> Result<Status> {
        if self.sharded().is_some() {
            // one read where a generated id says, a search only when it is not there
            if let Some(m) = self.named_shard(id) {
                match Box::pin(m.status(id)).await {
                    Err(Error::JobNotFound(_)) => {}
                    other => return other,
                }
            }
            return Box::pin(self.for_job(id).await?.status(id)).await;
        }
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
        if self.sharded().is_some() {
            if let Some(m) = self.named_shard(id) {
                match Box::pin(m.get(id)).await {
                    Err(Error::JobNotFound(_)) => {}
                    other => return other,
                }
            }
            return Box::pin(self.for_job(id).await?.get(id)).await;
        }
        let key = self.keys.job(id);
        let reply = self
            .redis
            .query::<redis::Value>(redis::cmd("HGETALL").arg(&key))
            .await?;
        Job::from_reply(&key, reply)?.ok_or_else(|| Error::JobNotFound(id.to_string()))
    }

    /// Stops a job: a queued or delayed one never starts; a running one ends `error`/`stopped`
    /// at once and its worker is told to interrupt the handler.
    pub async fn stop(&self, id: &JobId) -> Result<StopOutcome> {
        if self.sharded().is_some() {
            return Box::pin(self.for_job(id).await?.stop(id)).await;
        }
        for _ in 0..5 {
            match self.stop_as(id).await?.as_str() {
                "cancelled" => return Ok(StopOutcome::Cancelled),
                "interrupted" => return Ok(StopOutcome::Interrupted),
                "already_completed" => return Ok(StopOutcome::AlreadyCompleted),
                "changed" => continue,
                other => {
                    return Err(hero_protocol::reply::unexpected(format!(
                        "hero_stop answered {other:?}"
                    )))
                }
            }
        }
        Err(Error::InvalidInput(format!(
            "job {id} kept changing hands while it was being stopped, or its worker_id does not name a worker; try again"
        )))
    }

    /// One `hero_stop` call for `id`, for the worker its record names.
    async fn stop_as(&self, id: &JobId) -> Result<String> {
        function::stop_job(
            &self.redis,
            &self.keys,
            id,
            function::StopWhy::Operator,
            None,
        )
        .await
    }
}

impl Member for Client {
    fn keys(&self) -> &Keyspace {
        &self.keys
    }

    fn redis(&self) -> &Redis {
        &self.redis
    }

    /// A client of the one shard `keys` names, on `redis` (which serves it).
    fn bound_to(redis: Redis, keys: Keyspace) -> Client {
        Client {
            redis,
            keys,
            coalescer: std::sync::Arc::default(),
            shards: None,
            fleet: std::sync::Arc::default(),
            waiter: crate::waiter::Waiter::default(),
            upkeep: std::sync::Arc::default(),
        }
    }

    /// This client bound to its shard 0 (sharing its connections and group commit).
    fn bound(&self) -> Client {
        Client {
            shards: None,
            ..self.clone()
        }
    }
}
