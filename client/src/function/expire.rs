//! The `hero_expire` call (`expire.lua`): the broker deletes ended jobs past their retention.

use std::time::Duration;

use super::{Call, Function};
use crate::keys::Keyspace;

/// Deletes the jobs of at most `entries` retention entries older than `retention`; decode the
/// reply with [`crate::reply::Expired::decode`].
pub fn expire(keys: &Keyspace, retention: Duration, entries: usize) -> Call {
    let mut c = Call::new(Function::Expire, 1);
    c.key("retention stream", keys.retention());
    c.arg("job key prefix", keys.job_prefix())
        .arg(
            "retention ms",
            u64::try_from(retention.as_millis()).unwrap_or(u64::MAX),
        )
        .arg("most entries", entries);
    c
}
