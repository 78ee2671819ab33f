//! The `hero` command line (SPEC §1): parses nothing itself beyond clap's derive; each command
//! is a small function over the client, worker and broker libraries.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use hero_client::{
    Client, ClientOptions, GroupName, InstanceName, JobId, ListFilter, NewJob, Priority,
    ScriptType, Status, Target,
};
use hero_worker::Worker;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::local_redis::{self, LocalRedis};

#[derive(Parser, Debug)]
#[command(
    name = "hero",
    version,
    about = "hero-broker: a job broker on Redis Streams"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Redis URL (redis://[user:pass@]host:port[/db], rediss:// for TLS). Default: the Redis
    /// `hero up` started from this directory, else redis://127.0.0.1:6379.
    #[arg(long, global = true, env = "HERO_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Key namespace (the first segment of every key).
    #[arg(long, global = true, env = "HERO_NAMESPACE", default_value = "hero")]
    pub namespace: String,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start everything: Redis (a local one when none is configured), the broker and demo
    /// Rhai workers; stops them all on ctrl-c.
    Up(UpArgs),
    /// Run the broker daemon: recovery, promotion, retention.
    Broker(BrokerArgs),
    /// Run the built-in Rhai worker.
    Worker(WorkerArgs),
    /// Submit a job and print its id.
    Submit(SubmitArgs),
    /// Submit a job, wait for it, print its output (exit 1 when it ends in error).
    Run(RunArgs),
    /// Print a job's status (with --json, its whole record).
    Status { id: String },
    /// Stop a job: a queued one never starts, a running one is interrupted.
    Stop { id: String },
    /// List jobs by status or by queue, a page at a time.
    Jobs(JobsArgs),
    /// Benchmark hero (and a peer, with --peer bullmq) on a throwaway Redis.
    Bench(crate::bench::BenchArgs),
    /// The worker process `hero bench` kills in its recovery scenario.
    #[command(hide = true)]
    BenchWorker(crate::bench::BenchWorkerArgs),
}

impl Command {
    /// Commands that run best on one thread: the benchmark pins itself to one core, like the
    /// single-threaded peer it is compared with.
    pub fn single_threaded(&self) -> bool {
        matches!(self, Command::Bench(_) | Command::BenchWorker(_))
    }
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
    /// How long a run-and-wait reply waits for its caller (seconds).
    #[arg(long, env = "HERO_REPLY_TTL_SECS", default_value_t = 3600)]
    pub reply_ttl_secs: u64,
    /// A legacy bridge mapping (repeatable):
    /// <legacy key>=<type>[/<group>[/<instance>]][,in|out|both][,dual-push][,pickup=<secs>],
    /// e.g. hero:work_queue:w1=osis,both
    #[arg(long = "bridge", value_name = "MAPPING")]
    pub bridges: Vec<crate::bridge::BridgeMapping>,
    /// Also answer hero:reply:<id> the seed-001 way (default: on when any mapping is set).
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    pub legacy_replies: Option<bool>,
    /// TOML file with [[bridge]] mappings and legacy_replies (see docs/protocol.md).
    #[arg(long, env = "HERO_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

fn on_off(s: &str) -> std::result::Result<bool, String> {
    match s {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

impl BrokerArgs {
    fn config(&self) -> Result<BrokerConfig> {
        if self.max_attempts == 0 {
            bail!("--max-attempts must be at least 1");
        }
        if self.lease_ms < 300 {
            bail!("--lease-ms must be at least 300");
        }
        let (mut bridges, mut legacy_replies) = match &self.config {
            Some(path) => crate::bridge::load_file(path)?,
            None => (Vec::new(), None),
        };
        // flags add to the file's mappings and override its switch
        bridges.extend(self.bridges.iter().cloned());
        legacy_replies = self.legacy_replies.or(legacy_replies);
        Ok(BrokerConfig {
            retention: Duration::from_secs(self.retention_secs),
            reply_ttl: Duration::from_secs(self.reply_ttl_secs),
            lease: Duration::from_millis(self.lease_ms),
            max_attempts: self.max_attempts,
            bridges,
            legacy_replies,
            ..BrokerConfig::default()
        })
    }
}

#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// Script types served (comma-separated), most preferred first.
    #[arg(long, value_delimiter = ',', default_value = "rhai")]
    pub types: Vec<String>,
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
pub struct JobArgs {
    /// Script type to dispatch to.
    #[arg(long = "type", default_value = "rhai")]
    pub script_type: String,
    #[arg(long)]
    pub group: Option<String>,
    #[arg(long)]
    pub instance: Option<String>,
    /// 0 (highest) to 9 (lowest).
    #[arg(long)]
    pub priority: Option<u8>,
    /// Handler time limit in seconds.
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Attempts after the first when the handler fails.
    #[arg(long, default_value_t = 0)]
    pub retries: u32,
    /// Tag (repeatable).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// Choose the job id (submitting an existing id changes nothing).
    #[arg(long)]
    pub id: Option<String>,
    /// Start no earlier than this many ms from now.
    #[arg(long)]
    pub delay_ms: Option<u64>,
    /// The script; `-` reads it from standard input.
    pub script: String,
}

impl JobArgs {
    fn build(&self) -> Result<NewJob> {
        let script = if self.script == "-" {
            std::io::read_to_string(std::io::stdin())
                .context("reading the script from standard input")?
        } else {
            self.script.clone()
        };
        let mut b = NewJob::builder(&self.script_type, script).retries(self.retries);
        if let Some(g) = &self.group {
            b = b.group(g);
        }
        if let Some(i) = &self.instance {
            b = b.instance(i);
        }
        if let Some(p) = self.priority {
            b = b.priority(p);
        }
        if let Some(t) = self.timeout {
            b = b.timeout(Duration::from_secs(t));
        }
        for t in &self.tags {
            b = b.tag(t);
        }
        for kv in &self.env {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--env {kv:?} is not KEY=VALUE"))?;
            b = b.env(k, v);
        }
        if let Some(id) = &self.id {
            b = b.id(id);
        }
        if let Some(d) = self.delay_ms {
            b = b.delay(Duration::from_millis(d));
        }
        Ok(b.build()?)
    }
}

#[derive(Args, Debug, Clone)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub job: JobArgs,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// How long to wait for the result (seconds).
    #[arg(long, default_value_t = 60)]
    pub wait: u64,
}

#[derive(Args, Debug, Clone)]
pub struct JobsArgs {
    /// Only jobs with this status (waiting, dispatched, started, finished, error).
    #[arg(long)]
    pub status: Option<String>,
    /// List one queue instead: its script type.
    #[arg(long = "queue-type")]
    pub queue_type: Option<String>,
    #[arg(long = "queue-group")]
    pub queue_group: Option<String>,
    #[arg(long = "queue-instance")]
    pub queue_instance: Option<String>,
    #[arg(long = "queue-priority")]
    pub queue_priority: Option<u8>,
    /// Jobs per page.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Continue from the cursor a previous page printed.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// The URL commands use: flag or env, else the one `hero up` left in this directory.
fn resolve_url(global: &Global) -> String {
    if let Some(url) = &global.redis_url {
        return url.clone();
    }
    if let Ok(url) = std::fs::read_to_string(local_redis::url_file(Path::new("."))) {
        return url.trim().to_string();
    }
    "redis://127.0.0.1:6379".to_string()
}

async fn connect(global: &Global, url: &str) -> Result<Client> {
    let mut opts = ClientOptions::new(url);
    opts.namespace = global.namespace.clone();
    Ok(Client::with_options(opts).await?)
}

async fn signal_token() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            if let Ok(mut term) = signal(SignalKind::terminate()) {
                tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
            } else {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        t.cancel();
    });
    token
}

fn rhai_worker(client: Client, args: &WorkerArgs) -> Result<Worker> {
    let mut b = Worker::builder(client)
        .types(args.types.clone())
        .group(&args.group)
        .concurrency(args.concurrency)
        .lease(Duration::from_millis(args.lease_ms))
        .presence_ttl(Duration::from_millis(args.presence_ms))
        .shutdown_deadline(Duration::from_millis(args.shutdown_ms))
        .handler(crate::rhai_worker::handle);
    if let Some(i) = &args.instance {
        b = b.instance(i);
    }
    Ok(b.build()?)
}

pub async fn run(cli: Cli) -> Result<i32> {
    let g = &cli.global;
    match &cli.command {
        Command::Up(args) => up(g, args).await,
        Command::Broker(args) => {
            let cfg = args.config()?;
            let client = connect(g, &resolve_url(g)).await?;
            let stop = signal_token().await;
            crate::broker::run(client, cfg, stop).await?;
            Ok(0)
        }
        Command::Worker(args) => {
            let client = connect(g, &resolve_url(g)).await?;
            let worker = rhai_worker(client, args)?;
            eprintln!("worker {} serving {:?}", worker.consumer(), args.types);
            worker.run_until_signal().await?;
            Ok(0)
        }
        Command::Submit(args) => {
            let job = args.job.build()?;
            let client = connect(g, &resolve_url(g)).await?;
            let s = client.submit(&job).await?;
            if g.json {
                println!(
                    "{}",
                    serde_json::json!({"id": s.id.as_str(), "created": s.created, "status": s.status})
                );
            } else {
                println!("{}", s.id);
                if !s.created {
                    eprintln!(
                        "job {} existed already ({}); nothing changed",
                        s.id, s.status
                    );
                }
            }
            Ok(0)
        }
        Command::Run(args) => {
            let job = args.job.build()?;
            let client = connect(g, &resolve_url(g)).await?;
            let r = client.run(&job, Duration::from_secs(args.wait)).await?;
            if g.json {
                println!(
                    "{}",
                    serde_json::json!({"id": r.id.as_str(), "status": r.status.as_str(), "output": r.output, "error": r.error})
                );
            } else if r.status == Status::Finished {
                println!("{}", r.output);
            } else {
                eprintln!("job {} ended {}: {}", r.id, r.status, r.error);
            }
            Ok(if r.status == Status::Finished { 0 } else { 1 })
        }
        Command::Status { id } => {
            let id = JobId::new(id)?;
            let client = connect(g, &resolve_url(g)).await?;
            if g.json {
                let job = client.get(&id).await?;
                println!("{}", job_json(&job));
            } else {
                println!("{}", client.status(&id).await?);
            }
            Ok(0)
        }
        Command::Stop { id } => {
            let id = JobId::new(id)?;
            let client = connect(g, &resolve_url(g)).await?;
            let outcome = client.stop(&id).await?;
            let word = match outcome {
                hero_client::StopOutcome::Cancelled => "cancelled",
                hero_client::StopOutcome::Interrupted => "interrupted",
                hero_client::StopOutcome::AlreadyCompleted => "already completed",
            };
            if g.json {
                println!("{}", serde_json::json!({"id": id.as_str(), "stop": word}));
            } else {
                println!("{id}: {word}");
            }
            Ok(0)
        }
        Command::Jobs(args) => jobs(g, args).await,
        Command::Bench(args) => crate::bench::run(args.clone(), g.json).await,
        Command::BenchWorker(args) => {
            let client = connect(g, &resolve_url(g)).await?;
            crate::bench::bench_worker(client, args).await
        }
    }
}

fn job_json(job: &hero_client::Job) -> serde_json::Value {
    serde_json::json!({
        "id": job.id.as_str(),
        "status": job.status.as_str(),
        "script_type": job.script_type.as_ref().map(|t| t.as_str()),
        "group": job.group.as_ref().map(|g| g.as_str()),
        "instance": job.instance.as_ref().map(|i| i.as_str()),
        "priority": job.priority.level(),
        "attempts": job.attempts,
        "retries": job.retries,
        "timeout": job.timeout.as_secs(),
        "worker_id": job.worker_id,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "output": job.output,
        "error": job.error,
        "tags": job.tags,
    })
}

async fn jobs(g: &Global, args: &JobsArgs) -> Result<i32> {
    let filter = if let Some(t) = &args.queue_type {
        let target = Target::new(
            ScriptType::new(t)?,
            args.queue_group
                .as_deref()
                .map(GroupName::new)
                .transpose()?,
            args.queue_instance
                .as_deref()
                .map(InstanceName::new)
                .transpose()?,
        );
        let prio = args
            .queue_priority
            .map(Priority::new)
            .transpose()?
            .unwrap_or_default();
        ListFilter::Queue(target, prio)
    } else if let Some(s) = &args.status {
        ListFilter::Status(Status::parse(s).with_context(|| {
            format!("--status {s:?} is not a status: use waiting, dispatched, started, finished or error")
        })?)
    } else {
        ListFilter::All
    };
    let client = connect(g, &resolve_url(g)).await?;
    let page = client
        .list(&filter, args.cursor.as_deref(), args.limit)
        .await?;
    if g.json {
        let jobs: Vec<_> = page
            .jobs
            .iter()
            .map(|j| serde_json::json!({"id": j.id, "status": j.status, "script_type": j.script_type, "attempts": j.attempts, "updated_at": j.updated_at, "error": j.error}))
            .collect();
        println!("{}", serde_json::json!({"jobs": jobs, "next": page.next}));
    } else {
        println!(
            "{:<38} {:<10} {:<10} {:>8}  UPDATED / ERROR",
            "ID", "STATUS", "TYPE", "ATTEMPTS"
        );
        for j in &page.jobs {
            let tail = if j.error.is_empty() {
                j.updated_at.clone()
            } else {
                format!("{} {}", j.updated_at, j.error)
            };
            println!(
                "{:<38} {:<10} {:<10} {:>8}  {}",
                j.id, j.status, j.script_type, j.attempts, tail
            );
        }
        if let Some(next) = &page.next {
            println!("more: hero jobs --cursor {next}");
        }
    }
    Ok(0)
}

async fn up(g: &Global, args: &UpArgs) -> Result<i32> {
    let cfg = args.broker.config()?;
    let base = std::env::current_dir()?;
    let (url, local) = match &g.redis_url {
        Some(url) => (url.clone(), None),
        None => {
            let local = LocalRedis::start(&base).await?;
            (local.url.clone(), Some(local))
        }
    };
    let client = connect(g, &url).await?;
    let stop = signal_token().await;
    let broker = tokio::spawn(crate::broker::run(client.clone(), cfg, stop.clone()));
    let mut workers = Vec::new();
    for n in 0..args.workers {
        let wargs = WorkerArgs {
            types: vec!["rhai".into()],
            group: "default".into(),
            instance: Some(format!("up-{}-{n}", std::process::id())),
            concurrency: args.concurrency,
            lease_ms: args.broker.lease_ms,
            presence_ms: 15_000,
            shutdown_ms: 10_000,
        };
        let worker = rhai_worker(client.clone(), &wargs)?;
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            worker.run(stop.cancelled_owned()).await
        }));
    }
    let where_redis = match &local {
        Some(l) => format!("{url} (local, data in {})", l.dir.display()),
        None => url.clone(),
    };
    println!("hero is up");
    println!("  redis:     {where_redis}");
    println!("  namespace: {}", g.namespace);
    println!("  broker:    running");
    println!(
        "  workers:   {} x rhai, concurrency {}",
        args.workers, args.concurrency
    );
    println!("  try:       hero run --type rhai '40 + 2'   (from this directory, or with HERO_REDIS_URL={url})");
    println!("ready");
    stop.cancelled().await;
    eprintln!("stopping");
    for w in workers {
        match w.await {
            Ok(Err(e)) => eprintln!("worker: {e}"),
            Err(e) => eprintln!("worker task: {e}"),
            Ok(Ok(())) => {}
        }
    }
    let _ = broker.await;
    if let Some(local) = local {
        local.stop(&base).await;
    }
    Ok(0)
}
