//! Recovery of jobs whose worker died (SPEC §4.5): presence-driven (a consumer whose liveness
//! deadline passed) and idle-driven (XPENDING IDLE + XCLAIM past the lease, never a `bridge:` consumer's entries), both through `hero_recover`,
//! which re-checks owner and lease inside Redis so several brokers never double a move; the
//! idle pass also deletes consumers of gone workers that hold nothing (`sweep_consumers`).

use std::time::Duration;

use hero_client::Client;
use hero_protocol::clock;
use hero_protocol::function::Recovery;
use hero_protocol::outage::Outage;
use hero_protocol::recovery::{recover_stream, Taken};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

fn record(taken: Taken, path: &'static str) {
    metrics::counter!("hero_broker_requeued_total", "path" => path).increment(taken.requeued);
    metrics::counter!("hero_broker_dead_lettered_total", "path" => path).increment(taken.dead);
}

async fn streams(client: &Client) -> hero_protocol::Result<Vec<String>> {
    hero_admin::Inspector::from(client).queue_streams().await
}

/// One presence pass: every consumer whose liveness deadline has passed gets its deliveries
/// put back, then leaves the liveness set.
pub async fn presence_pass(client: &Client, cfg: &BrokerConfig) -> hero_protocol::Result<Taken> {
    let dead: Vec<String> = client
        .redis()
        .query(
            redis::cmd("ZRANGEBYSCORE")
                .arg(client.keys().consumers())
                .arg("-inf")
                .arg(clock::now_ms())
                .arg("LIMIT")
                .arg(0)
                .arg(100),
        )
        .await?;
    let mut total = Taken::default();
    if dead.is_empty() {
        return Ok(total);
    }
    let streams = streams(client).await?;
    for consumer in dead {
        let mut pass = Taken::default();
        for stream in &streams {
            let which = Recovery::Consumer(&consumer);
            pass.add(
                recover_stream(
                    client.redis(),
                    client.keys(),
                    stream,
                    which,
                    cfg.max_attempts,
                )
                .await?,
            );
        }
        // Only now: had a call failed, the consumer stays listed and the next pass retries it.
        let _: i64 = client
            .redis()
            .query(
                redis::cmd("ZREM")
                    .arg(client.keys().consumers())
                    .arg(&consumer),
            )
            .await?;
        tracing::info!(
            consumer,
            requeued = pass.requeued,
            dead = pass.dead,
            "recovered the jobs of a dead worker"
        );
        total.add(pass);
    }
    record(total, "presence");
    Ok(total)
}

/// One idle pass: XPENDING IDLE + XCLAIM on every stream for deliveries idle past the lease.
pub async fn idle_pass(client: &Client, cfg: &BrokerConfig) -> hero_protocol::Result<Taken> {
    let mut total = Taken::default();
    let policies = hero_protocol::policy::read_policies(client.redis(), client.keys()).await?;
    for stream in streams(client).await? {
        // a queue's policy may set its own lease
        let lease = hero_protocol::Target::parse_queue(&client.keys().queue_name(&stream))
            .ok()
            .and_then(|(t, _)| {
                policies.of(t.script_type.as_str(), t.group.as_ref().map(|g| g.as_str()))
            })
            .and_then(|p| p.lease_ms)
            .map_or(cfg.lease, Duration::from_millis);
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        let which = Recovery::Idle(lease_ms);
        let p = recover_stream(
            client.redis(),
            client.keys(),
            &stream,
            which,
            cfg.max_attempts,
        )
        .await?;
        if p.requeued + p.dead > 0 {
            tracing::info!(
                stream,
                requeued = p.requeued,
                dead = p.dead,
                "reclaimed idle deliveries"
            );
        }
        total.add(p);
        // consumers holding nothing that no worker's liveness entry names: left by a worker
        // killed with a read in flight, and deleted by no other pass
        let swept = sweep_consumers(client.redis(), client.keys(), &stream, lease_ms).await?;
        if swept > 0 {
            tracing::info!(
                stream,
                swept,
                "deleted consumers of gone workers that held nothing"
            );
        }
    }
    record(total, "idle");
    Ok(total)
}

/// How long recovery waits after this process last found Redis out of reach or refusing writes
/// (`outage::since_last_outage`): every worker's heartbeat and renewals failed through the
/// outage too, and back off up to 5 s; a live worker must get its next one in before a pass
/// judges it dead or its deliveries idle, or its jobs would run twice (the chaos soak's
/// "redis faults" phase: MISCONF for 20 s). A dead worker's jobs wait this much longer.
pub const AFTER_OUTAGE: Duration = Duration::from_secs(10);

/// Runs the presence pass every `presence_poll` and the idle pass every half lease.
pub async fn run(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    let mut last_idle = tokio::time::Instant::now();
    let (mut presence, mut idle) = (
        Outage::new("the presence recovery pass"),
        Outage::new("the idle recovery pass"),
    );
    loop {
        // every half of the shortest lease, a queue policy's included
        let shortest =
            match hero_protocol::policy::read_policies(client.redis(), client.keys()).await {
                Ok(p) => p.iter().filter_map(|(_, p)| p.lease_ms).min(),
                Err(_) => None,
            }
            .map_or(cfg.lease, |ms| cfg.lease.min(Duration::from_millis(ms)));
        let idle_every = (shortest / 2).max(Duration::from_millis(100));
        let mut wait = cfg.presence_poll;
        if hero_protocol::outage::since_last_outage().is_some_and(|d| d < AFTER_OUTAGE) {
            tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(wait) => {} }
            continue;
        }
        match super::timed("recover_presence", presence_pass(&client, &cfg)).await {
            Ok(_) => presence.ok(),
            Err(e) => wait = wait.max(presence.failed(&e)),
        }
        if last_idle.elapsed() >= idle_every {
            last_idle = tokio::time::Instant::now();
            match super::timed("recover_idle", idle_pass(&client, &cfg)).await {
                Ok(_) => idle.ok(),
                Err(e) => wait = wait.max(idle.failed(&e)),
            }
        }
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(wait) => {} }
    }
}

/// Deletes the consumers of `stream` that hold nothing, have been idle `min_idle_ms` or longer
/// and are in no worker's liveness entry: what a worker killed with a command still in flight
/// leaves behind (the command reached Redis after the presence pass had removed the consumer,
/// made it again, and whatever it claimed was reclaimed since), which no other pass would ever
/// delete. Each goes through `hero_fix`, which deletes it only while it still holds nothing, so
/// a consumer that took a job meanwhile stays (and a live worker's is made again by its next
/// read). The bridge's consumers are its own. Returns how many went.
async fn sweep_consumers(
    redis: &hero_protocol::Redis,
    keys: &hero_protocol::Keyspace,
    stream: &str,
    min_idle_ms: u64,
) -> hero_protocol::Result<u64> {
    let info: redis::Value = match redis
        .query(
            redis::cmd("XINFO")
                .arg("CONSUMERS")
                .arg(stream)
                .arg(hero_protocol::keys::CONSUMER_GROUP),
        )
        .await
    {
        Ok(v) => v,
        // no such stream or group (deleted by hand, or made again by the next fetch)
        Err(hero_protocol::Error::Redis(_)) => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut idle = Vec::new();
    for c in hero_protocol::reply::array(&info)? {
        let fields = hero_protocol::reply::pairs(c.clone())?;
        let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
        let pending = get("pending").and_then(|v| v.parse::<u64>().ok());
        let idle_ms = get("idle").and_then(|v| v.parse::<u64>().ok());
        if let (Some(name), Some(0), Some(ms)) = (get("name"), pending, idle_ms) {
            let name = name.to_string();
            if ms >= min_idle_ms && !hero_protocol::keys::is_bridge_consumer(&name) {
                idle.push(name);
            }
        }
    }
    if idle.is_empty() {
        return Ok(0);
    }
    let scores: Vec<Option<f64>> = redis
        .query(redis::cmd("ZMSCORE").arg(keys.consumers()).arg(&idle))
        .await?;
    let mut gone = 0;
    for (name, score) in idle.iter().zip(scores) {
        if score.is_some() {
            // a worker's liveness entry: the presence pass deals with it after its deadline
            continue;
        }
        let repair = hero_protocol::function::Repair::IdleConsumer {
            stream,
            consumer: name,
        };
        let answer: String = redis
            .query(&hero_protocol::function::fix(keys, repair))
            .await?;
        gone += u64::from(answer == "fixed");
    }
    Ok(gone)
}
