//! The ticks of recurring jobs (`hero_client::cron`): every `cron_poll` each broker looks for
//! due ticks and claims each through `hero_cron`, which fires it in the same call; a tick
//! another broker claimed first is left to it.

use std::time::Duration;

use hero_client::{clock, Client};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

/// How late a tick may be and still fire under the skip policy: later than this, it was
/// missed (no broker ran when it was due).
const GRACE: Duration = Duration::from_secs(1);

pub async fn run(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    super::every(
        "fired recurring jobs",
        "cron",
        "hero_broker_cron_fired_total",
        cfg.cron_poll,
        stop,
        || async {
            let p = client.cron_pass(clock::now_ms(), GRACE).await?;
            if p.skipped > 0 {
                metrics::counter!("hero_broker_cron_skipped_total").increment(p.skipped);
                tracing::info!(ticks = p.skipped, "skipped missed ticks of recurring jobs");
            }
            Ok(p.fired)
        },
    )
    .await;
}
