//! Outbound: jobs of the mapped work stream are handed to the legacy list's actors with
//! `hero_bridge_out`, a batch every bridge poll.

use hero_client::Client;
use hero_protocol::function;
use hero_protocol::outage::Outage;
use redis::Value;
use tokio_util::sync::CancellationToken;

use super::route::{counts, pause, Route, BATCH};
use crate::config::BrokerConfig;

/// Hands jobs of the canonical stream to the legacy list.
pub(super) async fn run(client: Client, cfg: BrokerConfig, route: Route, stop: CancellationToken) {
    let mut outage = Outage::new(format!("the bridge's hand-out to {}", route.list));
    loop {
        let cmd = function::bridge_out(
            client.keys(),
            &route.queue,
            &route.stream,
            u64::try_from(route.m.pickup.as_millis()).unwrap_or(u64::MAX),
            BATCH,
            client.redis().caps().xackdel_flag(),
        );
        let mut wait = cfg.bridge_poll;
        match client.redis().query::<Value>(&cmd).await {
            Ok(v) => {
                outage.ok();
                let handed = counts(&v).first().copied().unwrap_or(0);
                if handed > 0 {
                    metrics::counter!("hero_bridge_outbound_total").increment(handed as u64);
                }
                if handed >= BATCH as i64 {
                    continue;
                }
            }
            Err(e) => wait = wait.max(outage.failed(&e)),
        }
        if !pause(&stop, wait).await {
            return;
        }
    }
}
