//! The `hero_promote` call (`promote.lua`): the broker moves a due delayed job into its stream.

use super::{Call, Function};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;

/// Moves `id` from the delayed set into `stream` (its work stream, from
/// [`crate::job::Placement`]); answers `promoted`, `gone` or `skipped`.
pub fn promote(keys: &Keyspace, id: &JobId, stream: &str, now_iso: &str) -> Call {
    let mut c = Call::new(Function::Promote, 7);
    c.key("delayed zset", keys.delayed())
        .key("job hash", keys.job(id))
        .key("work stream", stream)
        .key("queue registry set", keys.queues())
        .key("config hash", keys.config())
        .key("event log", keys.events())
        .key("stats hash", keys.stats());
    c.arg("job id", id.as_str())
        .arg("consumer group", CONSUMER_GROUP)
        .arg("now ISO 8601", now_iso);
    c
}
