//! Recurring jobs: a named schedule (a cron expression, or `every <duration>`) in an explicit
//! time zone (UTC unless told), and the job each tick submits. Specs live in the hash
//! [`Keyspace::cron`], stored through `hero_cron`, which checks them with the one cron engine
//! (`function/lib/cron_engine.lua`); the holder of the duties (any worker or broker, see
//! [`crate::duties`]) computes each next tick with that engine and fires it in the same call,
//! so each tick fires once however many processes run, by the same rules in every language. A
//! tick missed while no process ran fires once on return (`catch-up`) or not at all (`skip`).

use std::time::Duration;

use crate::conn::Redis;
use crate::error::{Error, Result};
use crate::keys::Keyspace;
use crate::new_job::NewJob;

/// What a tick found missed when a broker got to it does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Missed {
    /// Fire the missed tick once, then go on from now.
    CatchUp,
    /// Drop it, and go on from now.
    #[default]
    Skip,
}

impl Missed {
    pub fn parse(s: &str) -> Result<Missed> {
        match s {
            "catch-up" | "catchup" => Ok(Missed::CatchUp),
            "skip" => Ok(Missed::Skip),
            other => Err(Error::InvalidInput(format!(
                "missed-tick policy {other:?}: give catch-up or skip"
            ))),
        }
    }
}

/// The job a tick submits.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobTemplate {
    pub script_type: String,
    pub script: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    #[serde(default)]
    pub retries: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The payload each tick's job carries (MessagePack bytes, base64 in the stored JSON, so
    /// every language writes it the same way).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "base64_bytes"
    )]
    pub payload: Option<Vec<u8>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<crate::policy::Backoff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_failed_ms: Option<u64>,
}

/// A template's payload as base64 text in its JSON.
mod base64_bytes {
    use base64::Engine;

    // serde's `with` hands the field as it is: `&Option<_>`, not `Option<&_>`
    #[allow(clippy::ref_option)]
    pub fn serialize<S: serde::Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        let text: Option<String> = serde::Deserialize::deserialize(d)?;
        text.map(|t| {
            base64::engine::general_purpose::STANDARD
                .decode(t.as_bytes())
                .map_err(|e| serde::de::Error::custom(format!("the payload is not base64: {e}")))
        })
        .transpose()
    }
}

impl JobTemplate {
    /// A builder of the job this template describes (the CLI's submit builds from one too).
    pub fn builder(&self) -> crate::new_job::NewJobBuilder {
        let mut b = NewJob::builder(&self.script_type, &self.script).retries(self.retries);
        if let Some(g) = &self.group {
            b = b.group(g);
        }
        if let Some(i) = &self.instance {
            b = b.instance(i);
        }
        if let Some(p) = self.priority {
            b = b.priority(p);
        }
        if let Some(s) = self.timeout_secs {
            b = b.timeout(Duration::from_secs(s));
        }
        for tag in &self.tags {
            b = b.tag(tag);
        }
        if let Some(p) = &self.payload {
            b = b.payload_bytes(p.clone());
        }
        if let Some(bo) = self.backoff {
            b = b.backoff(bo);
        }
        if let Some(ms) = self.keep_ms {
            b = b.keep(Duration::from_millis(ms));
        }
        if let Some(ms) = self.keep_failed_ms {
            b = b.keep_failed(Duration::from_millis(ms));
        }
        b
    }
}

/// A recurring job.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CronJob {
    pub name: String,
    /// A cron expression (5 fields, or 6 with seconds first; `@hourly` and the like) or
    /// `every <duration>` (`every 30s`: ticks at whole multiples of it since the epoch).
    pub schedule: String,
    /// An IANA zone name (`Europe/Amsterdam`) the cron expression is read in; `UTC` by default.
    #[serde(default = "utc")]
    pub tz: String,
    #[serde(default)]
    pub missed: Missed,
    #[serde(default)]
    pub paused: bool,
    pub job: JobTemplate,
}

fn utc() -> String {
    "UTC".into()
}

impl CronJob {
    /// Checks what the producer can without Redis: its name and job. The schedule and zone are
    /// checked by the cron engine when the spec is stored ([`store`]), the one that fires it.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Error::InvalidInput(format!(
                "recurring job name {:?} is not 1-64 characters of [A-Za-z0-9_-]",
                self.name
            )));
        }
        self.job_for(0)?;
        Ok(())
    }

    /// The job of the tick at `tick_ms`: its id names the recurring job and the tick, so a
    /// tick's job is the same whoever builds it.
    pub fn job_for(&self, tick_ms: u64) -> Result<NewJob> {
        self.job
            .builder()
            .id(format!("cron-{}-{tick_ms}", self.name))
            .tag(format!("cron:{}", self.name))
            .build()
    }
}

/// A recurring job with where it stands.
#[derive(Clone, Debug)]
pub struct CronEntry {
    pub job: CronJob,
    /// The next tick (ms since the epoch), once a broker has claimed the first.
    pub next_ms: Option<u64>,
    /// Ticks fired so far.
    pub fires: u64,
    /// The last tick fired.
    pub last_ms: Option<u64>,
}

impl CronEntry {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.job.name,
            "schedule": self.job.schedule,
            "tz": self.job.tz,
            "missed": self.job.missed,
            "paused": self.job.paused,
            "job": self.job.job,
            "next_ms": self.next_ms,
            "fires": self.fires,
            "last_ms": self.last_ms,
        })
    }
}

/// Stores (adds or replaces) a recurring job's spec through `hero_cron`, which checks its
/// schedule and zone with the cron engine that fires it; answers its next tick (ms), the first
/// the duties will fire.
pub async fn store(redis: &Redis, keys: &Keyspace, job: &CronJob) -> Result<u64> {
    job.validate()?;
    let json = serde_json::to_string(job).map_err(|e| Error::protocol(e.to_string()))?;
    let v: redis::Value = redis
        .query(&crate::function::cron(keys, &job.name, &json))
        .await?;
    crate::function::CronStored::parse(&v).map(|s| s.value)
}

/// Removes a recurring job and its state; false when there was none of that name.
pub async fn remove(redis: &Redis, keys: &Keyspace, name: &str) -> Result<bool> {
    let v: redis::Value = redis.query(&crate::function::cron(keys, name, "")).await?;
    crate::function::CronStored::parse(&v).map(|s| s.value > 0)
}

/// The next `n` (1-100) ticks of `schedule` in zone `tz` after `after_ms`, by the cron engine
/// every process fires by (`hero_cron_next`); a schedule or zone it does not take is
/// [`Error::InvalidInput`] saying why.
pub async fn next_ticks(
    redis: &Redis,
    schedule: &str,
    tz: &str,
    after_ms: u64,
    n: u32,
) -> Result<Vec<u64>> {
    redis
        .query(&crate::function::cron_next(schedule, tz, after_ms, n))
        .await
}

/// Every recurring job with its state, sorted by name; a spec that does not decode (written by
/// hand) is skipped with a warning.
pub async fn list(redis: &Redis, keys: &Keyspace) -> Result<Vec<CronEntry>> {
    let specs: Vec<(String, String)> = redis.query(redis::cmd("HGETALL").arg(keys.cron())).await?;
    let state: std::collections::HashMap<String, String> = redis
        .query(redis::cmd("HGETALL").arg(keys.cron_next()))
        .await?;
    let num = |k: String| state.get(&k).and_then(|v| v.parse::<u64>().ok());
    let mut out = Vec::new();
    for (name, raw) in specs {
        match serde_json::from_str::<CronJob>(&raw) {
            Ok(job) => out.push(CronEntry {
                next_ms: num(name.clone()),
                fires: num(format!("{name}|fires")).unwrap_or(0),
                last_ms: num(format!("{name}|last")),
                job,
            }),
            Err(e) => {
                tracing::warn!(name, error = %e, "ignoring a recurring job that does not decode");
            }
        }
    }
    out.sort_by(|a, b| a.job.name.cmp(&b.job.name));
    Ok(out)
}
