//! Promotion of due delayed jobs and retries from `hero:meta:delayed` into their work streams,
//! through `hero_promote` (a second broker's call for the same job is a no-op).

use hero_client::Client;
use hero_protocol::job::{Placement, PLACEMENT_FIELDS};
use hero_protocol::{clock, function, JobId};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

const BATCH: usize = 500;

/// Promotes every job due now; returns how many went to a stream.
pub async fn pass(client: &Client) -> hero_protocol::Result<u64> {
    let keys = client.keys();
    let mut promoted = 0;
    loop {
        let due: Vec<String> = client
            .redis()
            .query(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(keys.delayed())
                    .arg("-inf")
                    .arg(clock::now_ms())
                    .arg("LIMIT")
                    .arg(0)
                    .arg(BATCH),
            )
            .await?;
        if due.is_empty() {
            return Ok(promoted);
        }
        let mut read = redis::pipe();
        for id in &due {
            read.cmd("HMGET")
                .arg(keys.job_unchecked(id))
                .arg(&PLACEMENT_FIELDS);
        }
        let targets = client.redis().pipeline(&read).await?;
        let mut write = redis::pipe();
        let now = clock::now_iso();
        for (id, row) in due.iter().zip(targets) {
            let fields: Vec<Option<String>> = redis::from_redis_value(row?).unwrap_or_default();
            match (JobId::new(id), Placement::read(&fields)) {
                (Ok(job_id), Some(at)) => {
                    let stream = keys.work(&at.target, at.priority);
                    write.add_command(function::promote(keys, &job_id, &stream, &now).into_cmd());
                }
                (job_id, _) => {
                    // Nothing to dispatch it to: it ends `error` with the reason, atomically with
                    // leaving the delayed set, so it is never stuck `waiting`.
                    tracing::warn!(job = %id, "delayed job has no valid script type; failing it");
                    let mut tx = redis::pipe();
                    tx.atomic().cmd("ZREM").arg(keys.delayed()).arg(id).ignore();
                    if let Ok(job_id) = job_id {
                        tx.cmd("HSET")
                            .arg(keys.job(&job_id))
                            .arg("status")
                            .arg("error")
                            .arg("error")
                            .arg("invalid job: no valid script_type to dispatch it to")
                            .arg("updated_at")
                            .arg(&now)
                            .ignore();
                    }
                    client.redis().pipeline(&tx).await?;
                }
            }
        }
        for r in client.redis().pipeline(&write).await? {
            if redis::from_redis_value::<String>(r?).is_ok_and(|answer| answer == "promoted") {
                promoted += 1;
            }
        }
        if due.len() < BATCH {
            return Ok(promoted);
        }
    }
}

pub async fn run(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    let metric = "hero_broker_promoted_total";
    super::every(
        "promoted delayed jobs",
        "promote",
        metric,
        cfg.promote_poll,
        stop,
        || pass(&client),
    )
    .await;
}
