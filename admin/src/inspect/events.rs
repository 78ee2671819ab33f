//! Reading the event log (`hero:meta:events`) as an operator does: the latest entries, filtered
//! by job, queue, type or event, and following it live with XREAD BLOCK on a connection of its
//! own (no polling). The entries' decoding and the filter are the protocol's
//! (`hero_protocol::event_log`); a producer's subscription, with gaps told, is hero-client's
//! `Client::events`.

use std::time::Duration;

use redis::Value;

use super::Inspector;
use hero_protocol::error::{Error, Result};
pub use hero_protocol::event_log::{Event, EventFilter};
use hero_protocol::keys::Keyspace;
use hero_protocol::reply;

/// Entries read per round trip when scanning the log backwards.
const PAGE: usize = 1000;

/// The entries a job's history reads at most from each end of its life's span of the log.
pub const HISTORY_SCAN: usize = 2000;

/// How far before its `created_at` and after its `finished_at` a job's history looks: the
/// record's times come from its processes' clocks, the log's ids from Redis's.
pub const LIFE_MARGIN: Duration = Duration::from_secs(5);

impl Inspector {
    /// The latest `limit` events that match `filter`, oldest first. Scans the log backwards a
    /// page at a time, so a filter that matches little reads the whole log (at most its cap).
    /// In a sharded namespace the shards' logs are merged by time.
    pub async fn events(&self, filter: &EventFilter, limit: usize) -> Result<Vec<Event>> {
        self.events_within(filter, limit, usize::MAX).await
    }

    /// As [`Inspector::events`], reading at most `max_scan` entries of each shard's log: a
    /// filter that matches little answers what the newest `max_scan` entries hold (the HTTP
    /// API's bound, so one request costs the same beside a log of any length).
    pub async fn events_within(
        &self,
        filter: &EventFilter,
        limit: usize,
        max_scan: usize,
    ) -> Result<Vec<Event>> {
        if self.others.is_empty() {
            return self.events_here(filter, limit, max_scan).await;
        }
        let mut all = Vec::new();
        for (_, shard) in self.shards() {
            all.extend(shard.events_here(filter, limit, max_scan).await?);
        }
        // stable: a shard's own order holds among events of one millisecond
        all.sort_by_key(Event::at_ms);
        let skip = all.len().saturating_sub(limit);
        Ok(all.split_off(skip))
    }

    /// A job's history: its events, oldest first, read only from the part of the log its life
    /// spans (from its `created_at` to its `finished_at`, or now, with [`LIFE_MARGIN`] either
    /// side: entry ids are Redis's ms), and of that at most [`HISTORY_SCAN`] entries from each
    /// end (a job's events gather at its submit, its starts and its end). So a view costs the
    /// same beside a log of 10,000 entries or of millions, and nothing is added to submit, fetch
    /// or complete. The flag says whether the whole span was read (false: a long life in a busy
    /// log; its middle events, such as a retry's, may be missing).
    pub async fn job_history(&self, job: &hero_protocol::Job) -> Result<(Vec<Event>, bool)> {
        let filter = EventFilter {
            job: Some(job.id.to_string()),
            ..EventFilter::default()
        };
        let margin = LIFE_MARGIN.as_millis() as u64;
        let from = hero_protocol::clock::parse_iso_ms(&job.created_at)
            .map_or("-".to_string(), |ms| ms.saturating_sub(margin).to_string());
        let to = job
            .finished_at
            .as_deref()
            .and_then(hero_protocol::clock::parse_iso_ms)
            .map_or("+".to_string(), |ms| (ms + margin).to_string());
        let mut all = Vec::new();
        let mut whole = true;
        for (_, shard) in self.shards() {
            let (events, read_all) = shard.history_here(&filter, &from, &to).await?;
            all.extend(events);
            whole &= read_all;
        }
        all.sort_by_key(Event::at_ms);
        Ok((all, whole))
    }

    /// [`Inspector::job_history`] on this shard: forward from `from`, then (when the span holds
    /// more than that) backward from `to` down to where the forward read stopped.
    async fn history_here(
        &self,
        filter: &EventFilter,
        from: &str,
        to: &str,
    ) -> Result<(Vec<Event>, bool)> {
        let key = self.keys.events();
        let mut out = Vec::new();
        let keep = |entries: &[Value], out: &mut Vec<Event>| {
            for entry in entries {
                for e in Event::decode(entry) {
                    if filter.matches(&self.keys, &e) {
                        out.push(e);
                    }
                }
            }
        };
        let first = self
            .redis
            .query::<Value>(
                redis::cmd("XRANGE")
                    .arg(&key)
                    .arg(from)
                    .arg(to)
                    .arg("COUNT")
                    .arg(HISTORY_SCAN),
            )
            .await?;
        let entries = reply::array(&first)?;
        keep(entries, &mut out);
        if entries.len() < HISTORY_SCAN {
            return Ok((out, true));
        }
        let Some(stop) = entries.last().and_then(|e| reply::array(e).ok()?.first()) else {
            return Ok((out, true));
        };
        let stop = reply::text(stop)?;
        let last = self
            .redis
            .query::<Value>(
                redis::cmd("XREVRANGE")
                    .arg(&key)
                    .arg(to)
                    .arg(format!("({stop}"))
                    .arg("COUNT")
                    .arg(HISTORY_SCAN),
            )
            .await?;
        let mut tail = reply::array(&last)?.to_vec();
        let whole = tail.len() < HISTORY_SCAN;
        tail.reverse();
        keep(&tail, &mut out);
        Ok((out, whole))
    }

    async fn events_here(
        &self,
        filter: &EventFilter,
        limit: usize,
        max_scan: usize,
    ) -> Result<Vec<Event>> {
        let key = self.keys.events();
        let mut out = Vec::new();
        let mut end = "+".to_string();
        let mut scanned = 0usize;
        while out.len() < limit && scanned < max_scan {
            scanned += PAGE;
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
