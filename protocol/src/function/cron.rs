//! The `hero_cron` call (`cron.lua`): a broker claims a recurring job's tick and fires it.

use super::submit::{key_count, push_jobs, submit_keys};
use super::{Call, Function};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::new_job::NewJob;

/// Claims the tick `expected` (`None` before the first) of recurring job `name`, moving it to
/// `after`; the call also submits `job` when `fire` (else `job` only fills hero_submit's place
/// and is never written). Answers `claimed` or `taken`.
pub fn cron(
    keys: &Keyspace,
    name: &str,
    expected: Option<u64>,
    after: u64,
    job: &NewJob,
    fire: bool,
) -> Call {
    let jobs = std::slice::from_ref(job);
    let mut c = Call::new(Function::Cron, 1 + key_count(jobs));
    c.key("cron next-tick hash", keys.cron_next());
    for (_, k) in submit_keys(keys, jobs) {
        c.key("hero_submit's keys for one job", k);
    }
    c.arg("name", name)
        .arg(
            "the tick the caller expects",
            expected.map(|t| t.to_string()).unwrap_or_default(),
        )
        .arg("the tick after it", after)
        .arg("'fire'", if fire { "fire" } else { "skip" })
        .arg("hero_submit's arguments", CONSUMER_GROUP);
    push_jobs(&mut c, jobs, false);
    c
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
