//! What a bench worker saw: per job, when it started and completed, as latencies from the
//! submit time its id carries (`<seq>-<µs since the epoch>`), and with `--latency-trace` the
//! made / answered / started times per job that `benches/latency_tail.py` reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use hero_worker::WorkerEvent;
use tokio::sync::Notify;

use crate::report::{percentiles, Figures};

/// The longest any single wait of a scenario may take before the run is called broken.
pub const STUCK: Duration = Duration::from_secs(300);

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Calls `offer(i)` for `total` jobs at `rate` a second, paced by a 1 ms tick (missed ticks are
/// caught up at the next one, so the offered rate holds when this process is descheduled).
pub async fn offer_at_rate(rate: u64, total: u64, mut offer: impl FnMut(u64)) {
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sent = 0u64;
    while sent < total {
        tick.tick().await;
        let due = ((t0.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        while sent < due {
            offer(sent);
            sent += 1;
        }
    }
}

/// The submit time a bench job id carries.
fn submitted_us(id: &str) -> Option<u64> {
    id.rsplit('-').next()?.parse().ok()
}

/// The sequence number a bench job id starts with.
fn sequence(id: &str) -> Option<u64> {
    id.split('-').next()?.parse().ok()
}

/// What a bench worker saw: jobs started and completed, with their latencies.
#[derive(Default)]
pub struct Tally {
    target: AtomicU64,
    started: AtomicU64,
    completed: AtomicU64,
    start_us: Mutex<Vec<u64>>,
    /// With `--latency-trace`: (sequence, when) per job started, and per submit answered.
    traced_starts: Option<Mutex<Vec<(u64, u64)>>>,
    traced_answers: Option<Mutex<Vec<(u64, u64)>>>,
    result_us: Mutex<Vec<u64>>,
    all_started: Notify,
    all_completed: Notify,
    pub ready: Notify,
}

impl Tally {
    pub fn new(target: u64) -> Arc<Tally> {
        let t = Tally::default();
        t.target.store(target, Ordering::SeqCst);
        Arc::new(t)
    }

    /// A tally that also keeps the times `--latency-trace` writes.
    pub fn traced(target: u64, n: usize) -> Arc<Tally> {
        let t = Tally {
            traced_starts: Some(Mutex::new(Vec::with_capacity(n))),
            traced_answers: Some(Mutex::new(Vec::with_capacity(n))),
            ..Tally::default()
        };
        t.target.store(target, Ordering::SeqCst);
        Arc::new(t)
    }

    fn trace(list: Option<&Mutex<Vec<(u64, u64)>>>, id: &str, at: u64) {
        if let (Some(list), Some(seq)) = (list, sequence(id)) {
            if let Ok(mut v) = list.lock() {
                v.push((seq, at));
            }
        }
    }

    pub fn on_answer(&self, id: &str) {
        Tally::trace(self.traced_answers.as_ref(), id, now_us());
    }

    /// Writes `made answered started` per job (`made` from its id), in microseconds since the
    /// epoch, in the order they were made.
    pub fn write_trace(&self, ids: &[String], path: &std::path::Path) -> Result<()> {
        let take = |m: Option<&Mutex<Vec<(u64, u64)>>>| -> std::collections::HashMap<u64, u64> {
            m.and_then(|m| m.lock().ok().map(|mut v| std::mem::take(&mut *v)))
                .unwrap_or_default()
                .into_iter()
                .collect()
        };
        let answers = take(self.traced_answers.as_ref());
        let starts = take(self.traced_starts.as_ref());
        let mut text = String::from("# made_us answered_us started_us\n");
        for id in ids {
            let (Some(seq), Some(made)) = (sequence(id), submitted_us(id)) else {
                continue;
            };
            if let (Some(a), Some(s)) = (answers.get(&seq), starts.get(&seq)) {
                text.push_str(&format!("{made} {a} {s}\n"));
            }
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    pub fn on_start(&self, id: &str) {
        let now = now_us();
        if let Some(t) = submitted_us(id) {
            if let Ok(mut v) = self.start_us.lock() {
                v.push(now.saturating_sub(t));
            }
        }
        Tally::trace(self.traced_starts.as_ref(), id, now);
        if self.started.fetch_add(1, Ordering::SeqCst) + 1 == self.target.load(Ordering::SeqCst) {
            self.all_started.notify_one();
        }
    }

    pub fn on_event(&self, e: &WorkerEvent) {
        match e {
            WorkerEvent::Ready { .. } => self.ready.notify_one(),
            WorkerEvent::Completed { job_id, .. } => self.on_completed(job_id.as_str()),
            _ => {}
        }
    }

    /// A job's result was recorded.
    pub fn on_completed(&self, id: &str) {
        if let Some(t) = submitted_us(id) {
            if let Ok(mut v) = self.result_us.lock() {
                v.push(now_us().saturating_sub(t));
            }
        }
        let done = self.completed.fetch_add(1, Ordering::SeqCst) + 1;
        if done == self.target.load(Ordering::SeqCst) {
            self.all_completed.notify_one();
        }
    }

    async fn wait(&self, what: &str, n: &AtomicU64, notify: &Notify) -> Result<()> {
        let deadline = Instant::now() + STUCK;
        while n.load(Ordering::SeqCst) < self.target.load(Ordering::SeqCst) {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, notify.notified()).await.is_err() {
                bail!(
                    "only {} of {} jobs {what} within {STUCK:?}",
                    n.load(Ordering::SeqCst),
                    self.target.load(Ordering::SeqCst)
                );
            }
        }
        Ok(())
    }

    pub async fn all_completed(&self) -> Result<()> {
        self.wait("completed", &self.completed, &self.all_completed)
            .await
    }

    pub async fn all_started(&self) -> Result<()> {
        self.wait("started", &self.started, &self.all_started).await
    }

    pub fn latencies(&self, fig: &mut Figures, start: bool, result: bool) {
        let take = |m: &Mutex<Vec<u64>>| {
            m.lock()
                .map(|mut v| std::mem::take(&mut *v))
                .unwrap_or_default()
        };
        if start {
            let (p50, p99, max) = percentiles(take(&self.start_us));
            fig.set("start_p50_ms", p50);
            fig.set("start_p99_ms", p99);
            fig.set("start_max_ms", max);
        }
        if result {
            let (p50, p99, max) = percentiles(take(&self.result_us));
            fig.set("result_p50_ms", p50);
            fig.set("result_p99_ms", p99);
            fig.set("result_max_ms", max);
        }
    }
}
