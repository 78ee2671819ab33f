//! The worker: its builder, the fetch loop that takes jobs in precedence order and wakes on new
//! entries, the task that runs one job, and graceful shutdown.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use hero_client::function;
use hero_client::reply::{Completion, Delivery, FetchReply};
use hero_client::{
    Client, ConsumerName, GroupName, InstanceName, Job, Keyspace, Redis, ScriptType,
};
use redis::Value;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::complete::{self, Finished};
use crate::error::{Error, Result};
use crate::inflight::{CancelReason, InFlight};
use crate::lease;
use crate::outcome::{Handler, JobContext, Outcome};

/// Something a worker did, for logs, tests and embedding programs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerEvent {
    /// Presence is registered and the worker is fetching.
    Ready {
        consumer: String,
    },
    Started {
        job_id: String,
        attempt: u32,
    },
    /// What `hero_complete` answered for a job's outcome.
    Completed {
        job_id: String,
        completion: Completion,
    },
    /// A job's handler was interrupted and its result not recorded.
    Interrupted {
        job_id: String,
        reason: CancelReason,
    },
    /// A stream entry was dropped: `missing` (names no job hash), `foreign` (its job key is not
    /// a hash), `stale` or `legacy`.
    Dropped {
        job_id: String,
        reason: String,
    },
    /// Shutdown finished: `handed_back` jobs went back to their queues.
    Stopped {
        handed_back: u64,
    },
}

type EventHook = Arc<dyn Fn(&WorkerEvent) + Send + Sync>;

/// Settings of a worker; see [`Worker::builder`].
pub struct WorkerBuilder {
    client: Client,
    types: Vec<String>,
    group: Option<String>,
    instance: Option<String>,
    concurrency: usize,
    lease: Duration,
    presence_ttl: Duration,
    shutdown_deadline: Duration,
    handler: Option<Arc<dyn Handler>>,
    on_event: Option<EventHook>,
}

impl WorkerBuilder {
    /// Script types served, in the order they are preferred at the same precedence level.
    pub fn types<I, S>(mut self, types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.types = types.into_iter().map(Into::into).collect();
        self
    }
    /// The group (default `default`).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }
    /// The instance name, unique within the group (default `<hostname>-<pid>`).
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }
    /// At most this many handlers at once (default 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }
    /// Idle time after which the broker may take a delivery back; renewed every third of it
    /// while the job runs (default 30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }
    /// Presence TTL; refreshed every third of it. A worker silent this long is dead to the
    /// broker and its jobs are recovered (default 15 s, as seed 000).
    pub fn presence_ttl(mut self, ttl: Duration) -> Self {
        self.presence_ttl = ttl;
        self
    }
    /// How long shutdown waits for running jobs before handing them back (default 30 s).
    pub fn shutdown_deadline(mut self, d: Duration) -> Self {
        self.shutdown_deadline = d;
        self
    }
    pub fn handler(mut self, handler: impl Handler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }
    /// Called for every [`WorkerEvent`]; keep it quick.
    pub fn on_event(mut self, hook: impl Fn(&WorkerEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(hook));
        self
    }

    pub fn build(self) -> Result<Worker> {
        if self.types.is_empty() {
            return Err(Error::Config(
                "no script types: name at least one with .types([...])".into(),
            ));
        }
        let types = self
            .types
            .iter()
            .map(ScriptType::new)
            .collect::<hero_client::Result<Vec<_>>>()?;
        let group = match self.group {
            Some(g) => GroupName::new(g)?,
            None => GroupName::default_group(),
        };
        let instance = match self.instance {
            Some(i) => InstanceName::new(i)?,
            None => default_instance(),
        };
        if self.concurrency == 0 {
            return Err(Error::Config("concurrency must be at least 1".into()));
        }
        if self.lease < Duration::from_millis(300) || self.presence_ttl < Duration::from_millis(300)
        {
            return Err(Error::Config(
                "lease and presence TTL must be at least 300 ms".into(),
            ));
        }
        let handler = self
            .handler
            .ok_or_else(|| Error::Config("no handler: set one with .handler(...)".into()))?;
        let keys = self.client.keys().clone();
        let consumer = ConsumerName::new(group.clone(), instance.clone());
        let streams = keys.precedence(&types, &group, &instance);
        Ok(Worker {
            shared: Arc::new(Shared {
                redis: self.client.redis().clone(),
                keys,
                consumer_name: consumer.to_string(),
                consumer,
                types,
                streams,
                concurrency: self.concurrency,
                lease: self.lease,
                presence_ttl: self.presence_ttl,
                shutdown_deadline: self.shutdown_deadline,
                inflight: InFlight::default(),
                handler,
                on_event: self.on_event,
            }),
        })
    }
}

fn default_instance() -> InstanceName {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let name = if host.is_empty() {
        format!("w-{}", std::process::id())
    } else {
        format!("{host}-{}", std::process::id())
    };
    InstanceName::new(name).unwrap_or_else(|_| InstanceName::new("worker").expect("static name"))
}

/// What every loop of one worker shares.
pub(crate) struct Shared {
    pub redis: Redis,
    pub keys: Keyspace,
    pub consumer: ConsumerName,
    pub consumer_name: String,
    pub types: Vec<ScriptType>,
    /// Work streams in precedence order; deliveries refer to them by index.
    pub streams: Vec<String>,
    pub concurrency: usize,
    pub lease: Duration,
    pub presence_ttl: Duration,
    pub shutdown_deadline: Duration,
    pub inflight: InFlight,
    handler: Arc<dyn Handler>,
    on_event: Option<EventHook>,
}

impl Shared {
    pub fn emit(&self, event: WorkerEvent) {
        if let Some(hook) = &self.on_event {
            hook(&event);
        }
    }
}

/// A worker: presence, precedence fetch, handler calls, leases, fenced completion.
pub struct Worker {
    shared: Arc<Shared>,
}

impl Worker {
    pub fn builder(client: Client) -> WorkerBuilder {
        WorkerBuilder {
            client,
            types: Vec::new(),
            group: None,
            instance: None,
            concurrency: 1,
            lease: Duration::from_secs(30),
            presence_ttl: Duration::from_secs(15),
            shutdown_deadline: Duration::from_secs(30),
            handler: None,
            on_event: None,
        }
    }

    /// The consumer name this worker has in the consumer groups (`<group>:<instance>:<session>`).
    pub fn consumer(&self) -> &str {
        &self.shared.consumer_name
    }

    /// Runs until SIGTERM or ctrl-c, then shuts down gracefully.
    pub async fn run_until_signal(self) -> Result<()> {
        self.run(shutdown_signal()).await
    }

    /// Runs until `shutdown` completes, then stops fetching, lets running jobs finish within the
    /// shutdown deadline, hands back the rest and removes its presence.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
        let s = self.shared;
        let stop_fetch = CancellationToken::new();
        let stop_background = CancellationToken::new();
        lease::heartbeat_once(&s).await?;
        let (done_tx, done_rx) = mpsc::unbounded_channel::<Finished>();
        let completer = tokio::spawn(complete::run(s.clone(), done_rx));
        let background = vec![
            tokio::spawn(lease::heartbeat(s.clone(), stop_background.clone())),
            tokio::spawn(lease::renew(s.clone(), stop_background.clone())),
            tokio::spawn(lease::control(s.clone(), stop_background.clone())),
        ];
        let permits = Arc::new(Semaphore::new(s.concurrency));
        s.emit(WorkerEvent::Ready {
            consumer: s.consumer_name.clone(),
        });
        tracing::info!(consumer = %s.consumer_name, streams = s.streams.len(), "worker ready");
        let fetcher = tokio::spawn(fetch_loop(
            s.clone(),
            permits.clone(),
            done_tx,
            stop_fetch.clone(),
        ));

        shutdown.await;
        tracing::info!(consumer = %s.consumer_name, running = s.inflight.len(), "shutting down: no new jobs");
        stop_fetch.cancel();
        let _ = fetcher.await;
        // Every permit back means every job task has ended and queued its result.
        let all = s.concurrency as u32;
        if tokio::time::timeout(s.shutdown_deadline, permits.clone().acquire_many_owned(all))
            .await
            .is_err()
        {
            tracing::warn!(
                running = s.inflight.len(),
                "shutdown deadline passed: handing back running jobs"
            );
            s.inflight.cancel_all(CancelReason::Shutdown);
            let _ = tokio::time::timeout(Duration::from_secs(10), permits.acquire_many_owned(all))
                .await;
        }
        let _ = completer.await;
        let handed_back = lease::hand_back(&s).await;
        stop_background.cancel();
        for task in background {
            let _ = task.await;
        }
        lease::unregister(&s).await;
        s.emit(WorkerEvent::Stopped { handed_back });
        tracing::info!(handed_back, "worker stopped");
        Ok(())
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub(crate) fn fetch_cmd(s: &Shared, count: usize) -> redis::Cmd {
    function::fetch(
        &s.keys,
        &s.streams,
        &s.consumer_name,
        count,
        s.redis.caps().xackdel_flag(),
    )
}

/// How many fetches may be under way at once. Two measured best on the worker-concurrent
/// benchmark (about a fifth more jobs per second than one): while Redis runs one, this process
/// starts the jobs of the other, where with one the freed slots waited out every round trip.
/// Three split the slots into batches too small to pay for their calls.
const FETCHES_IN_FLIGHT: usize = 2;

/// What the fetches that ended since the last look said.
#[derive(Default)]
struct Ended {
    /// At least one fetch succeeded.
    ok: bool,
    /// Wake-up cursors: the queues came up drier than the slots a fetch asked for.
    dry: Option<Vec<String>>,
    failed: Option<hero_client::Error>,
}

impl Ended {
    fn absorb(&mut self, ended: std::result::Result<FetchOutcome, tokio::task::JoinError>) {
        match ended {
            Ok(Ok(cursors)) => {
                self.ok = true;
                if !cursors.is_empty() {
                    self.dry = Some(cursors);
                }
            }
            Ok(Err(e)) => self.failed = Some(e),
            // a fetch task cannot panic short of a bug; its slots went back as it unwound
            Err(e) => tracing::error!(error = %e, "a fetch task ended abnormally"),
        }
    }
}

type FetchOutcome = hero_client::Result<Vec<String>>;

/// Takes free slots, up to a quarter of them per fetch, and fetches that many jobs in precedence
/// order, with up to [`FETCHES_IN_FLIGHT`] fetches under way. When the queues are drier than
/// that, it blocks on XREAD from the cursors a fetch returned until a new entry lands.
async fn fetch_loop(
    s: Arc<Shared>,
    permits: Arc<Semaphore>,
    done: mpsc::UnboundedSender<Finished>,
    stop: CancellationToken,
) {
    let mut backoff = Backoff::new();
    let mut waker: Option<redis::aio::MultiplexedConnection> = None;
    let fetch_max = (s.concurrency / 4).max(8);
    let mut fetches: JoinSet<FetchOutcome> = JoinSet::new();
    let mut ended = Ended::default();
    loop {
        while let Some(r) = fetches.try_join_next() {
            ended.absorb(r);
        }
        if std::mem::take(&mut ended.ok) {
            backoff.reset();
        }
        if let Some(e) = ended.failed.take() {
            let delay = backoff.next_delay();
            tracing::warn!(error = %e, ?delay, "fetch failed; retrying");
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(delay) => {}
            }
            continue;
        }
        if let Some(mut cursors) = ended.dry.take() {
            // the fetches still under way end first: they may take what the wait would wake on
            while let Some(r) = fetches.join_next().await {
                ended.absorb(r);
            }
            if let Some(later) = ended.dry.take() {
                cursors = later;
            }
            if !wait_for_entry(&s, &mut waker, &cursors, &stop, &mut backoff).await {
                break;
            }
            continue;
        }
        if fetches.len() >= FETCHES_IN_FLIGHT {
            tokio::select! {
                _ = stop.cancelled() => break,
                Some(r) = fetches.join_next() => ended.absorb(r),
            }
            continue;
        }
        let first = tokio::select! {
            _ = stop.cancelled() => break,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        // Several smaller fetches rather than one of every free slot: the next is under way
        // while this process starts the jobs of the last, instead of the two taking turns.
        let mut slots = vec![first];
        while slots.len() < fetch_max {
            match permits.clone().try_acquire_owned() {
                Ok(p) => slots.push(p),
                Err(_) => break,
            }
        }
        fetches.spawn(fetch_once(s.clone(), slots, done.clone()));
    }
    // a fetch under way may have leased jobs already: they start in the slots it holds, and
    // shutdown waits for those slots like any other
    fetches.detach_all();
}

/// One fetch for `slots`: reports the entries it dropped, starts the jobs it leased (the slots
/// they do not take go back), and returns the wake-up cursors (empty when it filled every slot).
async fn fetch_once(
    s: Arc<Shared>,
    mut slots: Vec<OwnedSemaphorePermit>,
    done: mpsc::UnboundedSender<Finished>,
) -> FetchOutcome {
    let reply = s
        .redis
        .query::<Value>(&fetch_cmd(&s, slots.len()))
        .await
        .and_then(|v| FetchReply::decode(&v))?;
    for d in &reply.dropped {
        if d.reason == "missing" {
            tracing::warn!(job = %d.job_id, entry = %d.entry, "dropped a stream entry naming no job hash");
        }
        s.emit(WorkerEvent::Dropped {
            job_id: d.job_id.clone(),
            reason: d.reason.clone(),
        });
    }
    if !reply.jobs.is_empty() {
        let take = reply.jobs.len().min(slots.len());
        let permits = slots.split_off(slots.len() - take);
        tokio::spawn(start_jobs(s.clone(), reply.jobs, permits, done));
    }
    Ok(reply.cursors)
}

/// Queues are dry for our free slots: waits for any new entry after `cursors` (or a timeout,
/// then the loop looks again, which also picks up freed slots and recovered jobs). False when
/// the worker is stopping.
async fn wait_for_entry(
    s: &Shared,
    waker: &mut Option<redis::aio::MultiplexedConnection>,
    cursors: &[String],
    stop: &CancellationToken,
    backoff: &mut Backoff,
) -> bool {
    let wake_block = Duration::from_secs(2);
    if waker.is_none() {
        match s.redis.dedicated(wake_block).await {
            Ok(c) => *waker = Some(c),
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, ?delay, "no wake-up connection; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return false,
                    _ = tokio::time::sleep(delay) => return true,
                }
            }
        }
    }
    let Some(conn) = waker.as_mut() else {
        return true;
    };
    let mut cmd = redis::cmd("XREAD");
    cmd.arg("COUNT")
        .arg(1)
        .arg("BLOCK")
        .arg(wake_block.as_millis() as u64)
        .arg("STREAMS");
    cmd.arg(&s.streams).arg(cursors);
    let woke = tokio::select! {
        _ = stop.cancelled() => return false,
        r = cmd.query_async::<Value>(conn) => r,
    };
    if let Err(e) = woke {
        tracing::warn!(error = %e, "wake-up wait failed; reconnecting");
        *waker = None;
        let delay = backoff.next_delay();
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(delay) => {}
        }
    }
    true
}

/// Reads the records of jobs a fetch leased to this worker (one pipelined HGETALL per job, off
/// the fetch loop so the next fetch is already under way) and starts each one whose record still
/// carries its lease. A stop or recovery that took a job away between the fetch and the read
/// dealt with its entry too, so such a job is only forgotten here.
async fn start_jobs(
    s: Arc<Shared>,
    deliveries: Vec<Delivery>,
    mut permits: Vec<OwnedSemaphorePermit>,
    done: mpsc::UnboundedSender<Finished>,
) {
    let mut pipe = redis::pipe();
    let mut keys = Vec::with_capacity(deliveries.len());
    let mut running = Vec::with_capacity(deliveries.len());
    for d in &deliveries {
        let key = s.keys.job_unchecked(&d.job_id);
        pipe.cmd("HGETALL").arg(&key);
        keys.push(key);
        // known at once to the lease loop and to stop requests, before the record is even read
        running.push(s.inflight.insert(&d.job_id, d.stream, &d.entry));
    }
    let mut backoff = Backoff::new();
    let give_up = tokio::time::Instant::now() + s.lease / 2;
    let records = loop {
        match s.redis.pipeline(&pipe).await {
            Ok(r) => break r,
            Err(e) if tokio::time::Instant::now() < give_up => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, ?delay, jobs = deliveries.len(), "reading fetched jobs failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(e) => {
                // not renewed from now on: recovery hands them out again once the lease idles
                tracing::error!(error = %e, jobs = deliveries.len(), "reading fetched jobs failed; leaving them to recovery");
                for d in &deliveries {
                    s.inflight.remove(&d.job_id);
                }
                return;
            }
        }
    };
    for (((d, key), record), running) in deliveries.into_iter().zip(keys).zip(records).zip(running)
    {
        let Some(permit) = permits.pop() else {
            // never more jobs than slots asked for; if so, recovery hands the extra one out
            s.inflight.remove(&d.job_id);
            continue;
        };
        let fields = record.and_then(hero_client::reply::pairs);
        let fields = match fields {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(job = %d.job_id, error = %e, "reading a fetched job failed; leaving it to recovery");
                s.inflight.remove(&d.job_id);
                continue;
            }
        };
        let reply = field(&fields, "reply").unwrap_or_default().to_string();
        if !still_leased(&fields, &d.entry) {
            s.inflight.remove(&d.job_id);
            s.emit(WorkerEvent::Dropped {
                job_id: d.job_id,
                reason: "stale".into(),
            });
            continue;
        }
        let job = Job::from_fields(&key, fields);
        tokio::spawn(run_job(
            s.clone(),
            Taken {
                job_id: d.job_id,
                job,
                reply,
                running,
                permit,
            },
            done.clone(),
        ));
    }
}

/// One field of a record read as pairs.
fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Whether a record read after the fetch still says the delivery with this entry id runs it.
fn still_leased(fields: &[(String, String)], entry: &str) -> bool {
    field(fields, "status") == Some("started") && field(fields, "lease") == Some(entry)
}

/// What a panic said, when it said it with a string (as `panic!` and `unwrap` do).
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// A job this worker holds the lease of, read and ready to run.
struct Taken {
    job_id: String,
    job: std::result::Result<Job, hero_client::DecodeError>,
    /// The record's `reply` field, handed back with the outcome.
    reply: String,
    running: crate::inflight::Running,
    permit: OwnedSemaphorePermit,
}

/// Runs one delivered job to its outcome and queues the outcome for the completer, which
/// releases the slot once the outcome is recorded.
async fn run_job(s: Arc<Shared>, taken: Taken, done: mpsc::UnboundedSender<Finished>) {
    let Taken {
        job_id,
        job,
        reply,
        running,
        permit,
    } = taken;
    let attempt = job.as_ref().map(|j| j.attempts).unwrap_or(1);
    let outcome = match job {
        Err(e) => {
            tracing::warn!(job = %job_id, error = %e, "invalid job record");
            Some(Outcome::Abort(format!("invalid job: {e}")))
        }
        Ok(job) => {
            s.emit(WorkerEvent::Started {
                job_id: job_id.clone(),
                attempt: job.attempts,
            });
            let timeout = job.timeout;
            let ctx = JobContext {
                cancel: running.cancel.clone(),
                attempt: job.attempts,
            };
            // A panic is caught and becomes the outcome, not a lost slot. Caught here rather
            // than by running the handler in a task of its own: spawning and joining a second
            // task per job showed in the worker benchmark's profile at a few per cent of the
            // worker's CPU. Timeout and cancellation drop the handler's future.
            let handler = AssertUnwindSafe(s.handler.call(job, ctx)).catch_unwind();
            tokio::select! {
                r = handler => Some(match r {
                    Ok(outcome) => outcome,
                    Err(panic) => Outcome::Fail(format!("handler panicked: {}", panic_text(&*panic))),
                }),
                _ = tokio::time::sleep(timeout) => {
                    running.cancel.cancel();
                    Some(Outcome::Fail("timeout".into()))
                }
                _ = running.cancel.cancelled() => None,
            }
        }
    };
    match outcome {
        Some(outcome) => {
            let finished = Finished {
                job_id,
                stream: running.stream,
                lease: running.entry.clone(),
                reply,
                outcome,
                attempt,
                permit,
            };
            if let Err(mpsc::error::SendError(f)) = done.send(finished) {
                // the completer is gone only after shutdown: the job stays pending and is handed back
                s.inflight.remove(&f.job_id);
            }
        }
        None => {
            let reason = running.reason().unwrap_or(CancelReason::Stopped);
            metrics::counter!("hero_worker_interrupted_total", "reason" => format!("{reason:?}"))
                .increment(1);
            s.inflight.remove(&job_id);
            s.emit(WorkerEvent::Interrupted { job_id, reason });
            drop(permit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::still_leased;

    fn record(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_fetched_job_runs_only_while_its_record_carries_this_lease() {
        let entry = "1763712000000-0";
        let ours = record(&[("status", "started"), ("lease", entry), ("script", "x")]);
        assert!(still_leased(&ours, entry));
        // stopped between the fetch and the read
        let stopped = record(&[("status", "error"), ("lease", entry), ("error", "stopped")]);
        assert!(!still_leased(&stopped, entry));
        // recovered and fetched again by another worker under a new entry
        let recovered = record(&[("status", "started"), ("lease", "1763712000005-0")]);
        assert!(!still_leased(&recovered, entry));
        // gone (retention, or deleted by hand)
        assert!(!still_leased(&[], entry));
    }
}
