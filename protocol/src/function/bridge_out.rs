//! The `hero_bridge_out` call (`bridge_out.lua`): the bridge hands jobs of a work stream to the
//! legacy actors of a list.

use super::{Call, Function};
use crate::clock;
use crate::keys::{Keyspace, LegacyQueue, CONSUMER_GROUP};

/// Hands at most `count` jobs of `stream` to `queue`'s legacy actors, each to be picked up
/// within `pickup_ms`; answers `{handed out, dropped}`.
pub fn bridge_out(
    keys: &Keyspace,
    queue: &LegacyQueue,
    stream: &str,
    pickup_ms: u64,
    count: usize,
    xackdel: &str,
) -> Call {
    let now = clock::now_ms();
    let mut c = Call::new(Function::BridgeOut, 5);
    c.key("work stream", stream)
        .key("legacy list", keys.legacy_queue(queue))
        .key("the mapping's tracking zset", keys.bridge_track(queue))
        .key("config hash", keys.config())
        .key("event log", keys.events());
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("bridge consumer", queue.consumer())
        .arg("most jobs", count)
        .arg("job key prefix", keys.job_prefix())
        .arg("now ISO 8601", clock::iso(now))
        .arg("pickup deadline ms", now + pickup_ms)
        .arg("legacy worker id", queue.worker_id())
        .arg("legacy stop queue", keys.legacy_stop_for(queue))
        .arg("'1' when XACKDEL", xackdel);
    c
}
