//! The fetch loop: takes free slots, fetches that many jobs in precedence order with
//! `hero_fetch` (two fetches under way at once), hands what it leased to the job task, and when
//! the queues are dry blocks on XREAD from the cursors a fetch returned until a new entry lands.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hero_protocol::function;
use hero_protocol::function::FetchReply;
use redis::Value;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::event::WorkerEvent;
use crate::finished::Finished;
use crate::shared::{Registered, Shared};
use crate::task::start_jobs;
use crate::turns::{Seat, Turns};
use hero_protocol::outage::Outage;

/// The fetch for `count` slots, and the streams it names (indexes into [`Shared::streams`];
/// `None`: all of them).
pub(crate) fn fetch_cmd(s: &Shared, count: usize) -> (function::Call, Option<Registered>) {
    let limits = s.policy.limits();
    // concurrency limits name streams by their index among all of them: such a worker names
    // them all, as before the registry cursor
    let known = if limits.is_empty() {
        s.registered.lock().ok().and_then(|r| r.clone())
    } else {
        None
    };
    let names: Vec<&str> = match &known {
        Some(r) => r.streams.iter().map(|&i| s.streams[i].as_str()).collect(),
        None => s.streams.iter().map(String::as_str).collect(),
    };
    let cursor = match (&known, limits.is_empty()) {
        (Some(r), _) => function::RegistryCursor::Since(&r.signal),
        (None, true) => function::RegistryCursor::Ask,
        (None, false) => function::RegistryCursor::None,
    };
    let c = function::fetch_with(
        &s.keys,
        &names,
        &s.consumer_name,
        count,
        s.redis.caps().xackdel_flag(),
        &limits,
        // a short fetch hands the records back: the jobs start without another round trip
        function::Records::WhenShort,
        cursor,
    );
    (c, known)
}

/// How many fetches may be under way at once. Two measured best on the worker-concurrent
/// benchmark (about a fifth more jobs per second than one): while Redis runs one, this process
/// starts the jobs of the other, where with one the freed slots waited out every round trip.
/// Three split the slots into batches too small to pay for their calls.
const FETCHES_IN_FLIGHT: usize = 2;

/// How long a worker held back by a concurrency limit waits before it looks again.
const LIMITED_BLOCK: Duration = Duration::from_millis(50);

/// What the fetches that ended since the last look said.
#[derive(Default)]
struct Ended {
    /// At least one fetch succeeded.
    ok: bool,
    /// A fetch filled every slot it asked for: the queues hold more, so the next may overlap.
    full: bool,
    /// Wake-up cursors: the queues came up drier than the slots a fetch asked for.
    dry: Option<Vec<String>>,
    /// A concurrency limit held jobs back: the wait for an entry is short, since the slot it
    /// waits for frees without one.
    limited: bool,
    failed: Option<hero_protocol::Error>,
}

impl Ended {
    fn absorb(&mut self, ended: std::result::Result<FetchOutcome, tokio::task::JoinError>) {
        match ended {
            Ok(Ok((cursors, limited))) => {
                self.ok = true;
                self.limited |= limited;
                if cursors.is_empty() {
                    self.full = true;
                } else {
                    self.dry = Some(cursors);
                }
            }
            Ok(Err(e)) => self.failed = Some(e),
            // a fetch task cannot panic short of a bug; its slots went back as it unwound
            Err(e) => tracing::error!(error = %e, "a fetch task ended abnormally"),
        }
    }
}

type FetchOutcome = hero_protocol::Result<(Vec<String>, bool)>;

/// Takes free slots, up to a quarter of them per fetch, and fetches that many jobs in precedence
/// order, with up to [`FETCHES_IN_FLIGHT`] fetches under way while they come back full. When the queues are drier than
/// that, it blocks on XREAD from the cursors a fetch returned until a new entry lands.
/// `turns` and `seat` place this loop among the worker's namespaces and shards (see `turns`).
pub(crate) async fn fetch_loop(
    s: Arc<Shared>,
    permits: Arc<Semaphore>,
    done: mpsc::UnboundedSender<Finished>,
    stop: CancellationToken,
    turns: Arc<Turns>,
    seat: Seat,
) {
    let mut outage = Outage::new("the fetch");
    let mut waker: Option<hero_protocol::conn::Blocking> = None;
    let fetch_max = (s.concurrency / 4).max(8);
    let mut fetches: JoinSet<FetchOutcome> = JoinSet::new();
    let mut ended = Ended::default();
    // One fetch at a time until one comes back full: when the queues are nearly dry, as on
    // waking, a second fetch beside the first finds nothing and costs Redis a call (at 5,000
    // jobs/s it was half of all fetches); under load every fetch fills and two overlap.
    let mut in_flight_max = 1;
    loop {
        while let Some(r) = fetches.try_join_next() {
            ended.absorb(r);
        }
        if std::mem::take(&mut ended.ok) {
            outage.ok();
        }
        if std::mem::take(&mut ended.full) {
            in_flight_max = FETCHES_IN_FLIGHT;
            // a backlog: the completer fetches the slots it frees in its own round trip (only
            // the first namespace's, which never waits for its turn)
            if seat.rank == 0 {
                s.backlog.store(true, Ordering::Relaxed);
            }
        }
        if let Some(e) = ended.failed.take() {
            let delay = outage.failed(&e);
            turns.set_idle(&seat, true);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(delay) => {}
            }
            turns.set_idle(&seat, false);
            continue;
        }
        if let Some(mut cursors) = ended.dry.take() {
            // the fetches still under way end first: they may take what the wait would wake on
            while let Some(r) = fetches.join_next().await {
                ended.absorb(r);
            }
            if let Some(later) = ended.dry.take() {
                cursors = later;
            }
            in_flight_max = 1;
            s.backlog.store(false, Ordering::Relaxed);
            let limited = std::mem::take(&mut ended.limited);
            turns.set_idle(&seat, true);
            let go_on = wait_for_entry(&s, &mut waker, &cursors, limited, &stop, &mut outage).await;
            turns.set_idle(&seat, false);
            if !go_on {
                break;
            }
            continue;
        }
        if fetches.len() >= in_flight_max {
            tokio::select! {
                _ = stop.cancelled() => break,
                Some(r) = fetches.join_next() => ended.absorb(r),
            }
            continue;
        }
        if !turns.wait_turn(&seat, &stop).await {
            break;
        }
        let first = tokio::select! {
            _ = stop.cancelled() => break,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        // Several smaller fetches rather than one of every free slot: the next is under way
        // while this process starts the jobs of the last, instead of the two taking turns.
        let mut slots = vec![first];
        while slots.len() < fetch_max {
            match permits.clone().try_acquire_owned() {
                Ok(p) => slots.push(p),
                Err(_) => break,
            }
        }
        fetches.spawn(fetch_once(s.clone(), slots, done.clone()));
    }
    // a fetch under way may have leased jobs already: they start in the slots it holds, and
    // shutdown waits for those slots like any other
    s.backlog.store(false, Ordering::Relaxed);
    fetches.detach_all();
}

/// One fetch for `slots`: reports the entries it dropped, starts the jobs it leased (the slots
/// they do not take go back), and returns the wake-up cursors (empty when it filled every slot).
async fn fetch_once(
    s: Arc<Shared>,
    slots: Vec<OwnedSemaphorePermit>,
    done: mpsc::UnboundedSender<Finished>,
) -> FetchOutcome {
    let (cmd, named) = fetch_cmd(&s, slots.len());
    let reply = s.redis.query::<Value>(&cmd).await?;
    take_reply(&s, reply, named.as_ref(), slots, done)
}

/// What a fetch answered (`named`: the streams it named, as [`fetch_cmd`] gave them): the
/// registry view kept, the entries it dropped reported, the jobs it leased started in `slots`
/// (the slots they do not take go back). Returns the wake-up cursors (empty when it filled
/// every slot). The completer's fused fetch (`complete.rs`) ends here too.
pub(crate) fn take_reply(
    s: &Arc<Shared>,
    reply: Value,
    named: Option<&Registered>,
    mut slots: Vec<OwnedSemaphorePermit>,
    done: mpsc::UnboundedSender<Finished>,
) -> FetchOutcome {
    let mut reply = FetchReply::decode_owned(reply)?;
    if let Some(view) = reply.registry.take() {
        if let Ok(mut r) = s.registered.lock() {
            if view.stale {
                // the registry moved: the next fetch names every stream and asks again
                *r = None;
            } else if named.is_none() {
                let n = s.streams.len();
                *r = Some(Registered {
                    signal: view.signal,
                    streams: view.registered.into_iter().filter(|&i| i < n).collect(),
                });
            }
        }
    }
    if let Some(named) = named {
        // the reply's stream indexes are into the streams named: back to the worker's
        reply.renumber(&named.streams, s.streams.len())?;
    }
    let missing = reply
        .dropped
        .iter()
        .filter(|d| d.reason == "missing")
        .count();
    if missing > 0 {
        lost_records(
            missing,
            reply
                .dropped
                .iter()
                .find(|d| d.reason == "missing")
                .map(|d| d.job_id.as_str()),
        );
    }
    for d in &reply.dropped {
        s.emit(WorkerEvent::Dropped {
            job_id: d.job_id.clone(),
            reason: d.reason.clone(),
        });
    }
    if !reply.jobs.is_empty() {
        let take = reply.jobs.len().min(slots.len());
        let permits = slots.split_off(slots.len() - take);
        tokio::spawn(start_jobs(s.clone(), reply.jobs, permits, done));
    }
    Ok((reply.cursors, reply.limited))
}

/// Queues are dry for our free slots: waits for any new entry after `cursors` (or a timeout,
/// then the loop looks again, which also picks up freed slots and recovered jobs). False when
/// the worker is stopping.
async fn wait_for_entry(
    s: &Shared,
    waker: &mut Option<hero_protocol::conn::Blocking>,
    cursors: &[String],
    limited: bool,
    stop: &CancellationToken,
    outage: &mut Outage,
) -> bool {
    let wake_block = Duration::from_secs(2);
    // a limited queue's slot frees without a new entry: look again soon
    let block = if limited { LIMITED_BLOCK } else { wake_block };
    if waker.is_none() {
        match s.redis.dedicated(wake_block).await {
            Ok(c) => *waker = Some(c),
            Err(e) => {
                let delay = outage.failed(&e);
                tokio::select! {
                    _ = stop.cancelled() => return false,
                    _ = tokio::time::sleep(delay) => return true,
                }
            }
        }
    }
    let Some(conn) = waker.as_mut() else {
        return true;
    };
    let mut cmd = redis::cmd("XREAD");
    cmd.arg("COUNT")
        .arg(1)
        .arg("BLOCK")
        .arg(block.as_millis() as u64)
        .arg("STREAMS");
    // the streams worth watching (the fetch gave '' for the others) and the registry's signal
    // stream, which wakes this wait when a stream is registered
    let signal = s.keys.queue_signal();
    let mut watched: Vec<&str> = Vec::with_capacity(cursors.len());
    let mut ids: Vec<&str> = Vec::with_capacity(cursors.len());
    for (stream, id) in s.streams.iter().zip(cursors) {
        if !id.is_empty() {
            watched.push(stream);
            ids.push(id);
        }
    }
    if let Some(id) = cursors.get(s.streams.len()) {
        watched.push(&signal);
        ids.push(id);
    }
    cmd.arg(&watched).arg(&ids);
    let woke = tokio::select! {
        _ = stop.cancelled() => return false,
        r = cmd.query_async::<Value>(conn) => r,
    };
    if let Err(e) = woke {
        *waker = None;
        let delay = outage.failed(&e.into());
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(delay) => {}
        }
    }
    true
}

/// Entries dropped because their job's record was gone: jobs lost (an evicting Redis, a record
/// deleted by hand). Said as one WARN a minute with the count since, not one line an entry
/// (an evicted queue drops thousands); the functions count them for `hero audit` (`dropped`).
fn lost_records(n: usize, example: Option<&str>) {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    static SINCE: AtomicUsize = AtomicUsize::new(0);
    static SAID_AT: AtomicU64 = AtomicU64::new(0);
    let total = SINCE.fetch_add(n, Ordering::AcqRel) + n;
    let now = hero_protocol::clock::local_ms();
    let last = SAID_AT.load(Ordering::Acquire);
    if now.saturating_sub(last) >= 60_000
        && SAID_AT
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        SINCE.store(0, Ordering::Release);
        tracing::warn!(
            entries = total,
            example = example.unwrap_or(""),
            "dropped queue entries whose job record is gone (evicted by Redis, or deleted by hand): those jobs are lost; `hero audit` counts them"
        );
    }
}
