//! The recovery audit (`hero audit`): every pending entry of every work stream, joined with its
//! job record and its owner's liveness, classified; then the cross-checks the other way (jobs
//! `dispatched` in no stream, `started` with no pending entry, delayed-set members not waiting,
//! reply lists without a TTL, consumers that hold nothing and are not alive), and the dead
//! letters and bridge-held jobs for the record. Reads with SCAN, XPENDING and XRANGE a page at a
//! time, never KEYS; it is the one reader that is O(jobs). Repairs are `Client::fix`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use redis::Value;

use super::Inspector;
use crate::clock;
use crate::error::Result;
use crate::job::{Placement, PLACEMENT_FIELDS};
use crate::keys::CONSUMER_GROUP;
use crate::reply;

/// What the audit found an entry, a job or a key to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A delivery its live owner runs.
    Running,
    /// A delivery whose owner is gone: recovery takes it back (when: in the finding's detail).
    Orphaned,
    /// A delivery the legacy bridge holds for a legacy actor.
    Bridge,
    /// A dead letter (for the record).
    Dead,
    /// A pending entry of a job that is no longer this delivery's (ended, requeued, …).
    Stale,
    /// A pending entry, or the key it names, that is not ours.
    Foreign,
    /// A pending entry naming a job with no record.
    Missing,
    /// A `dispatched` job in no stream: nothing will ever fetch it.
    Lost,
    /// A `started` job whose lease is not pending: nothing will ever recover it.
    Unleased,
    /// A delayed-set member whose job is not `waiting`.
    StaleDelay,
    /// A reply list that will never expire.
    ReplyWithoutTtl,
    /// A consumer that holds nothing and belongs to no live worker.
    IdleConsumer,
}

impl Class {
    pub const ALL: [Class; 12] = [
        Class::Running,
        Class::Orphaned,
        Class::Bridge,
        Class::Dead,
        Class::Stale,
        Class::Foreign,
        Class::Missing,
        Class::Lost,
        Class::Unleased,
        Class::StaleDelay,
        Class::ReplyWithoutTtl,
        Class::IdleConsumer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Running => "running",
            Class::Orphaned => "orphaned",
            Class::Bridge => "bridge",
            Class::Dead => "dead",
            Class::Stale => "stale",
            Class::Foreign => "foreign",
            Class::Missing => "missing",
            Class::Lost => "lost",
            Class::Unleased => "unleased",
            Class::StaleDelay => "stale_delay",
            Class::ReplyWithoutTtl => "reply_without_ttl",
            Class::IdleConsumer => "idle_consumer",
        }
    }

    /// Whether the class is an inconsistency (something no loop will ever set right).
    pub fn is_inconsistency(self) -> bool {
        !matches!(
            self,
            Class::Running | Class::Orphaned | Class::Bridge | Class::Dead
        )
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing the audit found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub class: Class,
    /// The work stream (or, for a reply list, its key).
    pub key: String,
    pub entry: Option<String>,
    pub job: Option<String>,
    pub consumer: Option<String>,
    pub idle_ms: Option<u64>,
    pub deliveries: Option<u64>,
    pub detail: String,
}

impl Finding {
    fn new(class: Class, key: &str) -> Finding {
        Finding {
            class,
            key: key.to_string(),
            entry: None,
            job: None,
            consumer: None,
            idle_ms: None,
            deliveries: None,
            detail: String::new(),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "class": self.class.as_str(),
            "key": self.key,
            "entry": self.entry,
            "job": self.job,
            "consumer": self.consumer,
            "idle_ms": self.idle_ms,
            "deliveries": self.deliveries,
            "detail": self.detail,
        })
    }
}

/// What one audit found.
#[derive(Clone, Debug, Default)]
pub struct AuditReport {
    pub findings: Vec<Finding>,
}

impl AuditReport {
    pub fn counts(&self) -> BTreeMap<Class, u64> {
        let mut c: BTreeMap<Class, u64> = Class::ALL.iter().map(|k| (*k, 0)).collect();
        for f in &self.findings {
            *c.entry(f.class).or_default() += 1;
        }
        c
    }

    pub fn inconsistencies(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.class.is_inconsistency())
    }

    pub fn is_consistent(&self) -> bool {
        self.inconsistencies().next().is_none()
    }
}

/// Entries (or keys) read per round trip.
const PAGE: usize = 1000;

impl Inspector {
    /// Runs the audit; `progress` is told what is being read (for a progress line).
    pub async fn audit(&self, progress: &(dyn Fn(&str) + Sync)) -> Result<AuditReport> {
        let mut report = AuditReport::default();
        let now = clock::now_ms();
        let lease_ms: u64 = self
            .redis
            .query::<Option<String>>(redis::cmd("HGET").arg(self.keys.config()).arg("lease_ms"))
            .await?
            .and_then(|v| v.parse().ok())
            .unwrap_or(30_000);
        // who is alive: presence names live consumers; the liveness set says when one is dead
        let live: HashSet<String> = self
            .actors()
            .await?
            .into_iter()
            .filter(|a| a.live)
            .map(|a| a.consumer)
            .collect();
        let deadlines: Vec<(String, f64)> = self
            .redis
            .query(
                redis::cmd("ZRANGE")
                    .arg(self.keys.consumers())
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )
            .await?;
        let deadlines: BTreeMap<String, u64> = deadlines
            .into_iter()
            .map(|(c, s)| (c, s.max(0.0) as u64))
            .collect();
        let streams: Vec<String> = self
            .redis
            .query(redis::cmd("SMEMBERS").arg(self.keys.queues()))
            .await?;
        // every job id some stream entry names, and every pending entry id, per stream
        let mut queued: HashSet<String> = HashSet::new();
        let mut pending: HashSet<(String, String)> = HashSet::new();
        for (n, stream) in streams.iter().enumerate() {
            progress(&format!(
                "queue {}/{}: {}",
                n + 1,
                streams.len(),
                self.keys.queue_name(stream)
            ));
            self.audit_stream(
                stream,
                &live,
                &deadlines,
                lease_ms,
                now,
                &mut queued,
                &mut pending,
                &mut report,
            )
            .await?;
        }
        progress("job records");
        self.audit_jobs(&queued, &pending, &mut report).await?;
        progress("delayed set, reply lists, dead letters");
        self.audit_rest(&mut report).await?;
        Ok(report)
    }

    #[allow(clippy::too_many_arguments)]
    async fn audit_stream(
        &self,
        stream: &str,
        live: &HashSet<String>,
        deadlines: &BTreeMap<String, u64>,
        lease_ms: u64,
        now: u64,
        queued: &mut HashSet<String>,
        pending: &mut HashSet<(String, String)>,
        report: &mut AuditReport,
    ) -> Result<()> {
        // the entries: which jobs are queued here
        let mut start = "-".to_string();
        loop {
            let page: Value = self
                .redis
                .query(
                    redis::cmd("XRANGE")
                        .arg(stream)
                        .arg(&start)
                        .arg("+")
                        .arg("COUNT")
                        .arg(PAGE),
                )
                .await
                .unwrap_or(Value::Nil);
            let entries = reply::array(&page).unwrap_or(&[]);
            for e in entries {
                if let Some(j) = entry_job(e) {
                    queued.insert(j);
                }
            }
            if entries.len() < PAGE {
                break;
            }
            match entries.last().and_then(|e| {
                reply::array(e)
                    .ok()?
                    .first()
                    .and_then(|i| reply::text(i).ok())
            }) {
                Some(last) => start = format!("({last}"),
                None => break,
            }
        }
        // the pending entries, a page at a time
        let mut from = "-".to_string();
        loop {
            let v: Value = self
                .redis
                .query(
                    redis::cmd("XPENDING")
                        .arg(stream)
                        .arg(CONSUMER_GROUP)
                        .arg(&from)
                        .arg("+")
                        .arg(PAGE),
                )
                .await
                .unwrap_or(Value::Nil);
            let rows = reply::array(&v).unwrap_or(&[]).to_vec();
            if rows.is_empty() {
                break;
            }
            let mut pipe = redis::pipe();
            let mut parsed = Vec::with_capacity(rows.len());
            for r in &rows {
                let [id, consumer, idle, deliveries] = reply::array(r).unwrap_or(&[]) else {
                    continue;
                };
                let id = reply::text(id)?;
                pipe.cmd("XRANGE").arg(stream).arg(&id).arg(&id);
                parsed.push((
                    id,
                    reply::text(consumer)?,
                    reply::int(idle)?.max(0) as u64,
                    reply::int(deliveries)?.max(0) as u64,
                ));
            }
            let entries = self.redis.pipeline(&pipe).await?;
            let mut read = redis::pipe();
            let mut jobs = Vec::with_capacity(parsed.len());
            for r in entries {
                let job = r
                    .ok()
                    .and_then(|v| reply::array(&v).ok()?.first().and_then(entry_job));
                if let Some(j) = &job {
                    read.cmd("HMGET")
                        .arg(self.keys.job_unchecked(j))
                        .arg(&["status", "lease"]);
                }
                jobs.push(job);
            }
            let mut records = self.redis.pipeline(&read).await?.into_iter();
            for ((id, consumer, idle, deliveries), job) in parsed.iter().zip(jobs) {
                pending.insert((stream.to_string(), id.clone()));
                let mut f = Finding::new(Class::Running, stream);
                f.entry = Some(id.clone());
                f.consumer = Some(consumer.clone());
                f.idle_ms = Some(*idle);
                f.deliveries = Some(*deliveries);
                f.job.clone_from(&job);
                f.class = match job {
                    None => {
                        f.detail = "the entry names no job".into();
                        Class::Foreign
                    }
                    Some(_) => match records.next() {
                        Some(Err(e)) => {
                            f.detail = format!("the job key is not a hash: {e}");
                            Class::Foreign
                        }
                        Some(Ok(v)) => {
                            let vals: Vec<Option<String>> =
                                redis::from_redis_value(v).unwrap_or_default();
                            let get = |i: usize| vals.get(i).cloned().flatten();
                            match (get(0).as_deref(), get(1)) {
                                (None, _) => {
                                    f.detail = "no job record".into();
                                    Class::Missing
                                }
                                (Some("started"), Some(lease)) if lease == *id => {
                                    if consumer.starts_with("bridge:") {
                                        Class::Bridge
                                    } else if live.contains(consumer) {
                                        Class::Running
                                    } else {
                                        f.detail = match deadlines.get(consumer) {
                                            Some(d) if *d <= now => {
                                                "its worker's liveness lapsed: the next presence pass recovers it".into()
                                            }
                                            _ => format!(
                                                "idle recovery takes it in {} ms",
                                                lease_ms.saturating_sub(*idle)
                                            ),
                                        };
                                        Class::Orphaned
                                    }
                                }
                                (Some(status), _)
                                    if consumer.starts_with("bridge:")
                                        && status != "finished"
                                        && status != "error" =>
                                {
                                    Class::Bridge
                                }
                                (Some(status), _) => {
                                    f.detail = format!(
                                        "the job is {status}, and this is not its delivery"
                                    );
                                    Class::Stale
                                }
                            }
                        }
                        None => Class::Missing,
                    },
                };
                report.findings.push(f);
            }
            if rows.len() < PAGE {
                break;
            }
            from = format!(
                "({}",
                parsed.last().map(|p| p.0.clone()).unwrap_or_default()
            );
        }
        // consumers that hold nothing and belong to no live worker
        let consumers: Value = self
            .redis
            .query(
                redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(stream)
                    .arg(CONSUMER_GROUP),
            )
            .await
            .unwrap_or(Value::Nil);
        for c in reply::array(&consumers).unwrap_or(&[]) {
            let fields = reply::pairs(c.clone()).unwrap_or_default();
            let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let (Some(name), Some(held)) = (get("name"), get("pending")) else {
                continue;
            };
            if held == "0" && !live.contains(&name) && !name.starts_with("bridge:") {
                let mut f = Finding::new(Class::IdleConsumer, stream);
                f.consumer = Some(name);
                f.detail = "holds nothing and belongs to no live worker".into();
                report.findings.push(f);
            }
        }
        Ok(())
    }

    /// Every job record: `dispatched` ones must be in a stream, `started` ones must hold a
    /// pending entry.
    async fn audit_jobs(
        &self,
        queued: &HashSet<String>,
        pending: &HashSet<(String, String)>,
        report: &mut AuditReport,
    ) -> Result<()> {
        let prefix = self.keys.job_prefix();
        let mut cursor = "0".to_string();
        let mut fields = vec!["status", "lease", "bridge"];
        fields.extend(PLACEMENT_FIELDS);
        loop {
            let (next, keys): (String, Vec<String>) = self
                .redis
                .query(
                    redis::cmd("SCAN")
                        .arg(&cursor)
                        .arg("MATCH")
                        .arg(self.keys.job_pattern())
                        .arg("COUNT")
                        .arg(PAGE)
                        .arg("TYPE")
                        .arg("hash"),
                )
                .await?;
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("HMGET").arg(k).arg(&fields);
            }
            let rows = if keys.is_empty() {
                Vec::new()
            } else {
                self.redis.pipeline(&pipe).await?
            };
            let mut candidates = Vec::new();
            for (key, row) in keys.iter().zip(rows) {
                let Some(id) = key.strip_prefix(&prefix) else {
                    continue;
                };
                let vals: Vec<Option<String>> = row
                    .ok()
                    .and_then(|v| redis::from_redis_value(v).ok())
                    .unwrap_or_default();
                let get = |i: usize| vals.get(i).cloned().flatten();
                let bridged = get(2).is_some_and(|b| !b.is_empty());
                let stream = Placement::read(&vals[3.min(vals.len())..])
                    .map(|p| self.keys.work(&p.target, p.priority));
                match (get(0).as_deref(), get(1), stream) {
                    (Some("dispatched"), _, Some(stream)) if !queued.contains(id) && !bridged => {
                        let mut f = Finding::new(Class::Lost, &stream);
                        f.job = Some(id.to_string());
                        f.detail = "dispatched, but no stream entry names it".into();
                        candidates.push(f);
                    }
                    (Some("started"), Some(lease), Some(stream))
                        if !lease.is_empty()
                            && !pending.contains(&(stream.clone(), lease.clone()))
                            && !bridged =>
                    {
                        let mut f = Finding::new(Class::Unleased, &stream);
                        f.job = Some(id.to_string());
                        f.entry = Some(lease);
                        f.detail =
                            "started, but its lease is not pending: nothing would recover it"
                                .into();
                        candidates.push(f);
                    }
                    _ => {}
                }
            }
            // The streams were read before the records: a job queued or fetched since looks lost
            // or unleased. Read again what could have changed, and report only what still is.
            for f in candidates {
                if self.still_so(&f).await? {
                    report.findings.push(f);
                }
            }
            if next == "0" {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Whether a `Lost` or `Unleased` finding still holds now.
    async fn still_so(&self, f: &Finding) -> Result<bool> {
        let job = f.job.clone().unwrap_or_default();
        match f.class {
            Class::Lost => {
                let status: Option<String> = self
                    .redis
                    .query(
                        redis::cmd("HGET")
                            .arg(self.keys.job_unchecked(&job))
                            .arg("status"),
                    )
                    .await?;
                if status.as_deref() != Some("dispatched") {
                    return Ok(false);
                }
                // a look at the whole stream again: an entry added since the first read
                let mut start = "-".to_string();
                loop {
                    let page: Value = self
                        .redis
                        .query(
                            redis::cmd("XRANGE")
                                .arg(&f.key)
                                .arg(&start)
                                .arg("+")
                                .arg("COUNT")
                                .arg(PAGE),
                        )
                        .await
                        .unwrap_or(Value::Nil);
                    let entries = reply::array(&page).unwrap_or(&[]);
                    if entries
                        .iter()
                        .any(|e| entry_job(e).as_deref() == Some(job.as_str()))
                    {
                        return Ok(false);
                    }
                    if entries.len() < PAGE {
                        return Ok(true);
                    }
                    match entries.last().and_then(|e| {
                        reply::array(e)
                            .ok()?
                            .first()
                            .and_then(|i| reply::text(i).ok())
                    }) {
                        Some(last) => start = format!("({last}"),
                        None => return Ok(true),
                    }
                }
            }
            Class::Unleased => {
                let f2: Vec<Option<String>> = self
                    .redis
                    .query(
                        redis::cmd("HMGET")
                            .arg(self.keys.job_unchecked(&job))
                            .arg(&["status", "lease"]),
                    )
                    .await?;
                let lease = f2.get(1).cloned().flatten().unwrap_or_default();
                if f2.first().cloned().flatten().as_deref() != Some("started") || lease.is_empty() {
                    return Ok(false);
                }
                let p: Value = self
                    .redis
                    .query(
                        redis::cmd("XPENDING")
                            .arg(&f.key)
                            .arg(CONSUMER_GROUP)
                            .arg(&lease)
                            .arg(&lease)
                            .arg(1),
                    )
                    .await
                    .unwrap_or(Value::Nil);
                Ok(reply::array(&p).map(<[Value]>::is_empty).unwrap_or(true))
            }
            _ => Ok(true),
        }
    }

    async fn audit_rest(&self, report: &mut AuditReport) -> Result<()> {
        // delayed-set members whose job is not waiting
        let mut start = 0usize;
        loop {
            let ids: Vec<String> = self
                .redis
                .query(
                    redis::cmd("ZRANGE")
                        .arg(self.keys.delayed())
                        .arg(start)
                        .arg(start + PAGE - 1),
                )
                .await?;
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("HGET")
                    .arg(self.keys.job_unchecked(id))
                    .arg("status");
            }
            let rows = if ids.is_empty() {
                Vec::new()
            } else {
                self.redis.pipeline(&pipe).await?
            };
            for (id, r) in ids.iter().zip(rows) {
                let status = r.ok().and_then(|v| reply::text(&v).ok());
                if status.as_deref() != Some("waiting") {
                    let mut f = Finding::new(Class::StaleDelay, &self.keys.delayed());
                    f.job = Some(id.clone());
                    f.detail = format!("the job is {}", status.unwrap_or_else(|| "gone".into()));
                    report.findings.push(f);
                }
            }
            if ids.len() < PAGE {
                break;
            }
            start += PAGE;
        }
        // reply lists that will never expire
        let mut cursor = "0".to_string();
        loop {
            let (next, keys): (String, Vec<String>) = self
                .redis
                .query(
                    redis::cmd("SCAN")
                        .arg(&cursor)
                        .arg("MATCH")
                        .arg(format!("{}*", self.keys.reply_prefix()))
                        .arg("COUNT")
                        .arg(PAGE)
                        .arg("TYPE")
                        .arg("list"),
                )
                .await?;
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("PTTL").arg(k);
            }
            let rows = if keys.is_empty() {
                Vec::new()
            } else {
                self.redis.pipeline(&pipe).await?
            };
            for (k, r) in keys.iter().zip(rows) {
                if r.ok().and_then(|v| reply::int(&v).ok()) == Some(-1) {
                    let mut f = Finding::new(Class::ReplyWithoutTtl, k);
                    f.detail = "a reply list without a TTL".into();
                    report.findings.push(f);
                }
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        // dead letters, for the record
        let mut cursor: Option<String> = None;
        loop {
            let page = self.dead_letters(cursor.as_deref(), PAGE).await?;
            for d in &page {
                let mut f = Finding::new(Class::Dead, &d.queue);
                f.entry = Some(d.entry.clone());
                f.job = Some(d.job_id.clone());
                f.detail.clone_from(&d.reason);
                report.findings.push(f);
            }
            if page.len() < PAGE {
                return Ok(());
            }
            cursor = page.last().map(|d| d.entry.clone());
        }
    }
}

/// The job id a stream entry names (`j`), if any.
fn entry_job(entry: &Value) -> Option<String> {
    let [_, fields] = reply::array(entry).ok()? else {
        return None;
    };
    reply::array(fields)
        .ok()?
        .chunks(2)
        .find(|kv| kv.first().and_then(|k| reply::text(k).ok()).as_deref() == Some("j"))
        .and_then(|kv| reply::text(kv.get(1)?).ok())
        .filter(|j| !j.is_empty())
}
