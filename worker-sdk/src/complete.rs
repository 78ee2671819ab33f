//! The completer: one task that records job outcomes with `hero_complete`, many per round trip,
//! and only then frees the jobs' slots, so "at most N running" holds as Redis sees it too.

use std::sync::Arc;

use hero_client::function::Function;
use hero_client::keys::CONSUMER_GROUP;
use hero_client::reply::Completion;
use hero_client::{clock, JobId};
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::backoff::Backoff;
use crate::outcome::Outcome;
use crate::worker::{Shared, WorkerEvent};

/// How many outcomes go into one pipeline at most.
const BATCH: usize = 256;

/// One job's outcome on its way to Redis.
pub(crate) struct Finished {
    pub job_id: String,
    pub stream: usize,
    pub lease: String,
    pub outcome: Outcome,
    pub attempt: u32,
    /// Released once the outcome is recorded.
    pub permit: OwnedSemaphorePermit,
}

/// When a failed attempt may run again (ms since the epoch); 0 for outcomes that never retry,
/// so a successful job pays for no clock read or jitter.
fn retry_at_ms(outcome: &Outcome, attempt: u32, now_ms: u64) -> u64 {
    let delay = match outcome {
        Outcome::Done(_) | Outcome::Abort(_) => return 0,
        Outcome::RetryAfter(d, _) => *d,
        Outcome::Fail(_) => crate::backoff::retry_delay(attempt.max(1)),
    };
    now_ms + delay.as_millis() as u64
}

/// The time of one batch, read once for all of its outcomes.
struct BatchClock {
    ms: u64,
    iso: String,
}

fn complete_cmd(s: &Shared, f: &Finished, now: &BatchClock) -> Option<redis::Cmd> {
    // ids came from Redis: one that is not a valid id cannot have a job hash of ours
    let id = JobId::new(&f.job_id).ok()?;
    let (outcome, text) = match &f.outcome {
        Outcome::Done(out) => ("done", out.as_str()),
        Outcome::Fail(e) => ("fail", e.as_str()),
        Outcome::RetryAfter(_, e) => ("retry", e.as_str()),
        Outcome::Abort(e) => ("abort", e.as_str()),
    };
    let mut cmd = Function::Complete.call(&[
        s.keys.job(&id),
        s.streams[f.stream].clone(),
        s.keys.delayed(),
        s.keys.reply(&id),
        s.keys.config(),
    ]);
    cmd.arg(&f.lease)
        .arg(CONSUMER_GROUP)
        .arg(outcome)
        .arg(text)
        .arg(retry_at_ms(&f.outcome, f.attempt, now.ms))
        .arg(&now.iso)
        .arg(s.redis.caps().xackdel_flag())
        .arg(id.as_str());
    Some(cmd)
}

/// Runs until every sender is gone and every queued outcome is recorded.
pub(crate) async fn run(s: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Finished>) {
    let mut backoff = Backoff::new();
    let mut batch: Vec<Finished> = Vec::with_capacity(BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        let ms = clock::now_ms();
        let now = BatchClock {
            ms,
            iso: clock::iso(ms),
        };
        let mut pipe = redis::pipe();
        let mut sent = Vec::with_capacity(batch.len());
        for f in batch.drain(..) {
            match complete_cmd(&s, &f, &now) {
                Some(cmd) => {
                    pipe.add_command(cmd);
                    sent.push(f);
                }
                None => {
                    tracing::warn!(job = %f.job_id, "job id from the stream is not a valid id; outcome dropped")
                }
            }
        }
        // Redis away: keep the outcomes (and their slots) and try again, never drop them.
        let results = loop {
            match s.redis.pipeline(&pipe).await {
                Ok(r) => {
                    backoff.reset();
                    break r;
                }
                Err(e) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %e, ?delay, pending = sent.len(), "recording outcomes failed; retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        };
        for (f, r) in sent.into_iter().zip(results) {
            s.inflight.remove(&f.job_id);
            match r.and_then(|v| Completion::decode(&v)) {
                Ok(completion) => {
                    metrics::counter!("hero_worker_completions_total", "result" => completion.as_str()).increment(1);
                    if completion == Completion::LeaseLost {
                        tracing::warn!(job = %f.job_id, "result not recorded: the lease was lost to another delivery");
                    }
                    s.emit(WorkerEvent::Completed {
                        job_id: f.job_id,
                        completion,
                    });
                }
                Err(e) => {
                    tracing::error!(job = %f.job_id, error = %e, "recording the outcome failed")
                }
            }
            drop(f.permit);
        }
    }
}
