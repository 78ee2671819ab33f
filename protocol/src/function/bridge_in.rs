//! The `hero_bridge_in` call (`bridge_in.lua`): the bridge moves ids legacy producers pushed
//! into the mapped work stream.

use super::{Call, Function};
use crate::clock;
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::Target;

/// Moves at most `count` ids from the legacy `list` into `stream`, the work stream of `target`;
/// answers `{moved, dead, blocked}`.
pub fn bridge_in(keys: &Keyspace, list: &str, stream: &str, target: &Target, count: usize) -> Call {
    let mut c = Call::new(Function::BridgeIn, 6);
    c.key("legacy list", list)
        .key("work stream", stream)
        .key("queue registry set", keys.queues())
        .key("dead-letter stream", keys.dead_letter())
        .key("config hash", keys.config())
        .key("event log", keys.events());
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("most ids to move", count)
        .arg("job key prefix", keys.job_prefix())
        .arg("script type", target.script_type.as_str())
        .arg("group", target.group.as_ref().map_or("", |g| g.as_str()))
        .arg(
            "instance",
            target.instance.as_ref().map_or("", |i| i.as_str()),
        )
        .arg("now ISO 8601", clock::now_iso());
    c
}
