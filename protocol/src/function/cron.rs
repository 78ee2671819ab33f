//! The recurring jobs' calls: `hero_cron` (`cron.lua`) stores or removes a spec, checked by the
//! one cron engine; `hero_cron_next` (`cron_next.lua`) asks that engine for a schedule's ticks.
//! Firing the ticks is hero_duties' (no call of its own).

use super::{Call, Function};
use crate::error::Result;
use crate::keys::Keyspace;
use crate::reply;

/// Stores recurring job `name`'s spec (`spec_json`, a `CronJob` as JSON), or removes it and its
/// state when `spec_json` is empty.
pub fn cron(keys: &Keyspace, name: &str, spec_json: &str) -> Call {
    let mut c = Call::new(Function::Cron, 2);
    c.key("cron spec hash", keys.cron())
        .key("cron next-tick hash", keys.cron_next());
    c.arg("name", name).arg("the spec as JSON", spec_json);
    c
}

/// What [`cron`] answered: `stored` and the next tick (ms; 0 when the schedule has none), or
/// `removed` and 1 or 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronStored {
    pub stored: bool,
    pub value: u64,
}

impl CronStored {
    pub fn parse(v: &redis::Value) -> Result<CronStored> {
        let items = reply::array(v)?;
        match (items.first(), items.get(1)) {
            (Some(kind), Some(n)) => Ok(CronStored {
                stored: reply::text(kind)? == "stored",
                value: reply::int(n)?.max(0) as u64,
            }),
            _ => Err(reply::unexpected("hero_cron answered fewer than 2 items")),
        }
    }
}

/// Asks the cron engine (`cron_next.lua`) for the next `n` (1-100) ticks of `schedule` in
/// zone `tz` strictly after `after_ms`: how every language checks a schedule and shows its
/// ticks, by the engine `hero_duties` fires by. An invalid schedule or zone is an error reply
/// `HERO_INVALID_CRON <why>` ([`crate::Error::InvalidInput`]).
pub fn cron_next(schedule: &str, tz: &str, after_ms: u64, n: u32) -> Call {
    let mut c = Call::new(Function::CronNext, 0);
    c.arg("schedule", schedule)
        .arg("time zone", tz)
        .arg("after", after_ms)
        .arg("how many ticks", n);
    c
}
