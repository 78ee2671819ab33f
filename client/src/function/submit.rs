//! The `hero_submit` call (`submit.lua`): store and queue a batch of new jobs.

use super::{Call, Function};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::new_job::NewJob;

/// One call for all of `jobs`; `reply` asks for a run-and-wait reply. Decode the answer with
/// [`crate::reply::SubmitReply::decode_many`].
pub fn submit(keys: &Keyspace, jobs: &[NewJob], reply: bool) -> Call {
    let mut c = Call::new(Function::Submit, key_count(jobs));
    for (label, k) in submit_keys(keys, jobs) {
        c.key(label, k);
    }
    c.arg("consumer group", CONSUMER_GROUP);
    push_jobs(&mut c, jobs, reply);
    c
}

/// How many keys hero_submit takes for `jobs`.
pub(super) fn key_count(jobs: &[NewJob]) -> usize {
    6 + 2 * jobs.len()
}

/// hero_submit's keys for `jobs`, in order, with their header labels.
pub(super) fn submit_keys(keys: &Keyspace, jobs: &[NewJob]) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("delayed zset", keys.delayed()),
        ("queue registry set", keys.queues()),
        ("bridge registry hash", keys.bridge_registry()),
        ("config hash", keys.config()),
        ("event log", keys.events()),
        ("stats hash", keys.stats()),
    ];
    for job in jobs {
        out.push(("job hash", keys.job(job.id())));
        out.push((
            "its work stream",
            keys.work(job.target(), job.record().priority),
        ));
    }
    out
}

/// hero_submit's arguments after the consumer group: per job its id, run-at, field count and
/// fields.
pub(super) fn push_jobs(c: &mut Call, jobs: &[NewJob], reply: bool) {
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
}
