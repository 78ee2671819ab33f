//! The `hero_clean` call (`clean.lua`): ended jobs older than a grace period deleted, oldest
//! first, a bounded page a call (BullMQ's `queue.clean`); hero-admin's `Admin::clean` drives it.

use std::time::Duration;

use super::{Call, Function};
use crate::error::Result;
use crate::keys::Keyspace;
use crate::reply;

/// Deletes up to `limit` jobs of `queue` (`''`: every queue) that ended with `status`
/// (`finished`, `error`, or `''` for both) at least `grace` ago, going on after `cursor` (a
/// retention entry a previous call answered; `''` from the oldest).
pub fn clean(
    keys: &Keyspace,
    grace: Duration,
    status: &str,
    queue: &str,
    limit: usize,
    cursor: &str,
) -> Call {
    let mut c = Call::new(Function::Clean, 1);
    c.key("retention stream", keys.retention());
    c.arg("job key prefix", keys.job_prefix())
        .arg("grace ms", grace.as_millis() as u64)
        .arg("status", status)
        .arg("queue name", queue)
        .arg("the most jobs to delete", limit)
        .arg("cursor", cursor);
    c
}

/// What one [`clean`] call answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Where the next call goes on; `None` when the walk reached jobs younger than the grace
    /// (or the end).
    pub next: Option<String>,
    pub ids: Vec<String>,
}

impl Cleaned {
    pub fn parse(v: &redis::Value) -> Result<Cleaned> {
        let items = reply::array(v)?;
        let Some(first) = items.first() else {
            return Err(reply::unexpected(
                "hero_clean or hero_list answered nothing",
            ));
        };
        let next = reply::text(first)?;
        Ok(Cleaned {
            next: (!next.is_empty()).then_some(next),
            ids: items[1..].iter().map(reply::text).collect::<Result<_>>()?,
        })
    }
}
