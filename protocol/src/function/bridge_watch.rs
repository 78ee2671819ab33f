//! The `hero_bridge_watch` call (`bridge_watch.lua`): the bridge follows the jobs legacy actors
//! hold and takes back the abandoned ones.

use super::{Call, Function};
use crate::clock;
use crate::keys::{Keyspace, LegacyQueue, CONSUMER_GROUP};

/// The mapping a watch call looks after.
#[derive(Clone, Copy, Debug)]
pub struct Watch<'a> {
    pub queue: &'a LegacyQueue,
    /// The mapped work stream.
    pub stream: &'a str,
    /// How long a legacy actor has to take a job from its list.
    pub pickup_ms: u64,
    pub dual_push: bool,
}

/// Looks at up to `count` tracked jobs from `rank` on; answers `{ended, requeued, failed, next
/// rank}` (next rank 0 when the whole set was seen).
pub fn bridge_watch(
    keys: &Keyspace,
    w: &Watch<'_>,
    max_attempts: u32,
    xackdel: &str,
    count: usize,
    rank: i64,
) -> Call {
    let now = clock::now_ms();
    let mut c = Call::new(Function::BridgeWatch, 9);
    c.key("tracking zset", keys.bridge_track(w.queue))
        .key("legacy list", keys.legacy_queue(w.queue))
        .key("work stream", w.stream)
        .key("queue registry set", keys.queues())
        .key("config hash", keys.config())
        .key("dead-letter stream", keys.dead_letter())
        .key("retention stream", keys.retention())
        .key("event log", keys.events())
        .key("stats hash", keys.stats());
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("job key prefix", keys.job_prefix())
        .arg("reply key prefix", keys.reply_prefix())
        .arg("now ISO 8601", clock::iso(now))
        .arg("now ms", now)
        .arg("pickup time ms", w.pickup_ms)
        .arg("max attempts", max_attempts)
        .arg("'1' for a dual-push", if w.dual_push { "1" } else { "0" })
        .arg("'1' when XACKDEL", xackdel)
        .arg("most jobs to look at", count)
        .arg("rank to start at", rank);
    c
}
