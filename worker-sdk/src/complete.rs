//! The completer: one task that records job outcomes with `hero_complete`, a batch per call,
//! and only then frees the jobs' slots, so "at most N running" holds as Redis sees it too.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hero_protocol::clock;
use hero_protocol::function::Completion;
use hero_protocol::function::{CompleteBatch, Ended, Ending, Leased};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::event::WorkerEvent;
use crate::finished::Finished;
use crate::outcome::Outcome;
use crate::shared::Shared;
use hero_protocol::outage::Outage;

/// How many outcomes go into one call at most.
const BATCH: usize = 256;
/// How many calls may be under way at once.
const IN_FLIGHT: usize = 4;

/// When a failed attempt may run again (ms since the epoch); 0 for outcomes that never retry,
/// so a successful job pays for no clock read or jitter.
fn retry_at_ms(f: &Finished, now_ms: u64) -> u64 {
    let delay = match &f.outcome {
        Outcome::Done(_) | Outcome::Value(..) | Outcome::Abort(_) => return 0,
        Outcome::RetryAfter(d, _) => *d,
        Outcome::Fail(_) => f
            .retry_in
            .unwrap_or_else(|| crate::backoff::retry_delay(f.attempt.max(1))),
    };
    now_ms + delay.as_millis() as u64
}

/// The time of one batch, read once for all of its outcomes.
struct BatchClock {
    ms: u64,
    iso: String,
}

/// How `outcome` ended, as `hero_complete` takes it, and its text (the output or the error).
fn ending(outcome: &Outcome) -> Ending {
    match outcome {
        Outcome::Done(_) | Outcome::Value(..) => Ending::Done,
        Outcome::Fail(_) => Ending::Fail,
        Outcome::RetryAfter(..) => Ending::Retry,
        Outcome::Abort(_) => Ending::Abort,
    }
}

fn text(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Done(t)
        | Outcome::Value(_, t)
        | Outcome::Fail(t)
        | Outcome::RetryAfter(_, t)
        | Outcome::Abort(t) => t,
    }
}

/// Runs until every sender is gone and every queued outcome is recorded. Up to
/// [`IN_FLIGHT`] calls are under way at once, so Redis records one batch while this process
/// gathers the next and the fetch loop reuses the slots already freed: the worker's Redis
/// work and its own work overlap instead of taking turns.
/// `more` reaches the job tasks of a fused fetch (see [`record`]); weak, so that the completer
/// still ends once the fetch loop and every job task are gone.
pub(crate) async fn run(
    s: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Finished>,
    more: mpsc::WeakUnboundedSender<Finished>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut calls = JoinSet::new();
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        // what piled up while every call was under way goes into this one
        let mut batch: Vec<Finished> = Vec::with_capacity(BATCH);
        batch.push(first);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        calls.spawn(record(s.clone(), batch, slot, more.clone()));
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
}

/// A fetch sent with a completion: its answer, the streams it named, where its jobs report.
struct FusedFetch {
    reply: hero_protocol::Result<redis::Value>,
    named: Option<crate::shared::Registered>,
    done: mpsc::UnboundedSender<Finished>,
}

/// What the pipeline of a completion and a fetch answered: the completion's answer (None when
/// the pipeline answered nothing for it, or was not sent) and the fetch.
#[derive(Default)]
struct Pipelined {
    completion: Option<hero_protocol::Result<redis::Value>>,
    fetch: Option<FusedFetch>,
}

/// Sends the completion `cmd` with a fetch for `slots` jobs pipelined right after it.
async fn with_fetch(
    s: &Arc<Shared>,
    cmd: &redis::Cmd,
    slots: usize,
    done: mpsc::UnboundedSender<Finished>,
) -> Pipelined {
    let (fetch, named) = crate::fetch::fetch_cmd(s, slots);
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone()).add_command((*fetch).clone());
    match s.redis.pipeline(&pipe).await {
        Ok(mut replies) => {
            let fetch = replies.pop().map(|reply| FusedFetch { reply, named, done });
            Pipelined {
                completion: replies.pop(),
                fetch,
            }
        }
        Err(e) => Pipelined {
            completion: Some(Err(e)),
            fetch: None,
        },
    }
}

/// Records one batch of outcomes with one `hero_complete` call, then frees their slots.
///
/// With group commit (`WorkerBuilder::group_commit`, on by default when the server fsyncs
/// every write) and under a backlog (the last fetch came back full) the same round trip also
/// fetches as many
/// jobs as the batch frees slots, pipelined after the completion on the same connection: Redis
/// runs both in one pass of its event loop, so with `appendfsync always` one fsync covers the
/// results and the next leases, where apart each waited for its own. A slot then goes from the
/// ended job straight to the next (Redis records the end before the fetch runs, so "at most N
/// running" holds as it sees it), and a durable worker's slot cycle is one round trip, not two.
async fn record(
    s: Arc<Shared>,
    mut batch: Vec<Finished>,
    _slot: OwnedSemaphorePermit,
    more: mpsc::WeakUnboundedSender<Finished>,
) {
    let mut outage = Outage::new("recording outcomes");
    let ms = clock::now_ms();
    let now = BatchClock {
        ms,
        iso: clock::iso(ms),
    };
    let mut outcomes = CompleteBatch::new(
        &s.keys,
        &now.iso,
        s.redis.caps().xackdel_flag(),
        &s.consumer_name,
    );
    let mut sent = Vec::with_capacity(batch.len());
    for f in batch.drain(..) {
        let ending = if f.again {
            Ending::Again
        } else {
            ending(&f.outcome)
        };
        outcomes.push(Ended {
            held: Leased {
                id: &f.job_id,
                stream: &s.streams[f.stream],
                lease: &f.lease,
                reply: &f.reply,
            },
            ending,
            text: text(&f.outcome),
            retry_at_ms: retry_at_ms(&f, now.ms),
            ran: Some(f.ran),
        });
        if let Some(ms) = f.retention_ms {
            outcomes.expire_after(ms);
        }
        if let Outcome::Value(bytes, _) = &f.outcome {
            outcomes.value(bytes);
        }
        // only a failure carries one (task.rs); held back, as progress is, while a live older
        // process would refuse the field
        if let Some(trace) = &f.trace {
            if !s.hold_traces.load(Ordering::Acquire) {
                outcomes.trace(trace);
            }
        }
        sent.push(f);
    }
    if sent.is_empty() {
        return;
    }
    let cmd = outcomes.call();
    // (not where a WAIT for replicas ends every pipeline: one refusal would lose the fetch's
    // answer with the completion's)
    let fuse = s.group_commit && s.backlog.load(Ordering::Relaxed) && !s.redis.waits_for_replicas();
    let Pipelined {
        completion: mut first,
        fetch: fused,
    } = match (fuse, more.upgrade()) {
        (true, Some(done)) => with_fetch(&s, &cmd, sent.len(), done).await,
        _ => Pipelined::default(),
    };
    // Redis away: keep the outcomes (and their slots) and try again, never drop them.
    let answers = loop {
        if let Some(r) = first.take() {
            match r {
                Ok(v) => break outcomes.answers(&v),
                Err(e) if !e.is_retryable() => break Err(e),
                Err(_) => {}
            }
        }
        match s.redis.query::<redis::Value>(&cmd).await {
            Ok(v) => {
                outage.ok();
                break outcomes.answers(&v);
            }
            Err(e) if e.is_retryable() => {
                // kept, with their slots, until Redis takes them
                tokio::time::sleep(outage.failed(&e)).await;
            }
            Err(e) => break Err(e),
        }
    };
    let mut freed = Vec::with_capacity(sent.len());
    let answers = match answers {
        Ok(a) => a,
        Err(e) => {
            // a refusal, not an outage: retrying would be refused again
            tracing::error!(error = %e, jobs = sent.len(), "recording outcomes failed");
            for f in sent.drain(..) {
                s.inflight.remove(&f.job_id);
                freed.push(f.permit);
            }
            Vec::new()
        }
    };
    for (f, completion) in sent.into_iter().zip(answers) {
        s.inflight.remove(&f.job_id);
        metrics::counter!("hero_worker_completions_total", "result" => completion.as_str())
            .increment(1);
        if completion == Completion::LeaseLost {
            tracing::warn!(job = %f.job_id, "result not recorded: the lease was lost to another delivery");
        }
        s.emit(WorkerEvent::Completed {
            job_id: f.job_id,
            completion,
            failed: !matches!(f.outcome, Outcome::Done(_) | Outcome::Value(..)),
        });
        freed.push(f.permit);
    }
    if let Some(FusedFetch { reply, named, done }) = fused {
        // the freed slots go to the jobs the fused fetch leased (the rest go back)
        let taken =
            reply.and_then(|v| crate::fetch::take_reply(&s, v, named.as_ref(), freed, done));
        match taken {
            // the queues came up short: the fetch loop takes over again
            Ok((cursors, _)) if !cursors.is_empty() => s.backlog.store(false, Ordering::Relaxed),
            Ok(_) => {}
            Err(e) => {
                s.backlog.store(false, Ordering::Relaxed);
                tracing::warn!(error = %e, "the fetch sent with a completion failed; the fetch loop goes on");
            }
        }
    }
}
