//! Queue stats: per work stream, the gauges read from the stream itself (waiting, running, the
//! oldest waiting job's age) and the counters and histograms the functions keep on write (see
//! `hero_protocol::stats`, which names them and reads a hash back). Reading every queue costs a few
//! commands per queue, never per job.

use std::collections::HashMap;

use redis::Value;

use super::Inspector;
use hero_protocol::clock;
use hero_protocol::error::Result;
use hero_protocol::keys::CONSUMER_GROUP;
use hero_protocol::reply;
use hero_protocol::stats::Histogram;
use hero_protocol::stats::{self, StreamStats};

/// The minutes the rate is averaged over.
const RATE_MINUTES: u64 = 5;

/// One queue (work stream) as an operator sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueStats {
    /// The work stream's key.
    pub stream: String,
    /// `<type>[/<group>[/<instance>]]`, ` prio <n>` off the default level.
    pub name: String,
    /// Entries not yet delivered: the group's lag, at most the entries left.
    pub waiting: u64,
    /// Delivered and not yet acknowledged: running.
    pub running: u64,
    /// Jobs of this queue in the delayed set (delayed submits and retries).
    pub delayed: i64,
    pub finished: u64,
    /// Ended `error`, whatever the reason (dead letters and stops included).
    pub failed: u64,
    pub retried: u64,
    pub recovered: u64,
    pub dead: u64,
    /// Entries workers dropped because their job's record was gone: jobs lost.
    pub lost: u64,
    /// Jobs ended (finished or failed) per minute, over the last five whole minutes.
    pub done_per_minute: f64,
    /// From dispatch to start.
    pub wait: Histogram,
    /// From start to end.
    pub run: Histogram,
    /// Age of the oldest entry not yet delivered, ms.
    pub oldest_waiting_ms: Option<u64>,
    /// No worker takes a new job from it (`hero pause`).
    pub paused: bool,
    /// A fair queue's limit keys with jobs waiting in its gate (its ring's length: a held key
    /// is not counted); 0 for a queue served first in, first out.
    pub keys: u64,
}

impl QueueStats {
    pub fn to_json(&self) -> serde_json::Value {
        let hist = |h: &Histogram| {
            serde_json::json!({
                "count": h.count(),
                "sum_ms": h.sum_ms,
                "p50_ms": h.quantile_ms(0.5),
                "p99_ms": h.quantile_ms(0.99),
                "buckets": h.buckets.iter().map(|(b, n)| serde_json::json!({"le_ms": Histogram::upper_ms(*b), "count": n})).collect::<Vec<_>>(),
            })
        };
        serde_json::json!({
            "queue": self.name,
            "stream": self.stream,
            "waiting": self.waiting,
            "delayed": self.delayed,
            "running": self.running,
            "finished": self.finished,
            "failed": self.failed,
            "retried": self.retried,
            "recovered": self.recovered,
            "dead": self.dead,
            "lost": self.lost,
            "done_per_minute": self.done_per_minute,
            "oldest_waiting_ms": self.oldest_waiting_ms,
            "wait": hist(&self.wait),
            "run": hist(&self.run),
            "paused": self.paused,
            "keys": self.keys,
        })
    }
}

/// A stats hash's reply, by stream.
fn by_stream(v: Value) -> Result<HashMap<String, StreamStats>> {
    Ok(stats::by_stream(reply::pairs(v)?))
}

/// One minute of the whole system, for charts: jobs ended in it, and the jobs waiting when the
/// broker last sampled the queues in it (none when no broker sampled).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Minute {
    /// `2026-11-23T11:40`, UTC.
    pub at: String,
    pub finished: u64,
    pub failed: u64,
    pub waiting: Option<u64>,
}

impl Minute {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "at": self.at, "finished": self.finished, "failed": self.failed,
            "waiting": self.waiting,
        })
    }
}

impl Inspector {
    /// The last `minutes` whole minutes and the current one, oldest first: one HGETALL a
    /// minute, each holding a few fields a queue.
    pub async fn history(&self, minutes: u64) -> Result<Vec<Minute>> {
        let now = clock::now_ms();
        let mut pipe = redis::pipe();
        let mut out = Vec::new();
        for m in (0..=minutes).rev() {
            let at = clock::iso(now.saturating_sub(m * 60_000));
            pipe.cmd("HGETALL").arg(self.keys.stats_minute(&at));
            let at = hero_protocol::keys::minute_of(&at).to_string();
            out.push(Minute {
                at,
                ..Minute::default()
            });
        }
        for (minute, fields) in out.iter_mut().zip(self.redis.pipeline(&pipe).await?) {
            for s in by_stream(fields?)?.values() {
                minute.finished += s.finished;
                minute.failed += s.failed;
                if let Some(w) = s.waiting {
                    *minute.waiting.get_or_insert(0) += w;
                }
            }
        }
        Ok(out)
    }

    /// Every work stream, paused or not (the registry and its paused half): what a walk over
    /// all queues reads.
    pub async fn queue_streams(&self) -> Result<Vec<String>> {
        self.redis
            .query(
                redis::cmd("SUNION")
                    .arg(self.keys.queues())
                    .arg(self.keys.paused_queues()),
            )
            .await
    }

    /// The queue names an operator paused (`<type>[/<group>[/<instance>]]`), sorted.
    pub async fn paused(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .redis
            .query(redis::cmd("SMEMBERS").arg(self.keys.paused_names()))
            .await?;
        names.sort();
        Ok(names)
    }

    /// Every queue, sorted by name; in a sharded namespace summed over the shards (a queue's
    /// gauges, counters, rates and histograms added up, its oldest waiting job the oldest).
    pub async fn queues(&self) -> Result<Vec<QueueStats>> {
        if self.others.is_empty() {
            return self.queues_here().await;
        }
        let mut by_name = std::collections::BTreeMap::<String, QueueStats>::default();
        for (_, shard) in self.queues_by_shard().await? {
            for q in shard {
                match by_name.get_mut(&q.name) {
                    Some(sum) => sum.absorb(&q),
                    None => {
                        by_name.insert(q.name.clone(), q);
                    }
                }
            }
        }
        Ok(by_name.into_values().collect())
    }

    /// Every shard's queues, shard 0 first (what `/metrics` labels per shard).
    pub async fn queues_by_shard(&self) -> Result<Vec<(u16, Vec<QueueStats>)>> {
        let mut out = Vec::new();
        for (n, shard) in self.shards() {
            out.push((n, shard.queues_here().await?));
        }
        Ok(out)
    }

    /// This shard's registered queues, sorted by name: one round trip for the stats hashes and
    /// each stream's gauges, one for the oldest waiting entries.
    async fn queues_here(&self) -> Result<Vec<QueueStats>> {
        let streams = self.queue_streams().await?;
        let paused: std::collections::HashSet<String> = self
            .redis
            .query::<Vec<String>>(redis::cmd("SMEMBERS").arg(self.keys.paused_queues()))
            .await?
            .into_iter()
            .collect();
        let now = clock::now_ms();
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL").arg(self.keys.stats());
        for m in 1..=RATE_MINUTES {
            pipe.cmd("HGETALL").arg(
                self.keys
                    .stats_minute(&clock::iso(now.saturating_sub(m * 60_000))),
            );
        }
        for s in &streams {
            Gauges::ask(&mut pipe, s, &self.keys.fair_ring(s));
        }
        let mut replies = self.redis.pipeline(&pipe).await?.into_iter();
        let mut next = || {
            replies.next().unwrap_or_else(|| {
                Err(hero_protocol::reply::unexpected(
                    "a pipeline answered fewer replies than it was sent",
                ))
            })
        };
        let totals = by_stream(next()?)?;
        let mut done: HashMap<String, u64> = HashMap::new();
        for _ in 1..=RATE_MINUTES {
            for (stream, s) in by_stream(next()?)? {
                *done.entry(stream).or_default() += s.done();
            }
        }
        let mut queues = Vec::with_capacity(streams.len());
        let mut last_delivered = Vec::with_capacity(streams.len());
        for stream in &streams {
            let g = Gauges::decode(next(), next(), next(), next());
            let mut q = QueueStats {
                name: self.keys.queue_name(stream),
                stream: stream.clone(),
                // the lag, but never more than the entries left: Redis keeps a group's lag
                // when entries past its last delivery are deleted (a drain, a stop)
                waiting: g.lag.map_or(g.len.saturating_sub(g.running), |lag| {
                    lag.min(g.len.saturating_sub(g.running))
                }),
                running: g.running,
                done_per_minute: *done.get(stream).unwrap_or(&0) as f64 / RATE_MINUTES as f64,
                paused: paused.contains(stream),
                keys: g.keys,
                ..QueueStats::default()
            };
            if let Some(t) = totals.get(stream) {
                q.add_totals(t);
            }
            queues.push(q);
            last_delivered.push(g.last_delivered);
        }
        self.oldest_waiting(&mut queues, &last_delivered, now)
            .await?;
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(queues)
    }

    /// Each queue's oldest waiting job's age: the first entry after its group's last delivered
    /// one (one XRANGE each, in one round trip).
    async fn oldest_waiting(
        &self,
        queues: &mut [QueueStats],
        last_delivered: &[Option<String>],
        now: u64,
    ) -> Result<()> {
        if queues.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (q, last) in queues.iter().zip(last_delivered) {
            let from = match last {
                Some(id) if id != "0-0" => format!("({id}"),
                _ => "-".to_string(),
            };
            pipe.cmd("XRANGE")
                .arg(&q.stream)
                .arg(from)
                .arg("+")
                .arg("COUNT")
                .arg(1);
        }
        let mut gates = Vec::new();
        for (q, r) in queues.iter_mut().zip(self.redis.pipeline(&pipe).await?) {
            // a stream deleted or broken by hand answers an error: nothing waits in it
            let head = r.ok();
            if head.as_ref().is_some_and(is_wake_up) {
                // a fair gate's (or a resume's) wake-up entry, not a job
                q.waiting = q.waiting.saturating_sub(1);
            } else if q.waiting > 0 {
                q.oldest_waiting_ms = head
                    .and_then(|v| first_entry_ms(&v))
                    .map(|ms| now.saturating_sub(ms));
            }
            if q.oldest_waiting_ms.is_none() && q.keys > 0 {
                gates.push(q);
            }
        }
        self.gate_ages(&mut gates, now).await
    }

    /// A fair queue's oldest waiting job when its stream holds none: the job its gate serves
    /// next (the ring's head key's oldest, `<id> <ms queued>...`), two round trips for all.
    async fn gate_ages(&self, queues: &mut [&mut QueueStats], now: u64) -> Result<()> {
        if queues.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for q in queues.iter() {
            pipe.cmd("LINDEX")
                .arg(self.keys.fair_ring(&q.stream))
                .arg(0);
        }
        let heads: Vec<Option<String>> = self
            .redis
            .pipeline(&pipe)
            .await?
            .into_iter()
            .map(|r| r.ok().and_then(|v| reply::text(&v).ok()))
            .collect();
        let mut pipe = redis::pipe();
        for (q, key) in queues.iter().zip(&heads) {
            pipe.cmd("LINDEX")
                .arg(self.keys.fair_lane(&q.stream, key.as_deref().unwrap_or("")))
                .arg(0);
        }
        for (q, item) in queues.iter_mut().zip(self.redis.pipeline(&pipe).await?) {
            let ms = item
                .ok()
                .and_then(|v| reply::text(&v).ok())
                .and_then(|t| t.split(' ').nth(1)?.parse::<u64>().ok());
            q.oldest_waiting_ms = ms.map(|ms| now.saturating_sub(ms));
        }
        Ok(())
    }
}

impl QueueStats {
    /// Adds the same queue's stats on another shard.
    fn absorb(&mut self, o: &QueueStats) {
        self.waiting += o.waiting;
        self.running += o.running;
        self.delayed += o.delayed;
        self.finished += o.finished;
        self.failed += o.failed;
        self.retried += o.retried;
        self.recovered += o.recovered;
        self.dead += o.dead;
        self.lost += o.lost;
        self.done_per_minute += o.done_per_minute;
        self.wait.absorb(&o.wait);
        self.run.absorb(&o.run);
        self.oldest_waiting_ms = self.oldest_waiting_ms.max(o.oldest_waiting_ms);
        self.paused |= o.paused;
        self.keys += o.keys;
    }

    /// The counters and histograms the functions keep for this queue's stream.
    fn add_totals(&mut self, t: &StreamStats) {
        self.finished = t.finished;
        self.failed = t.failed;
        self.retried = t.retried;
        self.recovered = t.recovered;
        self.dead = t.dead;
        self.lost = t.lost;
        self.delayed = t.delayed;
        // a fair queue's jobs in its gate wait, though not on its stream
        self.waiting += t.gated.max(0) as u64;
        self.wait = t.wait.clone();
        self.run = t.run.clone();
    }
}

/// What a work stream itself says of its queue.
#[derive(Debug, Default, PartialEq, Eq)]
struct Gauges {
    /// Entries in the stream.
    len: u64,
    /// Delivered and not acknowledged: running.
    running: u64,
    /// The group's lag: entries not yet delivered (absent when Redis cannot tell).
    lag: Option<u64>,
    last_delivered: Option<String>,
    /// The fair gate's ring length: keys with work.
    keys: u64,
}

impl Gauges {
    /// Adds the four reads [`Gauges::decode`] takes, in its order.
    fn ask(pipe: &mut redis::Pipeline, stream: &str, ring: &str) {
        pipe.cmd("XLEN").arg(stream);
        pipe.cmd("XPENDING").arg(stream).arg(CONSUMER_GROUP);
        pipe.cmd("XINFO").arg("GROUPS").arg(stream);
        pipe.cmd("LLEN").arg(ring);
    }

    /// XLEN, the XPENDING summary (`[count, lowest, highest, consumers]`), XINFO GROUPS
    /// (a map per group, read by field name) and the fair ring's LLEN. A stream deleted or broken by hand answers
    /// errors: it reads as empty.
    fn decode(
        len: Result<Value>,
        pending: Result<Value>,
        groups: Result<Value>,
        ring: Result<Value>,
    ) -> Gauges {
        let count = |v: &Value| reply::int(v).ok().map(|n| n.max(0) as u64);
        let mut g = Gauges {
            len: len.ok().as_ref().and_then(count).unwrap_or(0),
            keys: ring.ok().as_ref().and_then(count).unwrap_or(0),
            running: pending
                .ok()
                .and_then(|v| reply::array(&v).ok()?.first().and_then(count))
                .unwrap_or(0),
            ..Gauges::default()
        };
        let groups = groups.unwrap_or(Value::Nil);
        for group in reply::array(&groups).unwrap_or(&[]) {
            let Ok(fields) = reply::array(group) else {
                continue;
            };
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|kv| {
                        kv.first().and_then(|f| reply::text(f).ok()).as_deref() == Some(name)
                    })
                    .and_then(|kv| kv.get(1))
            };
            if field("name").and_then(|v| reply::text(v).ok()).as_deref() != Some(CONSUMER_GROUP) {
                continue;
            }
            g.lag = field("lag").and_then(count);
            g.last_delivered = field("last-delivered-id").and_then(|v| reply::text(v).ok());
        }
        g
    }
}

/// Whether the first entry of an XRANGE reply is a wake-up entry (field `w`: `gate.lua`,
/// `pause.lua`), which names no job.
fn is_wake_up(v: &Value) -> bool {
    let field = || -> Option<String> {
        let entry = reply::array(v).ok()?.first()?;
        let fields = reply::array(reply::array(entry).ok()?.get(1)?).ok()?;
        reply::text(fields.first()?).ok()
    };
    field().as_deref() == Some("w")
}

/// The time (ms) of the first entry of an XRANGE reply, from its id.
fn first_entry_ms(v: &Value) -> Option<u64> {
    let entry = reply::array(v).ok()?.first()?;
    let id = reply::text(reply::array(entry).ok()?.first()?).ok()?;
    id.split('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_streams_gauges_are_read_by_name_and_errors_read_as_empty() {
        let groups = Value::Array(vec![
            Value::Array(vec![
                bulk("name"),
                bulk("other"),
                bulk("lag"),
                Value::Int(99),
            ]),
            Value::Array(vec![
                bulk("name"),
                bulk(CONSUMER_GROUP),
                bulk("consumers"),
                Value::Int(2),
                bulk("last-delivered-id"),
                bulk("7-0"),
                bulk("lag"),
                Value::Int(3),
            ]),
        ]);
        let pending = Value::Array(vec![Value::Int(4), bulk("5-0"), bulk("7-0"), Value::Nil]);
        let g = Gauges::decode(
            Ok(Value::Int(9)),
            Ok(pending),
            Ok(groups),
            Ok(Value::Int(2)),
        );
        assert_eq!(
            g,
            Gauges {
                len: 9,
                running: 4,
                lag: Some(3),
                last_delivered: Some("7-0".into()),
                keys: 2,
            }
        );
        let gone = || Err(hero_protocol::reply::unexpected("NOGROUP"));
        assert_eq!(
            Gauges::decode(gone(), gone(), gone(), gone()),
            Gauges::default()
        );
    }

    #[test]
    fn the_first_entry_gives_its_time() {
        let v = Value::Array(vec![Value::Array(vec![
            bulk("1700-3"),
            Value::Array(vec![]),
        ])]);
        assert_eq!(first_entry_ms(&v), Some(1700));
        assert_eq!(first_entry_ms(&Value::Array(vec![])), None);
    }
}
