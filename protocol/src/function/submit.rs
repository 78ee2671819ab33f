//! The `hero_submit` call (`submit.lua`): store and queue a batch of new jobs.

use super::{Call, Function};
use crate::error::{Error, Result};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::new_job::NewJob;
use crate::reply::{array, text};
use redis::Value;

/// One call for all of `jobs`; `reply` asks for a run-and-wait reply. Decode the answer with
/// [`crate::function::SubmitReply::decode_many`].
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

// The reply: decoded here, beside the call that asks for it, and nowhere else.
/// `hero_submit`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitReply {
    /// False when the id existed already, or the submit was a duplicate (nothing was written).
    pub created: bool,
    /// The job's status now (the holder's, for a duplicate).
    pub status: String,
    /// The job holding the submit's uniqueness key, when it was a duplicate.
    pub duplicate_of: Option<String>,
}

impl SubmitReply {
    /// The answers of a batched `hero_submit`, one per job (kind, status pairs in one list).
    pub fn decode_many(v: &Value, expected: usize) -> Result<Vec<Self>> {
        let items = array(v)?;
        if items.len() != 2 * expected {
            return Err(Error::protocol(format!(
                "hero_submit answered {} values for {expected} jobs; expected a kind and a status each",
                items.len()
            )));
        }
        items
            .chunks(2)
            .map(|c| {
                let kind = text(&c[0])?;
                Ok(SubmitReply {
                    created: kind == "created",
                    status: text(&c[1])?,
                    duplicate_of: kind.strip_prefix("duplicate:").map(str::to_string),
                })
            })
            .collect()
    }
}
