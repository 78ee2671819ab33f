//! The `hero_submit` call (`submit.lua`): store and queue a batch of new jobs.

use super::{Call, Function};
use crate::clock;
use crate::error::{Error, Result};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::new_job::NewJob;
use crate::reply::{array, text};
use redis::Value;

/// One call for all of `jobs`; `reply` asks for a run-and-wait reply. Decode the answer with
/// [`crate::function::SubmitReply::decode_many`].
///
/// Since protocol 35 the call names each work stream of the batch once, and a job by its id, a
/// code (its stream's place, how many values follow, its run-at when it has one) and its field,
/// value pairs without `created_at` and `script_type`, which the function writes (Redis's
/// clock; the stream's type): a plain job is four strings where it was eleven.
pub fn submit(keys: &Keyspace, jobs: &[NewJob], reply: bool) -> Call {
    let mut streams: Vec<String> = Vec::new();
    let mut at: Vec<usize> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let stream = keys.work(job.target(), job.record().priority);
        match streams.iter().position(|s| *s == stream) {
            Some(i) => at.push(i),
            None => {
                at.push(streams.len());
                streams.push(stream);
            }
        }
    }
    let mut c = Call::new(Function::Submit, 6 + streams.len());
    c.key("delayed zset", keys.delayed())
        .key("queue registry set", keys.queues())
        .key("bridge registry hash", keys.bridge_registry())
        .key("config hash", keys.config())
        .key("event log", keys.events())
        .key("stats hash", keys.stats());
    for s in &streams {
        c.key("the batch's work streams", s);
    }
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("job key prefix", keys.job_prefix())
        .arg("the caller's clock now", clock::now_ms());
    for (job, s) in jobs.iter().zip(at) {
        push_job(&mut c, job, s + 1, reply);
    }
    c
}

/// The fields of a job's record the function writes itself: left out of the call.
const WRITTEN_BY_THE_FUNCTION: [&str; 2] = ["created_at", "script_type"];

/// One job's arguments: its id, its code `<stream>.<values>[@<run-at ms>]`, its values.
fn push_job(c: &mut Call, job: &NewJob, stream: usize, reply: bool) {
    let fields: Vec<(&str, String)> = job
        .record()
        .to_submit_fields()
        .into_iter()
        .filter(|(k, _)| !WRITTEN_BY_THE_FUNCTION.contains(k))
        .collect();
    let payload = job.record().payload.as_deref();
    let values =
        2 * fields.len() + if reply { 2 } else { 0 } + if payload.is_some() { 2 } else { 0 };
    let code = match job.run_at_ms() {
        Some(at) if at > 0 => format!("{stream}.{values}@{at}"),
        _ => format!("{stream}.{values}"),
    };
    c.rest(job.id().as_str()).rest(code);
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
