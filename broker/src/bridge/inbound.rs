//! Inbound: ids legacy producers push to a legacy list move into the mapped work stream,
//! each in one `hero_bridge_in` call; between passes the loop waits on the list itself.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::function;
use hero_protocol::outage::Outage;
use redis::Value;
use tokio_util::sync::CancellationToken;

use super::route::{counts, pause, Route, BATCH};
use crate::config::BrokerConfig;

/// How long the loop blocks waiting for a legacy list to fill before it looks again.
const WAKE_BLOCK: Duration = Duration::from_secs(1);

/// Moves what legacy producers push into the canonical stream, then waits for the list to fill
/// with `BLMOVE list list RIGHT RIGHT`: popping and pushing back the same end in one command
/// changes nothing, so it wakes this loop without taking an id out of the list even for a
/// moment.
pub(super) async fn run(client: Client, cfg: BrokerConfig, route: Route, stop: CancellationToken) {
    let keys = client.keys();
    let mut waker = None;
    let mut outage = Outage::new(format!("the bridge's inbound move from {}", route.list));
    loop {
        let cmd = function::bridge_in(keys, &route.list, &route.stream, &route.m.target, BATCH);
        let (moved, dead, blocked) = match client.redis().query::<Value>(&cmd).await {
            Ok(v) => {
                outage.ok();
                let c = counts(&v);
                (
                    c.first().copied().unwrap_or(0),
                    c.get(1).copied().unwrap_or(0),
                    c.get(2) == Some(&1),
                )
            }
            Err(e) => {
                if !pause(&stop, outage.failed(&e).max(cfg.bridge_poll)).await {
                    return;
                }
                continue;
            }
        };
        if moved > 0 {
            metrics::counter!("hero_bridge_inbound_total").increment(moved as u64);
        }
        if dead > 0 {
            tracing::warn!(list = %route.list, dead, "legacy ids without a usable job hash went to the dead-letter stream");
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
                    if !pause(&stop, outage.failed(&e).max(cfg.bridge_poll)).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(conn) = waker.as_mut() else { continue };
        let mut wait = redis::cmd("BLMOVE");
        wait.arg(&route.list)
            .arg(&route.list)
            .arg("RIGHT")
            .arg("RIGHT")
            .arg(WAKE_BLOCK.as_secs_f64());
        let woke = tokio::select! {
            _ = stop.cancelled() => return,
            r = wait.query_async::<Value>(conn) => r,
        };
        if let Err(e) = woke {
            // the next move reports an outage; a dropped wake-up connection alone is made again
            tracing::debug!(error = %e, "bridge wake-up wait failed; reconnecting");
            waker = None;
        }
    }
}
