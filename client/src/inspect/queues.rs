//! Queue stats: per work stream, the gauges read from the stream itself (waiting, running, the
//! oldest waiting job's age) and the counters and histograms the functions keep on write (see
//! `crate::stats`, which names them and reads a hash back). Reading every queue costs a few
//! commands per queue, never per job.

use std::collections::HashMap;

use redis::Value;

use super::Inspector;
use crate::clock;
use crate::error::Result;
use crate::keys::CONSUMER_GROUP;
use crate::reply;
use crate::stats::{self, StreamStats};
use crate::stats::Histogram;

/// The minutes the rate is averaged over.
const RATE_MINUTES: u64 = 5;

/// One queue (work stream) as an operator sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueStats {
    /// The work stream's key.
    pub stream: String,
    /// `<type>[/<group>[/<instance>]]`, ` prio <n>` off the default level.
    pub name: String,
    /// Entries not yet delivered (a stopped job's entry counts until a fetch drops it).
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
            "done_per_minute": self.done_per_minute,
            "oldest_waiting_ms": self.oldest_waiting_ms,
            "wait": hist(&self.wait),
            "run": hist(&self.run),
            "paused": self.paused,
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
            let at = crate::keys::minute_of(&at).to_string();
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

    /// Every registered queue, sorted by name.
    pub async fn queues(&self) -> Result<Vec<QueueStats>> {
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
            let at = clock::iso(now.saturating_sub(m * 60_000));
            pipe.cmd("HGETALL")
                .arg(self.keys.stats_minute(&at));
        }
        for s in &streams {
            pipe.cmd("XLEN").arg(s);
            pipe.cmd("XPENDING").arg(s).arg(CONSUMER_GROUP);
            pipe.cmd("XINFO").arg("GROUPS").arg(s);
        }
        let mut replies = self.redis.pipeline(&pipe).await?.into_iter();
        let mut next = || replies.next().unwrap_or(Ok(Value::Nil));
        let totals = by_stream(next()?)?;
        let mut rates: HashMap<String, u64> = HashMap::new();
        for _ in 1..=RATE_MINUTES {
            for (stream, s) in by_stream(next()?)? {
                *rates.entry(stream).or_default() += s.done();
            }
        }
        let mut queues = Vec::with_capacity(streams.len());
        let mut last_delivered = Vec::with_capacity(streams.len());
        for stream in &streams {
            // a stream deleted or broken by hand answers errors: it reads as empty
            let len = next()
                .ok()
                .and_then(|v| reply::int(&v).ok())
                .unwrap_or(0)
                .max(0) as u64;
            let running = next()
                .ok()
                .and_then(|v| {
                    reply::array(&v)
                        .ok()?
                        .first()
                        .and_then(|n| reply::int(n).ok())
                })
                .unwrap_or(0)
                .max(0) as u64;
            let groups = next().unwrap_or(Value::Nil);
            let mut lag: Option<u64> = None;
            let mut last = None;
            for g in reply::array(&groups).unwrap_or(&[]) {
                let fields = reply::array(g).unwrap_or(&[]);
                let get = |k: &str| {
                    fields
                        .chunks(2)
                        .find(|kv| {
                            kv.first().and_then(|f| reply::text(f).ok()).as_deref() == Some(k)
                        })
                        .and_then(|kv| kv.get(1))
                };
                if get("name").and_then(|v| reply::text(v).ok()).as_deref() != Some(CONSUMER_GROUP)
                {
                    continue;
                }
                lag = get("lag")
                    .and_then(|v| reply::int(v).ok())
                    .map(|n| n.max(0) as u64);
                last = get("last-delivered-id").and_then(|v| reply::text(v).ok());
            }
            let mut q = QueueStats {
                name: self.keys.queue_name(stream),
                stream: stream.clone(),
                waiting: lag.unwrap_or_else(|| len.saturating_sub(running)),
                running,
                done_per_minute: *rates.get(stream).unwrap_or(&0) as f64 / RATE_MINUTES as f64,
                paused: paused.contains(stream),
                ..QueueStats::default()
            };
            if let Some(t) = totals.get(stream) {
                q.finished = t.finished;
                q.failed = t.failed;
                q.retried = t.retried;
                q.recovered = t.recovered;
                q.dead = t.dead;
                q.delayed = t.delayed;
                q.wait = t.wait.clone();
                q.run = t.run.clone();
            }
            queues.push(q);
            last_delivered.push(last);
        }
        // the oldest waiting job: the first entry after the group's last delivered one
        let mut pipe = redis::pipe();
        for (q, last) in queues.iter().zip(&last_delivered) {
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
        if !queues.is_empty() {
            for (q, r) in queues.iter_mut().zip(self.redis.pipeline(&pipe).await?) {
                let first = r
                    .ok()
                    .and_then(|v| {
                        let entry = reply::array(&v).ok()?.first()?.clone();
                        reply::text(reply::array(&entry).ok()?.first()?).ok()
                    })
                    .and_then(|id| id.split('-').next()?.parse::<u64>().ok());
                if q.waiting > 0 {
                    q.oldest_waiting_ms = first.map(|ms| now.saturating_sub(ms));
                }
            }
        }
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(queues)
    }
}
