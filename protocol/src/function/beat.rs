//! The `hero_beat` call (`beat.lua`): a process's heartbeat on Redis's clock, allowed past
//! maxmemory, answering Redis's time (what a process measures its clock's skew by), the
//! brokers' lease and fleet summary, and the maxmemory policy.

use std::time::Duration;

use super::{Call, Function};
use crate::error::Result;
use crate::keys::Keyspace;
use crate::reply;

/// A heartbeat of process `name` for `ttl`: its fleet entry (a JSON object without
/// `expires_ms`, which the function adds on Redis's clock) and, for a worker, its presence JSON
/// written to `presence_keys` and its liveness deadline to the consumers set.
pub fn beat(
    keys: &Keyspace,
    name: &str,
    ttl: Duration,
    entry: &str,
    presence: Option<(&[String], &str)>,
) -> Call {
    let presence_keys = presence.map(|(k, _)| k).unwrap_or(&[]);
    let mut c = Call::new(Function::Beat, 4 + presence_keys.len());
    c.key("consumers sorted set", keys.consumers())
        .key("fleet hash", keys.fleet())
        .key("config hash", keys.config())
        .key("memory flag", keys.memory());
    for k in presence_keys {
        c.key("", k);
    }
    c.arg("process name", name)
        .arg("liveness ttl ms", ttl.as_millis() as u64)
        .arg("fleet entry", entry)
        .arg("presence JSON", presence.map(|(_, j)| j).unwrap_or(""));
    c
}

/// What [`beat`] answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Beat {
    /// Redis's clock when it ran, ms since the epoch.
    pub now_ms: u64,
    /// The brokers' lease (`lease_ms` in the config hash), 0 when none is published.
    pub lease_ms: u64,
    /// The brokers' summary of what live older processes lack (`fleet_lacks`).
    pub fleet_lacks: Option<String>,
    /// Redis's maxmemory policy, as INFO gives it.
    pub memory_policy: String,
}

impl Beat {
    pub fn parse(v: &redis::Value) -> Result<Beat> {
        let items = reply::array(v)?;
        let opt = |i: usize| -> Result<Option<String>> {
            match items.get(i) {
                None | Some(redis::Value::Nil) => Ok(None),
                Some(v) => reply::text(v).map(Some),
            }
        };
        let now_ms = match items.first() {
            Some(v) => reply::int(v)?.max(0) as u64,
            None => return Err(reply::unexpected("hero_beat answered no time")),
        };
        Ok(Beat {
            now_ms,
            lease_ms: opt(1)?.and_then(|t| t.parse::<u64>().ok()).unwrap_or(0),
            fleet_lacks: opt(2)?,
            memory_policy: opt(3)?.unwrap_or_default(),
        })
    }
}
