//! Redis's own health, every [`EVERY`]: the maxmemory policy (an ERROR once per change to an
//! evicting one, and `/readyz` fails while submits are refused for it), a failing disk
//! (MISCONF) said once per change, the memory and persistence figures `/metrics` shows, and the
//! epoch that tells a Redis that lost data (`hero_protocol::health`): an ERROR naming what may
//! be gone and since when, counted in `hero_redis_data_loss_total`, and kept for `hero audit`.

use std::sync::Mutex;
use std::time::Duration;

use hero_client::Client;
use hero_protocol::health::{EpochWatch, RedisInfo};
use hero_protocol::memory;
use tokio_util::sync::CancellationToken;

/// Often enough that a rollback or a policy change is seen within seconds; an INFO and a few
/// hash commands a pass.
pub const EVERY: Duration = Duration::from_secs(2);

/// What the last pass read, for `/metrics` and `/readyz` (shard 0's Redis when sharded).
static LAST: Mutex<Option<RedisInfo>> = Mutex::new(None);

pub fn last() -> Option<RedisInfo> {
    LAST.lock().ok().and_then(|l| l.clone())
}

/// The accepted policy (`--accept-eviction`), for `/readyz`.
static ACCEPTED: Mutex<Option<String>> = Mutex::new(None);

/// Why submits are refused now ('' when they are not): an evicting policy not accepted.
pub fn refusing() -> Option<String> {
    let info = last()?;
    let accepted = ACCEPTED.lock().ok().and_then(|a| a.clone());
    memory::refused(&info.policy, accepted.as_deref()).then(|| format!("Redis's maxmemory-policy is {}: hero refuses submits (it may evict job records); set it to noeviction", info.policy))
}

struct Pass {
    epoch: EpochWatch,
    disk_failing: bool,
    unfinished: u64,
    passes: u64,
}

async fn pass(client: &Client, first: bool, p: &mut Pass) -> hero_protocol::Result<u64> {
    let info = RedisInfo::read(client.redis()).await?;
    memory::note_policy(&info.policy);
    let failing = info.disk_failing();
    if failing != p.disk_failing {
        if failing {
            tracing::error!(
                aof = %info.aof_last_write_status,
                rdb = %info.rdb_last_bgsave_status,
                "Redis cannot write to its disk (MISCONF): it refuses every write until it can; workers keep their outcomes and send them again, submits fail. Free the disk or fix its permissions (docs/operations.md, a failed disk)"
            );
        } else {
            tracing::info!("Redis writes to its disk again");
        }
        p.disk_failing = failing;
    }
    if first {
        if let Ok(mut l) = LAST.lock() {
            *l = Some(info.clone());
        }
    }
    if info.loading {
        return Ok(0);
    }
    // the jobs that could be lost with the data: counted every 15 passes (O(queues))
    if p.passes.is_multiple_of(15) {
        if let Ok(qs) = hero_admin::Inspector::from(client).queues().await {
            p.unfinished = qs
                .iter()
                .map(|q| q.waiting + q.running + q.delayed.max(0) as u64)
                .sum();
        }
    }
    p.passes += 1;
    match p
        .epoch
        .pass(client.redis(), client.keys(), p.unfinished)
        .await
    {
        Ok(Some(loss)) => {
            metrics::counter!("hero_redis_data_loss_total").increment(1);
            tracing::error!("{}", loss.describe());
        }
        Ok(None) => {}
        // a full Redis refuses the count: the loss check waits for room, the rest goes on
        Err(hero_protocol::Error::OutOfMemory { .. }) => {}
        Err(e) => return Err(e),
    }
    Ok(0)
}

/// `first`: this shard's figures are the ones `/metrics` and `/readyz` show (shard 0).
pub async fn run(client: Client, accept: Option<String>, first: bool, stop: CancellationToken) {
    if first {
        if let Ok(mut a) = ACCEPTED.lock() {
            *a = accept;
        }
    }
    let mut p = Pass {
        epoch: EpochWatch::default(),
        disk_failing: false,
        unfinished: 0,
        passes: 0,
    };
    let mut outage = hero_protocol::outage::Outage::new("the Redis health pass");
    loop {
        let wait = match super::timed("health", pass(&client, first, &mut p)).await {
            Ok(_) => {
                outage.ok();
                EVERY
            }
            Err(e) => outage.failed(&e).max(EVERY),
        };
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(wait) => {} }
    }
}
