//! A queue's job counts (`hero_counts`, summed over the shards) and the operator's controls of
//! one job beside requeue: promote a delayed job to now, remove an ended one. What every
//! language's `Queue` handle does with the same server functions.

use hero_protocol::function::{self, Removed, StopWhy, StreamCounts};
use hero_protocol::policy::queue_name;
use hero_protocol::{Error, JobId, Result};

use crate::Admin;

/// A queue's job counts, summed over its work streams (every priority, group and instance under
/// its name, every shard). `waiting`, `delayed` and `running` are sizes now; `finished`,
/// `failed` and `dead` are counters since the namespace began (`hero queues`' columns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobCounts {
    pub waiting: u64,
    pub delayed: u64,
    pub running: u64,
    pub finished: u64,
    pub failed: u64,
    pub dead: u64,
    /// Each work stream's own counts, by shard (0 unsharded).
    pub streams: Vec<(u16, StreamCounts)>,
}

impl JobCounts {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "waiting": self.waiting, "delayed": self.delayed, "running": self.running,
            "finished": self.finished, "failed": self.failed, "dead": self.dead,
            "streams": self.streams.iter().map(|(n, s)| {
                let mut v = serde_json::to_value(s).unwrap_or_default();
                v["shard"] = (*n).into();
                v
            }).collect::<Vec<_>>(),
        })
    }
}

impl Admin {
    /// The job counts of `queue` (`<type>[/<group>[/<instance>]]`).
    pub async fn job_counts(&self, queue: &str) -> Result<JobCounts> {
        let name = queue_name(queue)?;
        let mut out = JobCounts::default();
        let shards = std::iter::once((0u16, self)).chain(self.others.iter().map(|(n, a)| (*n, a)));
        for (n, shard) in shards {
            let v: redis::Value = shard
                .redis()
                .query(&function::counts(shard.keys(), &name))
                .await?;
            for s in StreamCounts::decode(v)? {
                out.waiting += s.waiting;
                out.delayed += s.delayed;
                out.running += s.running;
                out.finished += s.finished;
                out.failed += s.failed;
                out.dead += s.dead;
                out.streams.push((n, s));
            }
        }
        Ok(out)
    }

    /// Queues a delayed job now (a delayed submit, or a retry waiting out its back-off); a job
    /// that is not waiting in the delayed set is refused, naming its status.
    pub async fn promote(&self, id: &JobId) -> Result<()> {
        let holder = self.holder(id).await?;
        let status: Option<String> = holder
            .redis()
            .query(redis::cmd("HGET").arg(holder.keys().job(id)).arg("status"))
            .await?;
        let at: Option<f64> = holder
            .redis()
            .query(
                redis::cmd("ZSCORE")
                    .arg(holder.keys().delayed())
                    .arg(id.as_str()),
            )
            .await?;
        match (status.as_deref(), at) {
            (None, _) => Err(Error::JobNotFound(id.to_string())),
            (Some("waiting"), Some(_)) => holder.requeue(id, None).await.map(|_| ()),
            (Some(s), _) => Err(Error::InvalidInput(format!(
                "job {id} is not delayed (it is {s}): only a delayed job or a retry waiting out its back-off can be promoted"
            ))),
        }
    }

    /// Deletes job `id` (BullMQ's `job.remove()`): a queued or delayed one is stopped first so
    /// that it never starts; an ended one goes with its tag index entries and uniqueness key. A
    /// running job is refused: stop it first, or wait for its end.
    pub async fn remove(&self, id: &JobId) -> Result<()> {
        let holder = self.holder(id).await?;
        for _ in 0..3 {
            let word: String = holder
                .redis()
                .query(&function::remove(holder.keys(), id))
                .await?;
            match Removed::parse(&word)? {
                Removed::Removed => return Ok(()),
                Removed::Missing => return Err(Error::JobNotFound(id.to_string())),
                Removed::Running => {
                    return Err(Error::InvalidInput(format!(
                        "job {id} is running: stop it first (hero stop {id}), or wait for its end"
                    )))
                }
                Removed::Queued => {
                    function::stop_job(holder.redis(), holder.keys(), id, StopWhy::Operator, None)
                        .await?;
                }
            }
        }
        Err(Error::InvalidInput(format!(
            "job {id} kept changing state while it was being removed; try again"
        )))
    }
}
