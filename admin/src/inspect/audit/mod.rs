//! The recovery audit (`hero audit`): every pending entry of every work stream, joined with its
//! job record and its owner's liveness, classified; then the cross-checks the other way (jobs
//! `dispatched` in no stream, `started` with no pending entry, delayed-set members not waiting,
//! reply lists without a TTL, consumers that hold nothing and are not alive), and the dead
//! letters and bridge-held jobs for the record; then what Redis lost (`losses`: entries whose
//! record is gone, those workers dropped, a data loss a broker found). Reads with SCAN, XPENDING and XRANGE a page at a
//! time, never KEYS; it is the one reader that is O(jobs). Repairs are `Client::fix`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use redis::Value;

mod losses;
mod pending;
mod records;

pub use losses::LOST_ACKED;

use super::Inspector;
use hero_protocol::clock;
use hero_protocol::error::Result;
use hero_protocol::reply;

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
    /// A job still waiting on prerequisites that have all ended (or are gone): no call will
    /// release it.
    StuckDependent,
    /// Entries workers dropped because their job's record was gone (an evicting Redis, a
    /// record deleted by hand): jobs lost, counted by the fetch (`<stream>|lost`) since the
    /// last `hero audit --fix` acknowledged them.
    Dropped,
    /// Redis lost data (came back empty, or went back to an older snapshot), as a broker's
    /// health pass found (`<ns>:meta:epoch`'s `lost`), until `hero audit --fix` acknowledges it.
    DataLoss,
}

impl Class {
    pub const ALL: [Class; 15] = [
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
        Class::StuckDependent,
        Class::Dropped,
        Class::DataLoss,
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
            Class::StuckDependent => "stuck_dependent",
            Class::Dropped => "dropped",
            Class::DataLoss => "data_loss",
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
    pub(super) fn new(class: Class, key: &str) -> Finding {
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

    /// The report as `hero audit --json` and the HTTP API show it, with what a fix did.
    pub fn to_json(&self, fixed: &[(Finding, bool)]) -> serde_json::Value {
        let counts: serde_json::Map<String, serde_json::Value> = self
            .counts()
            .into_iter()
            .map(|(c, n)| (c.as_str().to_string(), n.into()))
            .collect();
        serde_json::json!({
            "consistent": self.is_consistent(),
            "counts": counts,
            "findings": self.findings.iter().map(Finding::to_json).collect::<Vec<_>>(),
            "fixed": fixed.iter().map(|(f, done)| {
                let mut v = f.to_json();
                v["result"] = if *done { "fixed" } else { "unchanged" }.into();
                v
            }).collect::<Vec<_>>(),
        })
    }
}

/// Entries (or keys) read per round trip.
pub(super) const PAGE: usize = 1000;

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
        let who = pending::Liveness {
            live,
            deadlines: deadlines
                .into_iter()
                .map(|(c, s)| (c, s.max(0.0) as u64))
                .collect(),
            lease_ms,
            now_ms: now,
        };
        let streams = self.every_work_stream().await?;
        let mut seen = pending::Seen::default();
        for (n, stream) in streams.iter().enumerate() {
            progress(&format!(
                "queue {}/{}: {}",
                n + 1,
                streams.len(),
                self.keys.queue_name(stream)
            ));
            self.audit_stream(stream, &who, &mut seen, &mut report)
                .await?;
        }
        progress("job records");
        self.audit_jobs(&seen.queued, &seen.pending, &mut report)
            .await?;
        progress("delayed set, reply lists, dead letters");
        self.audit_rest(&mut report).await?;
        progress("what Redis lost");
        self.audit_losses(&streams, &mut report).await?;
        Ok(report)
    }
}

impl Inspector {
    /// The registered work streams and every other stream under the work prefix a SCAN finds:
    /// a registry that Redis evicted (or that was edited by hand) must not blind the audit to
    /// the queues themselves.
    async fn every_work_stream(&self) -> Result<Vec<String>> {
        let mut streams = self.queue_streams().await?;
        let known: HashSet<String> = streams.iter().cloned().collect();
        let pattern = format!("{}*", self.keys.work_prefix());
        let mut cursor = "0".to_string();
        loop {
            let (next, keys) = self
                .scan_page(&cursor, &pattern, PAGE, Some("stream"))
                .await?;
            streams.extend(keys.into_iter().filter(|k| !known.contains(k)));
            if next == "0" {
                break;
            }
            cursor = next;
        }
        streams.sort();
        streams.dedup();
        Ok(streams)
    }

    /// The jobs a stream's entries name, read a page at a time; a key that is gone names none,
    /// and one that is not a stream (Redis answers WRONGTYPE) none either.
    pub(super) async fn stream_jobs(&self, stream: &str) -> Result<HashSet<String>> {
        self.stream_entries(stream, None).await
    }

    /// As [`Inspector::stream_jobs`], and each entry of the stream itself (entry id, job id)
    /// into `entries` when given.
    pub(super) async fn stream_entries(
        &self,
        stream: &str,
        mut entries_out: Option<&mut Vec<(String, String)>>,
    ) -> Result<HashSet<String>> {
        let mut jobs = HashSet::new();
        let mut start = "-".to_string();
        loop {
            let page: Value = match self
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
            {
                Ok(page) => page,
                Err(hero_protocol::Error::Redis(e)) if e.code() == Some("WRONGTYPE") => {
                    return Ok(jobs)
                }
                Err(e) => return Err(e),
            };
            let entries = reply::array(&page)?;
            jobs.extend(entries.iter().filter_map(entry_job));
            if let Some(out) = entries_out.as_deref_mut() {
                out.extend(entries.iter().filter_map(|e| {
                    let id = reply::text(reply::array(e).ok()?.first()?).ok()?;
                    Some((id, entry_job(e)?))
                }));
            }
            let last = entries.last().and_then(|e| {
                reply::array(e)
                    .ok()?
                    .first()
                    .and_then(|i| reply::text(i).ok())
            });
            match last {
                Some(last) if entries.len() == PAGE => start = format!("({last}"),
                _ => break,
            }
        }
        // a fair queue's jobs waiting in its gate are queued too, though not yet on the stream
        let ring: Vec<String> = self
            .redis
            .query(
                redis::cmd("LRANGE")
                    .arg(self.keys.fair_ring(stream))
                    .arg(0)
                    .arg(-1),
            )
            .await
            .unwrap_or_default();
        for key in ring {
            let lane: Vec<String> = self
                .redis
                .query(
                    redis::cmd("LRANGE")
                        .arg(self.keys.fair_lane(stream, &key))
                        .arg(0)
                        .arg(-1),
                )
                .await
                .unwrap_or_default();
            jobs.extend(
                lane.iter()
                    .filter_map(|item| item.split(' ').next().map(str::to_string)),
            );
        }
        Ok(jobs)
    }
}

/// The job id a stream entry names (`j`), if any.
pub(super) fn entry_job(entry: &Value) -> Option<String> {
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
