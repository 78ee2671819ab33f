//! The `hero_expire` call (`expire.lua`): the broker deletes ended jobs past their retention.

use std::time::Duration;

use super::{Call, Function};
use crate::error::{Error, Result};
use crate::keys::Keyspace;
use crate::reply::{array, int};
use redis::Value;

/// Deletes the jobs of at most `entries` retention entries older than `retention` (a
/// dead-lettered one lives on as long as its letter, `dead_retention`); decode the
/// reply with [`crate::function::Expired::decode`].
pub fn expire(
    keys: &Keyspace,
    retention: Duration,
    entries: usize,
    dead_retention: Duration,
) -> Call {
    let mut c = Call::new(Function::Expire, 1);
    c.key("retention stream", keys.retention());
    c.arg("job key prefix", keys.job_prefix())
        .arg(
            "retention ms",
            u64::try_from(retention.as_millis()).unwrap_or(u64::MAX),
        )
        .arg("most entries", entries)
        .arg(
            "the dead letters' retention ms",
            u64::try_from(dead_retention.as_millis()).unwrap_or(u64::MAX),
        );
    c
}

// The reply: decoded here, beside the call that asks for it, and nowhere else.
/// What `hero_expire` did in one call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Retention entries taken (and deleted).
    pub entries: u64,
    /// Jobs deleted.
    pub jobs: u64,
    /// More entries were due than the call took.
    pub more: bool,
}

impl Expired {
    pub fn decode(v: &Value) -> Result<Self> {
        match array(v)? {
            [e, j, m] => Ok(Expired {
                entries: int(e)? as u64,
                jobs: int(j)? as u64,
                more: int(m)? != 0,
            }),
            _ => Err(Error::protocol(
                "hero_expire reply is not {entries, jobs, more}",
            )),
        }
    }
}
