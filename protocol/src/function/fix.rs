//! The `hero_fix` call (`fix.lua`): repair one inconsistency the audit found, re-checked inside
//! Redis.

use super::{Call, Function};
use crate::clock;
use crate::keys::{Keyspace, CONSUMER_GROUP};

/// One repair, with what it needs to name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair<'a> {
    /// A pending entry of `stream` that is no job's delivery (`job`: what it names, '' for
    /// nothing): acknowledged and deleted.
    StaleEntry {
        stream: &'a str,
        entry: &'a str,
        job: &'a str,
    },
    /// A `dispatched` job in no stream: queued again in `stream`, its queue.
    LostJob { stream: &'a str, job: &'a str },
    /// A `started` job whose lease is not pending in `stream`: queued again.
    UnleasedJob { stream: &'a str, job: &'a str },
    /// A delayed-set member whose job is not `waiting`: removed.
    StaleDelay { job: &'a str },
    /// A reply list with no TTL: given the reply TTL.
    ReplyTtl { key: &'a str },
    /// A consumer of `stream` that holds nothing: deleted from the group.
    IdleConsumer { stream: &'a str, consumer: &'a str },
}

/// One `hero_fix` call; answers `fixed` or `unchanged`.
pub fn fix(keys: &Keyspace, repair: Repair<'_>) -> Call {
    let any = keys.config();
    let (what, stream, job, reference, target) = match repair {
        Repair::StaleEntry { stream, entry, job } => {
            ("stale_entry", stream, job, entry, any.as_str())
        }
        Repair::LostJob { stream, job } => ("lost_job", stream, job, job, any.as_str()),
        Repair::UnleasedJob { stream, job } => ("unleased_job", stream, job, job, any.as_str()),
        Repair::StaleDelay { job } => ("stale_delay", any.as_str(), job, job, any.as_str()),
        Repair::ReplyTtl { key } => ("reply_ttl", any.as_str(), "", "", key),
        Repair::IdleConsumer { stream, consumer } => {
            ("idle_consumer", stream, "", consumer, any.as_str())
        }
    };
    let job_key = if job.is_empty() {
        any.clone()
    } else {
        keys.job_unchecked(job)
    };
    let mut c = Call::new(Function::Fix, 7);
    c.key("the work stream", stream)
        .key("job hash", job_key)
        .key("delayed zset", keys.delayed())
        .key("queue registry set", keys.queues())
        .key("config hash", &any)
        .key("event log", keys.events())
        .key("the key to repair", target);
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("what", what)
        .arg("the entry id", reference)
        .arg("job id", job)
        .arg("now ISO 8601", clock::now_iso())
        .arg("'1' when XACKDEL", "0");
    c
}
