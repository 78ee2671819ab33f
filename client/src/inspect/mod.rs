//! The read side (after asynq's Inspector): questions an operator asks of the whole system
//! rather than of one job, answered from Redis without changing it. Listing lives here, the
//! event log in `events`, queue stats in `queues`, the workers in `actors`; the audit is the
//! next reader to join. Each costs Redis O(queues + workers), never O(jobs), except listing.

mod actors;
mod events;
mod queues;

pub use actors::{Actor, Holding};
pub use events::{Event, EventFilter, EventFollower};
pub use queues::{Histogram, QueueStats};

use crate::conn::Redis;
use crate::error::Result;
use crate::job::Status;
use crate::keys::{Keyspace, ENTRY_JOB_FIELD};
use crate::name::{Priority, Target};
use crate::reply;

/// Which jobs [`Inspector::list`] returns.
#[derive(Clone, Debug)]
pub enum ListFilter {
    /// Every job hash with this status (a SCAN over job keys, never KEYS).
    Status(Status),
    /// Every job hash.
    All,
    /// The entries of one work stream, oldest first.
    Queue(Target, Priority),
}

/// A job in a listing: the fields an operator scans for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSummary {
    pub id: String,
    pub status: String,
    pub script_type: String,
    pub attempts: String,
    pub updated_at: String,
    pub error: String,
}

/// One page of a listing; pass `next` back to continue, `None` means the end.
#[derive(Clone, Debug, Default)]
pub struct Page {
    pub jobs: Vec<JobSummary>,
    pub next: Option<String>,
}

/// Read-only questions about a namespace; get one from `Client::inspector`. Cheap to clone.
#[derive(Clone)]
pub struct Inspector {
    redis: Redis,
    keys: Keyspace,
}

impl Inspector {
    pub fn new(redis: Redis, keys: Keyspace) -> Inspector {
        Inspector { redis, keys }
    }

    /// One page of jobs; start with `cursor` `None`, continue with the page's `next`.
    pub async fn list(
        &self,
        filter: &ListFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let limit = limit.clamp(1, 10_000);
        let (ids, next): (Vec<String>, Option<String>) = match filter {
            ListFilter::Queue(target, priority) => {
                let stream = self.keys.work(target, *priority);
                let start = match cursor {
                    Some(c) => format!("({c}"),
                    None => "-".to_string(),
                };
                let entries: Vec<(String, Vec<(String, String)>)> = self
                    .redis
                    .query(
                        redis::cmd("XRANGE")
                            .arg(&stream)
                            .arg(start)
                            .arg("+")
                            .arg("COUNT")
                            .arg(limit),
                    )
                    .await?;
                let next = if entries.len() == limit {
                    entries.last().map(|e| e.0.clone())
                } else {
                    None
                };
                let ids = entries
                    .into_iter()
                    .filter_map(|(_, f)| {
                        f.into_iter()
                            .find(|(k, _)| k == ENTRY_JOB_FIELD)
                            .map(|(_, v)| v)
                    })
                    .collect();
                (ids, next)
            }
            ListFilter::Status(_) | ListFilter::All => {
                let prefix = self.keys.job_prefix();
                let (next, keys): (String, Vec<String>) = self
                    .redis
                    .query(
                        redis::cmd("SCAN")
                            .arg(cursor.unwrap_or("0"))
                            .arg("MATCH")
                            .arg(self.keys.job_pattern())
                            .arg("COUNT")
                            .arg(limit)
                            .arg("TYPE")
                            .arg("hash"),
                    )
                    .await?;
                let ids = keys
                    .into_iter()
                    .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
                    .collect();
                (ids, if next == "0" { None } else { Some(next) })
            }
        };
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET").arg(self.keys.job_unchecked(id)).arg(&[
                "status",
                "script_type",
                "attempts",
                "updated_at",
                "error",
            ]);
        }
        let rows = self.redis.pipeline(&pipe).await?;
        let mut jobs = Vec::with_capacity(ids.len());
        for (id, row) in ids.into_iter().zip(rows) {
            let values = reply::array(&row?)?
                .iter()
                .map(|v| reply::text(v).unwrap_or_default())
                .collect::<Vec<_>>();
            let get = |i: usize| values.get(i).cloned().unwrap_or_default();
            let summary = JobSummary {
                id,
                status: get(0),
                script_type: get(1),
                attempts: get(2),
                updated_at: get(3),
                error: get(4),
            };
            if summary.status.is_empty() {
                continue; // expired between the scan and the read
            }
            if let ListFilter::Status(s) = filter {
                if summary.status != s.as_str() {
                    continue;
                }
            }
            jobs.push(summary);
        }
        Ok(Page { jobs, next })
    }
}
