//! The `hero_pause` call (`pause.lua`): an operator pauses or resumes a queue.

use super::{Call, Function};
use crate::keys::Keyspace;

/// Pauses (`pause` true) or resumes the queue `name` (`<type>[/<group>[/<instance>]]`, every
/// priority); answers how many work streams moved.
pub fn pause(keys: &Keyspace, name: &str, pause: bool) -> Call {
    let mut c = Call::new(Function::Pause, 5);
    c.key("queue registry set", keys.queues())
        .key("paused streams set", keys.paused_queues())
        .key("paused names set", keys.paused_names())
        .key("config hash", keys.config())
        .key("event log", keys.events());
    c.arg(
        "'pause' or 'resume'",
        if pause { "pause" } else { "resume" },
    )
    .arg("queue name", name);
    c
}

/// Pauses (`pause` true) or resumes one limit key of the fair queue `name`: its jobs stay in the
/// gate while the queue's other keys flow (`gate.lua`); answers in how many work streams it was
/// held or resumed. Since protocol 30.
pub fn pause_key(keys: &Keyspace, name: &str, key: &str, pause: bool) -> Call {
    let mut c = self::pause(keys, name, pause);
    c.arg("limit key", key);
    c
}
