//! Adding a recurring job: a named schedule (a cron expression, or `every <duration>`) in an
//! explicit time zone, and the job each tick submits. The spec is `hero_protocol::cron`'s;
//! listing, pausing and removing are the operator's (`hero_admin`), firing the ticks the
//! broker's.

pub use hero_protocol::cron::{CronJob, JobTemplate, Missed, Schedule};
use hero_protocol::Result;

use crate::client::Client;

impl Client {
    /// Adds (or replaces) a recurring job. Its first tick is the first after the next broker
    /// pass; a replaced one keeps its next tick.
    pub async fn cron_add(&self, job: &CronJob) -> Result<()> {
        hero_protocol::cron::store(self.redis(), self.keys(), job).await
    }
}
