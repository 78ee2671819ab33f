//! Adding a recurring job: a named schedule (a cron expression, or `every <duration>`) in an
//! explicit time zone, and the job each tick submits. The spec is `hero_protocol::cron`'s;
//! listing, pausing and removing are the operator's (`hero_admin`); the ticks are fired by the
//! holder of the duties (any worker with duties on, or a broker), by the one cron engine in the
//! function library.

pub use hero_protocol::cron::{CronJob, JobTemplate, Missed};
use hero_protocol::Result;

use crate::client::Client;

impl Client {
    /// Adds (or replaces) a recurring job, checked by the cron engine that fires it (a
    /// schedule or zone it does not take is `Error::InvalidInput` saying why); answers its next
    /// tick (ms since the epoch). A replaced one with the same schedule and zone keeps its next
    /// tick. With no live process doing the duties in the namespace this says so once, as a
    /// WARN naming the Redis and its db, since nothing would fire the ticks.
    pub async fn cron_add(&self, job: &CronJob) -> Result<u64> {
        let next = hero_protocol::cron::store(self.redis(), self.keys(), job).await?;
        self.upkeep_needed().await;
        Ok(next)
    }

    /// The next `n` (1-100) ticks of `schedule` in zone `tz` (an IANA name) after `after_ms`,
    /// by the cron engine the duties fire by: what `hero cron next` shows.
    pub async fn cron_next(
        &self,
        schedule: &str,
        tz: &str,
        after_ms: u64,
        n: u32,
    ) -> Result<Vec<u64>> {
        hero_protocol::cron::next_ticks(self.redis(), schedule, tz, after_ms, n).await
    }
}
