//! The watch: follows the jobs legacy actors hold (handed out, or dual-pushed) with
//! `hero_bridge_watch` until their record says they ended, and takes back the ones no actor
//! picked up or finished.

use hero_client::Client;
use hero_protocol::function::{self, Watch};
use hero_protocol::outage::Outage;
use redis::Value;
use tokio_util::sync::CancellationToken;

use super::route::{counts, pause, Route, BATCH};
use crate::config::BrokerConfig;

/// Follows the jobs legacy actors hold, a pass every `bridge_poll`.
pub(super) async fn run(client: Client, cfg: BrokerConfig, route: Route, stop: CancellationToken) {
    let mut outage = Outage::new(format!("the bridge's watch of {}", route.list));
    loop {
        let wait = match pass(&client, &cfg, &route).await {
            Ok(()) => {
                outage.ok();
                cfg.bridge_poll
            }
            Err(e) => outage.failed(&e).max(cfg.bridge_poll),
        };
        if !pause(&stop, wait).await {
            return;
        }
    }
}

async fn pass(client: &Client, cfg: &BrokerConfig, route: &Route) -> hero_protocol::Result<()> {
    let watch = Watch {
        queue: &route.queue,
        stream: &route.stream,
        pickup_ms: u64::try_from(route.m.pickup.as_millis()).unwrap_or(u64::MAX),
        dual_push: route.m.dual_push,
    };
    let mut rank = 0i64;
    loop {
        let cmd = function::bridge_watch(
            client.keys(),
            &watch,
            cfg.max_attempts,
            client.redis().caps().xackdel_flag(),
            BATCH,
            rank,
        );
        let v: Value = client.redis().query(&cmd).await?;
        let c = counts(&v);
        let (ended, requeued, failed) = (
            c.first().copied().unwrap_or(0),
            c.get(1).copied().unwrap_or(0),
            c.get(2).copied().unwrap_or(0),
        );
        if requeued + failed > 0 {
            tracing::info!(list = %route.list, ended, requeued, failed, "bridge took back jobs legacy actors did not take or finish");
        }
        rank = c.get(3).copied().unwrap_or(0);
        if rank == 0 {
            return Ok(());
        }
    }
}
