//! The `hero_policy` call (`policy.lua`): store (or clear) one queue's policy on one shard and
//! recount the policies the functions apply.

use super::{Call, Function};
use crate::keys::Keyspace;

/// Stores `json` (the queue's whole policy, merged by the caller; `""` clears it) as the
/// policy of queue `name` (`<type>` or `<type>/<group>`) on the shard of `keys`.
pub fn set_policy(keys: &Keyspace, name: &str, json: &str) -> Call {
    let mut c = Call::new(Function::Policy, 2);
    c.key("policy hash", keys.policy())
        .key("config hash", keys.config());
    c.arg("queue name", name).arg("policy JSON", json);
    c
}
