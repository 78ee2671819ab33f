//! The job task: reads the records of leased jobs, starts each that still carries its lease, runs
//! the handler (timeout, stop, panic caught) and queues the outcome for the completer.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use hero_protocol::function::{self, Delivery, Fetched};
use hero_protocol::{Job, JobId};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tracing::Instrument;

use crate::event::WorkerEvent;
use crate::finished::Finished;
use crate::inflight::{CancelReason, Running};
use crate::outcome::{JobContext, Outcome};
use crate::shared::Shared;
use hero_protocol::outage::Outage;

/// Starts the jobs a fetch leased to this worker, each whose record still carries its lease.
/// A short fetch handed their records back; the others are read here (one pipelined HGETALL per
/// job, off the fetch loop so the next fetch is already under way). A stop or recovery that took
/// a job away between the fetch and the read dealt with its entry too, so such a job is only
/// forgotten here.
pub(crate) async fn start_jobs(
    s: Arc<Shared>,
    mut deliveries: Vec<Delivery>,
    mut permits: Vec<OwnedSemaphorePermit>,
    done: mpsc::UnboundedSender<Finished>,
) {
    let mut pipe = redis::pipe();
    let mut keys = Vec::with_capacity(deliveries.len());
    let mut running = Vec::with_capacity(deliveries.len());
    let mut handed: Vec<Option<redis::Value>> = Vec::with_capacity(deliveries.len());
    for d in &mut deliveries {
        let key = s.keys.job(&d.job_id);
        let record = d.record.take();
        if record.is_none() {
            pipe.cmd("HGETALL").arg(&key);
        }
        handed.push(record);
        keys.push(key);
        // known at once to the lease loop and to stop requests, before the record is even read
        running.push(s.inflight.insert(&d.job_id, d.stream, &d.entry));
    }
    let read = handed.iter().filter(|r| r.is_none()).count();
    let mut outage = Outage::new("reading fetched jobs");
    let give_up = tokio::time::Instant::now() + s.lease / 2;
    // an empty pipeline (every record handed back) answers at once, without a round trip
    let mut fresh = loop {
        match s.redis.pipeline(&pipe).await {
            Ok(r) => {
                outage.ok();
                break r;
            }
            Err(e) if tokio::time::Instant::now() < give_up => {
                tokio::time::sleep(outage.failed(&e)).await;
            }
            Err(e) => {
                // not renewed from now on: recovery hands them out again once the lease idles
                tracing::error!(error = %e, jobs = read, "reading fetched jobs failed; leaving them to recovery");
                break Vec::new();
            }
        }
    }
    .into_iter();
    // the records in the order of the deliveries: handed back, or the next of those read
    let records: Vec<hero_protocol::Result<redis::Value>> = handed
        .into_iter()
        .map(|h| match h {
            Some(v) => Ok(v),
            None => fresh.next().unwrap_or_else(|| {
                Err(hero_protocol::reply::unexpected(
                    "the pipeline of records answered fewer replies than it was sent",
                ))
            }),
        })
        .collect();
    for (((d, key), record), running) in deliveries.into_iter().zip(keys).zip(records).zip(running)
    {
        let Some(permit) = permits.pop() else {
            // never more jobs than slots asked for; if so, recovery hands the extra one out
            s.inflight.remove(&d.job_id);
            continue;
        };
        let fetched = record.and_then(|r| function::read_fetched(&key, r, &d.entry));
        let (job, reply) = match fetched {
            Ok(Fetched::Leased { job, reply }) => (job, reply),
            Ok(Fetched::Stale) => {
                s.inflight.remove(&d.job_id);
                s.emit(WorkerEvent::Dropped {
                    job_id: d.job_id.to_string(),
                    reason: "stale".into(),
                });
                continue;
            }
            Err(e) => {
                tracing::warn!(job = %d.job_id, error = %e, "reading a fetched job failed; leaving it to recovery");
                s.inflight.remove(&d.job_id);
                continue;
            }
        };
        tokio::spawn(run_job(
            s.clone(),
            Taken {
                job_id: d.job_id,
                job,
                reply,
                running,
                permit,
            },
            done.clone(),
        ));
    }
}

/// What a panic said, when it said it with a string (as `panic!` and `unwrap` do).
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// A job this worker holds the lease of, read and ready to run.
struct Taken {
    job_id: JobId,
    job: std::result::Result<Job, hero_protocol::DecodeError>,
    /// The record's `reply` field, handed back with the outcome.
    reply: String,
    running: Running,
    permit: OwnedSemaphorePermit,
}

/// Runs one delivered job to its outcome and queues the outcome for the completer, which
/// releases the slot once the outcome is recorded.
async fn run_job(s: Arc<Shared>, taken: Taken, done: mpsc::UnboundedSender<Finished>) {
    let Taken {
        job_id,
        job,
        reply,
        running,
        permit,
    } = taken;
    let attempt = job.as_ref().map(|j| j.attempts).unwrap_or(1);
    let began = std::time::Instant::now();
    // the queue's policy as it applies to this job, and the job's own budget, for its outcome
    let mut policy = None;
    let mut retries = 0;
    let outcome = match job {
        Err(e) => {
            tracing::warn!(job = %job_id, error = %e, "invalid job record");
            Some(Outcome::Abort(format!("invalid job: {e}")))
        }
        Ok(job) => {
            s.emit(WorkerEvent::Started {
                job_id: job_id.clone(),
                attempt: job.attempts,
            });
            policy = s.policy.of(&job);
            retries = job.retries;
            let timeout = crate::policy::timeout(&job, policy.as_ref());
            let ctx = JobContext {
                cancel: running.cancel.clone(),
                attempt: job.attempts,
                pending: running.pending.clone(),
            };
            // A panic is caught and becomes the outcome, not a lost slot. Caught here rather
            // than by running the handler in a task of its own: spawning and joining a second
            // task per job showed in the worker benchmark's profile at a few per cent of the
            // worker's CPU. Timeout and cancellation drop the handler's future.
            // the handler runs in a span of the producer's trace, when the job carries one
            let span = tracing::info_span!("hero.job", job = %job_id, attempt = job.attempts);
            if !span.is_disabled() {
                if let Some(parent) = job
                    .traceparent
                    .as_deref()
                    .and_then(hero_protocol::trace::parent_context)
                {
                    let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, parent);
                }
            }
            let handler =
                AssertUnwindSafe(s.handler.call(job, ctx).instrument(span)).catch_unwind();
            tokio::select! {
                r = handler => Some(match r {
                    Ok(outcome) => outcome,
                    Err(panic) => {
                        let text = format!("handler panicked: {}", panic_text(&*panic));
                        running.pending.set_trace(text.clone());
                        Outcome::Fail(text)
                    }
                }),
                _ = tokio::time::sleep(timeout) => {
                    running.cancel.cancel();
                    Some(Outcome::Fail("timeout".into()))
                }
                _ = running.cancel.cancelled() => None,
            }
        }
    };
    match outcome {
        Some(outcome) => {
            metrics::histogram!("hero_worker_job_seconds").record(began.elapsed().as_secs_f64());
            // what the handler reported last is recorded before its outcome; a handler that
            // reported nothing makes no call here
            if let Some(report) = running.pending.take() {
                let held = crate::inflight::Held {
                    job_id: job_id.clone(),
                    stream: running.stream,
                    lease: running.entry.clone(),
                    pending: running.pending.clone(),
                };
                crate::lease::renew_each(&s, vec![(held, Some(report))]).await;
            }
            let retry = crate::policy::shape(policy.as_ref(), attempt, retries, &outcome);
            // a success reads no trace (no lock a job on the hot path)
            let trace = match &outcome {
                Outcome::Done(_) | Outcome::Value(..) => None,
                _ => running.pending.take_trace(),
            };
            let finished = Finished {
                job_id,
                stream: running.stream,
                lease: running.entry.clone(),
                reply,
                outcome,
                attempt,
                retry_in: retry.delay,
                again: retry.by_policy,
                retention_ms: policy.as_ref().and_then(|p| p.retention_ms),
                trace,
                ran: began.elapsed(),
                permit,
            };
            if let Err(mpsc::error::SendError(f)) = done.send(finished) {
                // the completer is gone only after shutdown: the job stays pending and is handed back
                s.inflight.remove(&f.job_id);
            }
        }
        None => {
            let reason = running.reason().unwrap_or(CancelReason::Stopped);
            metrics::counter!("hero_worker_interrupted_total", "reason" => format!("{reason:?}"))
                .increment(1);
            s.inflight.remove(&job_id);
            s.emit(WorkerEvent::Interrupted { job_id, reason });
            drop(permit);
        }
    }
}
