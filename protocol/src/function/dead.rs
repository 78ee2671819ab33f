//! The `hero_dead` call (`dead.lua`): an operator retries or purges dead letters.

use super::{Call, Function};
use crate::clock;
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;

/// What to do with dead letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadAction {
    /// Queue the job again with a fresh attempt budget, leaving the dead-letter stream.
    Retry,
    /// Delete the entry, and the job while it still says `error`.
    Purge,
}

/// One call over `letters`: (dead-letter entry id, the job it names, the job's work stream; any
/// key of the namespace for a purge). Answers one of `requeued`, `purged`, `gone`, `not_dead`,
/// `missing` per letter.
pub fn dead(keys: &Keyspace, action: DeadAction, letters: &[(&str, &JobId, &str)]) -> Call {
    let mut c = Call::new(Function::Dead, 5 + 2 * letters.len());
    c.key("dead-letter stream", keys.dead_letter())
        .key("queue registry set", keys.queues())
        .key("config hash", keys.config())
        .key("event log", keys.events())
        .key("stats hash", keys.stats());
    for (_, id, stream) in letters {
        c.key("job hash", keys.job(id))
            .key("its work stream", *stream);
    }
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("now ISO 8601", clock::now_iso())
        .arg(
            "action",
            match action {
                DeadAction::Retry => "retry",
                DeadAction::Purge => "purge",
            },
        );
    for (entry, id, _) in letters {
        c.arg("dead-letter entry id", *entry)
            .arg("job id", id.as_str());
    }
    c
}
