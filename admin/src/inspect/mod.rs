//! The read side (after asynq's Inspector): questions an operator asks of the whole system
//! rather than of one job, answered from Redis without changing it. Listing lives here (by
//! status in `by_status`), the event log in `events`, queue stats in `queues`, the workers in
//! `actors` (their presence found by name, and by one bounded scan the process shares, in
//! `presence`), dead letters in `dead`, a fair queue's keys in `fair`, batches in `batches`, the audit in `audit`,
//! Redis's own state (its memory policy, disk, a data loss) in `redis_state`. Each costs
//! Redis O(queues + workers + page), never O(jobs) nor a walk of the keyspace per question,
//! except listing every job and the audit.

mod actors;
mod audit;
mod batches;
mod by_status;
mod dead;
mod events;
mod fair;
mod presence;
mod queues;
mod redis_state;

pub use actors::{Actor, Holding};
pub use audit::{AuditReport, Class, Finding, LOST_ACKED};
pub use dead::{DeadLetter, DEAD_FIELD, FALLBACK_LETTERS};
pub use events::{Event, EventFilter, EventFollower, HISTORY_SCAN, LIFE_MARGIN};
pub use fair::{FairKeys, KeyWaiting, KEY_PAGE};
pub use presence::{PresenceScan, SCAN_CALLS, SCAN_COUNT, SCAN_REFRESH};
pub use queues::{Minute, QueueStats};
pub use redis_state::RedisState;

use hero_protocol::conn::Redis;
use hero_protocol::error::{Error, Result};
use hero_protocol::job::Status;
use hero_protocol::keys::{Keyspace, ENTRY_JOB_FIELD};
use hero_protocol::name::{Priority, Target};
use hero_protocol::reply;

/// Which jobs [`Inspector::list`] returns.
#[derive(Clone, Debug)]
pub enum ListFilter {
    /// The jobs with this status, found through the streams, the pending lists, the delayed
    /// set, the dependents hashes or the retention stream (`by_status`): O(page), never a scan
    /// of every job.
    Status(Status),
    /// Every job hash (a SCAN over job keys, never KEYS: the one listing that is O(jobs)).
    All,
    /// The entries of one work stream, oldest first.
    Queue(Target, Priority),
    /// The jobs an operator tracks (`Client::track`), by id, one page of the set at a time.
    Tracked,
}

/// A job in a listing: the fields an operator scans for, filled for every status (a record
/// leaves out what is at its default; these are read the way `Job::from_fields` reads them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSummary {
    pub id: String,
    pub status: String,
    pub script_type: String,
    /// `<type>[/<group>[/<instance>]]`.
    pub queue: String,
    /// Numbers, as `Job::to_json` gives them: one JSON shape per record everywhere. A value
    /// edited by hand into something else reads as its default (a listing shows what it can;
    /// `hero status` names the bad field).
    pub priority: u8,
    pub attempts: u32,
    /// The latest of created_at, updated_at, started_at and finished_at.
    pub updated_at: String,
    pub worker: String,
    pub error: String,
    pub tags: Vec<String>,
}

/// What a listing reads of each record, in the order [`JobSummary::read`] takes.
const SUMMARY_FIELDS: [&str; 13] = [
    "status",
    "script_type",
    "group",
    "instance",
    "priority",
    "attempts",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "worker_id",
    "error",
    "tags",
];

impl JobSummary {
    fn read(id: String, v: &[String]) -> Option<JobSummary> {
        let get = |i: usize| v.get(i).cloned().unwrap_or_default();
        let status = get(0);
        if status.is_empty() {
            return None;
        }
        let mut queue = get(1);
        for part in [get(2), get(3)] {
            if !part.is_empty() {
                queue.push('/');
                queue.push_str(&part);
            }
        }
        // a first delivery writes no count: started or ended with a start means one
        let attempts = match get(5) {
            a if !a.is_empty() => a.parse().unwrap_or(0),
            _ if !get(8).is_empty() => 1,
            _ => 0,
        };
        // RFC 3339 timestamps of one form compare as text
        let updated_at = [get(6), get(7), get(8), get(9)]
            .into_iter()
            .max()
            .unwrap_or_default();
        let priority = get(4)
            .parse()
            .unwrap_or_else(|_| hero_protocol::Priority::DEFAULT.level());
        Some(JobSummary {
            id,
            status,
            script_type: get(1),
            queue,
            priority,
            attempts,
            updated_at,
            worker: get(10),
            error: get(11),
            // a listing shows what it can: tags that do not decode read as none
            tags: serde_json::from_str(&get(12)).unwrap_or_default(),
        })
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id, "status": self.status, "script_type": self.script_type,
            "queue": self.queue, "priority": self.priority, "attempts": self.attempts,
            "updated_at": self.updated_at, "worker": self.worker, "error": self.error,
            "tags": self.tags,
        })
    }
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
    /// The other shards of a sharded namespace (docs/sharding.md): `queues` sums them,
    /// `events` merges them; the other questions are about this shard.
    others: Vec<(u16, Inspector)>,
}

impl Inspector {
    /// The read side of one shard (`Inspector::from(&client)` reaches every shard).
    pub fn new(redis: Redis, keys: Keyspace) -> Inspector {
        Inspector {
            redis,
            keys,
            others: Vec::new(),
        }
    }

    /// Every served or retired shard of the namespace with its reader, shard 0 first (one shard
    /// for an unsharded namespace).
    pub fn shards(&self) -> Vec<(u16, Inspector)> {
        let mut out = vec![(0, Inspector::new(self.redis.clone(), self.keys.clone()))];
        out.extend(self.others.iter().cloned());
        out
    }

    /// Reaches the other shards too.
    pub fn with_shards(mut self, others: Vec<(u16, Inspector)>) -> Inspector {
        self.others = others;
        self
    }

    /// [`Inspector::list_tagged`] over a sharded namespace: the shards one after another, a
    /// page from one shard at a time; the cursor is `<shard index>~<that shard's cursor>`.
    async fn list_shards(
        &self,
        filter: &ListFilter,
        tag: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let shards = self.shards();
        let (at, inner) = match cursor {
            None => (0, None),
            Some(c) => {
                let (i, rest) = c.split_once('~').ok_or_else(|| bad_cursor(c))?;
                let i: usize = i.parse().map_err(|_| bad_cursor(c))?;
                if i >= shards.len() {
                    return Err(bad_cursor(c));
                }
                (i, (!rest.is_empty()).then_some(rest))
            }
        };
        let page = Box::pin(shards[at].1.list_tagged(filter, tag, inner, limit)).await?;
        let next = match page.next {
            Some(n) => Some(format!("{at}~{n}")),
            None if at + 1 < shards.len() => Some(format!("{}~", at + 1)),
            None => None,
        };
        Ok(Page {
            jobs: page.jobs,
            next,
        })
    }

    /// One SCAN page of the keys matching `pattern` (of `kind` when given): the next cursor
    /// ("0" at the end) and the keys. Every reader walks the keyspace this way, never KEYS.
    pub(crate) async fn scan_page(
        &self,
        cursor: &str,
        pattern: &str,
        count: usize,
        kind: Option<&str>,
    ) -> Result<(String, Vec<String>)> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        if let Some(kind) = kind {
            cmd.arg("TYPE").arg(kind);
        }
        self.redis.query(&cmd).await
    }

    /// A read of a stream's consumer group; `None` when Redis answered that the stream has no
    /// such group (or is gone): a fact about the data, which a reader takes for nothing
    /// pending, not an error. Any other error is one.
    pub(crate) async fn group_read(&self, cmd: &redis::Cmd) -> Result<Option<redis::Value>> {
        match self.redis.query(cmd).await {
            Ok(v) => Ok(Some(v)),
            Err(hero_protocol::Error::Redis(r)) if r.code() == Some("NOGROUP") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Up to `count` pending entries of `stream` from `from` (XPENDING's extended form:
    /// `[id, consumer, idle ms, deliveries]` each); `None` for a stream without the group.
    pub(crate) async fn pending_page(
        &self,
        stream: &str,
        from: &str,
        count: usize,
    ) -> Result<Option<redis::Value>> {
        self.group_read(
            redis::cmd("XPENDING")
                .arg(stream)
                .arg(hero_protocol::keys::CONSUMER_GROUP)
                .arg(from)
                .arg("+")
                .arg(count),
        )
        .await
    }

    /// One page of jobs; start with `cursor` `None`, continue with the page's `next`.
    pub async fn list(
        &self,
        filter: &ListFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        self.list_tagged(filter, None, cursor, limit).await
    }

    /// As [`Inspector::list`], keeping only the jobs that carry `tag`: by status or all, a page
    /// of the tag's index (kept on write, so never a scan of every job); a queue's listing is
    /// filtered instead.
    ///
    /// The candidates a page reads (a stream's entries, the retention stream's, a tag's index)
    /// are filtered by the jobs' records, so one read can keep none (142 failed jobs among
    /// 10,000 finished): the page reads on until it holds `limit` jobs or the listing ends,
    /// bounded by [`MAX_CANDIDATES`] read per call; only past that bound does a page come back
    /// short (even empty) with `next` to follow.
    pub async fn list_tagged(
        &self,
        filter: &ListFilter,
        tag: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let limit = limit.clamp(1, 10_000);
        let mut jobs = Vec::new();
        let mut cursor = cursor.map(str::to_string);
        let mut read = 0;
        loop {
            let want = limit - jobs.len();
            let page = self.list_once(filter, tag, cursor.as_deref(), want).await?;
            read += want;
            jobs.extend(page.jobs);
            match page.next {
                Some(next) if jobs.len() < limit && read < MAX_CANDIDATES => cursor = Some(next),
                next => return Ok(Page { jobs, next }),
            }
        }
    }

    /// One read of candidates and their records: [`Inspector::list_tagged`]'s step.
    async fn list_once(
        &self,
        filter: &ListFilter,
        tag: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        if !self.others.is_empty() {
            return self.list_shards(filter, tag, cursor, limit).await;
        }
        let limit = limit.clamp(1, 10_000);
        // a cursor goes to Redis as it is: one no page gave would be Redis's error, not the
        // caller's (SCAN takes digits, XRANGE an entry id)
        if let Some(c) = cursor {
            let ok = match filter {
                ListFilter::Queue(..) => {
                    is_entry_id(c) || c.strip_prefix("g:").and_then(fair::gate_cursor).is_some()
                }
                ListFilter::Status(_) if tag.is_none() => true,
                // SCAN's cursor is a 64-bit number: one past it is Redis's error otherwise
                _ => c.bytes().all(|b| b.is_ascii_digit()) && c.parse::<u64>().is_ok(),
            };
            if !ok {
                return Err(bad_cursor(c));
            }
        }
        let (ids, next): (Vec<String>, Option<String>) = match filter {
            ListFilter::Queue(target, priority) => {
                let stream = self.keys.work(target, *priority);
                // a fair queue's jobs in its gate come after the stream's (cursor `g:...`)
                let gate_from = cursor
                    .and_then(|c| c.strip_prefix("g:"))
                    .and_then(fair::gate_cursor);
                if let Some(from) = gate_from {
                    let (ids, next) = self.gate_page(&stream, from, limit).await?;
                    (ids, next.map(|(k, l)| format!("g:{k}:{l}")))
                } else {
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
                    let full = entries.len() == limit;
                    let next = if full {
                        entries.last().map(|e| e.0.clone())
                    } else {
                        None
                    };
                    let mut ids: Vec<String> = entries
                        .into_iter()
                        .filter_map(|(_, f)| {
                            f.into_iter()
                                .find(|(k, _)| k == ENTRY_JOB_FIELD)
                                .map(|(_, v)| v)
                        })
                        .collect();
                    if full {
                        (ids, next)
                    } else {
                        let (gated, more) =
                            self.gate_page(&stream, (0, 0), limit - ids.len()).await?;
                        ids.extend(gated);
                        (ids, more.map(|(k, l)| format!("g:{k}:{l}")))
                    }
                }
            }
            ListFilter::Status(_) | ListFilter::All if tag.is_some() => {
                // the tag's index, not every job
                let (next, ids): (String, Vec<String>) = self
                    .redis
                    .query(
                        redis::cmd("SSCAN")
                            .arg(self.keys.tag(tag.unwrap_or_default()))
                            .arg(cursor.unwrap_or("0"))
                            .arg("COUNT")
                            .arg(limit),
                    )
                    .await?;
                (ids, if next == "0" { None } else { Some(next) })
            }
            ListFilter::Tracked => {
                let (next, mut ids): (String, Vec<String>) = self
                    .redis
                    .query(
                        redis::cmd("SSCAN")
                            .arg(self.keys.tracked())
                            .arg(cursor.unwrap_or("0"))
                            .arg("COUNT")
                            .arg(limit),
                    )
                    .await?;
                ids.sort();
                (ids, if next == "0" { None } else { Some(next) })
            }
            ListFilter::Status(status) => self.by_status(*status, cursor, limit).await?,
            ListFilter::All => {
                let prefix = self.keys.job_prefix();
                let (next, keys) = self
                    .scan_page(
                        cursor.unwrap_or("0"),
                        &self.keys.job_pattern(),
                        limit,
                        Some("hash"),
                    )
                    .await?;
                let ids = keys
                    .into_iter()
                    .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
                    .collect();
                (ids, if next == "0" { None } else { Some(next) })
            }
        };
        // a job may be named twice (waiting on two prerequisites, ended twice): once a page
        let mut seen = std::collections::HashSet::new();
        let ids: Vec<String> = ids.into_iter().filter(|i| seen.insert(i.clone())).collect();
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET")
                .arg(self.keys.job_unchecked(id))
                .arg(&SUMMARY_FIELDS);
        }
        let rows = self.redis.pipeline(&pipe).await?;
        let mut jobs = Vec::with_capacity(ids.len());
        for (id, row) in ids.into_iter().zip(rows) {
            let values = reply::array(&row?)?
                .iter()
                .map(|v| reply::text(v).unwrap_or_default())
                .collect::<Vec<_>>();
            let Some(summary) = JobSummary::read(id, &values) else {
                continue; // expired between the scan and the read
            };
            if let ListFilter::Status(s) = filter {
                if summary.status != s.as_str() {
                    continue;
                }
            }
            if tag.is_some_and(|t| !summary.tags.iter().any(|x| x == t)) {
                continue;
            }
            jobs.push(summary);
        }
        Ok(Page { jobs, next })
    }
}

/// The candidates one listing call reads at most before it answers a page short of its limit
/// (with `next`): a call stays a few milliseconds of Redis however sparse the matches.
pub const MAX_CANDIDATES: usize = 20_000;

/// Whether `c` is a stream entry id (`<ms>-<seq>`), as a page's cursor into a stream is.
/// Both parts must be 64-bit numbers, and not the largest id (nothing comes after it, so Redis
/// refuses it as an exclusive start): a cursor Redis would refuse is the caller's error.
pub(crate) fn is_entry_id(c: &str) -> bool {
    let num = |p: &str| {
        (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse::<u64>().ok())
            .flatten()
    };
    c.split_once('-')
        .is_some_and(|(ms, seq)| match (num(ms), num(seq)) {
            (Some(ms), Some(seq)) => (ms, seq) != (u64::MAX, u64::MAX),
            _ => false,
        })
}

/// A cursor no page of a listing gave: the caller's error, never Redis's.
pub(crate) fn bad_cursor(c: &str) -> Error {
    Error::InvalidInput(format!(
        "cursor {c:?} is not one a page of this listing gave; start without one"
    ))
}
