//! `hero-bench chaos` (`benches/chaos`): the chaos soak. A real system (two `hero broker`
//! processes, four `hero-bench worker` processes, a producer) under a steady load while faults
//! are thrown at it, in up to three phases, one per Redis deployment (`deploy`): one durable
//! server behind the fault proxy (process and network faults), a Sentinel-managed primary with
//! replicas (failovers), a three-master cluster (a primary killed). The mix is in `faults`.
//!
//! At the end of each phase every acknowledged job is judged against the independent ledger the
//! workers' handlers wrote (`ledger`): finished, by a run the ledger shows, accepted once. Then
//! the audit must be clean and Redis memory back to its baseline once retention has run.
//!
//! The worst time to recover from a fault: for a worker killed or stalled, from the signal until
//! every job it held had started elsewhere; for every other kind, from the fault until a probe
//! job submitted right after it had finished. A lost or twice-recorded job is counted against
//! the kind of the last fault before its submit was acknowledged.
//!
//! Prints one table row per phase and fault kind, writes the figures as JSON, and ends with
//! `lost N, recorded twice M`; exits 1 when a check fails.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use hero_client::{Client, ClientOptions, NewJob};
use hero_testkit::{binary, Proc};

mod deploy;
mod faults;
mod ledger;

use deploy::{Deployment, Topology};
use faults::Kind;
pub use ledger::Ledger;
use ledger::{Book, Judgement};

const TYPE: &str = "bench";
const WORKERS: usize = 4;
const BROKERS: usize = 2;
/// The workers' lease; a stalled worker is stopped for longer than this.
const LEASE_MS: u64 = 2000;
/// The brokers' retention while the soak runs: every ended job stays to be checked.
const KEEP_SECS: u64 = 3600;
/// Memory a run may leave behind: the event log's capped tail and the stats' hashes.
const MEMORY_SLACK: u64 = 4 << 20;

#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// One fault of each kind per phase, a second apart: a few minutes in all.
    #[arg(long)]
    pub short: bool,
    /// The phases to run, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "single,sentinel,cluster"
    )]
    pub topology: Vec<Topology>,
    /// Faults thrown in the single-server phase (process and network faults).
    #[arg(long, default_value_t = 10_000)]
    pub faults: u64,
    /// Faults thrown in each of the Sentinel and cluster phases.
    #[arg(long, default_value_t = 40)]
    pub failover_faults: u64,
    /// Time between two faults of the single-server phase.
    #[arg(long, default_value = "75ms", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Time between two faults of the Sentinel and cluster phases.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub failover_interval: Duration,
    /// Jobs submitted per second while the faults run.
    #[arg(long, default_value_t = 300)]
    pub rate: u64,
    /// How long each job runs (ms).
    #[arg(long, default_value_t = 20)]
    pub run_ms: u64,
    /// Where the figures go as JSON.
    #[arg(long, default_value = "chaos-results.json")]
    pub out: PathBuf,
}

/// One row: a kind of fault in one phase.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct KindFigures {
    topology: String,
    kind: String,
    faults: u64,
    lost: u64,
    recorded_twice: u64,
    worst_recovery_ms: u64,
}

#[derive(Debug, Default, serde::Serialize)]
struct PhaseFigures {
    topology: String,
    jobs: u64,
    faults: u64,
    lost: u64,
    recorded_twice: u64,
    /// Finished with an output no run in the ledger produced.
    unproven: u64,
    handler_runs: u64,
    audit_clean: bool,
    memory_baseline_bytes: u64,
    memory_after_bytes: u64,
    seconds: f64,
}

#[derive(Debug, Default, serde::Serialize)]
struct Figures {
    faults: u64,
    jobs: u64,
    lost: u64,
    recorded_twice: u64,
    phases: Vec<PhaseFigures>,
    kinds: Vec<KindFigures>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub async fn run(args: &ChaosArgs) -> Result<i32> {
    if args.rate == 0 {
        bail!("--rate must be at least 1");
    }
    let dir = std::env::temp_dir().join(format!("hero-chaos-{}", std::process::id()));
    let mut fig = Figures::default();
    let mut ok = true;
    for &t in &args.topology {
        let phase_dir = dir.join(t.name());
        std::fs::create_dir_all(&phase_dir)
            .with_context(|| format!("cannot create {}", phase_dir.display()))?;
        eprintln!("chaos: the {} phase", t.name());
        let (p, kinds, clean) = phase(t, args, &phase_dir).await?;
        ok &= clean;
        fig.faults += p.faults;
        fig.jobs += p.jobs;
        fig.lost += p.lost;
        fig.recorded_twice += p.recorded_twice;
        fig.phases.push(p);
        fig.kinds.extend(kinds);
    }
    let _ = std::fs::remove_dir_all(&dir);
    print_table(&fig);
    std::fs::write(&args.out, serde_json::to_string_pretty(&fig)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("lost {}, recorded twice {}", fig.lost, fig.recorded_twice);
    Ok(i32::from(!ok))
}

fn print_table(fig: &Figures) {
    println!("| phase | fault | how many | lost | recorded twice | worst recovery |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for k in &fig.kinds {
        println!(
            "| {} | {} | {} | {} | {} | {:.1} s |",
            k.topology,
            k.kind,
            k.faults,
            k.lost,
            k.recorded_twice,
            k.worst_recovery_ms as f64 / 1000.0
        );
    }
    for p in &fig.phases {
        println!(
            "| {} | all: {} jobs, {} handler runs, {:.0} s | {} | {} | {} | audit {}, memory {:.1} → {:.1} MiB |",
            p.topology,
            p.jobs,
            p.handler_runs,
            p.seconds,
            p.faults,
            p.lost,
            p.recorded_twice,
            if p.audit_clean { "clean" } else { "NOT clean" },
            p.memory_baseline_bytes as f64 / 1048576.0,
            p.memory_after_bytes as f64 / 1048576.0
        );
    }
}

/// The processes of one phase.
struct Procs {
    url: String,
    replicas: u32,
    dir: PathBuf,
    run_ms: u64,
    brokers: Vec<Proc>,
    workers: Vec<Proc>,
    /// Every worker process ever started (a killed one's lines are still read at the end).
    retired: Vec<Proc>,
    started: u64,
}

impl Procs {
    fn replica_flags(&self) -> Vec<String> {
        if self.replicas == 0 {
            return Vec::new();
        }
        vec![
            "--min-replicas".into(),
            self.replicas.to_string(),
            "--replica-timeout-ms".into(),
            "2000".into(),
        ]
    }

    /// A broker; the soak's keep the ended jobs until they are checked, then one with a
    /// retention of 1 s deletes them, for the memory check.
    fn broker(&self, retention_secs: u64) -> Proc {
        let mut args: Vec<String> = vec!["--redis-url".into(), self.url.clone()];
        args.extend(self.replica_flags());
        args.extend(
            [
                "broker",
                "--http",
                "off",
                "--lease-ms",
                &LEASE_MS.to_string(),
                "--retention-secs",
                &retention_secs.to_string(),
                "--events-max",
                "1000",
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proc::spawn(&binary("hero"), &args, &[("RUST_LOG", "error")], None)
    }

    fn worker(&mut self) -> Proc {
        self.started += 1;
        let ledger = self.dir.join(format!("w{}.ledger", self.started));
        let mut args: Vec<String> = [
            "worker",
            "--redis-url",
            &self.url,
            "--concurrency",
            "16",
            "--presence-ms",
            "1000",
            "--lease-ms",
            &LEASE_MS.to_string(),
            "--run-ms",
            &self.run_ms.to_string(),
        ]
        .map(String::from)
        .to_vec();
        args.push("--ledger".into());
        args.push(ledger.display().to_string());
        args.extend(self.replica_flags());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proc::spawn(&binary("hero-bench"), &args, &[("RUST_LOG", "error")], None)
    }

    /// Replaces worker `i` with a new process and gives back the old one.
    fn swap_worker(&mut self, i: usize) -> Proc {
        let fresh = self.worker();
        std::mem::replace(&mut self.workers[i], fresh)
    }

    /// A process started while Redis was down may have given up at once: replace it.
    fn replace_exited(&mut self) {
        for i in 0..self.workers.len() {
            if matches!(self.workers[i].child.try_wait(), Ok(Some(_))) {
                let gone = self.swap_worker(i);
                self.retired.push(gone);
            }
        }
        for i in 0..self.brokers.len() {
            if matches!(self.brokers[i].child.try_wait(), Ok(Some(_))) {
                self.brokers[i] = self.broker(KEEP_SECS);
            }
        }
    }
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

/// How a fault's recovery is measured.
enum Recovery {
    /// The jobs a killed or stalled worker held: until each started elsewhere.
    Held(Vec<String>),
    /// A probe job submitted after the fault: until it finished (unix ms), None if never.
    Probe(String, tokio::task::JoinHandle<Option<u64>>),
    /// A probe's time, once awaited (None: it never finished).
    Measured(Option<u64>),
}

struct Thrown {
    kind: Kind,
    at_ms: u64,
    recovery: Recovery,
}

/// Submits a probe job (again until acknowledged) and waits for it to finish.
fn probe(client: Client, id: String) -> tokio::task::JoinHandle<Option<u64>> {
    tokio::spawn(async move {
        let job = NewJob::builder(TYPE, "x").id(id.clone()).build().ok()?;
        let deadline = Instant::now() + Duration::from_secs(180);
        while client.submit(&job).await.is_err() {
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let key = client.keys().job_unchecked(&id);
        while Instant::now() < deadline {
            let status: Option<String> = client
                .redis()
                .query(redis::cmd("HGET").arg(&key).arg("status"))
                .await
                .unwrap_or(None);
            if status.as_deref() == Some("finished") {
                return Some(now_ms());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    })
}

async fn connect(url: &str, replicas: u32) -> Result<Client> {
    let mut opts = ClientOptions::new(url);
    opts.replicas.wanted = replicas;
    opts.replicas.timeout = Duration::from_secs(2);
    Ok(Client::with_options(opts).await?)
}

/// A window fault (latency, bandwidth) in force until this instant.
type Window = Option<Instant>;

async fn phase(
    t: Topology,
    args: &ChaosArgs,
    dir: &Path,
) -> Result<(PhaseFigures, Vec<KindFigures>, bool)> {
    let mut dep = Deployment::start(t).await;
    let replicas = dep.replicas();
    let mut procs = Procs {
        url: dep.system_url(),
        replicas,
        dir: dir.to_path_buf(),
        run_ms: args.run_ms,
        brokers: Vec::new(),
        workers: Vec::new(),
        retired: Vec::new(),
        started: 0,
    };
    procs.brokers = (0..BROKERS).map(|_| procs.broker(KEEP_SECS)).collect();
    procs.workers = (0..WORKERS).map(|_| procs.worker()).collect();
    let client = connect(&dep.direct_url(), replicas).await?;
    let slot_key = client.keys().job_unchecked("x");
    for w in &procs.workers {
        w.expect_line("ready", Duration::from_secs(30)).await;
    }
    let baseline = used_memory(&client).await?;
    let started = Instant::now();

    // the load: batches every 20 ms, a failed batch sent again until it is acknowledged (ids
    // make a resend harmless), so every job counted was acknowledged; each batch's ack time is
    // kept to count a lost job against the fault before it
    let stop = Arc::new(AtomicBool::new(false));
    let submitted = Arc::new(AtomicU64::new(0));
    let acks: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let producer = {
        let (client, stop, submitted, acks) = (
            client.clone(),
            stop.clone(),
            submitted.clone(),
            acks.clone(),
        );
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
                acks.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((from + per_batch, now_ms()));
                submitted.fetch_add(per_batch, Ordering::Relaxed);
            }
        })
    };

    // the faults
    let (plan, interval) = match t {
        Topology::Single => (faults::plan(t, args.faults, args.short), args.interval),
        _ => (
            faults::plan(t, args.failover_faults, args.short),
            args.failover_interval,
        ),
    };
    let interval = if args.short {
        interval.max(Duration::from_secs(1))
    } else {
        interval
    };
    let mut rng = now_ms() | 1;
    let mut next = move || {
        // xorshift: which worker, how much latency, without a dependency for it
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut thrown: Vec<Thrown> = Vec::with_capacity(plan.len());
    let mut stalled: Option<(Proc, Instant)> = None;
    let mut resumed: Vec<Proc> = Vec::new();
    let (mut latency, mut bandwidth): (Window, Window) = (None, None);
    let mut dead_primary: Option<u16> = None;
    for (n, &kind) in plan.iter().enumerate() {
        tokio::time::sleep(interval).await;
        if let Some(proxy) = dep.proxy() {
            if latency.is_some_and(|u| Instant::now() > u) {
                proxy.set_latency(Duration::ZERO);
                latency = None;
            }
            if bandwidth.is_some_and(|u| Instant::now() > u) {
                proxy.set_bandwidth(None);
                bandwidth = None;
            }
        }
        // a stalled worker wakes with its lease gone (its late completions are refused,
        // fenced), and is then stopped gracefully: its replacement carries the load
        for p in resumed.drain(..) {
            p.signal("TERM");
            procs.retired.push(p);
        }
        if let Some((p, since)) = stalled.take() {
            if since.elapsed() > Duration::from_millis(LEASE_MS + 1000) {
                p.signal("CONT");
                resumed.push(p);
            } else {
                stalled = Some((p, since));
            }
        }
        if let Some(port) = dead_primary {
            if kind.fails_over() || dep.failed_over(port, &slot_key).await {
                wait_failover(&dep, port, &slot_key).await;
                dep.revive(port).await;
                dead_primary = None;
            }
        }
        if kind.fails_over() {
            dep.settle(&slot_key).await;
        }
        let worker_index = (next() % procs.workers.len() as u64) as usize;
        let window = Duration::from_millis(1000 + next() % 1000);
        let at_ms = now_ms();
        let probe_id = format!("p-{}-{n}", t.name());
        let recovery = match kind {
            Kind::WorkerKill => {
                let mut victim = procs.swap_worker(worker_index);
                victim.kill9();
                let h = held(&victim);
                procs.retired.push(victim);
                Recovery::Held(h)
            }
            Kind::WorkerStall => {
                if stalled.is_some() {
                    // one stall at a time: this one waits for the next turn
                    continue;
                }
                let p = procs.swap_worker(worker_index);
                p.signal("STOP");
                let h = held(&p);
                stalled = Some((p, Instant::now()));
                Recovery::Held(h)
            }
            other => {
                match other {
                    Kind::BrokerRestart => {
                        let i = (next() % BROKERS as u64) as usize;
                        procs.brokers[i].kill9();
                        procs.brokers[i] = procs.broker(KEEP_SECS);
                    }
                    Kind::RedisRestart => dep.restart_redis()?,
                    Kind::ConnectionCut => {
                        dep.proxy().map(|p| p.cut());
                    }
                    Kind::HalfOpen => {
                        dep.proxy().map(|p| p.half_open());
                    }
                    Kind::Latency => {
                        let d = Duration::from_millis(50 + next() % 451);
                        dep.proxy().map(|p| p.set_latency(d));
                        latency = Some(Instant::now() + window);
                    }
                    Kind::Bandwidth => {
                        let bps = (8 + next() % 57) * 1024;
                        dep.proxy().map(|p| p.set_bandwidth(Some(bps)));
                        bandwidth = Some(Instant::now() + window);
                    }
                    Kind::SentinelFailover => {
                        // the probe goes once the Sentinels name the new primary: a probe
                        // sent before would finish on the old one and measure nothing
                        let old = dep.kill_target_port(&slot_key).await?;
                        dep.sentinel_failover().await?;
                        wait_failover(&dep, old, &slot_key).await;
                    }
                    Kind::PrimaryKill => dead_primary = Some(dep.kill_primary(&slot_key).await?),
                    Kind::WorkerKill | Kind::WorkerStall => {}
                }
                Recovery::Probe(probe_id.clone(), probe(client.clone(), probe_id))
            }
        };
        thrown.push(Thrown {
            kind,
            at_ms,
            recovery,
        });
        procs.replace_exited();
        if (n + 1) % 500 == 0 {
            eprintln!(
                "chaos: {} faults, {} jobs submitted, {:.0} s",
                n + 1,
                submitted.load(Ordering::Relaxed),
                started.elapsed().as_secs_f64()
            );
        }
    }
    if let Some((p, _)) = stalled.take() {
        p.signal("CONT");
        resumed.push(p);
    }
    procs.retired.append(&mut resumed);
    if let Some(proxy) = dep.proxy() {
        proxy.set_latency(Duration::ZERO);
        proxy.set_bandwidth(None);
    }
    if let Some(port) = dead_primary.take() {
        wait_failover(&dep, port, &slot_key).await;
        dep.revive(port).await;
    }
    stop.store(true, Ordering::Relaxed);
    producer.await.context("the producer task")?;
    let jobs = submitted.load(Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();

    // every acknowledged job ends, and ends once, by the ledger
    let ids: Vec<String> = (0..jobs).map(|i| format!("c-{i}")).collect();
    wait_ended(&client, &ids, Duration::from_secs(180)).await?;
    let book = Book::read(dir)?;
    let records = read_records(&client, &ids).await?;
    let mut bad: Vec<(u64, Judgement)> = Vec::new();
    for (i, (id, (status, output))) in ids.iter().zip(&records).enumerate() {
        match book.judge(id, status.as_deref(), output.as_deref()) {
            Judgement::Once => {}
            j => bad.push((i as u64, j)),
        }
    }
    // the probes: their times, and each judged like any job (a bad one counts against its own
    // fault)
    let mut probe_ids: Vec<(usize, String)> = Vec::new();
    for (i, f) in thrown.iter_mut().enumerate() {
        if !matches!(f.recovery, Recovery::Probe(..)) {
            continue;
        }
        if let Recovery::Probe(id, h) = std::mem::replace(&mut f.recovery, Recovery::Measured(None))
        {
            let done = h.await.ok().flatten();
            f.recovery = Recovery::Measured(done.map(|d| d.saturating_sub(f.at_ms)));
            probe_ids.push((i, id));
        }
    }
    let only: Vec<String> = probe_ids.iter().map(|(_, id)| id.clone()).collect();
    let mut bad_probes: Vec<(usize, Judgement)> = Vec::new();
    for ((i, id), (status, output)) in probe_ids.iter().zip(read_records(&client, &only).await?) {
        match book.judge(id, status.as_deref(), output.as_deref()) {
            Judgement::Once => {}
            j => bad_probes.push((*i, j)),
        }
    }
    let (report, _) = client.audit(false, &|_| {}).await?;
    let audit_clean = report.is_consistent();
    if !audit_clean {
        eprintln!("audit: {:?}", report.inconsistencies().collect::<Vec<_>>());
    }
    for (i, j) in bad.iter().take(10) {
        eprintln!("chaos: c-{i} {j:?}");
    }

    for (i, j) in &bad_probes {
        eprintln!("chaos: probe of fault {i} ({:?}) {j:?}", thrown[*i].kind);
    }
    let kinds = per_kind(t, &thrown, &procs, &bad, &bad_probes, &acks);

    // memory: once retention has deleted the finished jobs, back to the baseline
    for b in &mut procs.brokers {
        b.kill9();
    }
    procs.brokers = vec![procs.broker(1)];
    for w in procs.workers.iter_mut().chain(&mut procs.retired) {
        if matches!(w.child.try_wait(), Ok(None)) {
            w.signal("TERM");
        }
    }
    let memory_deadline = Instant::now() + Duration::from_secs(60);
    let mut memory_after = used_memory(&client).await?;
    while memory_after > baseline + MEMORY_SLACK && Instant::now() < memory_deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        memory_after = used_memory(&client).await?;
    }
    let count = |j: Judgement| bad.iter().filter(|(_, b)| *b == j).count() as u64;
    let probes = |j: Judgement| bad_probes.iter().filter(|(_, b)| *b == j).count() as u64;
    let p = PhaseFigures {
        topology: t.name().into(),
        jobs: jobs + probe_ids.len() as u64,
        faults: thrown.len() as u64,
        lost: count(Judgement::Lost) + probes(Judgement::Lost),
        recorded_twice: count(Judgement::Twice) + probes(Judgement::Twice),
        unproven: count(Judgement::Unproven) + probes(Judgement::Unproven),
        handler_runs: book.runs() as u64,
        audit_clean,
        memory_baseline_bytes: baseline,
        memory_after_bytes: memory_after,
        seconds,
    };
    let clean = bad.is_empty()
        && bad_probes.is_empty()
        && audit_clean
        && memory_after <= baseline + MEMORY_SLACK;
    Ok((p, kinds, clean))
}

/// Waits (bounded) until the primary killed at `port` has been replaced.
async fn wait_failover(dep: &Deployment, port: u16, slot_key: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dep.failed_over(port, slot_key).await && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The figures per kind: how many, the worst recovery, and the bad jobs counted against the
/// last fault before their acknowledgement.
fn per_kind(
    t: Topology,
    thrown: &[Thrown],
    procs: &Procs,
    bad: &[(u64, Judgement)],
    bad_probes: &[(usize, Judgement)],
    acks: &Mutex<Vec<(u64, u64)>>,
) -> Vec<KindFigures> {
    // each job's start times, from every worker's lines
    let mut starts: HashMap<String, Vec<u64>> = HashMap::new();
    for p in procs.retired.iter().chain(&procs.workers) {
        for line in p.output() {
            let mut w = line.split_whitespace();
            if let (Some("started"), Some(id), Some(ms)) = (w.next(), w.next(), w.next()) {
                if let Ok(ms) = ms.parse::<u64>() {
                    starts.entry(id.to_string()).or_default().push(ms);
                }
            }
        }
    }
    let mut rows: BTreeMap<Kind, KindFigures> = BTreeMap::new();
    fn row(rows: &mut BTreeMap<Kind, KindFigures>, t: Topology, k: Kind) -> &mut KindFigures {
        rows.entry(k).or_insert_with(|| KindFigures {
            topology: t.name().into(),
            kind: k.name().into(),
            ..KindFigures::default()
        })
    }
    let mut worst: Vec<(Kind, u64)> = Vec::new();
    for f in thrown {
        let ms = match &f.recovery {
            Recovery::Held(ids) => ids
                .iter()
                .filter_map(|id| {
                    starts
                        .get(id)
                        .and_then(|s| s.iter().copied().filter(|&ms| ms >= f.at_ms).min())
                })
                .map(|again| again - f.at_ms)
                .max()
                .unwrap_or(0),
            // a probe that never finished is a lost job, counted below
            Recovery::Measured(ms) => ms.unwrap_or(0),
            Recovery::Probe(..) => 0,
        };
        worst.push((f.kind, ms));
    }
    for (k, ms) in worst {
        let r = row(&mut rows, t, k);
        r.faults += 1;
        r.worst_recovery_ms = r.worst_recovery_ms.max(ms);
    }
    for (i, j) in bad_probes {
        let r = row(&mut rows, t, thrown[*i].kind);
        match j {
            Judgement::Twice => r.recorded_twice += 1,
            _ => r.lost += 1,
        }
    }
    let acks = acks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (i, j) in bad {
        // the batch that acknowledged job i, then the last fault before it
        let at = acks
            .iter()
            .find(|(end, _)| *end > *i)
            .map_or(u64::MAX, |(_, at)| *at);
        let kind = thrown
            .iter()
            .rev()
            .find(|f| f.at_ms <= at)
            .or(thrown.first())
            .map(|f| f.kind);
        if let Some(k) = kind {
            match j {
                Judgement::Twice => row(&mut rows, t, k).recorded_twice += 1,
                _ => row(&mut rows, t, k).lost += 1,
            }
        }
    }
    rows.into_values().collect()
}

async fn wait_ended(client: &Client, ids: &[String], limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    let mut unfinished: Vec<String> = ids.to_vec();
    while !unfinished.is_empty() && Instant::now() < deadline {
        let records = read_records(client, &unfinished).await?;
        unfinished = unfinished
            .into_iter()
            .zip(records)
            .filter(|(_, (s, _))| s.as_deref() != Some("finished"))
            .map(|(id, _)| id)
            .collect();
        if !unfinished.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

/// Each job's status and output, pipelined.
async fn read_records(
    client: &Client,
    ids: &[String],
) -> Result<Vec<(Option<String>, Option<String>)>> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.cmd("HMGET")
                .arg(client.keys().job_unchecked(id))
                .arg("status")
                .arg("output");
        }
        for r in client.redis().pipeline(&pipe).await? {
            let pair: (Option<String>, Option<String>) = r
                .ok()
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or((None, None));
            out.push(pair);
        }
    }
    Ok(out)
}

async fn used_memory(client: &Client) -> Result<u64> {
    let info: String = client
        .redis()
        .query(redis::cmd("INFO").arg("memory"))
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no used_memory in INFO memory")
}
