//! The soak's steady load: this build's producer, in process, submitting a batch every 20 ms
//! (ids `c-<n>`); a batch refused or lost is sent again until it is acknowledged (ids make a
//! resend harmless), so every job counted was acknowledged. Each batch's acknowledgement time
//! is kept, to count a bad job against the fault before it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use hero_client::Client;
use hero_protocol::NewJob;

use super::checks::tenant;
use super::{now_ms, TYPE};

pub(super) struct Load {
    stop: Arc<AtomicBool>,
    /// Jobs acknowledged so far (`c-0` .. `c-<n-1>`).
    pub(super) submitted: Arc<AtomicU64>,
    /// Per batch: the index after its last job, and when it was acknowledged (unix ms).
    pub(super) acks: Arc<Mutex<Vec<(u64, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    /// `rate` jobs a second; `keyed`: each job with one of eight tenants' limit keys (a fair
    /// queue's).
    pub(super) fn start(client: Client, rate: u64, keyed: bool) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let submitted = Arc::new(AtomicU64::new(0));
        let acks: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
        let task = {
            let (stop, submitted, acks) = (stop.clone(), submitted.clone(), acks.clone());
            let per_batch = (rate / 50).max(1);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(20));
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let from = submitted.load(Ordering::Relaxed);
                    let jobs: Vec<NewJob> = (from..from + per_batch)
                        .filter_map(|i| {
                            let b = NewJob::builder(TYPE, "x").id(format!("c-{i}"));
                            let b = if keyed { b.limit_key(tenant(i)) } else { b };
                            b.build().ok()
                        })
                        .collect();
                    loop {
                        match client.submit_many(&jobs).await {
                            Ok(rs) if rs.iter().all(|r| r.is_ok()) => break,
                            _ => tokio::time::sleep(Duration::from_millis(100)).await,
                        }
                    }
                    acks.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((from + per_batch, now_ms()));
                    submitted.fetch_add(per_batch, Ordering::Relaxed);
                }
            })
        };
        Load {
            stop,
            submitted,
            acks,
            task,
        }
    }

    pub(super) fn count(&self) -> u64 {
        self.submitted.load(Ordering::Relaxed)
    }

    /// Stops the load after the batch under way; returns how many jobs were acknowledged.
    pub(super) async fn finish(self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.context("the producer task")?;
        Ok(self.submitted.load(Ordering::Relaxed))
    }
}
