//! The time limits, enforced by the server whatever the worker does (issue 27): every
//! [`BrokerConfig::timeout_poll`] the running jobs (each stream's pending entries) are read
//! with their records, and a job running past its limit plus [`GRACE`] is ended
//! `error`/`timeout` by `hero_stop` (why `timeout`): its entry is acknowledged, so the late
//! completion of the worker that kept it is fenced (`lease_lost` or `already_completed`), its
//! renewals answer `stopped`, and its worker is told through its control list. The limit is the
//! job's own `timeout`, else its queue policy's, else 300 s. A worker of the SDK ends its job
//! at the limit itself (a `fail`, retried while the budget lasts): the grace lets it.
//!
//! Cost: O(running jobs) a pass, two pipelined reads each, never O(jobs); nothing on the job
//! path.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::keys::{is_bridge_consumer, CONSUMER_GROUP};
use hero_protocol::{clock, function, JobId, DEFAULT_TIMEOUT};
use redis::Value;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;

/// How long past its limit a job may still end by its worker's own timeout before the broker
/// ends it.
pub const GRACE: Duration = Duration::from_secs(2);

/// Pending entries read per round trip.
const PAGE: usize = 500;

/// A running job as the pass reads it: its delivery, its worker and when it must end.
struct Running {
    job: String,
    worker: String,
    deadline_ms: u64,
}

/// One pass over every stream; answers how many jobs it ended.
pub async fn pass(client: &Client) -> hero_protocol::Result<u64> {
    let policies = hero_protocol::policy::read_policies(client.redis(), client.keys()).await?;
    let now = clock::now_ms();
    let mut ended = 0;
    for stream in hero_admin::Inspector::from(client).queue_streams().await? {
        let mut from = "-".to_string();
        loop {
            let rows: Vec<(String, String, u64, u64)> = match client
                .redis()
                .query(
                    redis::cmd("XPENDING")
                        .arg(&stream)
                        .arg(CONSUMER_GROUP)
                        .arg(&from)
                        .arg("+")
                        .arg(PAGE),
                )
                .await
            {
                Ok(rows) => rows,
                // a stream without the group (made by hand) runs nothing
                Err(hero_protocol::Error::Redis(e)) if e.code() == Some("NOGROUP") => Vec::new(),
                Err(e) => return Err(e),
            };
            let entries: Vec<&String> = rows
                .iter()
                .filter(|(_, consumer, _, _)| !is_bridge_consumer(consumer))
                .map(|(id, _, _, _)| id)
                .collect();
            for r in running(client, &stream, &entries, &policies).await? {
                if r.deadline_ms + GRACE.as_millis() as u64 <= now {
                    let Ok(id) = JobId::new(&r.job) else { continue };
                    if function::stop_job(
                        client.redis(),
                        client.keys(),
                        &id,
                        function::StopWhy::Timeout,
                        Some(&r.worker),
                    )
                    .await?
                        == "timeout"
                    {
                        tracing::warn!(job = %r.job, worker = %r.worker, "ended a job running past its time limit");
                        ended += 1;
                    }
                }
            }
            match rows.last() {
                Some((last, ..)) if rows.len() == PAGE => from = format!("({last}"),
                _ => break,
            }
        }
    }
    Ok(ended)
}

/// The jobs the pending `entries` of `stream` deliver, each still `started` by that very
/// delivery, with their deadlines.
async fn running(
    client: &Client,
    stream: &str,
    entries: &[&String],
    policies: &hero_protocol::policy::Policies,
) -> hero_protocol::Result<Vec<Running>> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for e in entries {
        pipe.cmd("XRANGE").arg(stream).arg(*e).arg(*e);
    }
    let mut jobs = Vec::with_capacity(entries.len());
    for r in client.redis().pipeline(&pipe).await? {
        let Value::Array(found) = r? else {
            jobs.push(None);
            continue;
        };
        let job = found.first().and_then(|entry| {
            let (_, fields): (String, Vec<(String, String)>) =
                redis::from_redis_value(entry.clone()).ok()?;
            fields.into_iter().find(|(k, _)| k == "j").map(|(_, v)| v)
        });
        jobs.push(job);
    }
    let mut read = redis::pipe();
    let asked: Vec<(&String, &String)> = entries
        .iter()
        .zip(&jobs)
        .filter_map(|(e, j)| Some((*e, j.as_ref()?)))
        .collect();
    for (_, job) in &asked {
        read.cmd("HMGET")
            .arg(client.keys().job_unchecked(job))
            .arg(&[
                "status",
                "lease",
                "started_at",
                "timeout",
                "script_type",
                "group",
                "worker_id",
            ]);
    }
    let mut out = Vec::new();
    for ((entry, job), r) in asked.iter().zip(client.redis().pipeline(&read).await?) {
        // a key of another type is foreign data: the audit reports it
        let Ok(v) = r else { continue };
        let f: Vec<Option<String>> = redis::from_redis_value(v).unwrap_or_default();
        let get = |i: usize| f.get(i).cloned().flatten();
        if get(0).as_deref() != Some("started") || get(1).as_deref() != Some(entry.as_str()) {
            continue;
        }
        let Some(started_ms) = get(2).as_deref().and_then(clock::parse_iso_ms) else {
            continue;
        };
        let limit = get(3)
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_secs)
            .or_else(|| {
                let t = get(4)?;
                policies
                    .of(&t, get(5).as_deref())?
                    .timeout_ms
                    .map(Duration::from_millis)
            })
            .unwrap_or(DEFAULT_TIMEOUT);
        out.push(Running {
            job: (*job).clone(),
            worker: get(6).unwrap_or_default(),
            deadline_ms: started_ms + limit.as_millis() as u64,
        });
    }
    Ok(out)
}

pub async fn run(client: Client, cfg: BrokerConfig, stop: CancellationToken) {
    super::every(
        "ended past their time limit",
        "timeouts",
        "hero_broker_timeouts_total",
        cfg.timeout_poll,
        stop,
        || pass(&client),
    )
    .await;
}
