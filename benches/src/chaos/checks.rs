//! Reading the system back: a probe job that measures a recovery, every job's status and output,
//! the wait until all have ended, Redis's memory.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hero_client::Client;
use hero_protocol::NewJob;

use super::{now_ms, TYPE};

/// Submits a probe job (again until acknowledged) and waits for it to finish.
pub(super) fn probe(client: Client, id: String) -> tokio::task::JoinHandle<Option<u64>> {
    tokio::spawn(async move {
        let job = NewJob::builder(TYPE, "x").id(id.clone()).build().ok()?;
        let deadline = Instant::now() + Duration::from_secs(180);
        while client.submit(&job).await.is_err() {
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let key = client.keys().job_unchecked(&id);
        while Instant::now() < deadline {
            let status: Option<String> = client
                .redis()
                .query(redis::cmd("HGET").arg(&key).arg("status"))
                .await
                .unwrap_or(None);
            if status.as_deref() == Some("finished") {
                return Some(now_ms());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    })
}

pub(super) async fn wait_ended(client: &Client, ids: &[String], limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    let mut unfinished: Vec<String> = ids.to_vec();
    while !unfinished.is_empty() && Instant::now() < deadline {
        let records = read_records(client, &unfinished).await?;
        unfinished = unfinished
            .into_iter()
            .zip(records)
            .filter(|(_, (s, _))| s.as_deref() != Some("finished"))
            .map(|(id, _)| id)
            .collect();
        if !unfinished.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

/// Each job's status and output, pipelined.
pub(super) async fn read_records(
    client: &Client,
    ids: &[String],
) -> Result<Vec<(Option<String>, Option<String>)>> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.cmd("HMGET")
                .arg(client.keys().job_unchecked(id))
                .arg("status")
                .arg("output");
        }
        for r in client.redis().pipeline(&pipe).await? {
            let pair: (Option<String>, Option<String>) = r
                .ok()
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or((None, None));
            out.push(pair);
        }
    }
    Ok(out)
}

pub(super) async fn used_memory(client: &Client) -> Result<u64> {
    let info: String = client
        .redis()
        .query(redis::cmd("INFO").arg("memory"))
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no used_memory in INFO memory")
}
