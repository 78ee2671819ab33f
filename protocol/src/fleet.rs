//! The fleet: every live process of a namespace and the protocol version it speaks, so that a
//! feature an older live process would refuse or not serve is refused at submit with an error
//! that names those processes (SPEC §4.7, docs/protocol.md §8), until they are gone.
//!
//! Readers released before protocol 29 refuse a record field they do not know, and cannot be
//! fixed after the fact; so the system has to know who is running. A process of 29 or later
//! writes its entry into `<ns>:meta:fleet` (a hash: name → JSON `{role, protocol, version,
//! expires_ms}`) with its heartbeat, in the same pipeline. An older worker wrote no entry, but
//! it is in `<ns>:meta:consumers` while it lives and its presence JSON says its `version`, from
//! which its protocol follows ([`protocol_of_version`]). Older brokers register nowhere: the
//! upgrade order (brokers first) is what keeps them out of the way (docs/protocol.md §8).
//!
//! Reading the fleet costs one pipelined call (HGETALL, ZRANGEBYSCORE) and, only for an older
//! worker seen for the first time, a GET of its presence per script type: a client reads it at
//! most every [`REFRESH`], and only when a submit uses a gated feature.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::clock;
use crate::conn::Redis;
use crate::error::{Error, Result};
use crate::keys::Keyspace;
use crate::name::{ConsumerName, ScriptType};
use crate::reply;

/// How old a fleet read may be before a gated submit reads it again.
pub const REFRESH: Duration = Duration::from_secs(2);

/// This process's protocol version, as a number.
pub fn protocol() -> u32 {
    crate::function::LIBRARY_VERSION.parse().unwrap_or(0)
}

/// What a process is to the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Worker,
    Broker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Broker => "broker",
        }
    }
}

/// A feature whose record fields or keys a process older than [`Feature::since`] refuses or
/// does not serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// `unique` (protocol 21).
    Unique,
    /// `tags` (22).
    Tags,
    /// `limit_key` (26).
    LimitKey,
    /// `batch` (27).
    Batch,
    /// `progress` and `log`, written by a running job's reports (27).
    Progress,
    /// A sharded namespace (release 0.3: shards are read by the clients, not the library).
    Shards,
    /// A job's own back-off and retention, `backoff`, `keep`, `keep_failed` (30): a worker of
    /// 29 keeps the fields and runs the job, but its library applies its queue's policy only.
    JobPolicy,
    /// A failed attempt's `trace`, written by `hero_complete` for a worker of 30: a reader of 29
    /// or later keeps it; one before 29 refuses the record, so workers hold traces back.
    Trace,
    /// Fair share within a queue (30): a fair queue's jobs wait in its gate, which only a fetch
    /// of 30 or later releases; a worker before 30 would serve the queue's stream and never its
    /// gate.
    Fair,
}

impl Feature {
    pub const ALL: [Feature; 9] = [
        Feature::Unique,
        Feature::Tags,
        Feature::LimitKey,
        Feature::Batch,
        Feature::Progress,
        Feature::Shards,
        Feature::JobPolicy,
        Feature::Trace,
        Feature::Fair,
    ];

    /// Its name in the brokers' summary (`Fleet::summary`), which hero-py and Node read.
    pub fn key(self) -> &'static str {
        match self {
            Feature::Unique => "unique",
            Feature::Tags => "tags",
            Feature::LimitKey => "limit_key",
            Feature::Batch => "batch",
            Feature::Progress => "progress",
            Feature::Shards => "shards",
            Feature::JobPolicy => "job_policy",
            Feature::Trace => "trace",
            Feature::Fair => "fair",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Feature::Unique => "a uniqueness key",
            Feature::Tags => "tags",
            Feature::LimitKey => "a limit key",
            Feature::Batch => "a batch",
            Feature::Progress => "progress and log lines",
            Feature::Shards => "a sharded namespace",
            Feature::JobPolicy => "a job's own back-off or retention",
            Feature::Trace => "a failed attempt's trace",
            Feature::Fair => "fair share within a queue (--fair)",
        }
    }

    /// The first protocol whose processes serve it.
    pub fn since(self) -> u32 {
        match self {
            Feature::Unique => 21,
            Feature::Tags => 22,
            Feature::LimitKey => 26,
            Feature::Batch | Feature::Progress => 27,
            Feature::Shards => 28,
            Feature::JobPolicy => 30,
            // written by workers of 30, kept by every reader of 29 and later (they keep a field
            // they do not know); a reader before 29 refuses the record
            Feature::Trace => 29,
            Feature::Fair => 30,
        }
    }
}

/// One live process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// A worker's consumer name, a broker's id.
    pub name: String,
    pub role: Role,
    /// The protocol it speaks; `None` when neither its entry nor its version says.
    pub protocol: Option<u32>,
    /// The release it says it is (`0.3.0`, `hero-py 0.28.0`, …).
    pub version: String,
    /// Whether it follows a sharded namespace (releases from 0.3, hero-py from 0.28).
    pub shards: bool,
}

impl Member {
    /// Whether it serves `f`. A process that says nothing of its protocol is taken at its
    /// word: a foreign client of the page serves what the page says.
    pub fn serves(&self, f: Feature) -> bool {
        match (f, self.protocol) {
            (Feature::Shards, _) => self.shards,
            (_, Some(p)) => p >= f.since(),
            (_, None) => true,
        }
    }

    /// `worker default:w1:ab12 (hero-py 0.26.0, protocol 26)`.
    pub fn describe(&self) -> String {
        let protocol = self
            .protocol
            .map(|p| format!("protocol {p}"))
            .unwrap_or_else(|| "protocol unknown".into());
        let version = if self.version.is_empty() {
            String::new()
        } else {
            format!("{}, ", self.version)
        };
        format!("{} {} ({version}{protocol})", self.role.as_str(), self.name)
    }
}

/// The protocol a presence's `version` names, for processes that wrote no `protocol`: the
/// Rust crates' releases (0.1 spoke 27, 0.2 and 0.3 spoke 28), hero-py's and the Node
/// package's (`0.<protocol>.x`). From 1.1 every package shares one release number, which says
/// nothing of the protocol: every such process writes its protocol with its presence.
pub fn protocol_of_version(version: &str) -> Option<u32> {
    let v = version.trim();
    let minor = |s: &str| s.split('.').nth(1).and_then(|m| m.parse::<u32>().ok());
    let package = v
        .strip_prefix("hero-py ")
        .or_else(|| v.strip_prefix("hero-broker (npm) "));
    if let Some(rest) = package {
        return rest.starts_with("0.").then(|| minor(rest)).flatten();
    }
    match v {
        "0.1.0" => Some(27),
        "0.2.0" | "0.3.0" => Some(28),
        _ => None,
    }
}

/// Whether a process of `version` (with no fleet entry) follows a sharded namespace.
fn shards_of_version(version: &str) -> bool {
    match protocol_of_version(version) {
        Some(p) if version.starts_with("hero-py ") || version.starts_with("hero-broker (npm)") => {
            p >= 28
        }
        _ => version == "0.3.0",
    }
}

/// This process's fleet entry without its `expires_ms`, which `hero_beat` adds on Redis's
/// clock.
pub fn entry_body(role: Role, version: &str) -> String {
    serde_json::json!({
        "role": role.as_str(),
        "protocol": protocol(),
        "version": version,
        "shards": true,
    })
    .to_string()
}

/// Writes (or renews) a process's fleet entry for `ttl` with `hero_beat` (on Redis's clock,
/// allowed past maxmemory), and drops the entries that expired (a process that died without
/// removing its own): what a broker does every pass. Returns the beat's answer: Redis's time,
/// which this process's clock is corrected by ([`clock::observe`]), and its memory policy.
pub async fn register(
    redis: &Redis,
    keys: &Keyspace,
    name: &str,
    role: Role,
    version: &str,
    ttl: Duration,
) -> Result<crate::function::Beat> {
    let sent = clock::local_ms();
    let answer: redis::Value = redis
        .query(&crate::function::beat(
            keys,
            name,
            ttl,
            &entry_body(role, version),
            None,
        ))
        .await?;
    let got = clock::local_ms();
    let beat = crate::function::Beat::parse(&answer)?;
    clock::observe(beat.now_ms, sent, got);
    let mut read = redis::cmd("HGETALL");
    read.arg(keys.fleet());
    let now = beat.now_ms;
    let expired: Vec<String> = reply::pairs(redis.query::<redis::Value>(&read).await?)?
        .into_iter()
        .filter(|(_, json)| {
            serde_json::from_str::<serde_json::Value>(json)
                .map(|v| v["expires_ms"].as_u64().unwrap_or(0) < now)
                .unwrap_or(true)
        })
        .map(|(name, _)| name)
        .collect();
    if !expired.is_empty() {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(keys.fleet()).arg(&expired);
        redis.query::<redis::Value>(&cmd).await?;
    }
    Ok(beat)
}

/// Removes a process's entry (a clean exit).
pub async fn unregister(redis: &Redis, keys: &Keyspace, name: &str) -> Result<()> {
    let mut cmd = redis::cmd("HDEL");
    cmd.arg(keys.fleet()).arg(name);
    redis.query::<redis::Value>(&cmd).await?;
    Ok(())
}

/// A broker's name in the fleet: `broker:<host>:<pid>`.
pub fn broker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("broker:{}:{}", host.trim(), std::process::id())
}

/// The fleet as a process last read it, for reads at most every [`REFRESH`].
#[derive(Debug, Default)]
pub struct Cached(std::sync::Mutex<Option<(std::time::Instant, std::sync::Arc<Fleet>)>>);

impl Cached {
    /// The fleet read less than [`REFRESH`] ago, if any.
    pub fn fresh(&self) -> Option<std::sync::Arc<Fleet>> {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.as_ref()
            .filter(|(at, _)| at.elapsed() < REFRESH)
            .map(|(_, f)| f.clone())
    }

    pub fn keep(&self, f: std::sync::Arc<Fleet>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((std::time::Instant::now(), f));
    }
}

/// The live processes of a namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fleet {
    pub members: Vec<Member>,
}

impl Fleet {
    /// Reads the fleet from the namespace's home (shard 0).
    pub async fn read(redis: &Redis, keys: &Keyspace) -> Result<Fleet> {
        let mut pipe = redis::pipe();
        Fleet::ask(&mut pipe, keys);
        let mut replies = redis.pipeline(&pipe).await?.into_iter();
        let entries = replies.next().unwrap_or(Ok(redis::Value::Nil))?;
        let live = replies.next().unwrap_or(Ok(redis::Value::Nil))?;
        Fleet::answer(redis, keys, entries, &live).await
    }

    /// Adds the fleet's two reads to a pipeline: their replies go to [`Fleet::answer`], in
    /// order.
    fn ask(pipe: &mut redis::Pipeline, keys: &Keyspace) {
        pipe.cmd("HGETALL").arg(keys.fleet());
        pipe.cmd("ZRANGEBYSCORE")
            .arg(keys.consumers())
            .arg(clock::now_ms())
            .arg("+inf");
    }

    /// The fleet from the replies of [`Fleet::ask`]'s reads, asking the presence of the older
    /// workers among them.
    async fn answer(
        redis: &Redis,
        keys: &Keyspace,
        entries: redis::Value,
        live: &redis::Value,
    ) -> Result<Fleet> {
        let now = clock::now_ms();
        let entries = reply::pairs(entries)?;
        let live = texts(live)?;
        let mut members = Vec::new();
        let mut known = std::collections::BTreeSet::new();
        for (name, json) in entries {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&json) else {
                continue;
            };
            if v["expires_ms"].as_u64().unwrap_or(0) < now {
                continue;
            }
            let role = if v["role"].as_str() == Some("broker") {
                Role::Broker
            } else {
                Role::Worker
            };
            known.insert(name.clone());
            members.push(Member {
                name,
                role,
                protocol: v["protocol"]
                    .as_u64()
                    .map(|p| p as u32)
                    .or_else(|| v["protocol"].as_str().and_then(|p| p.parse().ok())),
                version: v["version"].as_str().unwrap_or_default().to_string(),
                shards: v["shards"].as_bool().unwrap_or(false),
            });
        }
        let older: Vec<&String> = live.iter().filter(|c| !known.contains(*c)).collect();
        if !older.is_empty() {
            let types = registered_types(redis, keys).await?;
            for consumer in older {
                members.push(older_worker(redis, keys, consumer, &types).await?);
            }
        }
        members.sort_by(|a, b| (a.role, &a.name).cmp(&(b.role, &b.name)));
        Ok(Fleet { members })
    }

    /// Per feature some live process does not serve, those processes described: what brokers
    /// publish as `fleet_lacks` in the config hash, for producers in other languages (hero-py,
    /// Node), which refuse a submit by it rather than read the fleet themselves. Empty when every
    /// live process serves every feature.
    pub fn summary(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for f in Feature::ALL {
            let lacking = self.lacking(f);
            if !lacking.is_empty() {
                out.insert(
                    f.key().into(),
                    serde_json::json!({
                        "what": f.name(),
                        "since": f.since(),
                        "processes": lacking.iter().map(|m| m.describe()).collect::<Vec<_>>(),
                    }),
                );
            }
        }
        serde_json::Value::Object(out)
    }

    /// The live processes that do not serve `f`.
    pub fn lacking(&self, f: Feature) -> Vec<&Member> {
        self.members.iter().filter(|m| !m.serves(f)).collect()
    }

    /// `Err(Error::OlderProcesses)` naming `what` and the processes that lack one of `features`.
    pub fn require(&self, what: &str, features: &[Feature]) -> Result<()> {
        for &f in features {
            let lacking = self.lacking(f);
            if !lacking.is_empty() {
                return Err(Error::OlderProcesses {
                    what: format!(
                        "{what} uses {} (protocol {} and later)",
                        f.name(),
                        f.since()
                    ),
                    processes: lacking.iter().map(|m| m.describe()).collect(),
                });
            }
        }
        Ok(())
    }
}

/// The script types of the registered work streams (`<ns>:q:<type>…`): where an older
/// worker's presence may be.
async fn registered_types(redis: &Redis, keys: &Keyspace) -> Result<Vec<ScriptType>> {
    let mut cmd = redis::cmd("SMEMBERS");
    cmd.arg(keys.queues());
    let streams = texts(&redis.query::<redis::Value>(&cmd).await?)?;
    let mut types: Vec<ScriptType> = streams
        .iter()
        .filter_map(|s| {
            let name = keys.queue_name(s);
            let t = name.split(['/', ' ']).next()?;
            // a key that is no work stream comes back whole, and is no type name
            ScriptType::new(t).ok()
        })
        .collect();
    types.sort();
    types.dedup();
    Ok(types)
}

fn texts(v: &redis::Value) -> Result<Vec<String>> {
    match v {
        redis::Value::Nil => Ok(Vec::new()),
        v => reply::array(v)?.iter().map(reply::text).collect(),
    }
}

/// A live consumer with no fleet entry (a worker released before protocol 29), from its
/// presence: found by its group and instance under each registered type.
async fn older_worker(
    redis: &Redis,
    keys: &Keyspace,
    consumer: &str,
    types: &[ScriptType],
) -> Result<Member> {
    let mut member = Member {
        name: consumer.to_string(),
        role: Role::Worker,
        protocol: None,
        version: String::new(),
        shards: false,
    };
    let Ok(c) = ConsumerName::parse(consumer) else {
        return Ok(member);
    };
    if types.is_empty() {
        return Ok(member);
    }
    let mut pipe = redis::pipe();
    for t in types {
        pipe.cmd("GET").arg(keys.presence(t, &c.group, &c.instance));
    }
    let mut presence: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for r in redis.pipeline(&pipe).await? {
        let Ok(text) = r.and_then(|v| reply::text(&v)) else {
            continue;
        };
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            if v["consumer"].as_str() == Some(consumer) {
                presence.insert(consumer.to_string(), v);
                break;
            }
        }
    }
    if let Some(v) = presence.get(consumer) {
        member.version = v["version"].as_str().unwrap_or_default().to_string();
        member.protocol = v["protocol"]
            .as_str()
            .and_then(|p| p.parse().ok())
            .or_else(|| v["protocol"].as_u64().map(|p| p as u32))
            .or_else(|| protocol_of_version(&member.version));
        member.shards = shards_of_version(&member.version);
    }
    Ok(member)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_presence_names_its_protocol_by_its_release() {
        assert_eq!(protocol_of_version("0.1.0"), Some(27));
        assert_eq!(protocol_of_version("0.3.0"), Some(28));
        assert_eq!(protocol_of_version("hero-py 0.26.0"), Some(26));
        assert_eq!(protocol_of_version("hero-broker (npm) 0.28.0"), Some(28));
        assert_eq!(protocol_of_version("hero-broker (npm) 1.0.0"), None);
        assert_eq!(protocol_of_version("hero-py 1.1.0"), None);
        assert_eq!(protocol_of_version("my own client"), None);
        assert!(shards_of_version("0.3.0") && !shards_of_version("0.2.0"));
        assert!(shards_of_version("hero-py 0.28.0") && !shards_of_version("hero-py 0.27.1"));
    }

    #[test]
    fn a_feature_is_refused_naming_the_processes_that_lack_it() {
        let m = |name: &str, protocol: Option<u32>, shards: bool| Member {
            name: name.into(),
            role: Role::Worker,
            protocol,
            version: String::new(),
            shards,
        };
        let fleet = Fleet {
            members: vec![
                m("new", Some(29), true),
                m("py26", Some(26), false),
                m("foreign", None, false),
            ],
        };
        assert!(fleet
            .require("job x", &[Feature::LimitKey, Feature::Tags])
            .is_ok());
        let e = fleet
            .require("job x", &[Feature::Batch])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a batch") && e.contains("worker py26") && e.contains("protocol 26"),
            "{e}"
        );
        assert!(!e.contains("foreign"), "{e}");
        let lacking: Vec<_> = fleet
            .lacking(Feature::Shards)
            .iter()
            .map(|m| m.name.clone())
            .collect();
        assert_eq!(lacking, ["py26", "foreign"]);
    }
}
