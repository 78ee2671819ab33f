//! The `hero_duties` call (`duties.lua`): one bounded step of the queue's upkeep (promotion,
//! recovery, time limits, retention) by the process holding the duty lease, or nothing but the
//! holder's name for any other. [`crate::duties`] drives it.

use std::time::Duration;

use super::{Call, Function};
use crate::error::Result;
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::reply;

/// One step for `holder`, holding the duties for `lease` (a zero lease hands them back when
/// `holder` holds them), looking at no more than `budget` jobs; `recover` false holds back
/// recovery (the caller saw an outage lately).
pub fn duties(
    keys: &Keyspace,
    holder: &str,
    lease: Duration,
    budget: usize,
    recover: bool,
    xackdel: &str,
) -> Call {
    let mut c = Call::new(Function::Duties, 9);
    c.key("duty lease hash", keys.duties())
        .key("delayed zset", keys.delayed())
        .key("consumers zset", keys.consumers())
        .key("queue registry set", keys.queues())
        .key("config hash", keys.config())
        .key("event log", keys.events())
        .key("stats hash", keys.stats())
        .key("retention stream", keys.retention())
        .key("dead-letter stream", keys.dead_letter());
    c.arg("holder", holder)
        .arg("lease ms", lease.as_millis() as u64)
        .arg("budget", budget)
        .arg("consumer group", CONSUMER_GROUP)
        .arg("job key prefix", keys.job_prefix())
        .arg("'1' to recover", if recover { "1" } else { "0" })
        .arg("'1' when XACKDEL", xackdel);
    c
}

/// What one [`duties`] step answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Duties {
    /// The caller holds the duties (it did the step).
    pub held: bool,
    /// Who holds them ('' when nobody: the caller handed them back).
    pub holder: String,
    pub promoted: u64,
    pub recovered: u64,
    pub dead: u64,
    pub timed_out: u64,
    pub expired: u64,
    /// The budget ran out before the step was done: call again now.
    pub more: bool,
    /// Recurring jobs' ticks whose job was submitted (protocol 32).
    pub fired: u64,
    /// Recurring jobs' ticks missed under the skip policy.
    pub skipped: u64,
}

impl Duties {
    pub fn parse(v: &redis::Value) -> Result<Duties> {
        let items = reply::array(v)?;
        let n = |i: usize| -> Result<u64> {
            match items.get(i) {
                Some(v) => Ok(reply::int(v)?.max(0) as u64),
                None => Err(reply::unexpected("hero_duties answered too few items")),
            }
        };
        let holder = match items.get(1) {
            None | Some(redis::Value::Nil) => String::new(),
            Some(v) => reply::text(v)?,
        };
        Ok(Duties {
            held: n(0)? == 1,
            holder,
            promoted: n(2)?,
            recovered: n(3)?,
            dead: n(4)?,
            timed_out: n(5)?,
            expired: n(6)?,
            more: n(7)? == 1,
            fired: n(8).unwrap_or(0),
            skipped: n(9).unwrap_or(0),
        })
    }

    /// Jobs this step moved, of every kind.
    pub fn moved(&self) -> u64 {
        self.promoted + self.recovered + self.dead + self.timed_out + self.expired
    }
}
