//! Promotion of due delayed jobs and retries from `hero:meta:delayed` into their work streams,
//! through `hero_promote` (a second broker's call for the same job is a no-op).

use hero_client::Client;
use hero_protocol::job::{Placement, PLACEMENT_FIELDS};

use hero_protocol::{clock, function, JobId};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

const BATCH: usize = 500;

/// Why a due job whose record names no valid script type ends `error`.
const NO_QUEUE: &str = "invalid job: no valid script_type to dispatch it to";

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
            let Ok(job_id) = JobId::new(id) else {
                // a member no job of ours can have (written by hand): no record to end
                tracing::warn!(member = %id, "the delayed set holds a member that is no job id; removing it");
                let _: i64 = client
                    .redis()
                    .query(redis::cmd("ZREM").arg(keys.delayed()).arg(id))
                    .await?;
                continue;
            };
            // a reply that is not the fields (the key holds another type, or a value is not
            // text) is a record that cannot be read
            let placement = row
                .map_err(|e| e.to_string())
                .and_then(|v| {
                    redis::from_redis_value::<Vec<Option<String>>>(v).map_err(|e| e.to_string())
                })
                .map(|fields| Placement::read(&fields));
            match placement {
                Ok(Some(at)) => {
                    let stream = keys.work(&at.target, at.priority);
                    write.add_command(function::promote(keys, &job_id, &stream, &now).into_cmd());
                }
                // nothing to dispatch it to: it ends `error` through the function, with its
                // event and count, so it is never stuck `waiting`
                Ok(None) => {
                    write.add_command(
                        function::fail_unqueueable(keys, &job_id, NO_QUEUE, &now).into_cmd(),
                    );
                }
                Err(e) => {
                    let why = format!("invalid job: its record could not be read ({e})");
                    write.add_command(
                        function::fail_unqueueable(keys, &job_id, &why, &now).into_cmd(),
                    );
                }
            }
        }
        for r in client.redis().pipeline(&write).await? {
            match redis::from_redis_value::<String>(r?).as_deref() {
                Ok("promoted") => promoted += 1,
                Ok("failed") => {
                    tracing::warn!("a due job named no queue to dispatch it to; it ended error");
                }
                _ => {}
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
