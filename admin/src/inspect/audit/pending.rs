//! The audit's first half: the entries of one work stream (which jobs are queued there) and its
//! pending entries, each joined with its job record and its owner's liveness and classified;
//! and the consumers that hold nothing and belong to no live worker. Reading (`read_pending`,
//! `consumers`) is apart from judging (`classify`, `idle_consumer`, pure and unit-tested), and
//! an error reading Redis fails the audit: only the answers that describe the data (a stream
//! without the group, a key of another type) are read as what they say.

use std::collections::{BTreeMap, HashSet};

use redis::Value;

use super::{entry_job, AuditReport, Class, Finding, PAGE};
use crate::inspect::Inspector;
use hero_protocol::error::{Error, Result};
use hero_protocol::keys::{is_bridge_consumer, CONSUMER_GROUP};
use hero_protocol::reply;

/// Who is alive, as the audit saw it when it started.
pub(super) struct Liveness {
    /// Consumers whose worker's presence key is live.
    pub live: HashSet<String>,
    /// The liveness set: consumer → the deadline (ms) past which presence recovery takes its
    /// jobs.
    pub deadlines: BTreeMap<String, u64>,
    /// The broker's lease (ms): idle recovery takes a delivery idle this long.
    pub lease_ms: u64,
    pub now_ms: u64,
}

/// What the audit gathers across streams for the cross-checks of the records.
#[derive(Default)]
pub(super) struct Seen {
    /// Every job id some stream entry names.
    pub queued: HashSet<String>,
    /// Every (stream, pending entry id).
    pub pending: HashSet<(String, String)>,
}

/// A job record as the audit reads it for a pending entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Record {
    /// The entry names no job.
    NoJob,
    /// The job key holds another type: Redis's answer.
    NotAHash(String),
    /// `status` and `lease` (absent when the record is gone).
    Fields {
        status: Option<String>,
        lease: Option<String>,
    },
}

/// One pending entry with what the audit read about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PendingRow {
    pub id: String,
    pub consumer: String,
    pub idle_ms: u64,
    pub deliveries: u64,
    pub job: Option<String>,
    pub record: Record,
}

/// What one pending entry is.
pub(super) fn classify(stream: &str, row: &PendingRow, who: &Liveness) -> Finding {
    let mut f = Finding::new(Class::Running, stream);
    f.entry = Some(row.id.clone());
    f.consumer = Some(row.consumer.clone());
    f.idle_ms = Some(row.idle_ms);
    f.deliveries = Some(row.deliveries);
    f.job.clone_from(&row.job);
    let consumer = row.consumer.as_str();
    let (class, detail) = match &row.record {
        Record::NoJob => (Class::Foreign, "the entry names no job".to_string()),
        Record::NotAHash(e) => (Class::Foreign, format!("the job key is not a hash: {e}")),
        Record::Fields { status: None, .. } => (Class::Missing, "no job record".to_string()),
        Record::Fields {
            status: Some(status),
            lease,
        } if status == "started" && lease.as_deref() == Some(row.id.as_str()) => {
            if is_bridge_consumer(consumer) {
                (Class::Bridge, String::new())
            } else if who.live.contains(consumer) {
                (Class::Running, String::new())
            } else {
                let detail = match who.deadlines.get(consumer) {
                    Some(d) if *d <= who.now_ms => {
                        "its worker's liveness lapsed: the next presence pass recovers it".into()
                    }
                    _ => format!(
                        "idle recovery takes it in {} ms",
                        who.lease_ms.saturating_sub(row.idle_ms)
                    ),
                };
                (Class::Orphaned, detail)
            }
        }
        Record::Fields {
            status: Some(status),
            ..
        } if is_bridge_consumer(consumer) && status != "finished" && status != "error" => {
            (Class::Bridge, String::new())
        }
        Record::Fields {
            status: Some(status),
            ..
        } => (
            Class::Stale,
            format!("the job is {status}, and this is not its delivery"),
        ),
    };
    f.class = class;
    f.detail = detail;
    f
}

/// A consumer that holds nothing and that no loop will delete: one still in the liveness set
/// goes with the presence pass after its deadline (a worker killed holding nothing, a moment
/// ago), which is in-flight state, not an inconsistency (the chaos soak's audit, run a second
/// after its last kill, saw these).
pub(super) fn idle_consumer(
    stream: &str,
    name: &str,
    held: u64,
    who: &Liveness,
) -> Option<Finding> {
    if held != 0
        || who.live.contains(name)
        || who.deadlines.contains_key(name)
        || is_bridge_consumer(name)
    {
        return None;
    }
    let mut f = Finding::new(Class::IdleConsumer, stream);
    f.consumer = Some(name.to_string());
    f.detail = "holds nothing and belongs to no live worker".into();
    Some(f)
}

impl Inspector {
    /// Audits one work stream into `report`, noting what it saw in `seen`.
    pub(super) async fn audit_stream(
        &self,
        stream: &str,
        who: &Liveness,
        seen: &mut Seen,
        report: &mut AuditReport,
    ) -> Result<()> {
        let mut entries = Vec::new();
        seen.queued
            .extend(self.stream_entries(stream, Some(&mut entries)).await?);
        let mut from = "-".to_string();
        loop {
            let rows = self.read_pending(stream, &from).await?;
            for row in &rows {
                seen.pending.insert((stream.to_string(), row.id.clone()));
                report.findings.push(classify(stream, row, who));
            }
            match rows.last() {
                Some(last) if rows.len() == PAGE => from = format!("({}", last.id),
                _ => break,
            }
        }
        // queued entries (not pending: those are classified above) whose record is gone
        let queued: Vec<(String, String)> = entries
            .into_iter()
            .filter(|(id, _)| !seen.pending.contains(&(stream.to_string(), id.clone())))
            .collect();
        report
            .findings
            .extend(self.recordless(stream, &queued).await?);
        for (name, held) in self.consumers(stream).await? {
            report
                .findings
                .extend(idle_consumer(stream, &name, held, who));
        }
        Ok(())
    }

    /// One page of a stream's pending entries from `from`, each with the job its entry names
    /// and that job's `status` and `lease`: three pipelined round trips a page.
    async fn read_pending(&self, stream: &str, from: &str) -> Result<Vec<PendingRow>> {
        let Some(v) = self.pending_page(stream, from, PAGE).await? else {
            return Ok(Vec::new());
        };
        let mut rows = Vec::new();
        let mut pipe = redis::pipe();
        for r in reply::array(&v)? {
            let [id, consumer, idle, deliveries] = reply::array(r)? else {
                return Err(hero_protocol::reply::unexpected(format!(
                    "XPENDING of {stream} answered a row of another shape: {r:?}"
                )));
            };
            let id = reply::text(id)?;
            pipe.cmd("XRANGE").arg(stream).arg(&id).arg(&id);
            rows.push(PendingRow {
                id,
                consumer: reply::text(consumer)?,
                idle_ms: reply::int(idle)?.max(0) as u64,
                deliveries: reply::int(deliveries)?.max(0) as u64,
                job: None,
                record: Record::NoJob,
            });
        }
        if rows.is_empty() {
            return Ok(rows);
        }
        let mut read = redis::pipe();
        for (row, entry) in rows.iter_mut().zip(self.redis.pipeline(&pipe).await?) {
            row.job = reply::array(&entry?)?.first().and_then(entry_job);
            if let Some(j) = &row.job {
                read.cmd("HMGET")
                    .arg(self.keys.job_unchecked(j))
                    .arg(&["status", "lease"]);
            }
        }
        let mut records = self.redis.pipeline(&read).await?.into_iter();
        for row in rows.iter_mut().filter(|r| r.job.is_some()) {
            row.record = match records.next() {
                Some(Ok(v)) => {
                    let vals = reply::array(&v)?;
                    let field = |i: usize| {
                        vals.get(i)
                            .filter(|v| !matches!(v, Value::Nil))
                            .map(reply::text)
                            .transpose()
                    };
                    Record::Fields {
                        status: field(0)?,
                        lease: field(1)?,
                    }
                }
                Some(Err(Error::Redis(e))) if e.code() == Some("WRONGTYPE") => {
                    Record::NotAHash(e.to_string())
                }
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(hero_protocol::reply::unexpected(
                        "a pipeline of HMGETs answered fewer replies than it was sent",
                    ))
                }
            };
        }
        Ok(rows)
    }

    /// The consumers of a stream's group and how many entries each holds.
    async fn consumers(&self, stream: &str) -> Result<Vec<(String, u64)>> {
        let Some(v) = self
            .group_read(
                redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(stream)
                    .arg(CONSUMER_GROUP),
            )
            .await?
        else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for c in reply::array(&v)? {
            let fields = reply::pairs(c.clone())?;
            let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            if let (Some(name), Some(held)) = (get("name"), get("pending")) {
                out.push((name, held.parse().unwrap_or(0)));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> Liveness {
        Liveness {
            live: ["w:live:1".to_string()].into(),
            deadlines: [
                ("w:lapsed:1".to_string(), 1_000),
                ("w:live:1".to_string(), 99_000),
                ("w:killed:1".to_string(), 50_000),
            ]
            .into(),
            lease_ms: 30_000,
            now_ms: 10_000,
        }
    }

    fn row(consumer: &str, record: Record) -> PendingRow {
        PendingRow {
            id: "5-0".into(),
            consumer: consumer.into(),
            idle_ms: 4_000,
            deliveries: 1,
            job: Some("j1".into()),
            record,
        }
    }

    fn fields(status: Option<&str>, lease: Option<&str>) -> Record {
        Record::Fields {
            status: status.map(String::from),
            lease: lease.map(String::from),
        }
    }

    fn class(consumer: &str, record: Record) -> (Class, String) {
        let f = classify("s", &row(consumer, record), &who());
        (f.class, f.detail)
    }

    #[test]
    fn a_started_job_of_its_delivery_runs_with_a_live_owner_or_is_orphaned() {
        let started = || fields(Some("started"), Some("5-0"));
        assert_eq!(class("w:live:1", started()).0, Class::Running);
        let (c, d) = class("w:lapsed:1", started());
        assert_eq!(c, Class::Orphaned);
        assert!(d.contains("presence pass"), "{d}");
        let (c, d) = class("w:gone:1", started());
        assert_eq!(c, Class::Orphaned);
        assert_eq!(d, "idle recovery takes it in 26000 ms");
    }

    #[test]
    fn the_bridge_holds_what_its_legacy_actors_run() {
        assert_eq!(
            class(
                "bridge:actor_queue:osis",
                fields(Some("started"), Some("5-0"))
            )
            .0,
            Class::Bridge
        );
        assert_eq!(
            class("bridge:actor_queue:osis", fields(Some("dispatched"), None)).0,
            Class::Bridge
        );
        assert_eq!(
            class("bridge:actor_queue:osis", fields(Some("finished"), None)).0,
            Class::Stale
        );
    }

    #[test]
    fn an_entry_that_is_not_the_jobs_delivery_is_stale() {
        let (c, d) = class("w:live:1", fields(Some("started"), Some("9-0")));
        assert_eq!(c, Class::Stale);
        assert_eq!(d, "the job is started, and this is not its delivery");
        assert_eq!(
            class("w:live:1", fields(Some("finished"), Some("5-0"))).0,
            Class::Stale
        );
    }

    #[test]
    fn an_entry_without_a_job_or_a_record_is_foreign_or_missing() {
        assert_eq!(class("w:live:1", Record::NoJob).0, Class::Foreign);
        let (c, d) = class("w:live:1", Record::NotAHash("WRONGTYPE".into()));
        assert_eq!(c, Class::Foreign);
        assert!(d.contains("not a hash"), "{d}");
        assert_eq!(class("w:live:1", fields(None, None)).0, Class::Missing);
    }

    #[test]
    fn a_consumer_holding_nothing_is_idle_only_when_nothing_will_delete_it() {
        let who = who();
        let idle = |name: &str, held: u64| idle_consumer("s", name, held, &who).map(|f| f.class);
        assert_eq!(idle("w:gone:1", 0), Some(Class::IdleConsumer));
        assert_eq!(idle("w:gone:1", 2), None, "it holds entries");
        assert_eq!(idle("w:live:1", 0), None, "its worker is live");
        assert_eq!(idle("w:killed:1", 0), None, "the presence pass deletes it");
        assert_eq!(idle("bridge:actor_queue:osis", 0), None, "the bridge's");
    }
}
