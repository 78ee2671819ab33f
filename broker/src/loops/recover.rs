//! Recovery of jobs whose worker died (SPEC §4.5): presence-driven (a consumer whose liveness
//! deadline passed) and idle-driven (XPENDING IDLE + XCLAIM past the lease, never a `bridge:` consumer's entries), both through `hero_recover`,
//! which re-checks owner and lease inside Redis so several brokers never double a move; the
//! idle pass also deletes consumers of gone workers that hold nothing (`sweep_consumers`).

use std::time::Duration;

use hero_client::function::Recovery;
use hero_client::recovery::{recover_stream, sweep_consumers, Taken};
use hero_client::{clock, Client};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

fn record(taken: Taken, path: &'static str) {
    metrics::counter!("hero_broker_requeued_total", "path" => path).increment(taken.requeued);
    metrics::counter!("hero_broker_dead_lettered_total", "path" => path).increment(taken.dead);
}

async fn streams(client: &Client) -> hero_client::Result<Vec<String>> {
    client.inspector().queue_streams().await
}

/// One presence pass: every consumer whose liveness deadline has passed gets its deliveries
/// put back, then leaves the liveness set.
pub async fn presence_pass(client: &Client, cfg: &BrokerConfig) -> hero_client::Result<Taken> {
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
pub async fn idle_pass(client: &Client, cfg: &BrokerConfig) -> hero_client::Result<Taken> {
    let mut total = Taken::default();
    let policies = client.policies().await?;
    for stream in streams(client).await? {
        // a queue's policy may set its own lease
        let lease = hero_client::Target::parse_queue(&client.keys().queue_name(&stream))
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

/// Runs the presence pass every `presence_poll` and the idle pass every half lease.
pub async fn run(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    let mut last_idle = tokio::time::Instant::now();
    loop {
        // every half of the shortest lease, a queue policy's included
        let shortest = match client.policies().await {
            Ok(p) => p.iter().filter_map(|(_, p)| p.lease_ms).min(),
            Err(_) => None,
        }
        .map_or(cfg.lease, |ms| cfg.lease.min(Duration::from_millis(ms)));
        let idle_every = (shortest / 2).max(Duration::from_millis(100));
        if let Err(e) = super::timed("recover_presence", presence_pass(&client, &cfg)).await {
            tracing::warn!(error = %e, "presence recovery pass failed; retrying");
        }
        if last_idle.elapsed() >= idle_every {
            last_idle = tokio::time::Instant::now();
            if let Err(e) = super::timed("recover_idle", idle_pass(&client, &cfg)).await {
                tracing::warn!(error = %e, "idle recovery pass failed; retrying");
            }
        }
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(cfg.presence_poll) => {} }
    }
}
