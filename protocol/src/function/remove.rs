//! The `hero_remove` call (`remove.lua`): delete an ended job's record (BullMQ's `job.remove()`).

use super::{Call, Function};
use crate::error::{Error, Result};
use crate::keys::Keyspace;
use crate::name::JobId;

/// Deletes job `id` when it has ended (a queued one is stopped first by the caller).
pub fn remove(keys: &Keyspace, id: &JobId) -> Call {
    let mut c = Call::new(Function::Remove, 1);
    c.key("job hash", keys.job(id));
    c.arg("job id", id.as_str());
    c
}

/// What [`remove`] answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    Removed,
    /// Started: it may be stopped first, or waited for.
    Running,
    /// Waiting or dispatched: stop it first.
    Queued,
    Missing,
}

impl Removed {
    pub fn parse(s: &str) -> Result<Removed> {
        Ok(match s {
            "removed" => Removed::Removed,
            "running" => Removed::Running,
            "queued" => Removed::Queued,
            "missing" => Removed::Missing,
            other => {
                return Err(Error::Protocol(format!(
                    "hero_remove answered {other:?}, not removed, running, queued or missing"
                )))
            }
        })
    }
}
