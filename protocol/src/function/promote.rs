//! The `hero_promote` call (`promote.lua`): the broker moves a due delayed job into its stream.

use super::{Call, Function};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;

/// Moves `id` from the delayed set into `stream` (its work stream, from
/// [`crate::job::Placement`]); answers `promoted`, `gone` or `skipped`.
pub fn promote(keys: &Keyspace, id: &JobId, stream: &str, now_iso: &str) -> Call {
    promote_call(keys, id, stream, now_iso, "")
}

/// Ends `id`, due in the delayed set but with nothing to queue it to (its record names no valid
/// script type), `error` with `why`: its event, its `failed` count, its dependents and its
/// retention as for any job that ends. Answers `failed`, `gone` or `skipped`.
pub fn fail_unqueueable(keys: &Keyspace, id: &JobId, why: &str, now_iso: &str) -> Call {
    promote_call(keys, id, &keys.job(id), now_iso, why)
}

fn promote_call(keys: &Keyspace, id: &JobId, stream: &str, now_iso: &str, why: &str) -> Call {
    let mut c = Call::new(Function::Promote, 9);
    c.key("delayed zset", keys.delayed())
        .key("job hash", keys.job(id))
        .key("work stream", stream)
        .key("queue registry set", keys.queues())
        .key("config hash", keys.config())
        .key("event log", keys.events())
        .key("stats hash", keys.stats())
        .key("reply list", keys.reply(id))
        .key("retention stream", keys.retention());
    c.arg("job id", id.as_str())
        .arg("consumer group", CONSUMER_GROUP)
        .arg("now ISO 8601", now_iso)
        .arg("why it cannot be queued", why);
    c
}
