//! Promotion of due delayed jobs and retries from `hero:meta:delayed` into their work streams,
//! through `hero_promote` (a second broker's call for the same job is a no-op).

use hero_client::function::Function;
use hero_client::keys::CONSUMER_GROUP;
use hero_client::{clock, Client, GroupName, InstanceName, JobId, Priority, ScriptType, Target};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

const BATCH: usize = 500;

/// Promotes every job due now; returns how many went to a stream.
pub async fn pass(client: &Client) -> hero_client::Result<u64> {
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
            read.cmd("HMGET").arg(keys.job_unchecked(id)).arg(&[
                "script_type",
                "group",
                "instance",
                "priority",
            ]);
        }
        let targets = client.redis().pipeline(&read).await?;
        let mut write = redis::pipe();
        let now = clock::now_iso();
        for (id, row) in due.iter().zip(targets) {
            let fields: Vec<Option<String>> = redis::from_redis_value(row?).unwrap_or_default();
            let get = |i: usize| fields.get(i).cloned().flatten().unwrap_or_default();
            let target = ScriptType::new(get(0)).ok().map(|t| {
                Target::new(
                    t,
                    GroupName::new(get(1)).ok(),
                    InstanceName::new(get(2)).ok(),
                )
            });
            let priority = get(3)
                .parse()
                .ok()
                .and_then(|p| Priority::new(p).ok())
                .unwrap_or_default();
            match (JobId::new(id), target) {
                (Ok(job_id), Some(target)) => {
                    let mut cmd = Function::Promote.call(&[
                        keys.delayed(),
                        keys.job(&job_id),
                        keys.work(&target, priority),
                        keys.queues(),
                    ]);
                    cmd.arg(id).arg(CONSUMER_GROUP).arg(&now);
                    write.add_command(cmd);
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
    crate::broker::every(
        "promoted delayed jobs",
        metric,
        cfg.promote_poll,
        stop,
        || pass(&client),
    )
    .await
}
