//! The `hero_drain` call (`drain.lua`): a queue's waiting (and, asked, delayed) jobs deleted, a
//! bounded step a call (BullMQ's `queue.drain`), and with `remove` the queue itself once empty
//! (BullMQ's `obliterate`); hero-admin's `Admin::drain` and `Admin::obliterate` drive it.

use super::{Call, Function};
use crate::error::Result;
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::reply;

/// One step of draining `queue` (checked by the caller): at most `budget` jobs deleted, the
/// delayed ones too when `delayed`, the queue's streams and names removed once empty when
/// `remove`; `cursor` is where the walk over the delayed set goes on (`"0"` at first).
pub fn drain(
    keys: &Keyspace,
    queue: &str,
    delayed: bool,
    budget: usize,
    remove: bool,
    cursor: &str,
) -> Call {
    let mut c = Call::new(Function::Drain, 4);
    c.key("queue registry set", keys.queues())
        .key("delayed zset", keys.delayed())
        .key("config hash", keys.config())
        .key("stats hash", keys.stats());
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("job key prefix", keys.job_prefix())
        .arg("queue name", queue)
        .arg("'1' to drain its delayed", if delayed { "1" } else { "0" })
        .arg("budget", budget)
        .arg("'1' to remove the queue", if remove { "1" } else { "0" })
        .arg("where the walk over the delayed set", cursor);
    c
}

/// What one [`drain`] step answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    pub deleted: u64,
    /// The budget ran out: call again (with [`Drained::cursor`]).
    pub more: bool,
    /// The queue's jobs delivered and not yet acknowledged (left alone).
    pub running: u64,
    pub cursor: String,
}

impl Drained {
    pub fn parse(v: &redis::Value) -> Result<Drained> {
        let items = reply::array(v)?;
        if items.len() < 4 {
            return Err(reply::unexpected("hero_drain answered fewer than 4 items"));
        }
        let n = |i: usize| reply::int(&items[i]).map(|n| n.max(0) as u64);
        Ok(Drained {
            deleted: n(0)?,
            more: n(1)? == 1,
            running: n(2)?,
            cursor: reply::text(&items[3])?,
        })
    }
}
