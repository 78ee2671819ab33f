//! The `hero_counts` call (`counts.lua`): one queue's job counts per work stream, what every
//! language's `Queue` handle and `hero_admin::Admin::job_counts` answer.

use super::{Call, Function};
use crate::error::Result;
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::reply;

/// Asks for the counts of queue `name` (`<type>[/<group>[/<instance>]]`, checked by the
/// caller) on one shard.
pub fn counts(keys: &Keyspace, name: &str) -> Call {
    let mut c = Call::new(Function::Counts, 3);
    c.key("queue registry set", keys.queues())
        .key("paused streams set", keys.paused_queues())
        .key("stats hash", keys.stats());
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("queue name", name);
    c
}

/// One work stream's counts: `waiting`, `running` and `delayed` are sizes now; `finished`,
/// `failed` and `dead` counters since the namespace began (what `hero queues` shows).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamCounts {
    pub stream: String,
    pub waiting: u64,
    pub running: u64,
    pub delayed: u64,
    pub finished: u64,
    pub failed: u64,
    pub dead: u64,
    pub paused: bool,
    /// The age of its oldest waiting job, ms (none when nothing waits).
    pub oldest_waiting_ms: Option<u64>,
}

impl StreamCounts {
    /// The reply of [`counts`]: 9 values a stream.
    pub fn decode(v: redis::Value) -> Result<Vec<StreamCounts>> {
        let items = reply::array(&v)?;
        if items.len() % 9 != 0 {
            return Err(reply::unexpected(format!(
                "hero_counts answered {} values, not 9 a stream",
                items.len()
            )));
        }
        let mut out = Vec::with_capacity(items.len() / 9);
        for c in items.chunks(9) {
            let n = |i: usize| reply::int(&c[i]).map(|n| n.max(0) as u64);
            let age = reply::int(&c[8])?;
            out.push(StreamCounts {
                stream: reply::text(&c[0])?,
                waiting: n(1)?,
                running: n(2)?,
                delayed: n(3)?,
                finished: n(4)?,
                failed: n(5)?,
                dead: n(6)?,
                paused: n(7)? == 1,
                oldest_waiting_ms: (age >= 0).then_some(age as u64),
            });
        }
        Ok(out)
    }
}
