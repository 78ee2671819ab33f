//! The `hero_renew` call (`renew.lua`): a worker keeps a long job's lease.

use super::{Call, Function};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;

/// Renews the delivery of `id` from `stream` held with `lease` by `consumer`; decode the reply
/// with [`crate::reply::Renewal::decode`].
pub fn renew(keys: &Keyspace, id: &JobId, stream: &str, lease: &str, consumer: &str) -> Call {
    let mut c = Call::new(Function::Renew, 2);
    c.key("job hash", keys.job(id)).key("work stream", stream);
    c.arg("lease", lease)
        .arg("consumer group", CONSUMER_GROUP)
        .arg("consumer name", consumer);
    c
}
