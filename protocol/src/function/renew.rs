//! The `hero_renew` call (`renew.lua`): a worker keeps a long job's lease, and hands over what
//! its handler reported since the last renewal (progress, log lines) in the same call.

use super::{Call, Function};
use crate::error::{Error, Result};
use crate::job::{clip, Progress, LOG_LINE_BYTES, PROGRESS_MESSAGE_BYTES};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;
use crate::reply::text;
use redis::Value;

/// What a handler reported since the last renewal: its latest progress, and the lines it
/// logged, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub progress: Option<Progress>,
    pub lines: Vec<String>,
}

impl Report {
    pub fn is_empty(&self) -> bool {
        self.progress.is_none() && self.lines.is_empty()
    }
}

/// Renews the delivery of `id` from `stream` held with `lease` by `consumer`, recording
/// `report` when there is one (an empty report is a plain renewal); decode the reply with
/// [`crate::function::Renewal::decode`].
pub fn renew(
    keys: &Keyspace,
    id: &JobId,
    stream: &str,
    lease: &str,
    consumer: &str,
    report: Option<&Report>,
) -> Call {
    let report = report.filter(|r| !r.is_empty());
    let mut c = Call::new(Function::Renew, if report.is_some() { 4 } else { 2 });
    c.key("job hash", keys.job(id)).key("work stream", stream);
    if report.is_some() {
        c.key("event log", keys.events())
            .key("config hash", keys.config());
    }
    c.arg("lease", lease)
        .arg("consumer group", CONSUMER_GROUP)
        .arg("consumer name", consumer);
    if let Some(r) = report {
        let progress = r.progress.as_ref().map_or_else(String::new, |p| {
            let clipped = Progress {
                percent: p.percent.clamp(0.0, 100.0),
                message: clip(&p.message, PROGRESS_MESSAGE_BYTES).to_string(),
            };
            serde_json::to_string(&clipped).unwrap_or_default()
        });
        c.arg("job id", id.as_str()).arg("progress", progress);
        for line in &r.lines {
            c.arg("log lines", clip(line, LOG_LINE_BYTES));
        }
    }
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
