//! What a benchmark run is asked to do: the scenarios, the command line's knobs, which side of
//! the comparison a figure belongs to and where the load is pinned. Every other module of the
//! benchmark reads these; this one reads none of them, so the arrows point one way.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// The scenarios, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Scenario {
    /// Jobs submitted in batches → jobs/s.
    SubmitBulk,
    /// Pre-submitted no-op jobs, one worker of concurrency N → jobs/s.
    WorkerConcurrent,
    /// Producers and a worker at once → jobs/s and submit-to-start latency.
    EndToEnd,
    /// End to end with the features a production job carries: every job with retries, a
    /// uniqueness key, two tags and a small payload (BullMQ: attempts, a jobId, the payload).
    EndToEndFeatures,
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
    /// Jobs submitted one a call at 1,000/s, each waited on at once with `wait` (no reply list:
    /// the waits' shared follower of the event log) → submit-then-wait latency.
    Wait,
    /// End to end with 10 subscribers to the queue's events (`Client::events`) → the rate at
    /// which every subscriber has seen every job's end.
    Events,
    /// One queue spread over K shards of a local cluster, each held to `--shard-cpu`, for each
    /// K of `--shards` → jobs/s, Redis and client CPU per job (run alone: `--only sharded`).
    Sharded,
    /// One key's backlog of 50,000 jobs, then 20 keys' 100 each, fair share on and off → jobs/s,
    /// the time until the small keys are done, Jain's index (run alone: `--only fair`).
    Fair,
}

impl Scenario {
    pub const ALL: [Scenario; 11] = [
        Scenario::SubmitBulk,
        Scenario::WorkerConcurrent,
        Scenario::EndToEnd,
        Scenario::EndToEndFeatures,
        Scenario::Ceiling,
        Scenario::Latency,
        Scenario::CeilingLatency,
        Scenario::Recovery,
        Scenario::Memory,
        Scenario::Wait,
        Scenario::Events,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::SubmitBulk => "submit-bulk",
            Scenario::WorkerConcurrent => "worker-concurrent",
            Scenario::EndToEnd => "end-to-end",
            Scenario::EndToEndFeatures => "end-to-end-features",
            Scenario::Ceiling => "ceiling",
            Scenario::Latency => "latency",
            Scenario::CeilingLatency => "ceiling-latency",
            Scenario::Recovery => "recovery",
            Scenario::Memory => "memory",
            Scenario::Wait => "wait",
            Scenario::Events => "events",
            Scenario::Sharded => "sharded",
            Scenario::Fair => "fair",
        }
    }

    /// Whether `peer` runs this scenario too.
    pub fn has_peer(self, peer: PeerKind) -> bool {
        match self {
            Scenario::Recovery
            | Scenario::Ceiling
            | Scenario::CeilingLatency
            | Scenario::Wait
            | Scenario::Events => false,
            // the features scenario is held against BullMQ, whose options match it one for one
            Scenario::EndToEndFeatures => peer == PeerKind::Bullmq,
            _ => true,
        }
    }

    /// The ceiling scenario this one's figures are held against, if any.
    pub fn ceiling(self) -> Option<Scenario> {
        match self {
            Scenario::SubmitBulk
            | Scenario::WorkerConcurrent
            | Scenario::EndToEnd
            | Scenario::EndToEndFeatures => Some(Scenario::Ceiling),
            Scenario::Latency => Some(Scenario::CeilingLatency),
            _ => None,
        }
    }
}

/// The job queues measured beside hero on the same Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum PeerKind {
    /// BullMQ 6.7 under Node.js (`benches/peer/bullmq.mjs`).
    Bullmq,
    /// apalis-redis 1.0 with its defaults (`benches/apalis`).
    Apalis,
    /// apalis-redis 1.0 with `Config::lock_tasks(false)`: no per-task lease.
    ApalisNolock,
}

impl PeerKind {
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::Bullmq => "bullmq",
            PeerKind::Apalis => "apalis",
            PeerKind::ApalisNolock => "apalis-nolock",
        }
    }

    /// The peer and its version, as the report's settings name it.
    pub fn label(self) -> &'static str {
        match self {
            PeerKind::Bullmq => "bullmq 6.7.0",
            PeerKind::Apalis => "apalis-redis 1.0.0 (defaults)",
            PeerKind::ApalisNolock => "apalis-redis 1.0.0 (lock_tasks(false))",
        }
    }
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
    /// Run the same scenarios with these peers on the same Redis, interleaved with ours
    /// (comma-separated: bullmq,apalis,apalis-nolock).
    #[arg(long, value_delimiter = ',')]
    pub peer: Vec<PeerKind>,
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
    /// The shard counts of `--only sharded`, one round each (a cluster of that many masters).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub shards: Vec<u16>,
    /// The CPU share each shard's redis-server is held to in `--only sharded` (% of a core,
    /// through a cgroup): low enough that the shards, not the load generator, set the pace.
    #[arg(long, default_value_t = 10)]
    pub shard_cpu: u32,
    /// Directory of the BullMQ peer (its package.json and script).
    #[arg(long, env = "HERO_BENCH_PEER_DIR", default_value = "benches/peer")]
    pub peer_dir: PathBuf,
    /// The apalis peer's program (built by benches/run from benches/apalis); default: the
    /// `hero-bench-apalis` beside this binary.
    #[arg(long, env = "HERO_BENCH_APALIS")]
    pub apalis_bin: Option<PathBuf>,
}

/// The cores Redis and the load run on, when the machine has two or more and taskset exists.
#[derive(Clone, Copy, Debug)]
pub struct Pinning {
    pub redis: usize,
    pub load: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Ours,
    Peer(PeerKind),
}
