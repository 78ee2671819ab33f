//! The benchmark run (SPEC §9): starts a throwaway `redis-server`, pins it and the load to different
//! cores, runs each scenario with hero's own client and worker (the API users get, no
//! shortcuts) and, with `--peer bullmq`, the same scenario with BullMQ on the same Redis,
//! interleaved round by round; then prints one table of medians and writes it as JSON.
//!
//! Every figure is measured the same way on both sides: a timed section, Redis CPU time from
//! `INFO cpu` before and after it, latencies from a submit timestamp carried in the job.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use hero_broker::local_redis::{self, on_path, LocalRedis};

use crate::report::{Figures, Report};
use crate::{ours, peer};

/// The scenarios, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Scenario {
    /// Jobs submitted in batches → jobs/s.
    SubmitBulk,
    /// Pre-submitted no-op jobs, one worker of concurrency N → jobs/s.
    WorkerConcurrent,
    /// Producers and a worker at once → jobs/s and submit-to-start latency.
    EndToEnd,
    /// End to end with the least Redis work a job with a record needs (plain commands, no
    /// functions: see `ceiling`) → the jobs/s every scenario is held against.
    Ceiling,
    /// Jobs offered at a fixed rate → submit-to-start and submit-to-result latency.
    Latency,
    /// The ceiling's work offered at the latency scenario's rate → its Redis CPU per job there.
    CeilingLatency,
    /// A worker process holding running jobs is killed with SIGKILL → seconds until all of
    /// them run elsewhere (hero only: BullMQ's stalled-job check is a different mechanism).
    Recovery,
    /// Redis memory per waiting job, and after drain and retention.
    Memory,
}

impl Scenario {
    pub const ALL: [Scenario; 8] = [
        Scenario::SubmitBulk,
        Scenario::WorkerConcurrent,
        Scenario::EndToEnd,
        Scenario::Ceiling,
        Scenario::Latency,
        Scenario::CeilingLatency,
        Scenario::Recovery,
        Scenario::Memory,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::SubmitBulk => "submit-bulk",
            Scenario::WorkerConcurrent => "worker-concurrent",
            Scenario::EndToEnd => "end-to-end",
            Scenario::Ceiling => "ceiling",
            Scenario::Latency => "latency",
            Scenario::CeilingLatency => "ceiling-latency",
            Scenario::Recovery => "recovery",
            Scenario::Memory => "memory",
        }
    }

    fn has_peer(self) -> bool {
        !matches!(
            self,
            Scenario::Recovery | Scenario::Ceiling | Scenario::CeilingLatency
        )
    }

    /// The ceiling scenario this one's figures are held against, if any.
    pub fn ceiling(self) -> Option<Scenario> {
        match self {
            Scenario::SubmitBulk | Scenario::WorkerConcurrent | Scenario::EndToEnd => {
                Some(Scenario::Ceiling)
            }
            Scenario::Latency => Some(Scenario::CeilingLatency),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PeerKind {
    Bullmq,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AofMode {
    /// fsync after every write: the durable mode of SPEC §4.1.
    Always,
    Everysec,
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Jobs in submit-bulk, worker-concurrent, end-to-end and memory.
    #[arg(long, default_value_t = 100_000)]
    pub jobs: u64,
    /// Jobs per submit batch.
    #[arg(long, default_value_t = 50)]
    pub batch: usize,
    /// Producers with a batch in flight at once (submit-bulk, end-to-end).
    #[arg(long, default_value_t = 4)]
    pub producers: usize,
    /// Worker concurrency.
    #[arg(long, default_value_t = 100)]
    pub concurrency: usize,
    /// Jobs offered per second in the latency scenario.
    #[arg(long, default_value_t = 5_000)]
    pub rate: u64,
    /// Streams the bench worker serves, of which one holds work (a multiple of 3:
    /// instance, group and type level × priorities × types; 30 is one type, the default).
    #[arg(long, default_value_t = 30)]
    pub streams: usize,
    /// How long the latency scenario offers jobs.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Running jobs held by the worker the recovery scenario kills.
    #[arg(long, default_value_t = 100)]
    pub recovery_jobs: u64,
    /// Presence TTL of the workers in the recovery scenario.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub presence_ttl: Duration,
    /// Rounds; each figure is the median over them.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Run the same scenarios with this peer on the same Redis, interleaved with ours.
    #[arg(long)]
    pub peer: Option<PeerKind>,
    /// Give Redis an AOF with this fsync policy (default: no persistence).
    #[arg(long)]
    pub aof: Option<AofMode>,
    /// Only these scenarios (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<Scenario>,
    /// Do not pin Redis and the load to separate cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Where --json writes the report.
    #[arg(long, default_value = "bench-results.json")]
    pub out: PathBuf,
    /// After each scenario, print where Redis spent its time, by command (INFO commandstats;
    /// commands called from functions count on their own line too).
    #[arg(long)]
    pub commandstats: bool,
    /// The event log's cap for our runs, as a broker publishes it (0: the event log off, to
    /// measure what it costs).
    #[arg(long, default_value_t = hero_broker::config::DEFAULT_EVENTS_MAX)]
    pub events_max: u64,
    /// Write one line per job of our latency scenario to this file: the microseconds (since the
    /// epoch) it was made, its submit was answered and it started. Where a tail comes from shows
    /// there: a gap in the made column is this process not running (tick catch-up), a late
    /// answer is the submit path, a late start after a prompt answer is the worker's path
    /// (`benches/latency_tail.py` sums them up). With several rounds, the last one's.
    #[arg(long)]
    pub latency_trace: Option<PathBuf>,
    /// Scale-out instead of the scenarios: on a 3-master Redis Cluster, end to end in 1, then
    /// 2, ... up to this many namespaces at once, each on its own shard (`--jobs` each).
    #[arg(long, default_value_t = 0)]
    pub namespaces: usize,
    /// Directory of the peer (its package.json and script).
    #[arg(long, env = "HERO_BENCH_PEER_DIR", default_value = "benches/peer")]
    pub peer_dir: PathBuf,
}

/// The cores Redis and the load run on, when the machine has two or more and taskset exists.
#[derive(Clone, Copy, Debug)]
pub struct Pinning {
    pub redis: usize,
    pub load: usize,
}

fn pinning(args: &BenchArgs) -> Option<Pinning> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if args.no_pin || cores < 2 || !on_path("taskset") {
        return None;
    }
    Some(Pinning { redis: 0, load: 1 })
}

/// Moves every thread of this process to `core` (threads made later inherit it).
fn pin_self(core: usize) -> Result<()> {
    let status = std::process::Command::new("taskset")
        .args([
            "-a",
            "-p",
            "-c",
            &core.to_string(),
            &std::process::id().to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .context("running taskset")?;
    if !status.success() {
        bail!("taskset could not pin the benchmark to core {core}");
    }
    Ok(())
}

/// Reads what the scenarios need from the server itself.
#[derive(Clone)]
pub(crate) struct Probe {
    conn: redis::aio::MultiplexedConnection,
}

impl Probe {
    async fn connect(url: &str) -> Result<Probe> {
        let client = redis::Client::open(url)?;
        Ok(Probe {
            conn: client.get_multiplexed_async_connection().await?,
        })
    }

    async fn info(&self, section: &str) -> Result<String> {
        Ok(redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn.clone())
            .await?)
    }

    async fn info_field(&self, section: &str, field: &str) -> Result<f64> {
        info_value(&self.info(section).await?, field)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("INFO {section} has no {field}"))
    }

    /// Seconds of CPU the server has used, user and system.
    pub async fn cpu_secs(&self) -> Result<f64> {
        Ok(self.info_field("cpu", "used_cpu_user").await?
            + self.info_field("cpu", "used_cpu_sys").await?)
    }

    pub async fn used_memory(&self) -> Result<f64> {
        self.info_field("memory", "used_memory").await
    }

    pub async fn flushall(&self) -> Result<()> {
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    pub async fn reset_stats(&self) -> Result<()> {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The commands Redis spent most time in since the last reset: (name, calls, µs).
    pub async fn commandstats(&self) -> Result<Vec<(String, u64, u64)>> {
        let text = self.info("commandstats").await?;
        let mut rows: Vec<(String, u64, u64)> = text
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |f: &str| {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))
                        .and_then(|v| v.parse::<u64>().ok())
                };
                Some((name.to_string(), field("calls")?, field("usec")?))
            })
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.2));
        Ok(rows)
    }

    async fn version(&self) -> Result<String> {
        let text = self.info("server").await?;
        Ok(info_value(&text, "redis_version")
            .unwrap_or("?")
            .to_string())
    }
}

/// The value of `field` in INFO's `field:value` lines.
fn info_value<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Runs the benchmark; prints progress to stderr and the table to stdout. Exit code 0.
pub async fn run(args: BenchArgs, json: bool) -> Result<i32> {
    if args.jobs == 0 || args.batch == 0 || args.producers == 0 || args.concurrency == 0 {
        bail!("--jobs, --batch, --producers and --concurrency must be at least 1");
    }
    if args.rounds == 0 || args.rate == 0 {
        bail!("--rounds and --rate must be at least 1");
    }
    ours::streams_shape(args.streams)?;
    let scenarios: Vec<Scenario> = if args.only.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        let mut s = args.only.clone();
        s.sort();
        s.dedup();
        s
    };
    let pin = pinning(&args);
    let peer = match args.peer {
        Some(PeerKind::Bullmq) => Some(peer::Peer::prepare(&args.peer_dir, pin).await?),
        None => None,
    };
    let dir = std::env::temp_dir().join(format!("hero-bench-{}", std::process::id()));
    let redis = LocalRedis::spawn(local_redis::Options {
        dir: dir.clone(),
        aof: args.aof.map(|a| match a {
            AofMode::Always => "always",
            AofMode::Everysec => "everysec",
        }),
        core: pin.map(|p| p.redis),
    })
    .await?;
    if let Some(p) = pin {
        pin_self(p.load)?;
    }
    let probe = Probe::connect(&redis.url).await?;
    let version = probe.version().await?;
    eprintln!(
        "hero-bench: redis {version} at {} ({}), {}; {} round(s), {} jobs{}",
        redis.url,
        match args.aof {
            Some(AofMode::Always) => "AOF fsync always",
            Some(AofMode::Everysec) => "AOF fsync everysec",
            None => "no persistence",
        },
        match pin {
            Some(p) => format!("redis on core {}, load on core {}", p.redis, p.load),
            None => "not pinned".to_string(),
        },
        args.rounds,
        args.jobs,
        if peer.is_some() { ", peer bullmq" } else { "" },
    );
    let ours = ours::Ours::new(&redis.url, &args).await?;
    let ceiling = crate::ceiling::Ceiling::new(&redis.url, &args)?;
    let mut report = Report::new(&args, &version, pin, args.peer.is_some());
    let result = async {
        for round in 1..=args.rounds {
            for &scenario in &scenarios {
                eprintln!("[round {round}/{}] {} ours", args.rounds, scenario.name());
                probe.flushall().await?;
                if args.commandstats {
                    probe.reset_stats().await?;
                }
                let figures = match scenario {
                    Scenario::Ceiling | Scenario::CeilingLatency => ceiling
                        .run(&probe, scenario == Scenario::CeilingLatency)
                        .await
                        .with_context(|| format!("{} scenario", scenario.name()))?,
                    _ => ours
                        .run(scenario, &probe)
                        .await
                        .with_context(|| format!("hero {} scenario", scenario.name()))?,
                };
                eprintln!("    {}", figures.summary());
                if args.commandstats {
                    for (name, calls, usec) in probe.commandstats().await?.into_iter().take(12) {
                        eprintln!(
                            "      {name:<16} {calls:>9} calls {usec:>10} µs {:>7.2} µs/call",
                            usec as f64 / calls.max(1) as f64
                        );
                    }
                }
                report.add(scenario, Side::Ours, figures);
                if let (Some(peer), true) = (&peer, scenario.has_peer()) {
                    eprintln!("[round {round}/{}] {} bullmq", args.rounds, scenario.name());
                    probe.flushall().await?;
                    let figures: Figures = peer
                        .run(scenario, &redis.url, &args)
                        .await
                        .with_context(|| format!("bullmq {} scenario", scenario.name()))?;
                    eprintln!("    {}", figures.summary());
                    report.add(scenario, Side::Peer, figures);
                }
            }
        }
        anyhow::Ok(())
    }
    .await;
    redis.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    print!("{}", report.table());
    if json {
        std::fs::write(&args.out, serde_json::to_string_pretty(&report.json())?)
            .with_context(|| format!("writing {}", args.out.display()))?;
        eprintln!("wrote {}", args.out.display());
    }
    Ok(0)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Ours,
    Peer,
}
