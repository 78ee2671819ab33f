//! The `hero_batch` call (`batch.lua`): close a batch with the callback jobs to submit once
//! every member ended, and what it answered.

use super::{Call, Function};
use crate::clock;
use crate::error::{Error, Result};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::BatchName;
use crate::new_job::NewJob;
use crate::reply::text;
use redis::Value;

/// A callback job as `hero_batch` keeps it until it submits it: its record's fields and every
/// key it needs, built here with the keys module so the functions derive none.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CallbackSpec {
    pub id: String,
    pub key: String,
    pub stream: String,
    pub registry: String,
    pub group: String,
    /// field, value, field, value, ... of its record
    pub fields: Vec<String>,
}

impl CallbackSpec {
    /// The spec of `job`. A callback runs when the batch is done, so it cannot wait on
    /// prerequisites, be delayed, hold a uniqueness key or join a batch itself.
    pub fn new(keys: &Keyspace, job: &NewJob) -> Result<CallbackSpec> {
        let r = job.record();
        let refuse = |what: &str| {
            Err(Error::InvalidInput(format!(
                "a batch's callback job cannot {what}: it is submitted when the batch is done"
            )))
        };
        if !r.prerequisites.is_empty() {
            return refuse("wait on prerequisites");
        }
        if job.run_at_ms().is_some() {
            return refuse("be delayed");
        }
        if r.unique.is_some() {
            return refuse("hold a uniqueness key");
        }
        if r.batch.is_some() {
            return refuse("be a member of a batch");
        }
        if !r.tags.is_empty() {
            return refuse("carry tags");
        }
        let fields = r
            .to_submit_fields()
            .into_iter()
            .filter(|(k, _)| *k != "created_at")
            .flat_map(|(k, v)| [k.to_string(), v])
            .collect();
        Ok(CallbackSpec {
            id: r.id.to_string(),
            key: keys.job(&r.id),
            stream: keys.work(job.target(), r.priority),
            registry: keys.queues(),
            group: CONSUMER_GROUP.to_string(),
            fields,
        })
    }

    fn json(spec: Option<&CallbackSpec>) -> String {
        spec.and_then(|s| serde_json::to_string(s).ok())
            .unwrap_or_default()
    }
}

/// Closes batch `name` with its callbacks; decode the reply with [`BatchClosed::decode`].
pub fn close_batch(
    keys: &Keyspace,
    name: &BatchName,
    on_complete: Option<&CallbackSpec>,
    on_success: Option<&CallbackSpec>,
) -> Call {
    let mut c = Call::new(Function::Batch, 4);
    c.key("batch hash", keys.batch(name))
        .key("config hash", keys.config())
        .key("batch index", keys.batches())
        .key("event log", keys.events());
    c.arg("batch name", name.as_str())
        .arg("now ISO 8601", clock::now_iso())
        .arg("on_complete", CallbackSpec::json(on_complete))
        .arg("on_success", CallbackSpec::json(on_success));
    c
}

// The reply: decoded here, beside the call that asks for it, and nowhere else.
/// What `hero_batch` answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchClosed {
    /// `open` (members pending), `done` (it called back in this call) or `already_done`.
    pub state: String,
    pub total: u64,
    pub pending: u64,
    pub finished: u64,
    pub failed: u64,
    pub complete_id: Option<String>,
    pub success_id: Option<String>,
}

impl BatchClosed {
    pub fn decode(v: &Value) -> Result<Self> {
        let Value::Array(items) = v else {
            return Err(Error::protocol(format!("hero_batch answered {v:?}")));
        };
        let bad = || Error::protocol(format!("hero_batch answered {v:?}"));
        let num = |i: usize| match items.get(i) {
            Some(Value::Int(n)) => u64::try_from(*n).map_err(|_| bad()),
            _ => Err(bad()),
        };
        let id = |i: usize| -> Result<Option<String>> {
            let s = text(items.get(i).ok_or_else(bad)?)?;
            Ok((!s.is_empty()).then_some(s))
        };
        Ok(BatchClosed {
            state: text(items.first().ok_or_else(bad)?)?,
            total: num(1)?,
            pending: num(2)?,
            finished: num(3)?,
            failed: num(4)?,
            complete_id: id(5)?,
            success_id: id(6)?,
        })
    }
}
