//! The `hero_stop` call (`stop.lua`): stop a job wherever it is.

use super::{Call, Function};
use crate::clock;
use crate::conn::Redis;
use crate::error::{Error, Result, ServerCode};
use crate::job::{Placement, PLACEMENT_FIELDS};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;

/// Why a job is stopped, as `hero_stop` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopWhy {
    /// An operator's stop: wherever the job is, it never runs (again); the error `stopped`.
    Operator,
    /// The broker's time limit: only a running job is ended, with the error `timeout`.
    Timeout,
}

impl StopWhy {
    fn as_str(self) -> &'static str {
        match self {
            StopWhy::Operator => "stopped",
            StopWhy::Timeout => "timeout",
        }
    }
}

/// Stops `id`, queued on `stream` (any key of the namespace's slot when it has no valid target:
/// it is then never read). `seen` is the control list and the `worker_id` of the worker the
/// caller saw running it, if any. Answers `cancelled`, `interrupted`, `timeout`,
/// `already_completed` or `changed`.
pub fn stop(
    keys: &Keyspace,
    id: &JobId,
    stream: &str,
    seen: Option<(&str, &str)>,
    xackdel: &str,
    why: StopWhy,
) -> Call {
    let config = keys.config();
    let (ctl, worker) = super::seen_control(keys, seen);
    let mut c = Call::new(Function::Stop, 9);
    c.key("job hash", keys.job(id))
        .key("its work stream", stream)
        .key("delayed zset", keys.delayed())
        .key("reply list", keys.reply(id))
        .key("config hash", &config)
        .key("control list", ctl)
        .key("retention stream", keys.retention())
        .key("event log", keys.events())
        .key("stats hash", keys.stats());
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("worker_id the caller saw", worker)
        .arg("now ISO 8601", clock::now_iso())
        .arg("'1' when XACKDEL", xackdel)
        .arg("job id", id.as_str())
        .arg("why", why.as_str());
    c
}

/// Reads where `id` is queued and which worker runs it, then makes one `hero_stop` call for it:
/// for the worker its record names, or `expected` (the call then answers `changed` when the
/// record names another). The producer's stop and the broker's time limit both end a job here.
/// A job that does not exist is [`Error::JobNotFound`].
pub async fn stop_job(
    redis: &Redis,
    keys: &Keyspace,
    id: &JobId,
    why: StopWhy,
    expected: Option<&str>,
) -> Result<String> {
    let key = keys.job(id);
    let mut fields = PLACEMENT_FIELDS.to_vec();
    fields.push("worker_id");
    let f: Vec<Option<String>> = redis
        .query(redis::cmd("HMGET").arg(&key).arg(&fields))
        .await?;
    let placement = Placement::read(&f);
    let worker = f
        .get(PLACEMENT_FIELDS.len())
        .cloned()
        .flatten()
        .unwrap_or_default();
    let worker = expected.unwrap_or(&worker);
    // A job without a valid target was never queued by us: its stream key is unused.
    let stream = match &placement {
        Some(p) => keys.work(&p.target, p.priority),
        None => key.clone(),
    };
    let ctl = placement
        .as_ref()
        .and_then(|at| keys.ctl_of_worker(&at.target.script_type, worker));
    let seen = ctl.as_deref().map(|ctl| (ctl, worker));
    let cmd = stop(keys, id, &stream, seen, redis.caps().xackdel_flag(), why);
    match redis.query(&cmd).await {
        Err(Error::Server {
            code: ServerCode::JobNotFound,
            ..
        }) => Err(Error::JobNotFound(id.to_string())),
        other => other,
    }
}
