//! The `hero_stop` call (`stop.lua`): stop a job wherever it is.

use super::{Call, Function};
use crate::clock;
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
