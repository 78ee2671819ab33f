//! The `hero_batch_ends` call (`batch_ends.lua`): count into their batches the ends that a
//! library older than protocol 27 recorded without counting, as the broker found them in the
//! event log, moving the brokers' cursor over it in the same step.

use super::{Call, Function};
use crate::clock;
use crate::keys::Keyspace;
use crate::name::JobId;

/// Counts `ended` (job id, whether it finished) read from the event log after `cursor` and up
/// to `after`. The reply: how many still ended as their events said, or `moved` (another broker
/// counted them: nothing done).
pub fn batch_ends(keys: &Keyspace, cursor: &str, after: &str, ended: &[(JobId, bool)]) -> Call {
    let mut c = Call::new(Function::BatchEnds, 2 + ended.len());
    c.key("config hash", keys.config())
        .key("event log", keys.events());
    for (id, _) in ended {
        c.key("job hash", keys.job(id));
    }
    c.arg("now ISO 8601", clock::now_iso())
        .arg("the cursor expected", cursor)
        .arg("the cursor after these events", after);
    for (id, ok) in ended {
        c.rest(id.as_str()).rest(if *ok { "1" } else { "0" });
    }
    c
}
