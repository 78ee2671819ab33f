//! hero's side of each scenario, through the same `Client` and `Worker` API users have: jobs
//! with the job hash, fenced completion, presence and lease renewal all on. Job ids carry their
//! submit time (`<seq>-<µs since the epoch>`), so latencies need no table of their own.
//!
//! Also the `worker` child of the recovery scenario: a worker process whose handlers
//! never finish, so it can be killed holding running jobs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use hero_client::Client;
use hero_protocol::{Job, NewJob, Priority};
use hero_worker::{Outcome, Worker, WorkerEvent};
use tokio::io::AsyncBufReadExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use hero_broker::config::BrokerConfig;
use hero_broker::daemon;

use crate::probe::Probe;
use crate::report::Figures;
use crate::scenario::{BenchArgs, Scenario};
use crate::tally::{now_us, offer_at_rate, Tally};

pub(crate) const TYPE: &str = "bench";

/// A worker running in this process until stopped.
pub(crate) struct Running {
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<hero_worker::Result<()>>,
}

impl Running {
    pub(crate) async fn stop(self) -> Result<()> {
        let _ = self.shutdown.send(());
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .context("the bench worker did not stop within 60 s")???;
        Ok(())
    }
}

pub struct Ours {
    pub(crate) client: Client,
    pub(crate) args: BenchArgs,
    seq: AtomicU64,
}

impl Ours {
    pub async fn new(url: &str, args: &BenchArgs) -> Result<Ours> {
        Ok(Ours {
            client: Client::connect(url).await?,
            args: args.clone(),
            seq: AtomicU64::new(0),
        })
    }

    pub(crate) fn job(&self) -> Result<NewJob> {
        let id = format!("{}-{}", self.seq.fetch_add(1, Ordering::Relaxed), now_us());
        Ok(NewJob::builder(TYPE, "noop").id(id).build()?)
    }

    /// A job of the features scenario: retries, a uniqueness key, two tags and a small payload,
    /// as BullMQ's side gives attempts, a jobId and the same payload.
    fn featured_job(&self) -> Result<NewJob> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let id = format!("{seq}-{}", now_us());
        Ok(NewJob::builder(TYPE, "noop")
            .id(id)
            .retries(3)
            .unique(format!("order-{seq}"))
            .tag("bench")
            .tag("features")
            .payload(&FeaturePayload::new(seq))
            .build()?)
    }

    /// Submits `n` jobs in batches, `producers` batches in flight at once.
    pub(crate) async fn submit(&self, n: u64) -> Result<()> {
        submit_in_batches(&self.client, n, &self.args, |_| self.job()).await
    }

    /// Starts a worker with a no-op handler that reports to `tally`, and waits until it is ready.
    pub(crate) async fn worker(&self, tally: &Arc<Tally>, concurrency: usize) -> Result<Running> {
        let on_start = tally.clone();
        let on_event = tally.clone();
        let (types, priorities) = streams_shape(self.args.streams)?;
        let worker = Worker::builder(self.client.clone())
            .types(types)
            .priorities(priorities)
            .instance(format!(
                "bench-{}",
                self.seq.fetch_add(1, Ordering::Relaxed)
            ))
            .concurrency(concurrency)
            .presence_ttl(self.args.presence_ttl.max(Duration::from_millis(300)))
            .handler(move |job: Job, _ctx| {
                on_start.on_start(job.id.as_str());
                async { Outcome::Done(String::new()) }
            })
            .on_event(move |e| on_event.on_event(e))
            .build()?;
        let (shutdown, rx) = oneshot::channel::<()>();
        let ready = tally.ready.notified();
        let task = tokio::spawn(worker.run(async {
            let _ = rx.await;
        }));
        tokio::time::timeout(Duration::from_secs(30), ready)
            .await
            .context("the bench worker was not ready within 30 s")?;
        Ok(Running { shutdown, task })
    }

    pub async fn run(&self, scenario: Scenario, probe: &Probe) -> Result<Figures> {
        // the settings a broker would have published (the run starts on an empty Redis)
        let _: () = self
            .client
            .redis()
            .query(
                redis::cmd("HSET")
                    .arg(self.client.keys().config())
                    .arg("events_max")
                    .arg(self.args.events_max),
            )
            .await?;
        let n = self.args.jobs;
        let mut fig = Figures::default();
        match scenario {
            Scenario::SubmitBulk => {
                let cpu = CpuMark::now(probe).await?;
                let t0 = Instant::now();
                self.submit(n).await?;
                let secs = t0.elapsed().as_secs_f64();
                fig.set("jobs_per_s", n as f64 / secs);
                cpu.record(probe, n, &mut fig).await?;
            }
            Scenario::WorkerConcurrent => {
                self.submit(n).await?;
                let tally = Tally::new(n);
                let cpu = CpuMark::now(probe).await?;
                let t0 = Instant::now();
                let w = self.worker(&tally, self.args.concurrency).await?;
                tally.all_completed().await?;
                let secs = t0.elapsed().as_secs_f64();
                fig.set("jobs_per_s", n as f64 / secs);
                cpu.record(probe, n, &mut fig).await?;
                w.stop().await?;
            }
            Scenario::EndToEnd | Scenario::EndToEndFeatures => {
                let tally = Tally::new(n);
                let w = self.worker(&tally, self.args.concurrency).await?;
                let cpu = CpuMark::now(probe).await?;
                let t0 = Instant::now();
                let submit = async {
                    if scenario == Scenario::EndToEndFeatures {
                        submit_in_batches(&self.client, n, &self.args, |_| self.featured_job())
                            .await
                    } else {
                        self.submit(n).await
                    }
                };
                tokio::try_join!(submit, tally.all_completed())?;
                let secs = t0.elapsed().as_secs_f64();
                fig.set("jobs_per_s", n as f64 / secs);
                cpu.record(probe, n, &mut fig).await?;
                tally.latencies(&mut fig, true, false);
                w.stop().await?;
            }
            Scenario::Latency => {
                let total =
                    ((self.args.rate as f64) * self.args.duration.as_secs_f64()).round() as u64;
                let total = total.max(1);
                let tracing = self.args.latency_trace.is_some();
                let tally = if tracing {
                    Tally::traced(total, usize::try_from(total).unwrap_or(0))
                } else {
                    Tally::new(total)
                };
                let mut ids = Vec::new();
                let w = self.worker(&tally, self.args.concurrency).await?;
                let cpu = CpuMark::now(probe).await?;
                let t0 = Instant::now();
                let mut submits = tokio::task::JoinSet::new();
                offer_at_rate(self.args.rate, total, |_| {
                    let Ok(job) = self.job() else { return };
                    let client = self.client.clone();
                    let answered = tracing.then(|| tally.clone());
                    if tracing {
                        ids.push(job.id().to_string());
                    }
                    // each job is its own call, as a producer submitting one at a time does
                    submits.spawn(async move {
                        let r = client.submit(&job).await;
                        if let Some(t) = answered {
                            t.on_answer(job.id().as_str());
                        }
                        r
                    });
                })
                .await;
                while let Some(r) = submits.join_next().await {
                    r??;
                }
                tally.all_completed().await?;
                let secs = t0.elapsed().as_secs_f64();
                fig.set("offered_per_s", total as f64 / secs);
                cpu.record(probe, total, &mut fig).await?;
                tally.latencies(&mut fig, true, true);
                if let Some(path) = &self.args.latency_trace {
                    tally.write_trace(&ids, path)?;
                }
                w.stop().await?;
            }
            Scenario::Recovery => {
                fig.set("recovery_s", self.recovery().await?);
                fig.set("presence_ttl_s", self.args.presence_ttl.as_secs_f64());
            }
            Scenario::Memory => self.memory(probe, &mut fig).await?,
            Scenario::Wait => self.wait_after_submit(&mut fig).await?,
            Scenario::Events => self.events(probe, &mut fig).await?,
            Scenario::Sharded | Scenario::Fair => {
                anyhow::bail!(
                    "the {} scenario runs alone: hero-bench --only {}",
                    scenario.name(),
                    scenario.name()
                )
            }
            Scenario::Ceiling | Scenario::CeilingLatency => {
                anyhow::bail!("the ceiling scenarios are not hero's (see ceiling.rs)")
            }
        }
        Ok(fig)
    }

    /// Runs `n` queued jobs to the end with a worker of the bench's concurrency.
    async fn drain(&self, n: u64) -> Result<()> {
        let tally = Tally::new(n);
        let w = self.worker(&tally, self.args.concurrency).await?;
        tally.all_completed().await?;
        w.stop().await
    }

    /// Bytes per waiting job, and how far memory is from its baseline (%) after the jobs ran
    /// and their retention passed: both measured with the event log emptied (a history kept up
    /// to its cap, not a job's residue), whose own bytes per job and size at the end are figures
    /// of their own.
    async fn memory(&self, probe: &Probe, fig: &mut Figures) -> Result<()> {
        let events = self.client.keys().events();
        // the log's bytes, then the log emptied: memory is compared without it
        let take_log = || async {
            let bytes: Option<u64> = self
                .client
                .redis()
                .query(
                    redis::cmd("MEMORY")
                        .arg("USAGE")
                        .arg(&events)
                        .arg("SAMPLES")
                        .arg(0),
                )
                .await?;
            let _: i64 = self
                .client
                .redis()
                .query(redis::cmd("XTRIM").arg(&events).arg("MAXLEN").arg(0))
                .await?;
            anyhow::Ok(bytes.unwrap_or(0) as f64)
        };
        let retention = Duration::from_secs(1);
        let cfg = BrokerConfig {
            retention,
            events_max: self.args.events_max,
            ..BrokerConfig::default()
        };
        daemon::publish_config(&self.client, &cfg).await?;
        let settle = || async {
            tokio::time::sleep(retention + Duration::from_millis(100)).await;
            // what the holder of the duties does (a worker of the drain, or this call)
            loop {
                let d = hero_protocol::duties::step(
                    self.client.redis(),
                    self.client.keys(),
                    "hero-bench",
                    Duration::from_secs(3),
                )
                .await?;
                if !d.held {
                    // a worker holds them: its next step (100 ms) deletes what is due
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    break;
                }
                if !d.more {
                    break;
                }
            }
            // Redis shrinks its tables in its own cron; give it a second, as the peer gets
            tokio::time::sleep(Duration::from_secs(1)).await;
            anyhow::Ok(())
        };
        // warm up: the function library, the stream, its group and the connections in place
        self.submit(1000).await?;
        self.drain(1000).await?;
        settle().await?;
        take_log().await?;
        let base = probe.used_memory().await?;
        let n = self.args.jobs;
        self.submit(n).await?;
        let submitted_log = take_log().await?;
        let full = probe.used_memory().await?;
        eprintln!("    {n} queued");
        self.drain(n).await?;
        settle().await?;
        let log_at_end = take_log().await?;
        let after = probe.used_memory().await?;
        fig.set("bytes_per_waiting_job", (full - base) / n as f64);
        fig.set("after_drain_pct", (after - base) * 100.0 / base);
        fig.set("event_log_bytes_per_job", submitted_log / n as f64);
        fig.set("event_log_mb", log_at_end / 1e6);
        Ok(())
    }

    /// Seconds from the SIGKILL of a worker process holding `recovery_jobs` running jobs until
    /// another worker has started every one of them; the broker runs in this process.
    async fn recovery(&self) -> Result<f64> {
        let n = self.args.recovery_jobs;
        let stop_broker = CancellationToken::new();
        let broker = tokio::spawn(daemon::run(
            self.client.clone(),
            BrokerConfig::default(),
            stop_broker.clone(),
        ));
        let result = async {
            let exe = std::env::current_exe().context("finding the hero-bench binary")?;
            let mut child = tokio::process::Command::new(exe)
                .arg("worker")
                .arg("--redis-url")
                .arg(self.client.redis().url())
                .arg("--concurrency")
                .arg(n.to_string())
                .arg("--presence-ms")
                .arg(self.args.presence_ttl.as_millis().to_string())
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .context("starting the bench worker process")?;
            let stdout = child
                .stdout
                .take()
                .context("no stdout of the bench worker")?;
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            expect(&mut lines, "ready", 1).await?;
            for _ in 0..n {
                self.client.submit(&self.job()?).await?;
            }
            expect(&mut lines, "started", n).await?;
            let tally = Tally::new(n);
            let rescuer = self.worker(&tally, n as usize).await?;
            child.start_kill().context("killing the bench worker")?;
            let t0 = Instant::now();
            tally.all_started().await?;
            let secs = t0.elapsed().as_secs_f64();
            let _ = child.wait().await;
            rescuer.stop().await?;
            anyhow::Ok(secs)
        }
        .await;
        stop_broker.cancel();
        let _ = broker.await;
        result
    }
}

/// The small payload of the features scenario (BullMQ's side carries the same fields).
#[derive(serde::Serialize)]
struct FeaturePayload {
    order: u64,
    customer: &'static str,
    amount_cents: u64,
    currency: &'static str,
}

impl FeaturePayload {
    fn new(seq: u64) -> Self {
        FeaturePayload {
            order: seq,
            customer: "c-20417",
            amount_cents: 1999 + seq % 100,
            currency: "EUR",
        }
    }
}

/// The types and priority levels of a bench worker serving `streams` streams (instance, group
/// and type level × levels × types), of which the jobs' (type `bench`, priority 5, type level)
/// is the last but the levels after 5: the other types are named first and never get a job.
pub fn streams_shape(streams: usize) -> Result<(Vec<String>, Vec<Priority>)> {
    let types = streams.div_ceil(30).max(1);
    let levels = streams / 3 / types;
    if streams == 0 || !streams.is_multiple_of(3) || levels * 3 * types != streams {
        anyhow::bail!(
            "--streams {streams}: a worker serves 3 streams per priority level and type, up to \
             10 levels a type: give 3 × levels × types (3, 30, 300 ...)"
        );
    }
    let mut names: Vec<String> = (1..types).map(|k| format!("{TYPE}-idle-{k}")).collect();
    names.push(TYPE.to_string());
    let mut priorities: Vec<Priority> = (0..levels as u8)
        .filter_map(|l| Priority::new(l).ok())
        .collect();
    if !priorities.contains(&Priority::DEFAULT) {
        priorities.pop();
        priorities.push(Priority::DEFAULT);
    }
    Ok((names, priorities))
}

/// Reads the child's lines until `count` of them start with `what`.
async fn expect(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    what: &str,
    count: u64,
) -> Result<()> {
    let mut seen = 0;
    while seen < count {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .with_context(|| format!("the bench worker printed no '{what}' within 30 s"))??
            .with_context(|| format!("the bench worker exited before '{what}'"))?;
        if line.starts_with(what) {
            seen += 1;
        }
    }
    Ok(())
}

/// CPU time of this process (all threads, user and system), in seconds.
pub(crate) fn own_cpu_secs() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) } != 0 {
        return f64::NAN;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// CPU spent per job by Redis and by this process since `since`.
pub(crate) struct CpuMark {
    redis: f64,
    own: f64,
}

impl CpuMark {
    pub(crate) async fn now(probe: &Probe) -> Result<CpuMark> {
        Ok(CpuMark {
            redis: probe.cpu_secs().await?,
            own: own_cpu_secs(),
        })
    }

    pub(crate) async fn record(&self, probe: &Probe, jobs: u64, fig: &mut Figures) -> Result<()> {
        let own = own_cpu_secs();
        let redis = probe.cpu_secs().await?;
        fig.set("redis_us_per_job", (redis - self.redis) * 1e6 / jobs as f64);
        fig.set("client_us_per_job", (own - self.own) * 1e6 / jobs as f64);
        Ok(())
    }
}

/// Submits `n` jobs made by `job` (given their index) in batches of `--batch`, `--producers`
/// batches in flight at once.
pub async fn submit_in_batches(
    client: &Client,
    n: u64,
    args: &BenchArgs,
    job: impl Fn(u64) -> Result<NewJob>,
) -> Result<()> {
    let next = AtomicU64::new(0);
    let batch = args.batch as u64;
    let producer = || async {
        loop {
            let from = next.fetch_add(batch, Ordering::Relaxed);
            if from >= n {
                return anyhow::Ok(());
            }
            let jobs = (from..(from + batch).min(n))
                .map(&job)
                .collect::<Result<Vec<_>>>()?;
            for r in client.submit_many(&jobs).await? {
                r?;
            }
        }
    };
    futures::future::try_join_all((0..args.producers).map(|_| producer())).await?;
    Ok(())
}

#[derive(Args, Debug, Clone)]
pub struct BenchWorkerArgs {
    #[arg(long, default_value_t = 100)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 1000)]
    pub presence_ms: u64,
    #[arg(long, default_value_t = 60_000)]
    pub lease_ms: u64,
    /// Finish each job after this long (ms); unset: never finish one.
    #[arg(long)]
    pub run_ms: Option<u64>,
    /// The chaos soak's independent ledger: each run and each accepted completion appended
    /// to this file (see `chaos::ledger`); a run's output is its ledger token.
    #[arg(long)]
    pub ledger: Option<std::path::PathBuf>,
    /// Replicated acknowledgements (WAIT) for every write, as `hero --min-replicas`.
    #[arg(long, default_value_t = 0)]
    pub min_replicas: u32,
    #[arg(long, default_value_t = 1000)]
    pub replica_timeout_ms: u64,
}

/// The worker process the recovery scenario and the chaos soak kill: prints `ready`, then
/// `started <id> <unix ms>` per job it starts and `done <id>` per completion recorded; its jobs
/// take `--run-ms`, or never finish.
pub async fn bench_worker(client: Client, args: &BenchWorkerArgs) -> Result<i32> {
    use std::io::Write;
    let run = args.run_ms.map(Duration::from_millis);
    let ledger = match &args.ledger {
        Some(path) => Some(Arc::new(crate::chaos::Ledger::open(path)?)),
        None => None,
    };
    let accepted = ledger.clone();
    let worker = Worker::builder(client)
        .types([TYPE])
        .concurrency(args.concurrency)
        .presence_ttl(Duration::from_millis(args.presence_ms))
        .lease(Duration::from_millis(args.lease_ms))
        .handler(move |job: Job, _ctx| {
            let ledger = ledger.clone();
            async move {
                match run {
                    Some(d) => {
                        tokio::time::sleep(d).await;
                        let token = ledger.map(|l| l.ran(job.id.as_str())).unwrap_or_default();
                        Outcome::Done(token)
                    }
                    None => std::future::pending::<Outcome>().await,
                }
            }
        })
        .on_event(move |e| {
            let line = match e {
                WorkerEvent::Ready { .. } => "ready".to_string(),
                WorkerEvent::Started { job_id, .. } => {
                    format!("started {job_id} {}", now_us() / 1000)
                }
                WorkerEvent::Completed {
                    job_id, completion, ..
                } if completion.as_str() == "completed" => {
                    if let Some(l) = &accepted {
                        l.accepted(job_id.as_str());
                    }
                    format!("done {job_id}")
                }
                _ => return,
            };
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        })
        .build()?;
    worker.run_until_signal().await?;
    Ok(0)
}
