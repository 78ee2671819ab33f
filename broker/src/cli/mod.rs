//! The `hero` command line (SPEC §1): the clap definitions of every command and the dispatch
//! to its body, each in a file of its own over the client, worker and broker libraries.
//!
//! - `context`: what every command needs (the Redis URL, a client, the stop signal).
//! - `up`, `broker`, `worker`: the long-running commands; `submit`, `run`, `status`, `stop`,
//!   `jobs`: the producer's and the operator's.

mod actors;
mod audit;
mod batch;
mod broker;
mod cleanup;
mod config_show;
mod context;
mod cron;
mod dead;
mod events;
mod examples;
pub mod file;
mod job_args;
mod jobs;
mod queue;
mod queues;
mod requeue;
mod run;
mod shards;
mod status;
mod stop;
mod submit;
mod table;
mod up;
mod worker;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
pub use job_args::{JobArgs, RunArgs, SubmitArgs, TargetArgs};

/// `hero --version`: the release and the protocol version it speaks (CHANGELOG.md lists both).
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (protocol {})",
        env!("CARGO_PKG_VERSION"),
        hero_protocol::function::LIBRARY_VERSION
    )
});

#[derive(Parser, Debug)]
#[command(
    name = "hero",
    version = VERSION.as_str(),
    about = "hero-broker: a job broker on Redis Streams"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The flags every command takes: where Redis is and how to reach it, the namespace, output.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Redis URL: redis://[user:pass@]host:port[/db] (rediss:// for TLS), the master a set of
    /// Sentinels names (redis+sentinel://host:port,host:port/<master name>[/db]), or a cluster's
    /// seeds (redis+cluster://host:port,host:port). Default: the Redis `hero up` started from
    /// this directory, else redis://127.0.0.1:6379.
    // hide_env_values: clap would print the variable's value, password and all, in --help
    #[arg(long, global = true, env = "HERO_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// Redis Cluster: the URL's hosts are seeds and the namespace is a hash tag ({hero}:…), so
    /// it lives on one shard (implied by redis+cluster://).
    #[arg(long, global = true, env = "HERO_CLUSTER")]
    pub cluster: bool,
    /// Key namespace (the first segment of every key).
    #[arg(long, global = true, env = "HERO_NAMESPACE", default_value = "hero")]
    pub namespace: String,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub json: bool,
    /// A TOML configuration file: global flags at the top, a table per command ([broker],
    /// [worker], ...); flags and HERO_* variables override it (docs/configuration.md).
    #[arg(long, global = true, env = "HERO_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// For a rediss:// URL: the CA (PEM) that signed the server's certificate, instead of the
    /// system's roots. The certificate is always verified.
    #[arg(long, global = true, env = "HERO_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// For a rediss:// URL: a client certificate (PEM), when the server asks for one.
    #[arg(
        long,
        global = true,
        env = "HERO_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(
        long,
        global = true,
        env = "HERO_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,
    /// Replicated acknowledgements: a call that writes (a submit, a completion, a broker's move)
    /// succeeds only once this many replicas hold it (WAIT), else it fails loudly. 0: off.
    #[arg(long, global = true, env = "HERO_MIN_REPLICAS", default_value_t = 0)]
    pub min_replicas: u32,
    /// How long a write waits for --min-replicas replicas (ms) before it fails.
    #[arg(
        long,
        global = true,
        env = "HERO_REPLICA_TIMEOUT_MS",
        default_value_t = 1000
    )]
    pub replica_timeout_ms: u64,
    /// Connections kept for blocking waits (XREAD BLOCK, BLPOP) per process and namespace.
    #[arg(long, global = true, env = "HERO_POOL_SIZE", default_value_t = hero_protocol::conn::DEFAULT_POOL_SIZE)]
    pub pool_size: usize,
    /// With --min-replicas: wait until the write is on disk here and on the replicas
    /// (WAITAOF, Redis 7.2+), not only in their memory.
    #[arg(long, global = true, env = "HERO_REPLICA_FSYNC")]
    pub replica_fsync: bool,
    /// Export trace spans over OTLP/HTTP to this collector (e.g. http://127.0.0.1:4318); off
    /// when unset.
    // a collector's URL may carry credentials: --help must not print them
    #[arg(
        long,
        global = true,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        value_name = "URL",
        hide_env_values = true
    )]
    pub otlp: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start everything: Redis (a local one when none is configured), the broker and demo
    /// Rhai workers; stops them all on ctrl-c.
    #[command(after_long_help = examples::UP)]
    Up(UpArgs),
    /// Run the broker daemon: recovery, promotion, retention.
    #[command(after_long_help = examples::BROKER)]
    Broker(BrokerArgs),
    /// Run the built-in Rhai worker.
    #[command(after_long_help = examples::WORKER)]
    Worker(WorkerArgs),
    /// Submit a job and print its id.
    #[command(after_long_help = examples::SUBMIT)]
    Submit(SubmitArgs),
    /// Submit a job, wait for it, print its output (exit 1 when it ends in error).
    #[command(after_long_help = examples::RUN)]
    Run(RunArgs),
    /// Print a job's status (with --json, its whole record; with --history, its events).
    #[command(after_long_help = examples::STATUS)]
    Status(StatusArgs),
    /// Stop a job: a queued one never starts, a running one is interrupted.
    Stop {
        /// The job's id.
        id: String,
    },
    /// List jobs by status or by queue, a page at a time.
    #[command(after_long_help = examples::JOBS)]
    Jobs(JobsArgs),
    /// Print the latest events of the event log, or follow it live.
    #[command(after_long_help = examples::EVENTS)]
    Events(EventsArgs),
    /// Every queue: waiting, delayed, running, failed, dead, done per minute, wait and run
    /// times, the oldest waiting job's age (and a fair queue's keys with work).
    Queues {
        /// A fair queue's limit keys instead: how many have jobs waiting, the --top with the
        /// most, and the paused ones (<type>[/<group>[/<instance>]]).
        #[arg(long, value_name = "QUEUE")]
        keys: Option<String>,
        /// How many keys --keys lists.
        #[arg(long, default_value_t = 10, requires = "keys")]
        top: usize,
    },
    /// Live workers from their presence, and gone ones that still hold jobs.
    Actors,
    /// Move a job to a queue (its own by default), wherever it is: queued, running (its lease is
    /// revoked), delayed, or ended (it starts over with a fresh attempt budget).
    Requeue(RequeueArgs),
    /// Run a failed job again, in its own queue, with a fresh retry budget (BullMQ's
    /// job.retry()).
    Retry {
        /// The job's id.
        id: String,
    },
    /// Queue a delayed job now (a delayed submit, or a retry waiting out its back-off).
    Promote {
        /// The job's id.
        id: String,
    },
    /// Delete a job: a queued or delayed one is stopped first; a running one is refused.
    Remove {
        /// The job's id.
        id: String,
    },
    /// A parent's prerequisites and what each gave: status and output or error.
    Children {
        /// The parent job's id.
        id: String,
    },
    /// Mark a job tracked (see them all with `hero jobs --tracked`); --off unmarks it.
    Track {
        /// The job's id.
        id: String,
        /// Stop tracking it.
        #[arg(long)]
        off: bool,
    },
    /// The recovery audit: every pending entry classified, and the cross-checks; exit 1 when an
    /// inconsistency is found (--fix repairs each, atomically per job).
    Audit {
        /// Repair every inconsistency found, then audit again.
        #[arg(long)]
        fix: bool,
    },
    /// Dead letters: list, show, retry (atomically back into their queue), purge.
    #[command(subcommand, after_long_help = examples::DEAD)]
    Dead(DeadCommand),
    /// Recurring jobs: add (cron expression or `every 30s`), list, remove, pause, resume.
    #[command(subcommand, after_long_help = examples::CRON)]
    Cron(cron::CronCommand),
    /// The merged configuration (flags, HERO_* variables, --config file, defaults) of every
    /// command, secrets masked.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Pause a queue: workers take no new job from it (running ones finish), submits still
    /// queue; lasts until `hero resume`, across restarts.
    Pause {
        /// <type>[/<group>[/<instance>]]: every stream under it, at every priority.
        queue: String,
        /// Pause only this limit key of a fair queue: its jobs wait while the other keys flow.
        #[arg(long)]
        key: Option<String>,
    },
    /// A queue's policy: default timeout, retry budget, back-off, lease, retention, and a
    /// concurrency limit across all workers.
    #[command(subcommand, after_long_help = examples::QUEUE)]
    Queue(queue::QueueCommand),
    /// Resume a paused queue; its workers wake at once.
    Resume {
        /// <type>[/<group>[/<instance>]], as it was paused.
        queue: String,
        /// Resume only this limit key of a fair queue (paused with `hero pause --key`).
        #[arg(long)]
        key: Option<String>,
    },
    /// Batches: close one with its callback jobs (run once every member ended), show one,
    /// list them. Members join with `hero submit --batch NAME`.
    #[command(subcommand, after_long_help = examples::BATCH)]
    Batch(batch::BatchCommand),
    /// Shards: spread the namespace over K shards (`set K`), or show each shard's counts.
    #[command(subcommand)]
    Shards(shards::ShardsCommand),
}

impl Command {
    /// The commands that run until stopped and serve others (the broker, workers, `hero up`),
    /// as against the ones that print an answer and end.
    pub fn is_service(&self) -> bool {
        matches!(
            self,
            Command::Up(_) | Command::Broker(_) | Command::Worker(_)
        )
    }
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the settings `hero broker` and `hero worker` would run with.
    Show,
}

#[derive(Args, Debug, Clone)]
pub struct BrokerArgs {
    /// Keep finished and failed jobs this many seconds.
    #[arg(long, env = "HERO_RETENTION_SECS", default_value_t = 86_400)]
    pub retention_secs: u64,
    /// Reclaim deliveries idle this long (ms); at least the workers' lease.
    #[arg(long, env = "HERO_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// Dead-letter a job once it has been delivered this many times without finishing.
    #[arg(long, env = "HERO_MAX_ATTEMPTS", default_value_t = 5)]
    pub max_attempts: u32,
    /// Keep dead letters this many seconds (default: as long as ended jobs; a letter kept
    /// longer than its job can no longer be retried).
    #[arg(long, env = "HERO_DEAD_RETENTION_SECS", default_value_t = 86_400)]
    pub dead_retention_secs: u64,
    /// Accept Redis's maxmemory-policy POLICY (one that may evict keys, e.g. allkeys-lru):
    /// jobs are then taken under it, and may be lost without a trace when Redis evicts their
    /// records. Without it, every submit is refused while the policy is not noeviction.
    #[arg(long, env = "HERO_ACCEPT_EVICTION", value_name = "POLICY")]
    pub accept_eviction: Option<String>,
    /// The event log's cap in entries (approximate); 0 turns the event log off.
    #[arg(long, env = "HERO_EVENTS_MAX", default_value_t = crate::config::DEFAULT_EVENTS_MAX)]
    pub events_max: u64,
    /// How long a run-and-wait reply waits for its caller (seconds).
    #[arg(long, env = "HERO_REPLY_TTL_SECS", default_value_t = 3600)]
    pub reply_ttl_secs: u64,
    /// A legacy bridge mapping (repeatable):
    /// <legacy key>=<type>[/<group>[/<instance>]][,in|out|both][,dual-push][,pickup=<secs>],
    /// e.g. hero:work_queue:w1=osis,both
    #[arg(long = "bridge", value_name = "MAPPING")]
    pub bridges: Vec<crate::bridge::BridgeMapping>,
    /// Also answer hero:reply:<id> the seed-001 way (default: on when any mapping is set).
    #[arg(long, value_name = "on|off", value_parser = broker::on_off)]
    pub legacy_replies: Option<bool>,
    /// Serve the dashboard, the admin API and /metrics here (host:port), or `off`. A
    /// non-loopback address needs a token.
    #[arg(long, env = "HERO_HTTP", default_value = crate::http::DEFAULT_ADDR, value_name = "ADDR|off")]
    pub http: String,
    /// The admin token: every read (env values on request), the audit, and every change (stop,
    /// requeue, dead retry/purge, audit fix). Default on loopback: one made at start, printed
    /// in the dashboard's address (…/?token=…).
    #[arg(long, env = "HERO_HTTP_TOKEN", hide_env_values = true)]
    pub http_token: Option<String>,
    /// Read the admin token from this file instead.
    #[arg(long, env = "HERO_HTTP_TOKEN_FILE", value_name = "FILE")]
    pub http_token_file: Option<std::path::PathBuf>,
    /// A read-only token: every page and read of the API but the audit, env values redacted,
    /// no change.
    #[arg(long, env = "HERO_HTTP_READ_TOKEN", hide_env_values = true)]
    pub http_read_token: Option<String>,
    /// Serve reads without a token (a trusted loopback only; changes still need the admin
    /// token). Never the default.
    #[arg(long, env = "HERO_HTTP_OPEN")]
    pub http_open: bool,
    /// A host name (or address) browsers may reach the broker by (repeatable; the `Host` they
    /// send). Default: localhost, 127.0.0.1, [::1] and the --http address; with a wildcard
    /// address, localhost and any IP address. Others are refused (421): a defence against DNS
    /// rebinding.
    #[arg(
        long = "http-host",
        env = "HERO_HTTP_HOST",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    pub http_hosts: Vec<String>,
    /// Browsers reach the broker through a TLS proxy: the session cookie is `__Host-` and
    /// `Secure`, and answers carry Strict-Transport-Security.
    #[arg(long, env = "HERO_HTTP_BEHIND_TLS")]
    pub http_behind_tls: bool,
    /// Connections served at once; past it the idle ones are closed first (at most the open-file
    /// limit allows).
    #[arg(long, env = "HERO_HTTP_MAX_CONNECTIONS", default_value_t = crate::http::DEFAULT_MAX_CONNECTIONS)]
    pub http_max_connections: usize,
}

#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// Script types served (comma-separated), most preferred first.
    #[arg(long, value_delimiter = ',', default_value = "rhai")]
    pub types: Vec<String>,
    /// The worker's group: it takes its group's queue (jobs pinned with --group) before its
    /// types'.
    #[arg(long, default_value = "default")]
    pub group: String,
    /// Instance name, unique in the group (default: <hostname>-<pid>).
    #[arg(long)]
    pub instance: Option<String>,
    /// Jobs run at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Lease (ms): renewed every third of it while a job runs.
    #[arg(long, env = "HERO_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// Presence TTL (ms): a worker silent this long is dead and its jobs are recovered.
    #[arg(long, env = "HERO_PRESENCE_MS", default_value_t = 15_000)]
    pub presence_ms: u64,
    /// On shutdown, wait this long (ms) for running jobs before handing them back.
    #[arg(long, default_value_t = 30_000)]
    pub shutdown_ms: u64,
    /// Serve these namespaces too (comma-separated; other shards of a cluster), after
    /// --namespace in precedence: the slots are shared, and a namespace takes one only while
    /// the ones before it have no job.
    #[arg(long, value_delimiter = ',', env = "HERO_ALSO_NAMESPACES")]
    pub also_namespaces: Vec<String>,
    /// Under a backlog, fetch the next jobs in the round trip that records results, so Redis
    /// flushes both to disk at once (true/false; default: on exactly when Redis answers
    /// CONFIG GET with `appendfsync always`, which a least-privilege ACL user cannot ask).
    #[arg(long, env = "HERO_GROUP_COMMIT")]
    pub group_commit: Option<bool>,
    /// Leave the queue's upkeep (promoting delayed jobs and retries, recovering dead workers'
    /// jobs, time limits, retention) to other processes: by default every worker takes its
    /// turn, one at a time, so no `hero broker` is needed.
    #[arg(long, env = "HERO_NO_DUTIES")]
    pub no_duties: bool,
}

#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    /// Demo Rhai workers to start.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Concurrency of each demo worker.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

#[derive(Args, Debug, Clone)]
pub struct JobsArgs {
    /// Only jobs with this status (waiting, dispatched, started, finished, error).
    #[arg(long)]
    pub status: Option<String>,
    /// List one queue instead: its script type.
    #[arg(long = "queue-type")]
    pub queue_type: Option<String>,
    /// With --queue-type: the queue of this group.
    #[arg(long = "queue-group")]
    pub queue_group: Option<String>,
    /// With --queue-group: the queue of this instance.
    #[arg(long = "queue-instance")]
    pub queue_instance: Option<String>,
    /// With --queue-type: the queue at this priority level, 0 (highest) to 9 (default 5).
    #[arg(long = "queue-priority")]
    pub queue_priority: Option<u8>,
    /// Only jobs carrying this tag (a page may come back short: follow the cursor).
    #[arg(long)]
    pub tag: Option<String>,
    /// The jobs marked with `hero track`.
    #[arg(long, conflicts_with_all = ["status", "queue_type"])]
    pub tracked: bool,
    /// Jobs per page.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Continue from the cursor a previous page printed.
    #[arg(long)]
    pub cursor: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct RequeueArgs {
    /// The job's id.
    pub id: String,
    /// Move it to this script type's queue (with --group / --instance as given).
    #[arg(long = "type")]
    pub script_type: Option<String>,
    /// With --type: the queue of this group.
    #[arg(long, requires = "script_type")]
    pub group: Option<String>,
    /// With --group: the queue of this instance.
    #[arg(long, requires = "group")]
    pub instance: Option<String>,
    /// 0 (highest) to 9 (lowest).
    #[arg(long)]
    pub priority: Option<u8>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum DeadCommand {
    /// The dead letters, oldest first, a page at a time.
    List {
        /// Dead letters per page.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after this entry (the last one a page printed).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One job's dead letter, with its record.
    Show {
        /// The job's id.
        id: String,
    },
    /// Queue these jobs again (or every dead letter with --all), each leaving the dead-letter
    /// stream in the same call, with a fresh attempt budget.
    Retry {
        /// The jobs' ids.
        ids: Vec<String>,
        /// Every dead letter.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
    },
    /// Delete these dead letters (or all) and their jobs.
    Purge {
        /// The jobs' ids.
        ids: Vec<String>,
        /// Every dead letter.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
    },
}

#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// The job's id.
    pub id: String,
    /// Also print the job's events, from the event log (while they are in it).
    #[arg(long)]
    pub history: bool,
    /// Keep printing the job's status, progress and new log lines as they change, until it
    /// ends (exit 0 finished, 1 error); with --json, the record as one JSON line per change.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

#[derive(Args, Debug, Clone)]
pub struct EventsArgs {
    /// How many of the latest events to print.
    #[arg(long, short = 'n', default_value_t = 20)]
    pub last: usize,
    /// Keep printing new events as they happen (until ctrl-c).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only this job's events.
    #[arg(long)]
    pub job: Option<String>,
    /// Only this queue's events: <type>[/<group>[/<instance>]], every priority level.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only the events of queues of this script type.
    #[arg(long = "type")]
    pub script_type: Option<String>,
    /// Only events of this kind (submitted, dispatched, started, finished, error, retried,
    /// recovered, dead, stopped, requeued, purged, paused, resumed, bridged_in, bridged_out,
    /// progress, logged, batch_done).
    #[arg(long)]
    pub event: Option<String>,
}

/// Runs the command; the exit code is the command's (0, or 1 where it says so).
pub async fn run(cli: Cli) -> Result<i32> {
    let g = &cli.global;
    match &cli.command {
        Command::Up(args) => up::up(g, args).await,
        Command::Broker(args) => broker::broker(g, args).await,
        Command::Worker(args) => worker::worker(g, args).await,
        Command::Submit(args) => submit::submit(g, args).await,
        Command::Run(args) => run::run(g, args).await,
        Command::Status(args) => status::status(g, args).await,
        Command::Stop { id } => stop::stop(g, id).await,
        Command::Promote { id } => stop::promote(g, id).await,
        Command::Remove { id } => stop::remove(g, id).await,
        Command::Children { id } => stop::children(g, id).await,
        Command::Jobs(args) => jobs::jobs(g, args).await,
        Command::Events(args) => events::events(g, args).await,
        Command::Queues { keys: None, .. } => queues::queues(g).await,
        Command::Queues { keys: Some(q), top } => queues::keys(g, q, *top).await,
        Command::Actors => actors::actors(g).await,
        Command::Dead(cmd) => dead::dead(g, cmd).await,
        Command::Audit { fix } => audit::audit(g, *fix).await,
        Command::Requeue(args) => requeue::requeue(g, args).await,
        Command::Retry { id } => cleanup::retry(g, id).await,
        Command::Track { id, off } => jobs::track(g, id, !*off).await,
        Command::Pause { queue: q, key } => queue::pause(g, q, key.as_deref(), true).await,
        Command::Queue(cmd) => queue::queue(g, cmd).await,
        Command::Cron(cmd) => cron::cron(g, cmd).await,
        Command::Config(ConfigCommand::Show) => config_show::show(g),
        Command::Resume { queue: q, key } => queue::pause(g, q, key.as_deref(), false).await,
        Command::Batch(cmd) => batch::batch(g, cmd).await,
        Command::Shards(cmd) => shards::shards(g, cmd).await,
    }
}

#[cfg(test)]
mod help_tests;
