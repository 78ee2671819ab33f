//! The depth sample: every [`EVERY`] the number of jobs waiting in each queue is written into
//! the current minute's stats hash (`<stream>|waiting`), so the dashboard can chart queue depth
//! over the last hour without keeping state of its own. O(queues) a pass; with several brokers
//! the last write of a minute wins, which is the same number.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::clock;
use hero_protocol::stats::{self, MINUTE_TTL_SECS, WAITING_SAMPLE};
use tokio_util::sync::CancellationToken;

/// Twice a minute, so that every minute holds a sample even when a pass runs late.
pub const EVERY: Duration = Duration::from_secs(30);

pub async fn pass(client: &Client) -> hero_protocol::Result<u64> {
    let queues = hero_admin::Inspector::from(client).queues().await?;
    if queues.is_empty() {
        return Ok(0);
    }
    let now = clock::now_iso();
    let key = client.keys().stats_minute(&now);
    let mut hset = redis::cmd("HSET");
    hset.arg(&key);
    for q in &queues {
        hset.arg(stats::field(&q.stream, WAITING_SAMPLE))
            .arg(q.waiting);
    }
    let mut pipe = redis::pipe();
    pipe.add_command(hset).ignore();
    // NX: a TTL the functions set first stays; a hash this pass made gets one
    pipe.cmd("EXPIRE")
        .arg(&key)
        .arg(MINUTE_TTL_SECS)
        .arg("NX")
        .ignore();
    client.redis().pipeline(&pipe).await?;
    Ok(0)
}

pub async fn run(client: Client, stop: CancellationToken) {
    super::every(
        "sampled queue depths",
        "sample",
        "hero_broker_samples_total",
        EVERY,
        stop,
        || pass(&client),
    )
    .await;
}
