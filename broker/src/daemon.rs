//! The broker daemon: publishes the settings the server functions (and workers and clients in
//! other languages) read, then runs the periodic loops (`loops`) and the legacy bridge until told
//! to stop. It holds no state of its own, so any number of brokers may run against one Redis.

use hero_client::Client;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::loops::{promote, recover, retention, sample, timeouts};

/// Writes retention, reply TTL, the lease and the event log's cap into the namespace's config
/// hash (`lease_ms` is what a worker in another language renews within: docs/protocol.md).
pub async fn publish_config(client: &Client, cfg: &BrokerConfig) -> hero_client::Result<()> {
    let _: () = client
        .redis()
        .query(
            redis::cmd("HSET")
                .arg(client.keys().config())
                .arg("retention_ms")
                .arg(cfg.retention.as_millis() as u64)
                .arg("reply_ttl_ms")
                .arg(cfg.reply_ttl.as_millis() as u64)
                .arg("lease_ms")
                .arg(cfg.lease.as_millis() as u64)
                .arg("events_max")
                .arg(cfg.events_max),
        )
        .await?;
    crate::bridge::publish(client, cfg).await
}

/// Runs every broker loop until `stop` is cancelled.
pub async fn run(
    client: Client,
    cfg: BrokerConfig,
    stop: CancellationToken,
) -> hero_client::Result<()> {
    publish_config(&client, &cfg).await?;
    tracing::info!(redis = %client.redis().url(), "broker running");
    let tasks = [
        tokio::spawn(recover::run(client.clone(), cfg.clone(), stop.clone())),
        tokio::spawn(promote::run(client.clone(), cfg.clone(), stop.clone())),
        tokio::spawn(retention::run(client.clone(), cfg.clone(), stop.clone())),
        tokio::spawn(republish(client.clone(), cfg.clone(), stop.clone())),
        tokio::spawn(sample::run(client.clone(), stop.clone())),
        tokio::spawn(timeouts::run(client.clone(), cfg.clone(), stop.clone())),
        tokio::spawn(crate::loops::cron::run(
            client.clone(),
            cfg.clone(),
            stop.clone(),
        )),
    ];
    let bridge = crate::bridge::run(client.clone(), cfg.clone(), stop.clone()).await;
    for t in tasks {
        let _ = t.await;
    }
    bridge
}

/// A Redis restarted without persistence forgets the settings: write them again now and then.
async fn republish(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    loop {
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => {} }
        if let Err(e) = publish_config(&client, &cfg).await {
            tracing::warn!(error = %e, "could not publish broker settings; retrying");
        }
    }
}
