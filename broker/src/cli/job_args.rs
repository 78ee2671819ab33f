//! The arguments that describe a job: where it goes and how it runs (`TargetArgs`, which
//! `hero submit`, `hero run`, `hero batch close` and `hero cron add` share, and the template a
//! recurring job keeps), and the rest of a submit (`JobArgs`).

use clap::Args;

/// Where a job goes and how it runs: what `hero submit`, `hero run` and `hero cron add` share.
#[derive(Args, Debug, Clone)]
pub struct TargetArgs {
    /// Script type to dispatch to.
    #[arg(long = "type", default_value = "rhai")]
    pub script_type: String,
    /// Pin the job to this group of workers (its group's queue): only workers of the group
    /// take it.
    #[arg(long)]
    pub group: Option<String>,
    /// Pin the job to one worker instance of --group (its instance's queue).
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
    /// A payload beside the script, as JSON (carried as MessagePack, read by the handler as
    /// any payload): `--payload '{"to":"a@b.c"}'`.
    #[arg(long, value_parser = parse_json)]
    pub payload: Option<serde_json::Value>,
    /// Its own back-off between failed attempts: fixed:<delay> or
    /// exponential:<base>[:<cap>], optionally ,jitter=0.2 (the longer of it and its queue
    /// policy's applies).
    #[arg(long, value_parser = parse_backoff)]
    pub backoff: Option<hero_protocol::Backoff>,
    /// Keep it this long once finished (0s: as soon as no waiting caller can miss it, 10 s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub keep: Option<std::time::Duration>,
    /// Keep it this long once it ended error.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub keep_failed: Option<std::time::Duration>,
}

fn parse_json(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not JSON ({e}); quote it, e.g. '{{\"n\": 1}}'"))
}

fn parse_backoff(s: &str) -> Result<hero_protocol::Backoff, String> {
    hero_protocol::Backoff::parse(s).map_err(|e| e.to_string())
}

impl TargetArgs {
    /// The job of `script` these settings describe, as a recurring job keeps it.
    pub fn template(&self, script: &str) -> anyhow::Result<hero_protocol::cron::JobTemplate> {
        let payload = self
            .payload
            .as_ref()
            .map(rmp_serde::to_vec_named)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--payload does not encode as MessagePack: {e}"))?;
        Ok(hero_protocol::cron::JobTemplate {
            script_type: self.script_type.clone(),
            script: script.to_string(),
            group: self.group.clone(),
            instance: self.instance.clone(),
            priority: self.priority,
            timeout_secs: self.timeout,
            retries: self.retries,
            tags: self.tags.clone(),
            payload,
            backoff: self.backoff,
            keep_ms: self.keep.map(|d| d.as_millis() as u64),
            keep_failed_ms: self.keep_failed.map(|d| d.as_millis() as u64),
        })
    }
}

#[derive(Args, Debug, Clone)]
pub struct JobArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// Choose the job id (submitting an existing id changes nothing).
    #[arg(long)]
    pub id: Option<String>,
    /// Start no earlier than this many ms from now.
    #[arg(long, conflicts_with_all = ["delay", "at"])]
    pub delay_ms: Option<u64>,
    /// Run no sooner than this from now (e.g. 30s, 5m, 1h30m).
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "at")]
    pub delay: Option<std::time::Duration>,
    /// Run no sooner than this time (RFC 3339, e.g. 2026-12-01T08:00:00Z).
    #[arg(long, value_parser = humantime::parse_rfc3339_weak)]
    pub at: Option<std::time::SystemTime>,
    /// A prerequisite (repeatable): the job waits until job <ID> finished, and fails if it
    /// fails.
    #[arg(long = "after", value_name = "ID")]
    pub after: Vec<String>,
    /// Uniqueness key: while a job holding it is queued or running, queue nothing and print
    /// that job's id.
    #[arg(long, value_name = "KEY")]
    pub unique: Option<String>,
    /// The key its queue's --key-rate counts it under (a customer, an account).
    #[arg(long, value_name = "KEY")]
    pub limit_key: Option<String>,
    /// In a sharded namespace, every job with this key goes to one shard and starts in submit
    /// order within its priority (see `hero shards`).
    #[arg(long, value_name = "KEY")]
    pub route: Option<String>,
    /// Make it a member of this batch (see `hero batch`).
    #[arg(long, value_name = "NAME")]
    pub batch: Option<String>,
    /// Hold the uniqueness key at most this many seconds (default: the broker's retention).
    #[arg(long, value_name = "SECS", requires = "unique")]
    pub unique_ttl: Option<u64>,
    /// Read the script from this file (`-`: standard input) instead of the argument; a
    /// command-line argument cannot carry a script over ~128 KiB.
    #[arg(long, value_name = "PATH", conflicts_with = "script")]
    pub file: Option<std::path::PathBuf>,
    /// The script; `-` reads it from standard input.
    #[arg(required_unless_present = "file")]
    pub script: Option<String>,
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
