//! The event log's entries as every reader sees them: one entry decoded into the events it holds
//! (jobs of one call share an entry), and the filter a reader applies (job, queue, type, kind);
//! and the reads every follower of the log makes: its cap, its state (`XINFO STREAM`), one
//! blocking read, the entries of the reply.
//! The operator's reads (hero-admin's `Inspector::events`, `follow`) and the producer's
//! subscription (hero-client's `Client::events`, and `wait`) are built on these.

use std::time::Duration;

use redis::Value;

use crate::conn::{Blocking, Redis};
use crate::error::Result;
use crate::keys::Keyspace;
use crate::name::{ScriptType, Target};
use crate::reply;

/// One change of a job's state, as the function that made it logged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The entry id: `<ms>-<seq>`, the time of the change.
    pub id: String,
    /// The kind's name ([`crate::event::EventKind`]; see [`Event::kind`]). Kept as written, so a kind
    /// a newer protocol adds still reads.
    pub event: String,
    pub job_id: String,
    /// The work stream, where there is one.
    pub queue: Option<String>,
    /// The worker's consumer name, or a legacy worker id.
    pub worker: Option<String>,
    pub attempt: Option<u32>,
    /// The error, the way it was recovered, or another detail.
    pub reason: Option<String>,
    /// When a waiting job is due (ms since the epoch).
    pub due_ms: Option<u64>,
}

impl Event {
    /// When the change happened (ms since the epoch), from the entry id.
    pub fn at_ms(&self) -> u64 {
        self.id
            .split('-')
            .next()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0)
    }

    /// Decodes one XRANGE-style entry into the events it holds: one per job it names (jobs of
    /// one call that share event, stream and worker share an entry, their ids and attempts
    /// space-separated). An entry that is not an event (foreign data) holds none.
    pub fn decode(entry: &Value) -> Vec<Event> {
        Self::decode_entry(entry).unwrap_or_default()
    }

    fn decode_entry(entry: &Value) -> Option<Vec<Event>> {
        let [id, fields] = reply::array(entry).ok()? else {
            return None;
        };
        let id = reply::text(id).ok()?;
        let fields = reply::array(fields).ok()?;
        let mut attempts = String::new();
        let mut e = Event {
            id,
            event: String::new(),
            job_id: String::new(),
            queue: None,
            worker: None,
            attempt: None,
            reason: None,
            due_ms: None,
        };
        for pair in fields.chunks(2) {
            let [k, v] = pair else { break };
            let (k, v) = (reply::text(k).ok()?, reply::text(v).ok()?);
            match k.as_str() {
                "e" => e.event = v,
                "j" => e.job_id = v,
                "q" => e.queue = Some(v),
                "w" => e.worker = Some(v),
                "a" => attempts = v,
                "r" => e.reason = Some(v),
                "d" => e.due_ms = v.parse().ok(),
                _ => {}
            }
        }
        if e.event.is_empty() || e.job_id.is_empty() {
            return None;
        }
        let ids = std::mem::take(&mut e.job_id);
        if !ids.contains(' ') {
            // one job: an entry of its own, whose reason or id may hold spaces
            e.job_id = ids;
            e.attempt = attempts.parse().ok();
            return Some(vec![e]);
        }
        let mut attempts = attempts.split(' ');
        Some(
            ids.split(' ')
                .map(|id| Event {
                    job_id: id.to_string(),
                    attempt: attempts.next().and_then(|a| a.parse().ok()),
                    ..e.clone()
                })
                .collect(),
        )
    }

    /// The kind, when it is one this version knows.
    pub fn kind(&self) -> Option<crate::event::EventKind> {
        self.event.parse().ok()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "at_ms": self.at_ms(),
            "event": self.event,
            "job": self.job_id,
            "queue": self.queue,
            "worker": self.worker,
            "attempt": self.attempt,
            "reason": self.reason,
            "due_ms": self.due_ms,
        })
    }
}

/// Which events a reader wants; every field set must match.
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    pub job: Option<String>,
    /// One queue, every priority level of it (its work stream key at the default level).
    pub queue: Option<Target>,
    /// Every queue of a script type.
    pub script_type: Option<ScriptType>,
    pub event: Option<crate::event::EventKind>,
}

impl EventFilter {
    pub fn matches(&self, keys: &Keyspace, e: &Event) -> bool {
        if self.job.as_ref().is_some_and(|j| *j != e.job_id) {
            return false;
        }
        if self.event.is_some_and(|ev| ev.as_str() != e.event) {
            return false;
        }
        // a stream key and what may follow it: the end, or a deeper level / priority suffix
        let under = |base: &str, exact: bool| {
            e.queue.as_deref().is_some_and(|q| {
                q == base
                    || q.strip_prefix(base).is_some_and(|rest| {
                        if exact {
                            rest.starts_with(":prio:")
                        } else {
                            rest.starts_with(':')
                        }
                    })
            })
        };
        if let Some(t) = &self.queue {
            if !under(&keys.work(t, crate::Priority::DEFAULT), true) {
                return false;
            }
        }
        if let Some(t) = &self.script_type {
            let base = keys.work(&Target::of_type(t.clone()), crate::Priority::DEFAULT);
            if !under(&base, false) {
                return false;
            }
        }
        true
    }
}

/// The log's cap as the brokers set it (`events_max` in the config hash: 10000 when absent).
pub async fn events_max(redis: &Redis, keys: &Keyspace) -> Result<u64> {
    let v: Option<String> = redis
        .query(redis::cmd("HGET").arg(keys.config()).arg("events_max"))
        .await?;
    Ok(v.and_then(|v| v.trim().parse().ok()).unwrap_or(10_000))
}

/// What `XINFO STREAM` says of the log: entries ever added, entries kept, the first kept entry,
/// the last id given.
#[derive(Debug, Default)]
pub struct LogInfo {
    pub added: u64,
    pub length: u64,
    pub first: Option<String>,
    pub last: String,
}

impl LogInfo {
    /// `XINFO STREAM`'s reply (a flat list, or a map under RESP3).
    pub fn decode(v: &Value) -> Result<LogInfo> {
        let mut info = LogInfo {
            last: "0-0".into(),
            ..LogInfo::default()
        };
        let items = match v {
            Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect::<Vec<_>>(),
            other => reply::array(other)?.iter().collect(),
        };
        for pair in items.chunks(2) {
            let [k, v] = pair else { break };
            match reply::text(k)?.as_str() {
                "entries-added" => info.added = reply::int(v)?.max(0) as u64,
                "length" => info.length = reply::int(v)?.max(0) as u64,
                "last-generated-id" => info.last = reply::text(v)?,
                "first-entry" => {
                    info.first = reply::array(v)?.first().map(reply::text).transpose()?;
                }
                _ => {}
            }
        }
        Ok(info)
    }

    /// The log's state now; an empty one when it was never written.
    pub async fn read<C: redis::aio::ConnectionLike + Send>(
        conn: &mut C,
        key: &str,
    ) -> Result<LogInfo> {
        let exists: bool = redis::cmd("EXISTS").arg(key).query_async(conn).await?;
        if !exists {
            return Ok(LogInfo {
                last: "0-0".into(),
                ..LogInfo::default()
            });
        }
        let v: Value = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(key)
            .query_async(conn)
            .await?;
        LogInfo::decode(&v)
    }
}

/// A stream id as its two numbers, for ordering.
pub fn stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// One `XREAD COUNT <count> BLOCK <block>` of the log `key` after `cursor`.
pub async fn read_log(
    conn: &mut Blocking,
    key: &str,
    cursor: &str,
    count: u64,
    block: Duration,
) -> Result<Value> {
    Ok(redis::cmd("XREAD")
        .arg("COUNT")
        .arg(count)
        .arg("BLOCK")
        .arg(block.as_millis() as u64)
        .arg("STREAMS")
        .arg(key)
        .arg(cursor)
        .query_async(conn)
        .await?)
}

/// The entries of an XREAD reply for one key, as (id, entry) pairs.
pub fn xread_entries(v: &Value) -> Result<Vec<(String, &Value)>> {
    let mut out = Vec::new();
    for stream in reply::array(v)? {
        let [_, entries] = reply::array(stream)? else {
            return Err(reply::unexpected("XREAD answered a stream without entries"));
        };
        for entry in reply::array(entries)? {
            let id = reply::array(entry)?
                .first()
                .map(reply::text)
                .transpose()?
                .ok_or_else(|| reply::unexpected("XREAD answered an entry without an id"))?;
            out.push((id, entry));
        }
    }
    Ok(out)
}
