//! Retention (SPEC §4.6): ended jobs get no TTL of their own; the call that ends them names them
//! in one entry of the retention stream, and this loop deletes them through `hero_expire` once
//! the retention time has passed. Several brokers may run it at once: each call takes its
//! entries atomically, so a job is looked at once.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::function;
use hero_protocol::function::Expired;
use hero_protocol::{BatchName, Result};
use redis::Value;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

/// Entries per call: a completion batch names up to a few hundred jobs, so a call stays short.
const ENTRIES: usize = 20;

/// Deletes every job whose retention has passed; returns how many.
pub async fn pass(
    client: &Client,
    retention: Duration,
    dead_retention: Duration,
) -> hero_protocol::Result<u64> {
    let mut jobs = 0;
    loop {
        let cmd = function::expire(client.keys(), retention, ENTRIES, dead_retention);
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
pub async fn trim_dead(client: &Client, keep: Duration) -> hero_protocol::Result<u64> {
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
            let jobs = pass(&client, cfg.retention, cfg.dead_retention).await?;
            trim_dead(&client, cfg.dead_retention).await?;
            hero_admin::Admin::from(&client).prune_tracked().await?;
            prune_batches(&client).await?;
            Ok(jobs)
        },
    )
    .await;
}

/// Drops from the batch index the names whose batch expired (done, past the retention
/// time). The oldest 500 names a call, where expired
/// ones gather.
async fn prune_batches(client: &Client) -> Result<u64> {
    let index = client.keys().batches();
    let names: Vec<String> = client
        .redis()
        .query(redis::cmd("ZRANGE").arg(&index).arg(0).arg(499))
        .await?;
    if names.is_empty() {
        return Ok(0);
    }
    // a name no batch can have (written by hand) is dropped as well
    let (valid, mut gone): (Vec<_>, Vec<_>) = names
        .iter()
        .map(String::as_str)
        .partition(|n| BatchName::new(*n).is_ok());
    let mut pipe = redis::pipe();
    for n in &valid {
        if let Ok(name) = BatchName::new(*n) {
            pipe.cmd("EXISTS").arg(client.keys().batch(&name));
        }
    }
    for (n, r) in valid.iter().zip(client.redis().pipeline(&pipe).await?) {
        if matches!(r?, redis::Value::Int(0)) {
            gone.push(n);
        }
    }
    if gone.is_empty() {
        return Ok(0);
    }
    let _: i64 = client
        .redis()
        .query(redis::cmd("ZREM").arg(&index).arg(&gone))
        .await?;
    Ok(gone.len() as u64)
}
