//! The `hero_list` call (`list.lua`): one bounded page of a queue's jobs in one state, the
//! listing the Python and Node packages' `get_jobs`/`getJobs` call, so every language answers
//! the same jobs in the same order. Its answer has `hero_clean`'s shape ([`Cleaned`]).

use super::{Call, Function};
use crate::keys::Keyspace;

pub use super::clean::Cleaned as Listed;

/// The states [`list`] takes: `finished` and `error` (newest end first), `delayed` (soonest
/// first), `waiting` (queued, not taken) and `running`.
pub const LIST_STATES: [&str; 5] = ["finished", "error", "delayed", "waiting", "running"];

/// Up to `limit` (1-1000) ids of the jobs of `queue` (`''`: every queue) in `state`, going on
/// from `cursor` (`''` from the start, else a page's `next`). A call reads at most 1,000
/// candidates, so a page may be short with a `next` to follow.
pub fn list(keys: &Keyspace, state: &str, queue: &str, cursor: &str, limit: usize) -> Call {
    let mut c = Call::new(Function::List, 3);
    c.key("retention stream", keys.retention())
        .key("delayed zset", keys.delayed())
        .key("queue registry set", keys.queues());
    c.arg("job key prefix", keys.job_prefix())
        .arg("state", state)
        .arg("queue name", queue)
        .arg("cursor", cursor)
        .arg("the most jobs", limit);
    c
}
