//! Retention (SPEC §4.6): ended jobs get no TTL of their own; the call that ends them names them
//! in one entry of the retention stream, and this loop deletes them through `hero_expire` once
//! the retention time has passed. Several brokers may run it at once: each call takes its
//! entries atomically, so a job is looked at once.

use std::time::Duration;

use hero_client::function;
use hero_client::function::Expired;
use hero_client::Client;
use redis::Value;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

/// Entries per call: a completion batch names up to a few hundred jobs, so a call stays short.
const ENTRIES: usize = 20;

/// Deletes every job whose retention has passed; returns how many.
pub async fn pass(client: &Client, retention: Duration) -> hero_client::Result<u64> {
    let mut jobs = 0;
    loop {
        let cmd = function::expire(client.keys(), retention, ENTRIES);
        let r = Expired::decode(&client.redis().query::<Value>(&cmd).await?)?;
        jobs += r.jobs;
        if !r.more {
            return Ok(jobs);
        }
    }
}

/// Trims dead letters older than `keep` from the dead-letter stream (its own retention: the
/// jobs they name are ended and expire with the others). XTRIM MINID by Redis's clock is one
/// atomic command; the stream is not a work stream, so trimming it drops no queued job.
pub async fn trim_dead(client: &Client, keep: Duration) -> hero_client::Result<u64> {
    let time: (String, String) = client.redis().query(&redis::cmd("TIME")).await?;
    let now_ms =
        time.0.parse::<u64>().unwrap_or(0) * 1000 + time.1.parse::<u64>().unwrap_or(0) / 1000;
    let oldest = now_ms.saturating_sub(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX));
    client
        .redis()
        .query(
            redis::cmd("XTRIM")
                .arg(client.keys().dead_letter())
                .arg("MINID")
                .arg(format!("{oldest}-0")),
        )
        .await
}

pub async fn run(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    let metric = "hero_broker_expired_total";
    super::every(
        "deleted jobs past their retention",
        "retention",
        metric,
        cfg.retention_poll,
        stop,
        || async {
            let jobs = pass(&client, cfg.retention).await?;
            trim_dead(&client, cfg.dead_retention).await?;
            client.prune_tracked().await?;
            client.prune_batches().await?;
            Ok(jobs)
        },
    )
    .await;
}
