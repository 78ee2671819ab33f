//! The `hero_renew` call (`renew.lua`): a worker keeps a long job's lease.

use super::{Call, Function};
use crate::error::{Error, Result};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;
use crate::reply::text;
use redis::Value;

/// Renews the delivery of `id` from `stream` held with `lease` by `consumer`; decode the reply
/// with [`crate::function::Renewal::decode`].
pub fn renew(keys: &Keyspace, id: &JobId, stream: &str, lease: &str, consumer: &str) -> Call {
    let mut c = Call::new(Function::Renew, 2);
    c.key("job hash", keys.job(id)).key("work stream", stream);
    c.arg("lease", lease)
        .arg("consumer group", CONSUMER_GROUP)
        .arg("consumer name", consumer);
    c
}

// The reply: decoded here, beside the call that asks for it, and nowhere else.
/// What `hero_renew` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    Ok,
    /// The job ended while running (stopped): interrupt the handler.
    Stopped,
    /// Another delivery owns the job: interrupt the handler, its result would be rejected.
    Lost,
}

impl Renewal {
    pub fn decode(v: &Value) -> Result<Self> {
        match text(v)?.as_str() {
            "ok" => Ok(Renewal::Ok),
            "stopped" => Ok(Renewal::Stopped),
            "lost" => Ok(Renewal::Lost),
            other => Err(Error::protocol(format!("hero_renew answered {other:?}"))),
        }
    }
}
