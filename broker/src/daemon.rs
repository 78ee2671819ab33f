//! The broker daemon: publishes the settings the server functions (and workers and clients in
//! other languages) read, then runs the periodic loops (`loops`) and the legacy bridge until told
//! to stop. It holds no state of its own, so any number of brokers may run against one Redis.

use hero_client::Client;
use hero_protocol::fleet;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

/// Writes retention, reply TTL, the lease and the event log's cap into the namespace's config
/// hash (`lease_ms` is what a worker in another language renews within: docs/protocol.md).
pub async fn publish_config(client: &Client, cfg: &BrokerConfig) -> hero_protocol::Result<()> {
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
                .arg(cfg.events_max)
                .arg("max_attempts")
                .arg(cfg.max_attempts)
                .arg("dead_retention_ms")
                .arg(cfg.dead_retention.as_millis() as u64),
        )
        .await?;
    // the policy the operator accepts: `hero_submit` takes jobs under it (settings.lua)
    let accept = match &cfg.accept_eviction {
        Some(policy) => {
            let mut c = redis::cmd("HSET");
            c.arg(client.keys().config())
                .arg("accept_eviction")
                .arg(policy);
            c
        }
        None => {
            let mut c = redis::cmd("HDEL");
            c.arg(client.keys().config()).arg("accept_eviction");
            c
        }
    };
    let _: redis::Value = client.redis().query(&accept).await?;
    crate::bridge::publish(client, cfg).await
}

/// Runs every broker loop until `stop` is cancelled: on every shard of the namespace (one set
/// of loops a shard, started as shards are added), the legacy bridge on shard 0, and the pass
/// that retires drained shards.
pub async fn run(
    client: Client,
    cfg: BrokerConfig,
    stop: CancellationToken,
) -> hero_protocol::Result<()> {
    tracing::info!(redis = %client.redis().url(), "broker running");
    let mut shards: Vec<(Client, tokio::task::JoinHandle<()>)> = Vec::new();
    let bridge = tokio::spawn(crate::bridge::run(
        client.clone(),
        cfg.clone(),
        stop.clone(),
    ));
    let mut outage = hero_protocol::outage::Outage::new("retiring drained shards");
    loop {
        for (n, shard) in client.all_shard_clients() {
            if shards.iter().any(|(c, _)| c.keys() == shard.keys()) {
                continue;
            }
            if n > 0 {
                tracing::info!(shard = n, prefix = %shard.keys().prefix(), "running the passes of a new shard");
            }
            let task = tokio::spawn(run_shard(shard.clone(), cfg.clone(), n == 0, stop.clone()));
            shards.push((shard, task));
        }
        match client.retire_drained_shards(cfg.retention).await {
            Ok(Some(_)) => outage.ok(),
            Ok(None) => {}
            Err(e) => {
                outage.failed(&e);
            }
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(hero_protocol::shard::REFRESH) => {}
        }
    }
    for (_, t) in shards {
        let _ = t.await;
    }
    bridge.await.unwrap_or(Ok(()))
}

/// Every loop of one shard (`client` bound to it), until `stop` is cancelled.
async fn run_shard(client: Client, cfg: BrokerConfig, first: bool, stop: CancellationToken) {
    match publish_config(&client, &cfg).await {
        Ok(()) => {}
        // a full Redis is no reason to stop: the loops that drain it still run (their
        // functions are allow-oom), and `republish` writes the settings once there is room
        Err(e @ hero_protocol::Error::OutOfMemory { .. }) => {
            tracing::error!(error = %e, "Redis is full; the broker runs on and retries its settings");
        }
        Err(e) => {
            hero_protocol::outage::report(
                "publishing the broker's settings (retried every 10 s)",
                &e,
            );
        }
    }
    let tasks = [
        tokio::spawn(duties(client.clone(), cfg.clone(), stop.clone())),
        tokio::spawn(republish(client.clone(), cfg.clone(), stop.clone())),
        tokio::spawn(crate::loops::health::run(
            client.clone(),
            cfg.accept_eviction.clone(),
            first,
            stop.clone(),
        )),
        tokio::spawn(crate::loops::batch_ends::run(client.clone(), stop.clone())),
    ];
    for t in tasks {
        let _ = t.await;
    }
}

/// The queue's upkeep (promotion, recovery, time limits, retention, depth samples) through
/// `hero_duties`, as
/// every worker does it too: whichever process holds the duty lease does it, the broker being
/// one contender among them. Its moves feed the broker's counters.
async fn duties(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    let pace = hero_protocol::duties::Pace {
        holder: cfg.promote_poll.min(cfg.presence_poll),
        ..Default::default()
    };
    hero_protocol::duties::run(
        client.redis().clone(),
        client.keys().clone(),
        fleet::broker_name(),
        pace,
        stop,
        |d| {
            metrics::counter!("hero_broker_promoted_total").increment(d.promoted);
            metrics::counter!("hero_broker_requeued_total", "path" => "duties")
                .increment(d.recovered);
            metrics::counter!("hero_broker_dead_lettered_total", "path" => "duties")
                .increment(d.dead);
            metrics::counter!("hero_broker_timeouts_total").increment(d.timed_out);
            metrics::counter!("hero_broker_expired_total").increment(d.expired);
            if d.recovered + d.dead > 0 {
                tracing::info!(
                    requeued = d.recovered,
                    dead = d.dead,
                    "recovered the jobs of dead workers or idle deliveries"
                );
            }
            if d.timed_out > 0 {
                tracing::warn!(
                    jobs = d.timed_out,
                    "ended jobs running past their time limit"
                );
            }
        },
    )
    .await;
}

/// A Redis restarted without persistence forgets the settings: write them again now and then.
/// Also renews the broker's entry in the fleet (its protocol, for `hero actors` and the
/// checks at submit: `hero_protocol::fleet`), removed again when it stops.
async fn republish(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    let mut outage = hero_protocol::outage::Outage::new("publishing the broker's settings");
    let name = fleet::broker_name();
    let every = std::time::Duration::from_secs(10);
    loop {
        let registered = fleet::register(
            client.redis(),
            client.keys(),
            &name,
            fleet::Role::Broker,
            env!("CARGO_PKG_VERSION"),
            every * 3,
        )
        .await;
        tokio::select! {
            _ = stop.cancelled() => {
                let _ = fleet::unregister(client.redis(), client.keys(), &name).await;
                return;
            }
            _ = tokio::time::sleep(every) => {}
        }
        // the fleet summary (`fleet_lacks`) is the duties' holder's to write (lib/fleet.lua)
        let registered =
            registered.map(|beat| hero_protocol::memory::note_policy(&beat.memory_policy));
        match registered.and(publish_config(&client, &cfg).await) {
            Ok(()) => outage.ok(),
            Err(e) => {
                outage.failed(&e);
            }
        }
    }
}
