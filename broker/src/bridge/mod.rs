//! The legacy bridge (SPEC §6): the loops that serve each mapping of seed-001 list queues to
//! canonical targets. Every move is one server function (`hero_bridge_in`, `hero_bridge_out`,
//! `hero_bridge_watch`, and dual-push inside `hero_submit`), so a broker killed at any point
//! leaves each job in exactly one place, and several brokers with the same mappings can run at
//! once.
//!
//! - [`mapping`]: what a mapping is and how flags and the config file spell it.
//! - `inbound`: legacy list → work stream; `outbound`: work stream → legacy list; `watch`: the
//!   jobs legacy actors hold, until they end or are taken back; `route`: the keys one mapping's
//!   loops use, and what the loops share.

mod inbound;
pub mod mapping;
mod outbound;
mod route;
mod watch;

use route::Route;

pub use mapping::{load_file, BridgeConfigError, BridgeMapping, Direction, DEFAULT_PICKUP};

use hero_client::Client;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

fn routes(client: &Client, cfg: &BrokerConfig) -> hero_protocol::Result<Vec<Route>> {
    cfg.bridges
        .iter()
        .map(|m| Route::new(client.keys(), m))
        .collect()
}

/// Writes the dual-push registry `hero_submit` reads and the legacy reply prefix (in
/// compatibility mode) into Redis; both replace what an earlier broker published.
pub async fn publish(client: &Client, cfg: &BrokerConfig) -> hero_protocol::Result<()> {
    let keys = client.keys();
    let mut tx = redis::pipe();
    tx.atomic().del(keys.bridge_registry()).ignore();
    let mut bridged = 0u64;
    for route in routes(client, cfg)?.iter().filter(|l| l.m.dual_push) {
        bridged += 1;
        let entry = serde_json::json!({
            "list": route.list,
            "stop": route.stop,
            "track": route.track,
            "worker": route.queue.worker_id(),
            "pickup_ms": route.m.pickup.as_millis() as u64,
        });
        tx.hset(keys.bridge_registry(), &route.stream, entry.to_string())
            .ignore();
    }
    // how many mappings the registry holds: a submit reads it with its settings, and asks the
    // registry only while it is above 0
    tx.hset(keys.config(), "bridged", bridged).ignore();
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
) -> hero_protocol::Result<()> {
    let mut tasks = Vec::new();
    for route in routes(&client, &cfg)? {
        tracing::info!(legacy = %route.list, stream = %route.stream, direction = ?route.m.direction, dual_push = route.m.dual_push, "bridge mapping");
        if route.m.direction.inbound() {
            tasks.push(tokio::spawn(inbound::run(
                client.clone(),
                cfg.clone(),
                route.clone(),
                stop.clone(),
            )));
        }
        if route.m.direction.outbound() {
            if !route.m.dual_push {
                tasks.push(tokio::spawn(outbound::run(
                    client.clone(),
                    cfg.clone(),
                    route.clone(),
                    stop.clone(),
                )));
            }
            tasks.push(tokio::spawn(watch::run(
                client.clone(),
                cfg.clone(),
                route,
                stop.clone(),
            )));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
