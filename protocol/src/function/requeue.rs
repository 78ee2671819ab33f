//! The `hero_requeue` call (`requeue.lua`): an operator moves a job to a queue, wherever it is.

use super::{Call, Function};
use crate::clock;
use crate::job::Placement;
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::{JobId, Priority};

/// Moves `id` from `current` (the stream its record names) to the queue of `to`. `seen` is the
/// control list and the `worker_id` of the worker the caller saw running it, if any; `cursor`
/// is where to go on looking for a queued job's entry ('0-0' to start). Answers `{answer,
/// cursor}`: `requeued`, `searching` (call again from the cursor), `changed`, `missing`.
pub fn requeue(
    keys: &Keyspace,
    id: &JobId,
    current: &str,
    to: &Placement,
    seen: Option<(&str, &str)>,
    cursor: &str,
    xackdel: &str,
) -> Call {
    let config = keys.config();
    let (ctl, worker) = super::seen_control(keys, seen);
    let t = &to.target;
    let mut c = Call::new(Function::Requeue, 9);
    c.key("job hash", keys.job(id))
        .key("its current work stream", current)
        .key("the work stream to move it to", keys.work(t, to.priority))
        .key("delayed zset", keys.delayed())
        .key("queue registry set", keys.queues())
        .key("config hash", &config)
        .key("event log", keys.events())
        .key("stats hash", keys.stats())
        .key("control list", ctl);
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("now ISO 8601", clock::now_iso())
        .arg("'1' when XACKDEL", xackdel)
        .arg("job id", id.as_str())
        .arg("worker_id the caller saw", worker)
        .arg("cursor", cursor)
        .arg("script type", t.script_type.as_str())
        .arg("group", t.group.as_ref().map_or("", |g| g.as_str()))
        .arg("instance", t.instance.as_ref().map_or("", |i| i.as_str()))
        .arg(
            "priority level",
            if to.priority == Priority::DEFAULT {
                String::new()
            } else {
                to.priority.to_string()
            },
        );
    c
}
