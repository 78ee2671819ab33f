//! One mapping with the keys its loops use, and the little the three loops share (their batch
//! size, their pause, how they read a function's counts). The loops read this module; it reads
//! none of them.

use std::time::Duration;

use hero_protocol::{Keyspace, LegacyQueue, Priority};
use redis::Value;
use tokio_util::sync::CancellationToken;

use super::mapping::BridgeMapping;

/// How many ids one function call moves at most.
pub(super) const BATCH: usize = 200;

/// A mapping with the keys its loops use, built once from the namespace.
#[derive(Clone)]
pub(super) struct Route {
    pub(super) m: BridgeMapping,
    pub(super) queue: LegacyQueue,
    /// The legacy list's key.
    pub(super) list: String,
    /// The canonical work stream (the target's default priority level).
    pub(super) stream: String,
    /// The tracking zset of the jobs its legacy actors hold.
    pub(super) track: String,
    /// The legacy stop queue of its worker id.
    pub(super) stop: String,
}

impl Route {
    pub(super) fn new(keys: &Keyspace, m: &BridgeMapping) -> hero_protocol::Result<Route> {
        let queue = keys.parse_legacy_queue(&m.legacy)?;
        Ok(Route {
            list: keys.legacy_queue(&queue),
            stream: keys.work(&m.target, Priority::DEFAULT),
            track: keys.bridge_track(&queue),
            stop: keys.legacy_stop_for(&queue),
            queue,
            m: m.clone(),
        })
    }
}

pub(super) async fn pause(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! { _ = stop.cancelled() => false, _ = tokio::time::sleep(d) => true }
}

pub(super) fn counts(v: &Value) -> Vec<i64> {
    redis::from_redis_value::<Vec<i64>>(v.clone()).unwrap_or_default()
}
