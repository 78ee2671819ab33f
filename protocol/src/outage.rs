//! How a process's loops live through Redis going away: [`Backoff`], the pause between tries
//! (100 ms doubling to 5 s, reset on success), and [`Outage`], what a failing loop says in the
//! log: the first failure at once, then at most one line every 30 s with how many failed since,
//! and one INFO line when it works again. A failure to reach Redis at all is the process's, not
//! the loop's: every loop of the process reports it into one shared account, so Redis down for
//! a minute is a warning, one more every 30 s, and one "reachable again" line, however many
//! loops run. Brokers and workers share them, so a daemon's log reads the same whatever the
//! process.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::Error;

/// Reconnect back-off: 100 ms doubling to 5 s, reset on success.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

const FIRST: Duration = Duration::from_millis(100);
const MAX: Duration = Duration::from_secs(5);

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    pub fn new() -> Self {
        Self { next: FIRST }
    }

    /// The delay to wait now; the following one is twice as long, up to 5 s.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(MAX);
        d
    }

    pub fn reset(&mut self) {
        self.next = FIRST;
    }
}

/// How long a failing loop stays quiet between two warnings.
pub const WARN_EVERY: Duration = Duration::from_secs(30);

/// How long after a recovery a failure is counted but not warned: the pooled connections
/// opened before an outage fail once each as they are next used (a broken pipe, a refused
/// connection to the old socket) while Redis is up, and are replaced by that failure.
pub const SETTLE: Duration = Duration::from_secs(10);

/// Failures counted for one log: the first warned at once, then one warning every
/// [`WARN_EVERY`] with the count since the last, one INFO line on recovery; none within
/// [`SETTLE`] of a recovery.
#[derive(Debug, Default)]
struct Account {
    /// Failures since the last success.
    failures: u64,
    /// Failures since the last warning, and when it was.
    unreported: u64,
    warned_at: Option<Instant>,
    since: Option<Instant>,
    /// When it last recovered.
    recovered_at: Option<Instant>,
}

impl Account {
    fn failed(&mut self, what: &str, error: &dyn std::fmt::Display) {
        let now = Instant::now();
        self.failures += 1;
        self.unreported += 1;
        let since = *self.since.get_or_insert(now);
        if self
            .warned_at
            .is_some_and(|at| now.duration_since(at) < WARN_EVERY)
            || self.recovered_at.is_some_and(|at| {
                now.duration_since(at) < SETTLE && now.duration_since(since) < SETTLE
            })
        {
            return;
        }
        if self.failures == 1 {
            tracing::warn!(%error, "{what} failed; retrying with back-off");
        } else {
            tracing::warn!(
                %error,
                failures = self.unreported,
                for_secs = now.duration_since(since).as_secs(),
                "{what} still failing; retrying with back-off"
            );
        }
        self.warned_at = Some(now);
        self.unreported = 0;
    }

    fn ok(&mut self, what: &str, recovered: &str) {
        if self.failures == 0 {
            return;
        }
        if self.warned_at.is_some() {
            tracing::info!(
                failures = self.failures,
                after_secs = self.since.map(|s| s.elapsed().as_secs()).unwrap_or(0),
                "{what} {recovered}"
            );
        }
        *self = Account {
            recovered_at: Some(Instant::now()),
            ..Account::default()
        };
    }
}

/// When a call of this process last found Redis out of reach or refusing writes.
static LAST_OUTAGE: Mutex<Option<Instant>> = Mutex::new(None);

/// Notes that a call of this process found Redis out of reach, refusing writes, or its
/// connection broken (a restart: what Redis holds may be older than what was last seen).
pub fn note_outage() {
    if let Ok(mut at) = LAST_OUTAGE.lock() {
        *at = Some(Instant::now());
    }
}

/// How long since a call of this process last found Redis out of reach or refusing writes
/// (None: never). Recovery waits a while after one: the workers' heartbeats and renewals failed
/// through it too, and a live worker must get its next one in before it is judged dead.
pub fn since_last_outage() -> Option<Duration> {
    LAST_OUTAGE
        .lock()
        .ok()
        .and_then(|at| at.map(|a| a.elapsed()))
}

/// Redis out of reach, as every loop of the process has seen it.
static UNREACHABLE: Mutex<Account> = Mutex::new(Account {
    failures: 0,
    unreported: 0,
    warned_at: None,
    since: None,
    recovered_at: None,
});

const REDIS: &str = "reaching Redis";

/// The failures of one loop, as its log reports them.
#[derive(Debug)]
pub struct Outage {
    what: String,
    backoff: Backoff,
    own: Account,
}

impl Outage {
    /// `what` names the loop in its lines ("the promote pass").
    pub fn new(what: impl Into<String>) -> Self {
        Outage {
            what: what.into(),
            backoff: Backoff::new(),
            own: Account::default(),
        }
    }

    /// A failed try, counted into the process's account when Redis could not be reached (the
    /// error is one a later try can get past), else into the loop's own. Returns how long to
    /// wait before the next try.
    pub fn failed(&mut self, error: &Error) -> Duration {
        if error.is_retryable() {
            note_outage();
            if let Ok(mut a) = UNREACHABLE.lock() {
                a.failed(REDIS, error);
            }
        } else {
            self.own.failed(&self.what, error);
        }
        self.backoff.next_delay()
    }

    /// A try that worked: after failures, one INFO line says the loop recovered (or, for the
    /// first loop to get through after Redis was out of reach, that Redis is reachable again).
    pub fn ok(&mut self) {
        // any success proves Redis reachable, whatever this loop's last failure was
        reached();
        self.own.ok(&self.what, "recovered");
        self.backoff.reset();
    }
}

/// A failure of a call made outside any loop's [`Outage`] (a renewal round, a policy read):
/// counted into the process's account when Redis could not be reached, else warned with `what`.
pub fn report(what: &str, error: &Error) {
    if error.is_retryable() {
        note_outage();
        if let Ok(mut a) = UNREACHABLE.lock() {
            a.failed(REDIS, error);
        }
    } else {
        tracing::warn!(%error, "{what} failed");
    }
}

/// A call that reached Redis: when the process had found it out of reach, one line says it is
/// reachable again.
pub fn reached() {
    if let Ok(mut a) = UNREACHABLE.lock() {
        a.ok("Redis", "is reachable again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new();
        let seen: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert_eq!(seen[0], FIRST);
        assert_eq!(seen[1], FIRST * 2);
        assert_eq!(*seen.last().unwrap(), MAX);
        b.reset();
        assert_eq!(b.next_delay(), FIRST);
    }

    #[test]
    fn an_outage_backs_off_and_a_recovery_resets_it() {
        let mut o = Outage::new("a test loop");
        let refused = Error::InvalidInput("refused".into());
        assert_eq!(o.failed(&refused), FIRST);
        assert_eq!(o.failed(&refused), FIRST * 2);
        o.ok();
        // a recovery starts the back-off over
        assert_eq!(o.failed(&refused), FIRST);
    }
}
