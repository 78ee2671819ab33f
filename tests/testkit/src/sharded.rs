//! Helpers for the tests of sharded namespaces: plain jobs submitted in chunks, and a bounded
//! wait until every one of them is finished, read through the sharded client.

use std::time::{Duration, Instant};

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};

/// Waits until every job is finished, reading each through the sharded client (its id names
/// its shard), and answers their records' attempts.
pub async fn all_finished_on_shards(client: &Client, ids: &[String], limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    let mut left: Vec<&String> = ids.iter().collect();
    while !left.is_empty() {
        let mut still = Vec::new();
        for id in left {
            let st = client.status(&JobId::new(id).unwrap()).await.unwrap();
            if st != Status::Finished {
                still.push(id);
            }
        }
        left = still;
        assert!(
            Instant::now() <= deadline,
            "{} jobs not finished, e.g. {:?}",
            left.len(),
            left.first()
        );
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut attempts = Vec::new();
    for id in ids {
        attempts.push(client.get(&JobId::new(id).unwrap()).await.unwrap().attempts);
    }
    attempts
}

pub fn plain_jobs(n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|_| NewJob::builder("t", "x").build().unwrap())
        .collect()
}

/// Submits `jobs` in chunks of 100 and answers the ids the submits gave (naming the shards).
pub async fn submit_all(client: &Client, jobs: &[NewJob]) -> Vec<String> {
    let mut ids = Vec::new();
    for chunk in jobs.chunks(100) {
        for r in client.submit_many(chunk).await.unwrap() {
            let s = r.unwrap();
            assert!(s.created);
            ids.push(s.id.to_string());
        }
    }
    ids
}
