//! `hero-bench chaos` (`benches/chaos`): the chaos soak. A real system (Redis with
//! `appendfsync always`, two `hero broker` processes, four `hero-bench worker` processes) under
//! a steady load, while faults are injected: workers killed with SIGKILL (and replaced), brokers
//! killed and restarted, Redis killed and restarted, workers stopped with SIGSTOP past their
//! lease and then continued. At the end every acknowledged job is checked: ended `finished`,
//! none lost, none recorded twice (the stats kept on write count each recorded completion, so
//! a second one would show), the audit clean, Redis memory back to its baseline once retention
//! has run. Prints the figures and writes them as JSON.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use hero_client::{Client, NewJob, Status};
use hero_testkit::{binary, Proc, RedisServer};

const TYPE: &str = "bench";
const WORKERS: usize = 4;
const BROKERS: usize = 2;
/// The workers' lease; a stalled worker is stopped for longer than this.
const LEASE_MS: u64 = 2000;
/// The brokers' retention while the soak runs: every ended job stays to be checked.
const KEEP_SECS: u64 = 3600;

#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// Workers killed with SIGKILL (each replaced by a new process).
    #[arg(long, default_value_t = 1000)]
    pub worker_kills: u64,
    /// One broker killed and restarted after every this many worker kills.
    #[arg(long, default_value_t = 50)]
    pub broker_every: u64,
    /// Redis killed and restarted after every this many worker kills.
    #[arg(long, default_value_t = 200)]
    pub redis_every: u64,
    /// A worker stopped with SIGSTOP past its lease after every this many worker kills.
    #[arg(long, default_value_t = 25)]
    pub stall_every: u64,
    /// Time between two faults.
    #[arg(long, default_value = "150ms", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Jobs submitted per second while the faults run.
    #[arg(long, default_value_t = 500)]
    pub rate: u64,
    /// How long each job runs (ms).
    #[arg(long, default_value_t = 20)]
    pub run_ms: u64,
    /// Where the figures go as JSON.
    #[arg(long, default_value = "chaos-results.json")]
    pub out: std::path::PathBuf,
}

#[derive(Default, serde::Serialize)]
struct Figures {
    jobs: u64,
    worker_kills: u64,
    broker_restarts: u64,
    redis_restarts: u64,
    stalls: u64,
    lost: u64,
    double_completions: u64,
    /// The longest time from a worker's SIGKILL until every job it held had started again.
    max_recovery_ms: u64,
    audit_clean: bool,
    memory_baseline_bytes: u64,
    memory_after_bytes: u64,
    seconds: f64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

struct System {
    redis: RedisServer,
    url: String,
    brokers: Vec<Proc>,
    workers: Vec<Proc>,
    /// Every worker process ever started (a killed one's lines are still read at the end).
    retired: Vec<Proc>,
}

impl System {
    /// A broker; the soak's keep the ended jobs (an hour) until they are checked, then one
    /// with a retention of 1 s deletes them, for the memory check.
    fn broker(url: &str, retention_secs: u64) -> Proc {
        Proc::spawn(
            &binary("hero"),
            &[
                "--redis-url",
                url,
                "broker",
                "--http",
                "off",
                "--lease-ms",
                &LEASE_MS.to_string(),
                "--retention-secs",
                &retention_secs.to_string(),
                "--events-max",
                "1000",
            ],
            &[("RUST_LOG", "error")],
            None,
        )
    }

    fn worker(url: &str, run_ms: u64) -> Proc {
        Proc::spawn(
            &binary("hero-bench"),
            &[
                "worker",
                "--redis-url",
                url,
                "--concurrency",
                "16",
                "--presence-ms",
                "1000",
                "--lease-ms",
                &LEASE_MS.to_string(),
                "--run-ms",
                &run_ms.to_string(),
            ],
            &[("RUST_LOG", "error")],
            None,
        )
    }
}

/// A kill of a worker: when, and the jobs it was running.
struct Kill {
    at_ms: u64,
    held: Vec<String>,
}

/// The jobs a worker process started and has not finished, from its lines.
fn held(p: &Proc) -> Vec<String> {
    let mut running: HashSet<String> = HashSet::new();
    for line in p.output() {
        let mut w = line.split_whitespace();
        match (w.next(), w.next()) {
            (Some("started"), Some(id)) => {
                running.insert(id.to_string());
            }
            (Some("done"), Some(id)) => {
                running.remove(id);
            }
            _ => {}
        }
    }
    running.into_iter().collect()
}

pub async fn run(args: &ChaosArgs) -> Result<i32> {
    if args.worker_kills == 0 || args.rate == 0 {
        bail!("--worker-kills and --rate must be at least 1");
    }
    let redis = RedisServer::start_durable();
    let url = redis.url();
    let mut sys = System {
        brokers: (0..BROKERS)
            .map(|_| System::broker(&url, KEEP_SECS))
            .collect(),
        workers: (0..WORKERS)
            .map(|_| System::worker(&url, args.run_ms))
            .collect(),
        retired: Vec::new(),
        redis,
        url,
    };
    let client = Client::connect(&sys.url).await?;
    for w in &sys.workers {
        w.expect_line("ready", Duration::from_secs(30)).await;
    }
    let baseline = used_memory(&sys.redis).await?;
    let started = Instant::now();
    let mut fig = Figures {
        memory_baseline_bytes: baseline,
        ..Figures::default()
    };

    // the load: batches every 20 ms, a failed batch sent again until it is acknowledged (ids
    // make a resend harmless), so every job counted was acknowledged
    let stop = Arc::new(AtomicBool::new(false));
    let submitted = Arc::new(AtomicU64::new(0));
    let producer = {
        let (client, stop, submitted) = (client.clone(), stop.clone(), submitted.clone());
        let per_batch = (args.rate / 50).max(1);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let from = submitted.load(Ordering::Relaxed);
                let jobs: Vec<NewJob> = (from..from + per_batch)
                    .filter_map(|i| NewJob::builder(TYPE, "x").id(format!("c-{i}")).build().ok())
                    .collect();
                loop {
                    match client.submit_many(&jobs).await {
                        Ok(rs) if rs.iter().all(|r| r.is_ok()) => break,
                        _ => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
                submitted.fetch_add(per_batch, Ordering::Relaxed);
            }
        })
    };

    // the faults
    let mut kills: Vec<Kill> = Vec::new();
    let mut rng = now_ms();
    let mut next = || {
        // xorshift: which worker, without a dependency for it
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut stalled: Option<(Proc, Instant)> = None;
    let mut resumed: Vec<Proc> = Vec::new();
    for k in 1..=args.worker_kills {
        tokio::time::sleep(args.interval).await;
        let i = (next() % sys.workers.len() as u64) as usize;
        let mut victim =
            std::mem::replace(&mut sys.workers[i], System::worker(&sys.url, args.run_ms));
        victim.kill9();
        kills.push(Kill {
            at_ms: now_ms(),
            held: held(&victim),
        });
        sys.retired.push(victim);
        fig.worker_kills += 1;
        if k % args.stall_every.max(1) == 0 && stalled.is_none() {
            let i = (next() % sys.workers.len() as u64) as usize;
            let p = std::mem::replace(&mut sys.workers[i], System::worker(&sys.url, args.run_ms));
            p.signal("STOP");
            stalled = Some((p, Instant::now()));
            fig.stalls += 1;
        }
        // a stalled worker wakes with its lease gone (its late completions are refused, fenced),
        // and is then stopped gracefully: the four replacements carry the load
        for p in resumed.drain(..) {
            p.signal("TERM");
            sys.retired.push(p);
        }
        if let Some((p, since)) = stalled.take() {
            if since.elapsed() > Duration::from_millis(LEASE_MS + 1000) {
                p.signal("CONT");
                resumed.push(p);
            } else {
                stalled = Some((p, since));
            }
        }
        if k % args.broker_every.max(1) == 0 {
            let i = (next() % BROKERS as u64) as usize;
            sys.brokers[i].kill9();
            sys.brokers[i] = System::broker(&sys.url, KEEP_SECS);
            fig.broker_restarts += 1;
        }
        if k % args.redis_every.max(1) == 0 {
            sys.redis.restart();
            fig.redis_restarts += 1;
        }
        // a process started while Redis was down may have given up at once: replace it
        for w in &mut sys.workers {
            if matches!(w.child.try_wait(), Ok(Some(_))) {
                let gone = std::mem::replace(w, System::worker(&sys.url, args.run_ms));
                sys.retired.push(gone);
            }
        }
        for b in &mut sys.brokers {
            if matches!(b.child.try_wait(), Ok(Some(_))) {
                *b = System::broker(&sys.url, KEEP_SECS);
            }
        }
        if k % 100 == 0 {
            eprintln!(
                "chaos: {k} worker kills, {} jobs submitted, {:.0} s",
                submitted.load(Ordering::Relaxed),
                started.elapsed().as_secs_f64()
            );
        }
    }
    if let Some((p, _)) = stalled.take() {
        p.signal("CONT");
        resumed.push(p);
    }
    sys.retired.append(&mut resumed);
    stop.store(true, Ordering::Relaxed);
    producer.await.context("the producer task")?;
    fig.jobs = submitted.load(Ordering::Relaxed);
    fig.seconds = started.elapsed().as_secs_f64();

    // every acknowledged job ends, and ends once
    let ids: Vec<String> = (0..fig.jobs).map(|i| format!("c-{i}")).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut unfinished: Vec<String> = ids.clone();
    while !unfinished.is_empty() && Instant::now() < deadline {
        let mut still = Vec::new();
        for chunk in unfinished.chunks(1000) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.cmd("HGET")
                    .arg(client.keys().job_unchecked(id))
                    .arg("status");
            }
            let statuses = client.redis().pipeline(&pipe).await?;
            for (id, s) in chunk.iter().zip(statuses) {
                let s: Option<String> = s.ok().and_then(|v| redis::from_redis_value(v).ok());
                if s.as_deref() != Some(Status::Finished.as_str()) {
                    still.push(id.clone());
                }
            }
        }
        unfinished = still;
        if !unfinished.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    fig.lost = unfinished.len() as u64;
    let stats = client.inspector().queues().await?;
    let finished: u64 = stats
        .iter()
        .filter(|q| q.name == TYPE)
        .map(|q| q.finished)
        .sum();
    fig.double_completions = finished.saturating_sub(fig.jobs - fig.lost);
    let (report, _) = client.audit(false, &|_| {}).await?;
    fig.audit_clean = report.is_consistent();

    // recovery time: from each kill until every job the victim held started elsewhere
    let mut starts: HashMap<String, Vec<u64>> = HashMap::new();
    for p in sys.retired.iter().chain(&sys.workers) {
        for line in p.output() {
            let mut w = line.split_whitespace();
            if let (Some("started"), Some(id), Some(ms)) = (w.next(), w.next(), w.next()) {
                if let Ok(ms) = ms.parse::<u64>() {
                    starts.entry(id.to_string()).or_default().push(ms);
                }
            }
        }
    }
    for kill in &kills {
        for id in &kill.held {
            if let Some(again) = starts
                .get(id)
                .and_then(|s| s.iter().copied().filter(|&ms| ms >= kill.at_ms).min())
            {
                fig.max_recovery_ms = fig.max_recovery_ms.max(again - kill.at_ms);
            }
        }
    }

    // memory: once retention has deleted the finished jobs, back to the baseline
    for b in &mut sys.brokers {
        b.kill9();
    }
    sys.brokers = vec![System::broker(&sys.url, 1)];
    for w in sys.workers.iter_mut().chain(&mut sys.retired) {
        if matches!(w.child.try_wait(), Ok(None)) {
            w.signal("TERM");
        }
    }
    let memory_deadline = Instant::now() + Duration::from_secs(60);
    loop {
        fig.memory_after_bytes = used_memory(&sys.redis).await?;
        if fig.memory_after_bytes <= baseline + MEMORY_SLACK || Instant::now() > memory_deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let memory_ok = fig.memory_after_bytes <= baseline + MEMORY_SLACK;

    println!("| figure | value |");
    println!("| --- | --- |");
    println!("| jobs acknowledged | {} |", fig.jobs);
    println!(
        "| faults | {} worker kills, {} broker restarts, {} Redis restarts, {} stalls past the lease |",
        fig.worker_kills, fig.broker_restarts, fig.redis_restarts, fig.stalls
    );
    println!("| lost | {} |", fig.lost);
    println!("| recorded twice | {} |", fig.double_completions);
    println!("| max recovery after a kill | {} ms |", fig.max_recovery_ms);
    println!(
        "| audit | {} |",
        if fig.audit_clean {
            "clean"
        } else {
            "NOT clean"
        }
    );
    println!(
        "| Redis memory | {:.1} MiB before, {:.1} MiB after |",
        fig.memory_baseline_bytes as f64 / 1048576.0,
        fig.memory_after_bytes as f64 / 1048576.0
    );
    println!("| duration | {:.0} s |", fig.seconds);
    std::fs::write(&args.out, serde_json::to_string_pretty(&fig)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    if !unfinished.is_empty() {
        eprintln!("lost: {:?}", &unfinished[..unfinished.len().min(10)]);
    }
    if !report.is_consistent() {
        eprintln!("audit: {:?}", report.inconsistencies().collect::<Vec<_>>());
    }
    let ok = fig.lost == 0 && fig.double_completions == 0 && fig.audit_clean && memory_ok;
    // exit 1 when a check failed
    Ok(i32::from(!ok))
}

/// Memory the run may leave behind: the event log's capped tail and the stats' hashes.
const MEMORY_SLACK: u64 = 4 << 20;

async fn used_memory(redis: &RedisServer) -> Result<u64> {
    let mut conn = redis.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no used_memory in INFO memory")
}
