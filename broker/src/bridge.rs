//! The legacy bridge (SPEC §6): mappings between seed-001 list queues and canonical targets,
//! read from flags or the config file, and the loops that serve them. Every move is one
//! server function (`hero_bridge_in`, `hero_bridge_out`, `hero_bridge_watch`, and dual-push
//! inside `hero_submit`), so a broker killed at any point leaves each job in exactly one place,
//! and several brokers with the same mappings can run at once.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use hero_client::function::Function;
use hero_client::keys::CONSUMER_GROUP;
use hero_client::{
    clock, Client, GroupName, InstanceName, Keyspace, LegacyQueue, Priority, ScriptType, Target,
};
use redis::Value;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

/// How many ids one function call moves at most.
const BATCH: usize = 200;
/// How long the inbound loop blocks waiting for a legacy list to fill before it looks again.
const WAKE_BLOCK: Duration = Duration::from_secs(1);

/// A bad mapping in flags or the config file.
#[derive(Debug, thiserror::Error)]
pub enum BridgeConfigError {
    #[error("bridge mapping {spec:?}: {why}")]
    Mapping { spec: String, why: String },
    #[error("config file {path}: {why}")]
    File { path: String, why: String },
}

/// Which way jobs cross a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Ids legacy producers push to the list go into the canonical stream.
    Inbound,
    /// Jobs of the canonical stream go to the list's legacy actors.
    Outbound,
    Both,
}

impl Direction {
    fn parse(s: &str) -> Option<Direction> {
        match s {
            "in" | "inbound" => Some(Direction::Inbound),
            "out" | "outbound" => Some(Direction::Outbound),
            "both" => Some(Direction::Both),
            _ => None,
        }
    }

    pub fn inbound(self) -> bool {
        self != Direction::Outbound
    }

    pub fn outbound(self) -> bool {
        self != Direction::Inbound
    }
}

/// One legacy queue ↔ one canonical target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeMapping {
    /// The legacy list's full key, e.g. `hero:work_queue:w1`.
    pub legacy: String,
    pub target: Target,
    pub direction: Direction,
    /// Migration phase 1: a submit to the target is also pushed to the list, and whichever
    /// side takes it first runs it. Replaces the outbound hand-out for this mapping.
    pub dual_push: bool,
    /// A job handed to the list and not taken by a legacy actor within this time is taken back.
    pub pickup: Duration,
}

pub const DEFAULT_PICKUP: Duration = Duration::from_secs(60);

impl BridgeMapping {
    pub fn new(
        legacy: &str,
        target: Target,
        direction: Direction,
        dual_push: bool,
        pickup: Duration,
    ) -> Result<Self, BridgeConfigError> {
        let bad = |why: &str| BridgeConfigError::Mapping {
            spec: legacy.to_string(),
            why: why.to_string(),
        };
        if dual_push && !direction.outbound() {
            return Err(bad(
                "dual-push sends jobs to legacy actors: it needs direction outbound or both",
            ));
        }
        if pickup.is_zero() {
            return Err(bad("the pickup time must be more than 0"));
        }
        Ok(BridgeMapping {
            legacy: legacy.to_string(),
            target,
            direction,
            dual_push,
            pickup,
        })
    }
}

fn target_of(
    spec: &str,
    script_type: &str,
    group: Option<&str>,
    instance: Option<&str>,
) -> Result<Target, BridgeConfigError> {
    let bad = |e: hero_client::Error| BridgeConfigError::Mapping {
        spec: spec.to_string(),
        why: e.to_string(),
    };
    Ok(Target::new(
        ScriptType::new(script_type).map_err(bad)?,
        group.map(GroupName::new).transpose().map_err(bad)?,
        instance.map(InstanceName::new).transpose().map_err(bad)?,
    ))
}

/// The flag form: `<legacy key>=<type>[/<group>[/<instance>]][,in|out|both][,dual-push][,pickup=<secs>]`,
/// e.g. `hero:work_queue:w1=osis/io,both,dual-push`. The direction defaults to both.
impl FromStr for BridgeMapping {
    type Err = BridgeConfigError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| BridgeConfigError::Mapping {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let (legacy, rest) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected <legacy key>=<type>[/<group>[/<instance>]][,in|out|both][,dual-push][,pickup=<secs>]"))?;
        let mut parts = rest.split(',');
        let target = parts.next().unwrap_or_default();
        let mut path = target.split('/');
        let script_type = path.next().unwrap_or_default();
        let (group, instance) = (path.next(), path.next());
        if path.next().is_some() {
            return Err(bad("the target is <type>[/<group>[/<instance>]]"));
        }
        let target = target_of(spec, script_type, group, instance)?;
        let (mut direction, mut dual, mut pickup) = (Direction::Both, false, DEFAULT_PICKUP);
        for opt in parts {
            if let Some(d) = Direction::parse(opt) {
                direction = d;
            } else if opt == "dual-push" {
                dual = true;
            } else if let Some(secs) = opt.strip_prefix("pickup=") {
                pickup = Duration::from_secs(
                    secs.parse()
                        .map_err(|_| bad("pickup=<seconds> takes a whole number"))?,
                );
            } else {
                return Err(bad(&format!(
                    "unknown option {opt:?}; expected in, out, both, dual-push or pickup=<secs>"
                )));
            }
        }
        BridgeMapping::new(legacy, target, direction, dual, pickup)
    }
}

/// The parts of the broker's TOML config file this module reads.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    legacy_replies: Option<bool>,
    #[serde(default)]
    bridge: Vec<FileMapping>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMapping {
    legacy: String,
    #[serde(rename = "type")]
    script_type: String,
    group: Option<String>,
    instance: Option<String>,
    direction: Option<String>,
    #[serde(default)]
    dual_push: bool,
    pickup_secs: Option<u64>,
}

/// Mappings and the compatibility switch from a config file:
///
/// ```toml
/// legacy_replies = true           # also answer hero:reply:<id> (default: on when mapped)
/// [[bridge]]
/// legacy = "<namespace>:work_queue:w1"
/// type = "osis"                   # group = "io", instance = "3" are optional
/// direction = "both"              # inbound | outbound | both
/// dual_push = false
/// pickup_secs = 60
/// ```
pub fn load_file(path: &Path) -> Result<(Vec<BridgeMapping>, Option<bool>), BridgeConfigError> {
    let file_err = |why: String| BridgeConfigError::File {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
    let cfg: FileConfig = toml::from_str(&text).map_err(|e| file_err(e.to_string()))?;
    let mut mappings = Vec::new();
    for m in cfg.bridge {
        let direction = match m.direction.as_deref() {
            None => Direction::Both,
            Some(d) => Direction::parse(d).ok_or_else(|| BridgeConfigError::Mapping {
                spec: m.legacy.clone(),
                why: format!("direction {d:?}; expected inbound, outbound or both"),
            })?,
        };
        let target = target_of(
            &m.legacy,
            &m.script_type,
            m.group.as_deref(),
            m.instance.as_deref(),
        )?;
        let pickup = m
            .pickup_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_PICKUP);
        mappings.push(BridgeMapping::new(
            &m.legacy,
            target,
            direction,
            m.dual_push,
            pickup,
        )?);
    }
    Ok((mappings, cfg.legacy_replies))
}

/// A mapping with every key it uses, built once from the namespace.
#[derive(Clone)]
struct Lane {
    m: BridgeMapping,
    queue: LegacyQueue,
    list: String,
    stream: String,
    track: String,
    stop: String,
}

impl Lane {
    fn new(keys: &Keyspace, m: &BridgeMapping) -> hero_client::Result<Lane> {
        let queue = keys.parse_legacy_queue(&m.legacy)?;
        Ok(Lane {
            list: keys.legacy_queue(&queue),
            stream: keys.work(&m.target, Priority::DEFAULT),
            track: keys.bridge_track(&queue),
            stop: keys.legacy_stop_for(&queue),
            queue,
            m: m.clone(),
        })
    }
}

fn lanes(client: &Client, cfg: &BrokerConfig) -> hero_client::Result<Vec<Lane>> {
    cfg.bridges
        .iter()
        .map(|m| Lane::new(client.keys(), m))
        .collect()
}

/// Writes the dual-push registry `hero_submit` reads and the legacy reply prefix (in
/// compatibility mode) into Redis; both replace what an earlier broker published.
pub async fn publish(client: &Client, cfg: &BrokerConfig) -> hero_client::Result<()> {
    let keys = client.keys();
    let mut tx = redis::pipe();
    tx.atomic().del(keys.bridge_registry()).ignore();
    for lane in lanes(client, cfg)?.iter().filter(|l| l.m.dual_push) {
        let entry = serde_json::json!({
            "list": lane.list,
            "stop": lane.stop,
            "track": lane.track,
            "worker": lane.queue.worker_id(),
            "pickup_ms": lane.m.pickup.as_millis() as u64,
        });
        tx.hset(keys.bridge_registry(), &lane.stream, entry.to_string())
            .ignore();
    }
    if cfg.legacy_replies() {
        tx.hset(
            keys.config(),
            "legacy_reply_prefix",
            keys.legacy_reply_prefix(),
        )
        .ignore();
    } else {
        tx.hdel(keys.config(), "legacy_reply_prefix").ignore();
    }
    client.redis().pipeline(&tx).await?;
    Ok(())
}

/// Runs the loops of every mapping until `stop` is cancelled.
pub async fn run(
    client: Client,
    cfg: BrokerConfig,
    stop: CancellationToken,
) -> hero_client::Result<()> {
    let mut tasks = Vec::new();
    for lane in lanes(&client, &cfg)? {
        tracing::info!(legacy = %lane.list, stream = %lane.stream, direction = ?lane.m.direction, dual_push = lane.m.dual_push, "bridge mapping");
        if lane.m.direction.inbound() {
            tasks.push(tokio::spawn(inbound(
                client.clone(),
                cfg.clone(),
                lane.clone(),
                stop.clone(),
            )));
        }
        if lane.m.direction.outbound() {
            if !lane.m.dual_push {
                tasks.push(tokio::spawn(outbound(
                    client.clone(),
                    cfg.clone(),
                    lane.clone(),
                    stop.clone(),
                )));
            }
            tasks.push(tokio::spawn(watch(
                client.clone(),
                cfg.clone(),
                lane,
                stop.clone(),
            )));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

async fn pause(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! { _ = stop.cancelled() => false, _ = tokio::time::sleep(d) => true }
}

fn counts(v: &Value) -> Vec<i64> {
    redis::from_redis_value::<Vec<i64>>(v.clone()).unwrap_or_default()
}

/// Moves what legacy producers push into the canonical stream, then waits for the list to fill
/// with `BLMOVE list list RIGHT RIGHT`: popping and pushing back the same end in one command
/// changes nothing, so it wakes this loop without taking an id out of the list even for a
/// moment.
async fn inbound(client: Client, cfg: BrokerConfig, lane: Lane, stop: CancellationToken) {
    let keys = client.keys().clone();
    let mut waker = None;
    loop {
        let mut cmd = Function::BridgeIn.call(&[
            lane.list.clone(),
            lane.stream.clone(),
            keys.queues(),
            keys.dead_letter(),
        ]);
        let t = &lane.m.target;
        cmd.arg(CONSUMER_GROUP)
            .arg(BATCH)
            .arg(keys.job_prefix())
            .arg(t.script_type.as_str())
            .arg(t.group.as_ref().map(|g| g.as_str()).unwrap_or(""))
            .arg(t.instance.as_ref().map(|i| i.as_str()).unwrap_or(""))
            .arg(clock::now_iso());
        let (moved, dead, blocked) = match client.redis().query::<Value>(&cmd).await {
            Ok(v) => {
                let c = counts(&v);
                (
                    c.first().copied().unwrap_or(0),
                    c.get(1).copied().unwrap_or(0),
                    c.get(2) == Some(&1),
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, list = %lane.list, "bridge inbound move failed; retrying");
                if !pause(&stop, cfg.bridge_poll * 5).await {
                    return;
                }
                continue;
            }
        };
        if moved > 0 {
            metrics::counter!("hero_bridge_inbound_total").increment(moved as u64);
        }
        if dead > 0 {
            tracing::warn!(list = %lane.list, dead, "legacy ids without a usable job hash went to the dead-letter stream");
        }
        if moved + dead >= BATCH as i64 {
            continue;
        }
        if blocked {
            // the oldest id waits for a legacy actor; look again after a while
            if !pause(&stop, cfg.bridge_poll).await {
                return;
            }
            continue;
        }
        if waker.is_none() {
            match client.redis().dedicated(WAKE_BLOCK).await {
                Ok(c) => waker = Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "bridge: no wake-up connection; retrying");
                    if !pause(&stop, cfg.bridge_poll * 5).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(conn) = waker.as_mut() else { continue };
        let mut wait = redis::cmd("BLMOVE");
        wait.arg(&lane.list)
            .arg(&lane.list)
            .arg("RIGHT")
            .arg("RIGHT")
            .arg(WAKE_BLOCK.as_secs_f64());
        let woke = tokio::select! {
            _ = stop.cancelled() => return,
            r = wait.query_async::<Value>(conn) => r,
        };
        if let Err(e) = woke {
            tracing::warn!(error = %e, "bridge wake-up wait failed; reconnecting");
            waker = None;
        }
    }
}

/// Hands jobs of the canonical stream to the legacy list.
async fn outbound(client: Client, cfg: BrokerConfig, lane: Lane, stop: CancellationToken) {
    let keys = client.keys().clone();
    let consumer = lane.queue.consumer();
    loop {
        let now = clock::now_ms();
        let mut cmd =
            Function::BridgeOut.call(&[lane.stream.clone(), lane.list.clone(), lane.track.clone()]);
        cmd.arg(CONSUMER_GROUP)
            .arg(&consumer)
            .arg(BATCH)
            .arg(keys.job_prefix())
            .arg(clock::iso(now))
            .arg(now + lane.m.pickup.as_millis() as u64)
            .arg(lane.queue.worker_id())
            .arg(&lane.stop)
            .arg(client.redis().caps().xackdel_flag());
        match client.redis().query::<Value>(&cmd).await {
            Ok(v) => {
                let handed = counts(&v).first().copied().unwrap_or(0);
                if handed > 0 {
                    metrics::counter!("hero_bridge_outbound_total").increment(handed as u64);
                }
                if handed >= BATCH as i64 {
                    continue;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, list = %lane.list, "bridge hand-out failed; retrying")
            }
        }
        if !pause(&stop, cfg.bridge_poll).await {
            return;
        }
    }
}

/// Follows the jobs legacy actors hold, a pass every `bridge_poll`.
async fn watch(client: Client, cfg: BrokerConfig, lane: Lane, stop: CancellationToken) {
    loop {
        if let Err(e) = watch_pass(&client, &cfg, &lane).await {
            tracing::warn!(error = %e, list = %lane.list, "bridge watch failed; retrying");
        }
        if !pause(&stop, cfg.bridge_poll).await {
            return;
        }
    }
}

async fn watch_pass(client: &Client, cfg: &BrokerConfig, lane: &Lane) -> hero_client::Result<()> {
    let keys = client.keys();
    let mut rank = 0i64;
    loop {
        let now = clock::now_ms();
        let mut cmd = Function::BridgeWatch.call(&[
            lane.track.clone(),
            lane.list.clone(),
            lane.stream.clone(),
            keys.queues(),
            keys.config(),
            keys.dead_letter(),
            keys.retention(),
        ]);
        cmd.arg(CONSUMER_GROUP)
            .arg(keys.job_prefix())
            .arg(keys.reply_prefix())
            .arg(clock::iso(now))
            .arg(now)
            .arg(lane.m.pickup.as_millis() as u64)
            .arg(cfg.max_attempts)
            .arg(if lane.m.dual_push { "1" } else { "0" })
            .arg(client.redis().caps().xackdel_flag())
            .arg(BATCH)
            .arg(rank);
        let v: Value = client.redis().query(&cmd).await?;
        let c = counts(&v);
        let (ended, requeued, failed) = (
            c.first().copied().unwrap_or(0),
            c.get(1).copied().unwrap_or(0),
            c.get(2).copied().unwrap_or(0),
        );
        if requeued + failed > 0 {
            tracing::info!(list = %lane.list, ended, requeued, failed, "bridge took back jobs legacy actors did not take or finish");
        }
        rank = c.get(3).copied().unwrap_or(0);
        if rank == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hero_client::Namespace;

    /// A legacy key of the default namespace, built by the keys module.
    fn work_queue(id: &str) -> String {
        Keyspace::new(&Namespace::new("hero").unwrap()).legacy_work_queue(id)
    }

    #[test]
    fn flag_mappings_parse_with_their_options_and_bad_ones_say_why() {
        let w1 = work_queue("w1");
        let m: BridgeMapping = format!("{w1}=osis/io/3,in,pickup=5").parse().unwrap();
        assert_eq!(m.legacy, w1);
        assert_eq!(m.target.script_type.as_str(), "osis");
        assert_eq!(m.target.group.as_ref().map(|g| g.as_str()), Some("io"));
        assert_eq!(m.target.instance.as_ref().map(|i| i.as_str()), Some("3"));
        assert_eq!(
            (m.direction, m.dual_push, m.pickup),
            (Direction::Inbound, false, Duration::from_secs(5))
        );
        let d: BridgeMapping = format!("{w1}=sal,dual-push").parse().unwrap();
        assert_eq!((d.direction, d.dual_push), (Direction::Both, true));
        for (rest, says) in [
            ("", "expected <legacy key>="),
            ("=bad type", "script type"),
            ("=osis,sideways", "unknown option"),
            ("=osis,in,dual-push", "dual-push"),
            ("=osis,pickup=soon", "whole number"),
        ] {
            let bad = format!("{w1}{rest}");
            let e = bad.parse::<BridgeMapping>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_config_file_gives_mappings_and_the_compatibility_switch() {
        let dir = std::env::temp_dir().join(format!("hero-bridge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hero.toml");
        std::fs::write(
            &path,
            format!("legacy_replies = false\n[[bridge]]\nlegacy = \"{}\"\ntype = \"v\"\ndirection = \"outbound\"\ndual_push = true\npickup_secs = 9\n", work_queue("a7")),
        )
        .unwrap();
        let (maps, compat) = load_file(&path).unwrap();
        assert_eq!(compat, Some(false));
        assert_eq!(maps.len(), 1);
        assert_eq!(
            (maps[0].direction, maps[0].dual_push, maps[0].pickup),
            (Direction::Outbound, true, Duration::from_secs(9))
        );
        std::fs::write(
            &path,
            format!(
                "[[bridge]]\nlegacy = \"{}\"\ntype = \"v\"\ncolour = 1\n",
                work_queue("a7")
            ),
        )
        .unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
