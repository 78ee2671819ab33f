//! Reading the event log (`hero:meta:events`): the latest entries, filtered by job, queue, type or
//! event, and following it live with XREAD BLOCK on a connection of its own (no polling).

use std::time::Duration;

use redis::Value;

use super::Inspector;
use hero_protocol::error::{Error, Result};
use hero_protocol::keys::Keyspace;
use hero_protocol::name::{ScriptType, Target};
use hero_protocol::reply;

/// One change of a job's state, as the function that made it logged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The entry id: `<ms>-<seq>`, the time of the change.
    pub id: String,
    /// The kind's name ([`crate::EventKind`]; see [`Event::kind`]). Kept as written, so a kind
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
    fn decode(entry: &Value) -> Vec<Event> {
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
    pub fn kind(&self) -> Option<hero_protocol::event::EventKind> {
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
    pub event: Option<hero_protocol::event::EventKind>,
}

impl EventFilter {
    fn matches(&self, keys: &Keyspace, e: &Event) -> bool {
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
            if !under(&keys.work(t, hero_protocol::Priority::DEFAULT), true) {
                return false;
            }
        }
        if let Some(t) = &self.script_type {
            let base = keys.work(
                &Target::of_type(t.clone()),
                hero_protocol::Priority::DEFAULT,
            );
            if !under(&base, false) {
                return false;
            }
        }
        true
    }
}

/// Entries read per round trip when scanning the log backwards.
const PAGE: usize = 1000;

impl Inspector {
    /// The latest `limit` events that match `filter`, oldest first. Scans the log backwards a
    /// page at a time, so a filter that matches little reads the whole log (at most its cap).
    /// In a sharded namespace the shards' logs are merged by time.
    pub async fn events(&self, filter: &EventFilter, limit: usize) -> Result<Vec<Event>> {
        if self.others.is_empty() {
            return self.events_here(filter, limit).await;
        }
        let mut all = Vec::new();
        for (_, shard) in self.shards() {
            all.extend(shard.events_here(filter, limit).await?);
        }
        // stable: a shard's own order holds among events of one millisecond
        all.sort_by_key(Event::at_ms);
        let skip = all.len().saturating_sub(limit);
        Ok(all.split_off(skip))
    }

    async fn events_here(&self, filter: &EventFilter, limit: usize) -> Result<Vec<Event>> {
        let key = self.keys.events();
        let mut out = Vec::new();
        let mut end = "+".to_string();
        while out.len() < limit {
            let page: Value = self
                .redis
                .query(
                    redis::cmd("XREVRANGE")
                        .arg(&key)
                        .arg(&end)
                        .arg("-")
                        .arg("COUNT")
                        .arg(PAGE),
                )
                .await?;
            let entries = reply::array(&page)?;
            for entry in entries {
                // newest first: the jobs of an entry too
                for e in Event::decode(entry).into_iter().rev() {
                    if filter.matches(&self.keys, &e) && out.len() < limit {
                        out.push(e);
                    }
                }
            }
            if entries.len() < PAGE {
                break;
            }
            let Some(last) = entries.last().and_then(|e| reply::array(e).ok()?.first()) else {
                break;
            };
            end = format!("({}", reply::text(last)?);
        }
        out.reverse();
        Ok(out)
    }

    /// Follows the log from `after` (an entry id; `$` for what comes from now on: resolved here
    /// to the log's last entry, so an event logged after this returns is never missed, however
    /// late the first read).
    pub async fn follow(&self, filter: EventFilter, after: &str) -> Result<EventFollower> {
        let block = Duration::from_secs(1);
        let key = self.keys.events();
        let last = if after == "$" {
            let v: Value = self
                .redis
                .query(
                    redis::cmd("XREVRANGE")
                        .arg(&key)
                        .arg("+")
                        .arg("-")
                        .arg("COUNT")
                        .arg(1),
                )
                .await?;
            reply::array(&v)?
                .first()
                .and_then(|e| {
                    reply::array(e)
                        .ok()?
                        .first()
                        .and_then(|id| reply::text(id).ok())
                })
                .unwrap_or_else(|| "0-0".to_string())
        } else {
            after.to_string()
        };
        Ok(EventFollower {
            conn: self.redis.dedicated(block).await?,
            key,
            keys: self.keys.clone(),
            last,
            filter,
            block,
        })
    }
}

/// A live tail of the event log: each [`EventFollower::next`] blocks on XREAD until events
/// arrive (or a second passes: then it answers an empty batch).
pub struct EventFollower {
    conn: hero_protocol::conn::Blocking,
    key: String,
    keys: Keyspace,
    last: String,
    filter: EventFilter,
    block: Duration,
}

impl EventFollower {
    /// Every event after the last one returned (up to a page of entries a call).
    pub async fn next(&mut self) -> Result<Vec<Event>> {
        self.read(PAGE).await
    }

    /// The newest events only: waits for the first new entry, then reads the newest
    /// `max_entries` after the last one returned and skips what came between. What a live view
    /// wants on a busy system: its cost is bounded by `max_entries` a call, whatever the rate
    /// (a full tail at 28,000 jobs/s expanded ~80,000 events a second).
    pub async fn next_latest(&mut self, max_entries: usize) -> Result<Vec<Event>> {
        let woke = self.read(1).await?;
        let v: Value = redis::cmd("XREVRANGE")
            .arg(&self.key)
            .arg("+")
            .arg(format!("({}", self.last))
            .arg("COUNT")
            .arg(max_entries.max(1))
            .query_async(&mut self.conn)
            .await
            .map_err(Error::from)?;
        let newest = reply::array(&v)?;
        if newest.is_empty() {
            return Ok(woke);
        }
        let mut out = woke;
        for entry in newest.iter().rev() {
            if let Some(id) = reply::array(entry)?.first() {
                self.last = reply::text(id)?;
            }
            out.extend(
                Event::decode(entry)
                    .into_iter()
                    .filter(|e| self.filter.matches(&self.keys, e)),
            );
        }
        Ok(out)
    }

    async fn read(&mut self, count: usize) -> Result<Vec<Event>> {
        let v: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(self.block.as_millis() as u64)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(&self.last)
            .query_async(&mut self.conn)
            .await
            .map_err(Error::from)?;
        let mut out = Vec::new();
        // [[key, [entries…]]] or nil when the block timed out
        for stream in reply::array(&v)? {
            let [_, entries] = reply::array(stream)? else {
                return Err(hero_protocol::reply::unexpected(
                    "XREAD answered a stream without entries",
                ));
            };
            for entry in reply::array(entries)? {
                if let Some(id) = reply::array(entry)?.first() {
                    self.last = reply::text(id)?;
                }
                for e in Event::decode(entry) {
                    if self.filter.matches(&self.keys, &e) {
                        out.push(e);
                    }
                }
            }
        }
        Ok(out)
    }
}
