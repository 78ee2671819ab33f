//! The ticks of recurring jobs (`hero_protocol::cron`): every `cron_poll` each broker looks for
//! due ticks and claims each through `hero_cron`, which fires it in the same call; a tick
//! another broker claimed first is left to it.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::cron::{self, Missed};
use hero_protocol::{clock, function, Result};
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
            let p = pass(&client, clock::now_ms(), GRACE).await?;
            if p.skipped > 0 {
                metrics::counter!("hero_broker_cron_skipped_total").increment(p.skipped);
                tracing::info!(ticks = p.skipped, "skipped missed ticks of recurring jobs");
            }
            Ok(p.fired)
        },
    )
    .await;
}

/// How one broker pass over the recurring jobs went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CronPass {
    pub fired: u64,
    pub skipped: u64,
}

/// One broker pass: every recurring job whose tick is due is claimed and (under its
/// missed-tick policy) fired, each through one `hero_cron` call; a job seen for the first
/// time gets its first tick. `grace` is how late a tick may be and still count as on time
/// for the skip policy.
pub async fn pass(client: &Client, now_ms: u64, grace: Duration) -> Result<CronPass> {
    let mut pass = CronPass::default();
    for e in cron::list(client.redis(), client.keys()).await? {
        if e.job.paused {
            continue;
        }
        let Ok(schedule) = e.job.validate() else {
            continue;
        };
        let Some(after_now) = schedule.next_after(now_ms) else {
            continue;
        };
        let (fire, tick) = match e.next_ms {
            None => (false, None),
            Some(next) if next > now_ms => continue,
            Some(next) => {
                let late = now_ms - next;
                (
                    e.job.missed == Missed::CatchUp || late <= grace.as_millis() as u64,
                    Some(next),
                )
            }
        };
        let job = e.job.job_for(tick.unwrap_or(0))?;
        let call = function::cron(client.keys(), &e.job.name, tick, after_now, &job, fire);
        let answer: Vec<String> = client.redis().query(&call).await?;
        if answer.first().map(String::as_str) == Some("claimed") && tick.is_some() {
            if fire {
                pass.fired += 1;
            } else {
                pass.skipped += 1;
            }
        }
    }
    Ok(pass)
}
