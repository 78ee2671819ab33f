//! Retention (SPEC §4.6): ended jobs get no TTL of their own; the call that ends them names them
//! in one entry of the retention stream, and this loop deletes them through `hero_expire` once
//! the retention time has passed. Several brokers may run it at once: each call takes its
//! entries atomically, so a job is looked at once.

use std::time::Duration;

use hero_client::function;
use hero_client::reply::Expired;
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

pub async fn run(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    let metric = "hero_broker_expired_total";
    super::every(
        "deleted jobs past their retention",
        metric,
        cfg.retention_poll,
        stop,
        || pass(&client, cfg.retention),
    )
    .await;
}
