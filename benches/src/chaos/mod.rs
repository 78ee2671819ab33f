//! `hero-bench chaos` (`benches/chaos`): the chaos soak. A real system (two `hero broker`
//! processes, four `hero-bench worker` processes, a producer) under a steady load while faults
//! are thrown at it, in up to four phases, one per Redis deployment (`deploy`): one durable
//! server behind the fault proxy (process and network faults), a Sentinel-managed primary with
//! replicas (failovers), a three-master cluster (a primary killed), and that cluster with the
//! namespace spread over three shards (each shard's primary killed in turn). The mix is in
//! `faults`. The queue is fair (issue 52) outside the upgrade phase, its jobs spread over eight
//! limit keys, so every job passes through its gate.
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

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use hero_client::{Client, ClientOptions};
use hero_testkit::Proc;

mod checks;
mod deploy;
mod faults;
mod figures;
mod ledger;
mod load;
mod procs;
mod redis_faults;
mod upgrade;

use checks::{home_key, probe, read_records, used_memory, wait_ended};
use deploy::{Deployment, Topology};
use faults::Kind;
use figures::{per_kind, print_table, Figures, KindFigures, PhaseFigures, Recovery, Thrown};
pub use ledger::Ledger;
use ledger::{Book, Judgement};
use procs::{held, Procs};

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
        default_value = "single,no-broker,sentinel,cluster,sharded-cluster,redis-faults,upgrade"
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
    /// The upgrade phase: the directory holding the earlier release's `hero` and `hero-bench`
    /// (`benches/chaos` builds them from `--upgrade-from`).
    #[arg(long)]
    pub old_bin: Option<PathBuf>,
    /// The upgrade phase: the earlier release's name (its commit), for the figures.
    #[arg(long, default_value = "old")]
    pub old_name: String,
    /// The upgrade phase: a Python with the earlier release's hero-py (else its Python workers
    /// are Rust ones).
    #[arg(long)]
    pub old_python: Option<PathBuf>,
    /// The upgrade phase: a Python with this build's hero-py.
    #[arg(long)]
    pub new_python: Option<PathBuf>,
    /// The upgrade phase: the earlier release's Node package build (`node/dist/esm/index.js`;
    /// else its Node worker is a Rust one).
    #[arg(long)]
    pub old_node: Option<PathBuf>,
    /// The upgrade phase: this build's Node package build.
    #[arg(long)]
    pub new_node: Option<PathBuf>,
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
        if t == Topology::Upgrade && args.old_bin.is_none() {
            // building an earlier release is the soak script's (benches/chaos), not the suite's
            eprintln!(
                "chaos: the upgrade phase needs --old-bin (benches/chaos builds it): skipped"
            );
            continue;
        }
        let phase_dir = dir.join(t.name());
        std::fs::create_dir_all(&phase_dir)
            .with_context(|| format!("cannot create {}", phase_dir.display()))?;
        eprintln!("chaos: the {} phase", t.name());
        let (p, kinds, clean) = if t == Topology::Upgrade {
            let Some(bin) = &args.old_bin else {
                bail!("the upgrade phase needs --old-bin");
            };
            let old = procs::Build {
                name: args.old_name.clone(),
                hero: bin.join("hero"),
                bench: bin.join("hero-bench"),
                python: args.old_python.clone(),
                node: args.old_node.clone(),
            };
            let new = procs::Build {
                python: args.new_python.clone(),
                node: args.new_node.clone(),
                ..procs::Build::current()
            };
            upgrade::phase(args, &phase_dir, old, new).await?
        } else if t == Topology::RedisFaults {
            redis_faults::phase(args, &phase_dir).await?
        } else {
            phase(t, args, &phase_dir).await?
        };
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

/// The retention the duties apply (`retention_ms` in the config hash, as a broker publishes it),
/// on every shard.
async fn keep_for(client: &Client, secs: u64) -> Result<()> {
    for (_, shard) in client.all_shard_clients() {
        let _: () = shard
            .redis()
            .query(
                redis::cmd("HSET")
                    .arg(shard.keys().config())
                    .arg("retention_ms")
                    .arg(secs * 1000),
            )
            .await?;
    }
    Ok(())
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
    let mut procs = Procs::new(
        dep.system_url(),
        replicas,
        dir,
        args.run_ms,
        procs::Build::current(),
    );
    let client = connect(&dep.direct_url(), replicas).await?;
    if t.shards() > 1 {
        // before any process starts: each reads the map as it connects
        client.set_shards(t.shards()).await?;
    }
    // a key of each shard: the primary kills rotate over the shards' masters
    let slot_keys: Vec<String> = client
        .shard_clients()
        .iter()
        .map(|(_, c)| c.keys().job_unchecked("x"))
        .collect();
    let mut slot_key = slot_keys[0].clone();
    // the soak's queue is fair (issue 52): every job passes through its gate, keyed by one of
    // eight tenants (`checks::tenant`); the upgrade phase's is not (a process older than
    // protocol 30 cannot serve a gate, and the fleet gate refuses it while one is live)
    hero_admin::Admin::from(&client)
        .set_policy(
            TYPE,
            &hero_protocol::policy::Policy {
                fair: Some(true),
                ..hero_protocol::policy::Policy::default()
            },
        )
        .await?;
    if t == Topology::NoBroker {
        // what a broker would publish, kept in Redis for the workers' duties to read
        keep_for(&client, KEEP_SECS).await?;
    } else {
        procs.brokers = (0..BROKERS).map(|_| procs.broker(KEEP_SECS)).collect();
    }
    procs.workers = (0..WORKERS).map(|_| procs.worker()).collect();
    for w in &procs.workers {
        w.expect_line("ready", Duration::from_secs(30)).await;
    }
    let baseline = used_memory(&client).await?;
    let started = Instant::now();

    let load = load::Load::start(client.clone(), args.rate, true);
    let acks = load.acks.clone();

    // the faults
    let (plan, interval) = match t {
        Topology::Single | Topology::NoBroker => {
            (faults::plan(t, args.faults, args.short), args.interval)
        }
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
    for (n, &planned) in plan.iter().enumerate() {
        // one stall at a time: a stall planned while one lasts is a kill instead, so the run
        // throws as many faults as planned
        let kind = if planned == Kind::WorkerStall && stalled.is_some() {
            Kind::WorkerKill
        } else {
            planned
        };
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
            slot_key = slot_keys[n % slot_keys.len()].clone();
            dep.settle(&slot_key).await;
        }
        let worker_index = (next() % procs.workers.len() as u64) as usize;
        let window = Duration::from_millis(500 + next() % 500);
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
                        if let Some(p) = dep.proxy() {
                            p.cut();
                        }
                    }
                    Kind::HalfOpen => {
                        if let Some(p) = dep.proxy() {
                            p.half_open();
                        }
                    }
                    Kind::Latency => {
                        let d = Duration::from_millis(50 + next() % 451);
                        if let Some(p) = dep.proxy() {
                            p.set_latency(d);
                        }
                        latency = Some(Instant::now() + window);
                    }
                    Kind::Bandwidth => {
                        let bps = (8 + next() % 57) * 1024;
                        if let Some(p) = dep.proxy() {
                            p.set_bandwidth(Some(bps));
                        }
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
                    // the worker faults are above; Redis's own are the redis-faults phase's
                    _ => {}
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
                load.count(),
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
    dep.settle(&slot_key).await;
    let jobs = load.finish().await?;
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
    // read again: a probe may end after the read above (a failover's takes seconds), and its
    // run is then only in the ledgers now (it read as `Unproven`, a run the book had not seen)
    let book = Book::read(dir)?;
    let only: Vec<String> = probe_ids.iter().map(|(_, id)| id.clone()).collect();
    let mut bad_probes: Vec<(usize, Judgement)> = Vec::new();
    for ((i, id), (status, output)) in probe_ids.iter().zip(read_records(&client, &only).await?) {
        match book.judge(id, status.as_deref(), output.as_deref()) {
            Judgement::Once => {}
            j => bad_probes.push((*i, j)),
        }
    }
    // a consumer a worker killed a moment ago left goes with the brokers' next presence pass:
    // the audit is asked again (bounded) until that pass had its turn
    let audit_deadline = Instant::now() + Duration::from_secs(30);
    let report = loop {
        let (report, _) = hero_admin::Admin::from(&client)
            .audit(false, &|_| {})
            .await?;
        if report.is_consistent() || Instant::now() > audit_deadline {
            break report;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let audit_clean = report.is_consistent();
    if !audit_clean {
        eprintln!("audit: {:?}", report.inconsistencies().collect::<Vec<_>>());
    }
    for (i, j) in bad.iter().take(10) {
        // what the record says, to tell a job never stored from one stuck on its way
        let home = client.home_client(&home_key(&format!("c-{i}")));
        let record: Vec<(String, String)> = home
            .redis()
            .query(redis::cmd("HGETALL").arg(home.keys().job_unchecked(&format!("c-{i}"))))
            .await
            .unwrap_or_default();
        let brief: Vec<String> = record
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "script" | "script_type" | "id"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!("chaos: c-{i} {j:?}: {}", brief.join(" "));
        let only = hero_admin::inspect::EventFilter {
            job: Some(format!("c-{i}")),
            ..Default::default()
        };
        for e in hero_admin::Inspector::from(&client)
            .events(&only, 50)
            .await
            .unwrap_or_default()
        {
            eprintln!("chaos:   {e:?}");
        }
    }

    for (i, j) in &bad_probes {
        eprintln!("chaos: probe of fault {i} ({:?}) {j:?}", thrown[*i].kind);
    }
    let kinds = per_kind(t, &thrown, &procs, &bad, &bad_probes, &acks);

    // memory: once retention has deleted the finished jobs, back to the baseline
    for b in &mut procs.brokers {
        b.kill9();
    }
    let keeper = if t == Topology::NoBroker {
        // a worker, not a broker, deletes the finished jobs: the duties of a new one
        keep_for(&client, 1).await?;
        Some(procs.worker())
    } else {
        procs.brokers = vec![procs.broker(1)];
        None
    };
    for w in procs.workers.iter_mut().chain(&mut procs.retired) {
        if matches!(w.child.try_wait(), Ok(None)) {
            w.signal("TERM");
        }
    }
    // the event log is kept long for the diagnosis above; memory is about the jobs
    for (_, shard) in client.all_shard_clients() {
        let _: hero_protocol::Result<i64> = shard
            .redis()
            .query(
                redis::cmd("XTRIM")
                    .arg(shard.keys().events())
                    .arg("MAXLEN")
                    .arg(0),
            )
            .await;
    }
    let memory_deadline = Instant::now() + Duration::from_secs(60);
    let mut memory_after = used_memory(&client).await?;
    while memory_after > baseline + MEMORY_SLACK && Instant::now() < memory_deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        memory_after = used_memory(&client).await?;
    }
    if let Some(k) = keeper {
        k.signal("TERM");
        procs.retired.push(k);
    }
    let p = PhaseFigures {
        audit_clean,
        memory_baseline_bytes: baseline,
        memory_after_bytes: memory_after,
        seconds,
        ..PhaseFigures::judged(
            t,
            jobs + probe_ids.len() as u64,
            thrown.len() as u64,
            &bad,
            &bad_probes,
            book.runs() as u64,
        )
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
