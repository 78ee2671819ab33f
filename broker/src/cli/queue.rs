//! `hero pause`, `hero resume` and `hero queue set|show|clear`: the operator's controls of a
//! queue as a whole, over `hero_protocol::policy` (`hero queue clean|drain|obliterate` are
//! `cleanup`'s).

use anyhow::Result;

use super::context::{connect, resolve_url};
use super::Global;

pub(super) async fn pause(g: &Global, queue: &str, key: Option<&str>, on: bool) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let name = hero_protocol::policy::queue_name(queue)?;
    if let Some(key) = key {
        let admin = hero_admin::Admin::from(&client);
        let n = if on {
            admin.pause_key(&name, key).await?
        } else {
            admin.resume_key(&name, key).await?
        };
        let word = if on { "paused" } else { "resumed" };
        if g.json {
            println!(
                "{}",
                serde_json::json!({"queue": name, "key": key, "paused": on, "streams": n})
            );
        } else {
            println!("{name}: key {key:?} {word} (it has jobs in {n} work streams)");
        }
        return Ok(0);
    }
    let moved = if on {
        hero_admin::Admin::from(&client).pause(&name).await?
    } else {
        hero_admin::Admin::from(&client).resume(&name).await?
    };
    let still = hero_admin::Inspector::from(&client).paused().await?;
    if g.json {
        println!(
            "{}",
            serde_json::json!({"queue": name, "paused": on, "streams": moved, "paused_queues": still})
        );
    } else {
        let word = if on { "paused" } else { "resumed" };
        println!("{name}: {word} ({moved} work streams now)");
        if !on {
            if let Some(other) = still
                .iter()
                .find(|p| name.starts_with(p.as_str()) || p.starts_with(name.as_str()))
            {
                println!("note: {other} is still paused and covers part of it");
            }
        }
    }
    Ok(0)
}

#[derive(clap::Subcommand, Debug)]
pub enum QueueCommand {
    /// Set a queue's policy (fields not given keep their value); workers and brokers follow
    /// within seconds.
    Set(SetArgs),
    /// Show one queue's policy, or every queue's.
    Show {
        /// <type> or <type>/<group>; every queue with a policy when absent.
        queue: Option<String>,
    },
    /// Remove a queue's policy: its jobs get the defaults again.
    Clear {
        /// <type> or <type>/<group>, as it was set.
        queue: String,
    },
    #[command(flatten)]
    Cleanup(super::cleanup::CleanupCommand),
}

#[derive(clap::Args, Debug)]
pub struct SetArgs {
    /// <type> or <type>/<group> (a group's policy overrides its type's, field by field).
    pub queue: String,
    /// Time limit of a job that names none (e.g. 30s, 5m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<std::time::Duration>,
    /// Retry budget: a failing job gets at least this many retries.
    #[arg(long)]
    pub retries: Option<u32>,
    /// Back-off of retries: fixed:<delay> or exponential:<base>[:<cap>], optionally
    /// ,jitter=<0..1> (default jitter 0.2), e.g. exponential:1s:10m.
    #[arg(long, value_parser = parse_backoff)]
    pub backoff: Option<hero_protocol::policy::Backoff>,
    /// Lease: how long a delivery may go unrenewed before it is handed out again.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub lease: Option<std::time::Duration>,
    /// Keep the queue's ended jobs this long (when shorter than the broker's retention).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub retention: Option<std::time::Duration>,
    /// At most this many of the queue's jobs run at once, across every worker.
    #[arg(long)]
    pub concurrency: Option<u32>,
    /// At most this many of the queue's jobs start in a window, across every worker:
    /// <max>/<window>, e.g. 100/s, 10/1m, 5/500ms.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<hero_protocol::policy::Rate>,
    /// At most this many jobs sharing a --limit-key (one customer, one account) start in a
    /// window; the rest wait: <max>/<window>, e.g. 10/s.
    #[arg(long, value_parser = parse_rate)]
    pub key_rate: Option<hero_protocol::policy::Rate>,
    /// Priority aging: a job that has waited this long is served as if one priority level
    /// higher, one more level per further period (e.g. 30s), so no level starves.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub aging: Option<std::time::Duration>,
    /// Fair share: within each priority level, serve the queue's jobs by their --limit-key (the
    /// customer) in turns, not first in, first out; jobs without a key are one key of their own.
    #[arg(long)]
    pub fair: bool,
    /// Turns per round of one limit key under --fair (repeatable): <key>=<n>, e.g. gold=3.
    #[arg(long = "fair-weight", value_name = "KEY=N", value_parser = parse_weight)]
    pub fair_weights: Vec<(String, u32)>,
    /// At most this many running jobs of one limit key across every worker (with --fair).
    #[arg(long = "key-concurrency", value_name = "N")]
    pub key_concurrency: Option<u32>,
}

fn parse_weight(s: &str) -> std::result::Result<(String, u32), String> {
    let (k, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: give <limit key>=<turns>, e.g. gold=3"))?;
    let n: u32 = n
        .trim()
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("{s:?}: the turns are a whole number of at least 1"))?;
    if k.trim().is_empty() || k.contains(char::is_whitespace) {
        return Err(format!("{s:?}: name the limit key before the ="));
    }
    Ok((k.trim().to_string(), n))
}

fn parse_rate(s: &str) -> std::result::Result<hero_protocol::policy::Rate, String> {
    hero_protocol::policy::Rate::parse(s).map_err(|e| e.to_string())
}

fn parse_backoff(s: &str) -> std::result::Result<hero_protocol::policy::Backoff, String> {
    hero_protocol::policy::Backoff::parse(s).map_err(|e| e.to_string())
}

pub(super) async fn queue(g: &Global, cmd: &QueueCommand) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    if let QueueCommand::Cleanup(c) = cmd {
        return super::cleanup::run(g, &client, c).await;
    }
    let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_millis() as u64);
    let (name, policy) = match cmd {
        QueueCommand::Set(a) => {
            let set = hero_protocol::policy::Policy {
                timeout_ms: ms(a.timeout),
                retries: a.retries,
                backoff: a.backoff,
                lease_ms: ms(a.lease),
                retention_ms: ms(a.retention),
                concurrency: a.concurrency,
                rate: a.rate,
                key_rate: a.key_rate,
                aging_ms: ms(a.aging),
                fair: a.fair.then_some(true),
                fair_weights: (!a.fair_weights.is_empty())
                    .then(|| a.fair_weights.iter().cloned().collect()),
                key_concurrency: a.key_concurrency,
            };
            if set.is_empty() {
                anyhow::bail!("nothing to set: give at least one of --timeout, --retries, --backoff, --lease, --retention, --concurrency, --rate, --key-rate, --aging, --fair, --fair-weight, --key-concurrency");
            }
            let name = hero_protocol::policy::queue_name(&a.queue)?;
            let now = hero_admin::Admin::from(&client)
                .set_policy(&name, &set)
                .await?;
            (Some(name), Some(now))
        }
        QueueCommand::Clear { queue } => {
            let name = hero_protocol::policy::queue_name(queue)?;
            let had = hero_admin::Admin::from(&client).clear_policy(&name).await?;
            if g.json {
                println!("{}", serde_json::json!({"queue": name, "cleared": had}));
            } else if had {
                println!("{name}: policy cleared");
            } else {
                println!("{name}: had no policy");
            }
            return Ok(0);
        }
        QueueCommand::Show { queue: Some(q) } => {
            let name = hero_protocol::policy::queue_name(q)?;
            let p = hero_admin::Admin::from(&client).policy(&name).await?;
            (Some(name), Some(p))
        }
        QueueCommand::Show { queue: None } => (None, None),
        // answered by cleanup::run above
        QueueCommand::Cleanup(_) => return Ok(0),
    };
    let shown: Vec<(String, hero_protocol::policy::Policy)> = match (name, policy) {
        (Some(n), Some(p)) => vec![(n, p)],
        _ => {
            let mut all: Vec<_> = hero_admin::Admin::from(&client)
                .policies()
                .await?
                .iter()
                .map(|(q, p)| (q.clone(), p.clone()))
                .collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all
        }
    };
    if g.json {
        let list: Vec<_> = shown
            .iter()
            .map(|(q, p)| serde_json::json!({"queue": q, "policy": p}))
            .collect();
        println!("{}", serde_json::json!({ "policies": list }));
        return Ok(0);
    }
    if shown.is_empty() {
        println!("no queue has a policy: set one with hero queue set <queue> --retries 3 ...");
    }
    let d = |v: Option<u64>| {
        v.map_or_else(
            || "-".to_string(),
            |ms| humantime::format_duration(std::time::Duration::from_millis(ms)).to_string(),
        )
    };
    for (q, p) in shown {
        let backoff = p.backoff.map_or_else(
            || "-".to_string(),
            |b| {
                format!(
                    "{:?} {} cap {} jitter {}",
                    b.kind,
                    d(Some(b.base_ms)),
                    d(Some(b.cap_ms)),
                    b.jitter
                )
                .to_lowercase()
            },
        );
        let rate = |r: Option<hero_protocol::policy::Rate>| {
            r.map_or_else(
                || "-".to_string(),
                |r| format!("{}/{}", r.max, d(Some(r.per_ms))),
            )
        };
        println!(
            "{q}: timeout {}, retries {}, backoff {backoff}, lease {}, retention {}, concurrency {}, rate {}, key rate {}, aging {}, fair {}, key concurrency {}",
            d(p.timeout_ms),
            p.retries.map_or_else(|| "-".to_string(), |r| r.to_string()),
            d(p.lease_ms),
            d(p.retention_ms),
            p.concurrency
                .map_or_else(|| "-".to_string(), |c| c.to_string()),
            rate(p.rate),
            rate(p.key_rate),
            d(p.aging_ms),
            match (p.fair, &p.fair_weights) {
                (Some(true), Some(w)) => format!(
                    "on ({})",
                    w.iter()
                        .map(|(k, n)| format!("{k}={n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                (Some(true), None) => "on".to_string(),
                _ => "-".to_string(),
            },
            p.key_concurrency
                .map_or_else(|| "-".to_string(), |n| n.to_string()),
        );
    }
    Ok(0)
}
