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
    // the soak's ids are chosen and its load's jobs keyed, so each lives at its key's home (one
    // shard when unsharded)
    let mut by_shard: std::collections::BTreeMap<String, (Client, Vec<usize>)> =
        std::collections::BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let home = client.home_client(&home_key(id));
        by_shard
            .entry(home.keys().prefix().to_string())
            .or_insert_with(|| (home, Vec::new()))
            .1
            .push(i);
    }
    let mut out = vec![(None, None); ids.len()];
    for (shard, idx) in by_shard.values() {
        for chunk in idx.chunks(1000) {
            let mut pipe = redis::pipe();
            for &i in chunk {
                pipe.cmd("HMGET")
                    .arg(shard.keys().job_unchecked(&ids[i]))
                    .arg("status")
                    .arg("output");
            }
            for (&i, r) in chunk.iter().zip(shard.redis().pipeline(&pipe).await?) {
                out[i] = r
                    .ok()
                    .and_then(|v| redis::from_redis_value(v).ok())
                    .unwrap_or((None, None));
            }
        }
    }
    Ok(out)
}

/// Redis's memory, summed over the nodes that serve the namespace's shards.
pub(super) async fn used_memory(client: &Client) -> Result<u64> {
    let mut nodes = std::collections::HashSet::new();
    let mut total = 0;
    for (_, shard) in client.all_shard_clients() {
        if !nodes.insert(shard.redis().node_url()) {
            continue;
        }
        let info: String = shard
            .redis()
            .query(redis::cmd("INFO").arg("memory"))
            .await?;
        total += info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .context("no used_memory in INFO memory")?;
    }
    Ok(total)
}

/// The tenants (limit keys) the load's jobs are spread over, served in turns.
const TENANTS: u64 = 8;

/// The limit key (tenant) of the load's job `c-<i>`.
pub(super) fn tenant(i: u64) -> String {
    format!("t{}", i % TENANTS)
}

/// The key whose home holds job `id` in a sharded namespace: a load job's tenant (a limit key
/// places its jobs), else the chosen id.
pub(super) fn home_key(id: &str) -> String {
    match id.strip_prefix("c-").and_then(|i| i.parse::<u64>().ok()) {
        Some(i) => tenant(i),
        None => id.to_string(),
    }
}
