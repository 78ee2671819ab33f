//! The worker: its builder, and the run that starts every loop (presence, fetch, lease
//! renewal, control, completer) and shuts them down gracefully: stop fetching, let running jobs
//! finish within the deadline, hand back the rest, remove presence.

use std::sync::Arc;
use std::time::Duration;

use hero_client::Client;
use hero_protocol::{ConsumerName, GroupName, InstanceName, Priority, ScriptType};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::complete;
use crate::error::{Error, Result};
use crate::event::WorkerEvent;
use crate::fetch::fetch_loop;
use crate::finished::Finished;
use crate::inflight::{CancelReason, InFlight};
use crate::outcome::Handler;
use crate::shared::{EventHook, Shared};
use crate::turns::Turns;
use crate::{control, lease, presence};

/// Settings of a worker; see [`Worker::builder`].
pub struct WorkerBuilder {
    client: Client,
    /// Further namespaces, after `client`'s in precedence (see `turns`).
    more: Vec<Client>,
    types: Vec<String>,
    group: Option<String>,
    instance: Option<String>,
    priorities: Option<Vec<Priority>>,
    group_commit: Option<bool>,
    concurrency: usize,
    lease: Duration,
    presence_ttl: Duration,
    shutdown_deadline: Duration,
    duties: bool,
    handler: Option<Arc<dyn Handler>>,
    on_event: Option<EventHook>,
}

impl WorkerBuilder {
    /// Serves `client`'s namespace too (another shard of a cluster, say), after the namespaces
    /// given before it: the worker's slots are shared, and a namespace takes one only while
    /// every earlier namespace has no job for it.
    pub fn also(mut self, client: Client) -> Self {
        self.more.push(client);
        self
    }

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
    /// Serves only jobs of these priority levels (default every level, 0 to 9): a worker kept
    /// for urgent work, say. Each level served is three streams per type the worker watches.
    pub fn priorities(mut self, levels: impl IntoIterator<Item = Priority>) -> Self {
        let mut levels: Vec<Priority> = levels.into_iter().collect();
        levels.sort();
        levels.dedup();
        self.priorities = Some(levels);
        self
    }
    /// Under a backlog, send the next fetch in the round trip that records each batch of
    /// results, so that Redis flushes both to disk at once. Worth it only when every write waits
    /// for a disk flush (`appendfsync always`: a durable worker's slot then turns over in one
    /// flush, not two; 29–56 % more jobs/s measured); in memory it costs throughput. By default
    /// on exactly when the server says it runs `appendfsync always` (CONFIG GET; a
    /// least-privilege ACL user may not ask, and then sets it here).
    pub fn group_commit(mut self, on: bool) -> Self {
        self.group_commit = Some(on);
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
    /// Whether this worker takes its turn at the queue's upkeep (default on): promoting due
    /// delayed jobs and retries, recovering dead workers' jobs, time limits, retention, through
    /// `hero_duties`, which one process at a time does whatever the number of workers
    /// (`hero_protocol::duties`). Off, some other process must: another worker or a broker.
    pub fn duties(mut self, on: bool) -> Self {
        self.duties = on;
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
            .collect::<hero_protocol::Result<Vec<_>>>()?;
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
        let priorities = match self.priorities {
            Some(p) if p.is_empty() => {
                return Err(Error::Config(
                    "no priority levels: name at least one with .priorities([...]), or none \
                     for every level"
                        .into(),
                ))
            }
            Some(p) => p,
            None => Priority::all().collect(),
        };
        let consumer = ConsumerName::new(group.clone(), instance.clone());
        let template = Template {
            consumer_name: consumer.to_string(),
            consumer,
            group,
            instance,
            types,
            priorities,
            group_commit: self.group_commit,
            concurrency: self.concurrency,
            lease: self.lease,
            presence_ttl: self.presence_ttl,
            shutdown_deadline: self.shutdown_deadline,
            duties: self.duties,
            handler,
            on_event: self.on_event,
        };
        let mut namespaces = vec![self.client];
        namespaces.extend(self.more);
        Ok(Worker {
            template: Arc::new(template),
            namespaces,
        })
    }
}

/// What every shard's and namespace's `Shared` of one worker has in common.
struct Template {
    consumer: ConsumerName,
    consumer_name: String,
    group: GroupName,
    instance: InstanceName,
    types: Vec<ScriptType>,
    priorities: Vec<Priority>,
    group_commit: Option<bool>,
    concurrency: usize,
    lease: Duration,
    presence_ttl: Duration,
    shutdown_deadline: Duration,
    duties: bool,
    handler: Arc<dyn Handler>,
    on_event: Option<EventHook>,
}

impl Template {
    /// The state of this worker in one shard (`client`, bound to it).
    fn shared(&self, client: &Client) -> Arc<Shared> {
        let keys = client.keys().clone();
        let streams =
            keys.precedence_at(&self.types, &self.group, &self.instance, &self.priorities);
        Arc::new(Shared {
            redis: client.redis().clone(),
            keys,
            consumer_name: self.consumer_name.clone(),
            consumer: self.consumer.clone(),
            types: self.types.clone(),
            streams,
            registered: std::sync::Mutex::new(None),
            backlog: std::sync::atomic::AtomicBool::new(false),
            group_commit: self
                .group_commit
                .unwrap_or_else(|| client.redis().caps().fsync_always),
            concurrency: self.concurrency,
            lease: self.lease,
            presence_ttl: self.presence_ttl,
            inflight: InFlight::default(),
            policy: crate::policy::PolicyCache::default(),
            hold_reports: std::sync::atomic::AtomicBool::new(false),
            hold_traces: std::sync::atomic::AtomicBool::new(false),
            brokers_lease_ms: std::sync::atomic::AtomicU64::new(0),
            handler: self.handler.clone(),
            on_event: self.on_event.clone(),
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

/// A worker: presence, precedence fetch, handler calls, leases, fenced completion; in one
/// namespace or several, each over its shards (one `Shared` a shard, slots shared).
pub struct Worker {
    template: Arc<Template>,
    /// The namespaces served, in precedence order.
    namespaces: Vec<Client>,
}

impl Worker {
    pub fn builder(client: Client) -> WorkerBuilder {
        WorkerBuilder {
            client,
            more: Vec::new(),
            types: Vec::new(),
            group: None,
            instance: None,
            priorities: None,
            group_commit: None,
            concurrency: 1,
            lease: Duration::from_secs(30),
            presence_ttl: Duration::from_secs(15),
            shutdown_deadline: Duration::from_secs(30),
            duties: true,
            handler: None,
            on_event: None,
        }
    }

    /// The consumer name this worker has in the consumer groups (`<group>:<instance>:<session>`).
    pub fn consumer(&self) -> &str {
        &self.template.consumer_name
    }

    /// Runs until SIGTERM or ctrl-c, then shuts down gracefully.
    pub async fn run_until_signal(self) -> Result<()> {
        self.run(shutdown_signal()).await
    }

    /// Runs until `shutdown` completes, then stops fetching, lets running jobs finish within the
    /// shutdown deadline, hands back the rest and removes its presence.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
        let concurrency = self.template.concurrency;
        let deadline = self.template.shutdown_deadline;
        let pool = Pool {
            template: self.template.clone(),
            permits: Arc::new(Semaphore::new(concurrency)),
            turns: Arc::new(Turns::default()),
            running: Arc::new(tokio::sync::Mutex::new(Vec::new())),
        };
        for (rank, ns) in self.namespaces.iter().enumerate() {
            for (_, shard) in ns.shard_clients() {
                pool.start(&shard, rank).await?;
            }
        }
        // shards added to a namespace while the worker runs are served from then on
        let stop_watch = CancellationToken::new();
        let watch = tokio::spawn(
            pool.clone()
                .watch_shards(self.namespaces, stop_watch.clone()),
        );

        shutdown.await;
        stop_watch.cancel();
        let _ = watch.await;
        let permits = pool.permits.clone();
        let mut namespaces = std::mem::take(&mut *pool.running.lock().await);
        let running = |ns: &[Running]| ns.iter().map(|n| n.s.inflight.len()).sum::<usize>();
        tracing::info!(running = running(&namespaces), "shutting down: no new jobs");
        for n in &mut namespaces {
            n.stop_fetch.cancel();
            if let Some(f) = n.fetcher.take() {
                let _ = f.await;
            }
        }
        // Every permit back means every job task has ended and queued its result.
        let all = concurrency as u32;
        if tokio::time::timeout(deadline, permits.clone().acquire_many_owned(all))
            .await
            .is_err()
        {
            tracing::warn!(
                running = running(&namespaces),
                "shutdown deadline passed: handing back running jobs"
            );
            for n in &namespaces {
                n.s.inflight.cancel_all(CancelReason::Shutdown);
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), permits.acquire_many_owned(all))
                .await;
        }
        for n in namespaces {
            n.finish().await;
        }
        Ok(())
    }
}

/// The running shards of a worker, and what starting another needs.
#[derive(Clone)]
struct Pool {
    template: Arc<Template>,
    permits: Arc<Semaphore>,
    turns: Arc<Turns>,
    running: Arc<tokio::sync::Mutex<Vec<Running>>>,
}

impl Pool {
    async fn start(&self, shard: &Client, rank: usize) -> Result<()> {
        let s = self.template.shared(shard);
        let seat = self.turns.seat(rank);
        let r = Running::start(
            s,
            self.permits.clone(),
            self.turns.clone(),
            seat,
            self.template.duties,
        )
        .await?;
        self.running.lock().await.push(r);
        Ok(())
    }

    /// Every `shard::REFRESH`, starts serving the shards a namespace gained (the client reads
    /// its shard map in the background; an unsharded namespace costs nothing more here).
    async fn watch_shards(self, namespaces: Vec<Client>, stop: CancellationToken) {
        // a shard that cannot be served yet (its master unreachable) is tried again each pass,
        // and said once, not every pass
        let mut outage = hero_protocol::outage::Outage::new("starting to serve a new shard");
        let mut retiring = hero_protocol::outage::Outage::new("retiring drained shards");
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(hero_protocol::shard::REFRESH) => {}
            }
            for (rank, ns) in namespaces.iter().enumerate() {
                for (n, shard) in ns.shard_clients() {
                    let served = self
                        .running
                        .lock()
                        .await
                        .iter()
                        .any(|r| &r.s.keys == shard.keys());
                    if served {
                        continue;
                    }
                    match self.start(&shard, rank).await {
                        Ok(()) => {
                            outage.ok();
                            tracing::info!(shard = n, namespace = %ns.keys().prefix(), "serving a new shard");
                        }
                        Err(Error::Client(e)) => {
                            outage.failed(&e);
                        }
                        Err(e) => {
                            tracing::error!(shard = n, error = %e, "cannot serve a new shard");
                            return;
                        }
                    }
                }
                if self.template.duties {
                    retire_drained(ns, &mut retiring).await;
                }
            }
        }
    }
}

/// A worker's share of the duties that span shards: drained shards retired once empty
/// (`Client::retire_drained_shards`: nothing asked of Redis while no shard drains, and a
/// compare-and-set when one is retired, so every worker at it retires it once). The K history
/// is forgotten after the namespace's retention time (the config hash's `retention_ms`, 24 h
/// when unset, as hero_duties reads it).
async fn retire_drained(ns: &Client, outage: &mut hero_protocol::outage::Outage) {
    let map = ns.shard_map();
    if map.draining.is_empty() && map.history.is_empty() {
        return;
    }
    let retention: Option<u64> = ns
        .redis()
        .query(
            redis::cmd("HGET")
                .arg(ns.keys().config())
                .arg("retention_ms"),
        )
        .await
        .unwrap_or(None);
    let retention = Duration::from_millis(retention.unwrap_or(86_400_000));
    match ns.retire_drained_shards(retention).await {
        Ok(_) => outage.ok(),
        Err(e) => {
            outage.failed(&e);
        }
    }
}

/// The loops of one namespace of a running worker.
struct Running {
    s: Arc<Shared>,
    stop_fetch: CancellationToken,
    stop_background: CancellationToken,
    fetcher: Option<tokio::task::JoinHandle<()>>,
    completer: tokio::task::JoinHandle<()>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    async fn start(
        s: Arc<Shared>,
        permits: Arc<Semaphore>,
        turns: Arc<Turns>,
        seat: crate::turns::Seat,
        duties: bool,
    ) -> Result<Running> {
        let stop_fetch = CancellationToken::new();
        let stop_background = CancellationToken::new();
        presence::heartbeat_once(&s).await?;
        crate::refresh::refresh_once(&s).await;
        let (done_tx, done_rx) = mpsc::unbounded_channel::<Finished>();
        let completer = tokio::spawn(complete::run(s.clone(), done_rx, done_tx.downgrade()));
        let mut background = vec![
            tokio::spawn(presence::heartbeat(s.clone(), stop_background.clone())),
            tokio::spawn(lease::renew(s.clone(), stop_background.clone())),
            tokio::spawn(crate::lease::flush_reports(
                s.clone(),
                stop_background.clone(),
            )),
            tokio::spawn(control::control(s.clone(), stop_background.clone())),
            tokio::spawn(crate::refresh::refresh(s.clone(), stop_background.clone())),
        ];
        if duties {
            background.push(tokio::spawn(hero_protocol::duties::run(
                s.redis.clone(),
                s.keys.clone(),
                s.consumer_name.clone(),
                hero_protocol::duties::Pace::default(),
                stop_background.clone(),
                |d| tracing::debug!(?d, "did the queue's upkeep"),
            )));
        }
        s.emit(WorkerEvent::Ready {
            consumer: s.consumer_name.clone(),
        });
        tracing::info!(consumer = %s.consumer_name, namespace = %s.keys.prefix(), streams = s.streams.len(), "worker ready");
        let fetcher = tokio::spawn(fetch_loop(
            s.clone(),
            permits,
            done_tx,
            stop_fetch.clone(),
            turns,
            seat,
        ));
        Ok(Running {
            s,
            stop_fetch,
            stop_background,
            fetcher: Some(fetcher),
            completer,
            background,
        })
    }

    /// After the jobs ended: the results recorded, the rest handed back, presence removed.
    async fn finish(self) {
        let s = self.s;
        let _ = self.completer.await;
        let handed_back = lease::hand_back(&s).await;
        self.stop_background.cancel();
        for task in self.background {
            let _ = task.await;
        }
        presence::unregister(&s).await;
        s.emit(WorkerEvent::Stopped { handed_back });
        tracing::info!(handed_back, "worker stopped");
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
