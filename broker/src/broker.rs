//! The broker daemon: publishes the settings the server functions read, then runs the
//! recovery, promotion, retention and legacy bridge loops until told to stop. It holds no state of its own, so any
//! number of brokers may run against one Redis.

use hero_client::Client;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::{promote, recover, retention};

/// Writes retention and reply TTL into the namespace's config hash.
pub async fn publish_config(client: &Client, cfg: &BrokerConfig) -> hero_client::Result<()> {
    let _: () = client
        .redis()
        .query(
            redis::cmd("HSET")
                .arg(client.keys().config())
                .arg("retention_ms")
                .arg(cfg.retention.as_millis() as u64)
                .arg("reply_ttl_ms")
                .arg(cfg.reply_ttl.as_millis() as u64),
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

/// Runs `pass` every `poll` until `stop` is cancelled: how many jobs each pass moved is added to
/// the counter `metric` (and logged as `what` was done to them); a failed pass is logged and the
/// next one comes at the usual time.
pub(crate) async fn every<F, Fut>(
    what: &'static str,
    metric: &'static str,
    poll: std::time::Duration,
    stop: CancellationToken,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = hero_client::Result<u64>>,
{
    loop {
        match pass().await {
            Ok(n) if n > 0 => {
                metrics::counter!(metric).increment(n);
                tracing::debug!(jobs = n, "{what}")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "a pass that {what} failed; retrying"),
        }
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(poll) => {} }
    }
}
