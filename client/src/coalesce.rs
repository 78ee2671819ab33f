//! Group commit for single submits: `Client::submit` calls made at the same moment (from many
//! tasks, as a web service submitting one job per request does) share one `hero_submit` call.
//! A background task takes every submit waiting, up to [`MAX_BATCH`], and sends them as one
//! batch, with up to [`IN_FLIGHT`] batches under way; while they are, new submits gather for
//! the next. Nothing waits on a timer: a lone submit is sent at once, alone.
//!
//! Why: a Redis Functions call has a fixed cost per call and per command it makes (about 4 µs a
//! `redis.call` on this machine, docs/performance.md), and at 5,000 single submits a second the
//! one-job calls were the larger part of Redis's work, which set the latency tail.
//!
//! A batch that fails is sent again job by job, so each caller gets its own answer: a job a
//! server function refuses (`HERO_INVALID_JOB` refuses the whole call) fails alone, and the
//! others are queued. Submitting an id that exists changes nothing, so sending a job twice is
//! safe (a job a failed batch did store answers `created: false` the second time).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::answer::Submitted;
use hero_protocol::conn::Redis;
use hero_protocol::error::Result;
use hero_protocol::function;
use hero_protocol::function::SubmitReply;
use hero_protocol::keys::Keyspace;
use hero_protocol::new_job::NewJob;

/// Jobs per shared call: the size producers' own batches use.
pub const MAX_BATCH: usize = 50;

/// Batches under way at once: while one is in Redis, the next gathers and is sent.
const IN_FLIGHT: usize = 2;

type Request = (NewJob, oneshot::Sender<Result<Submitted>>);

/// The sending side; the task ends when the last clone of the client drops it.
#[derive(Clone)]
pub(crate) struct Coalescer {
    tx: mpsc::UnboundedSender<Request>,
}

impl Coalescer {
    /// Starts the task on the current Tokio runtime.
    pub(crate) fn start(redis: Redis, keys: Keyspace) -> Coalescer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(redis, keys, rx));
        Coalescer { tx }
    }

    /// `None` when the task is gone (its runtime ended while this client lives on, as when a
    /// client outlives the test runtime that first used it): the caller submits directly.
    pub(crate) async fn submit(&self, job: NewJob) -> Option<Result<Submitted>> {
        let (tx, rx) = oneshot::channel();
        self.tx.send((job, tx)).ok()?;
        rx.await.ok()
    }
}

async fn run(redis: Redis, keys: Keyspace, mut rx: mpsc::UnboundedReceiver<Request>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // what gathered while the slot was taken goes in the same call
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let (redis, keys) = (redis.clone(), keys.clone());
        tokio::spawn(async move {
            send(&redis, &keys, batch).await;
            drop(slot);
        });
    }
}

/// One call for the batch; on failure, one call per job.
async fn send(redis: &Redis, keys: &Keyspace, batch: Vec<Request>) {
    let (jobs, answers): (Vec<NewJob>, Vec<oneshot::Sender<Result<Submitted>>>) =
        batch.into_iter().unzip();
    match submit_many(redis, keys, &jobs).await {
        Ok(results) => {
            for (answer, r) in answers.into_iter().zip(results) {
                let _ = answer.send(r);
            }
        }
        Err(e) if jobs.len() == 1 => {
            if let Some(answer) = answers.into_iter().next() {
                let _ = answer.send(Err(e));
            }
        }
        Err(_) => {
            for (job, answer) in jobs.iter().zip(answers) {
                let r = match submit_many(redis, keys, std::slice::from_ref(job)).await {
                    Ok(mut one) => one.pop().unwrap_or_else(|| {
                        Err(hero_protocol::reply::unexpected(
                            "hero_submit answered no job",
                        ))
                    }),
                    Err(e) => Err(e),
                };
                let _ = answer.send(r);
            }
        }
    }
}

/// One `hero_submit` call for `jobs`: one result per job, in order.
pub(crate) async fn submit_many(
    redis: &Redis,
    keys: &Keyspace,
    jobs: &[NewJob],
) -> Result<Vec<Result<Submitted>>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let v: redis::Value = redis.query(&function::submit(keys, jobs, false)).await?;
    let replies = SubmitReply::decode_many(&v, jobs.len())?;
    Ok(jobs
        .iter()
        .zip(replies)
        .map(|(job, r)| {
            let id = match &r.duplicate_of {
                Some(holder) => hero_protocol::JobId::new(holder)?,
                None => job.id().clone(),
            };
            Ok(Submitted {
                id,
                created: r.created,
                status: r.status,
                duplicate: r.duplicate_of.is_some(),
            })
        })
        .collect())
}
