//! The queue's upkeep, in every process that wants it (workers by default, brokers): the
//! driver of `hero_duties` (`function/duties.lua`), where the duties themselves live, so Rust,
//! Python and Node run one implementation and each language drives it with a few lines. One
//! process at a time holds the duty lease (a key with a TTL, on Redis's clock) and calls the
//! function every [`Pace::holder`]; every other calls it every [`Pace::contender`] and gets the
//! holder's name back after one HGET. A holder that dies is replaced once its lease runs out; one
//! that stops hands the lease back, so the next caller takes it at once. A Rust holder also
//! keeps the fleet summary (`fleet_lacks`) a broker keeps.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::conn::Redis;
use crate::function::{self, Duties};
use crate::keys::Keyspace;
use crate::outage::{self, Outage};

/// How long after this process last saw Redis out of reach or refusing writes recovery is held
/// back: every worker's heartbeat and renewals failed through the outage too, and back off up to
/// 5 s; a live worker must get its next one in before it is judged dead or its deliveries idle,
/// or its jobs would run twice (the chaos soak's "redis faults" phase: MISCONF for 20 s).
pub const RECOVERY_HOLD: Duration = Duration::from_secs(10);

/// The jobs one call looks at, at most: a call stays well under a millisecond or two of Redis.
pub const BUDGET: usize = 100;

/// How often the duties are looked at.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// The holder's pause between two calls: how late a due delayed job may be promoted.
    pub holder: Duration,
    /// Everyone else's: how soon after the lease ran out another process takes it.
    pub contender: Duration,
    /// How long the lease lasts without a call (a dead holder is replaced after it).
    pub lease: Duration,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            holder: Duration::from_millis(100),
            contender: Duration::from_secs(1),
            lease: Duration::from_secs(3),
        }
    }
}

/// Whether recovery may run now: not within [`RECOVERY_HOLD`] of an outage this process saw.
pub fn may_recover() -> bool {
    outage::since_last_outage().is_none_or(|d| d >= RECOVERY_HOLD)
}

/// One call of `hero_duties` for `holder`.
pub async fn step(
    redis: &Redis,
    keys: &Keyspace,
    holder: &str,
    lease: Duration,
) -> crate::Result<Duties> {
    let call = function::duties(
        keys,
        holder,
        lease,
        BUDGET,
        may_recover(),
        redis.caps().xackdel_flag(),
    );
    let v: redis::Value = redis.query(&call).await?;
    Duties::parse(&v)
}

/// Does the duties as `holder` until `stop`, then hands the lease back. `moved` hears of every
/// step that moved a job (for metrics and logs). Failures back off and are logged once, as
/// every loop's are ([`Outage`]).
pub async fn run(
    redis: Redis,
    keys: Keyspace,
    holder: String,
    pace: Pace,
    stop: CancellationToken,
    mut moved: impl FnMut(&Duties) + Send,
) {
    let mut failing = Outage::new("the queue's upkeep (hero_duties)");
    let mut held = false;
    loop {
        let wait = match step(&redis, &keys, &holder, pace.lease).await {
            Ok(d) => {
                failing.ok();
                if d.held != held {
                    held = d.held;
                    if held {
                        tracing::info!(holder, "this process does the queue's upkeep now");
                    }
                }
                if d.moved() > 0 {
                    moved(&d);
                }
                if d.more {
                    Duration::ZERO
                } else if d.held {
                    pace.holder
                } else {
                    pace.contender
                }
            }
            Err(e) => failing.failed(&e).max(pace.holder),
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    if held {
        let _ = step(&redis, &keys, &holder, Duration::ZERO).await;
    }
}
