//! The `hero_submit` call (`submit.lua`): store and queue a batch of new jobs.

use super::{Call, Function};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::new_job::NewJob;

/// One call for all of `jobs`; `reply` asks for a run-and-wait reply. Decode the answer with
/// [`crate::reply::SubmitReply::decode_many`].
pub fn submit(keys: &Keyspace, jobs: &[NewJob], reply: bool) -> Call {
    let mut c = Call::new(Function::Submit, 6 + 2 * jobs.len());
    c.key("delayed zset", keys.delayed())
        .key("queue registry set", keys.queues())
        .key("bridge registry hash", keys.bridge_registry())
        .key("config hash", keys.config())
        .key("event log", keys.events())
        .key("stats hash", keys.stats());
    for job in jobs {
        c.key("job hash", keys.job(job.id())).key(
            "its work stream",
            keys.work(job.target(), job.record().priority),
        );
    }
    c.arg("consumer group", CONSUMER_GROUP);
    for job in jobs {
        let fields = job.record().to_submit_fields();
        let payload = job.record().payload.as_deref();
        let extra = if reply { 2 } else { 0 } + if payload.is_some() { 2 } else { 0 };
        c.rest(job.id().as_str())
            .rest(job.run_at_ms().unwrap_or(0))
            .rest(2 * fields.len() + extra);
        for (field, value) in fields {
            c.rest(field).rest(value);
        }
        if reply {
            c.rest("reply").rest("1");
        }
        if let Some(bytes) = payload {
            c.rest("payload").rest(bytes);
        }
    }
    c
}
