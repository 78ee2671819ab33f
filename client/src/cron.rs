//! Adding a recurring job: a named schedule (a cron expression, or `every <duration>`) in an
//! explicit time zone, and the job each tick submits. The spec is `hero_protocol::cron`'s;
//! listing, pausing and removing are the operator's (`hero_admin`), firing the ticks the
//! broker's.

pub use hero_protocol::cron::{CronJob, JobTemplate, Missed, Schedule};
use hero_protocol::Result;

use crate::client::Client;

impl Client {
    /// Adds (or replaces) a recurring job. Its first tick is the first after the next broker
    /// pass; a replaced one keeps its next tick. The ticks are fired by `hero broker` (the
    /// schedule is croner's, in Rust): with no live broker in the namespace this says so once,
    /// as a WARN naming the Redis and its db, since nothing would fire them.
    pub async fn cron_add(&self, job: &CronJob) -> Result<()> {
        hero_protocol::cron::store(self.redis(), self.keys(), job).await?;
        let fleet = hero_protocol::fleet::Fleet::read(self.redis(), self.keys()).await?;
        if !fleet
            .members
            .iter()
            .any(|m| m.role == hero_protocol::fleet::Role::Broker)
        {
            tracing::warn!(
                name = %job.name,
                namespace = %self.keys().prefix(),
                redis = %hero_protocol::conn::shown_url(&self.redis().url()),
                "recurring job stored, but no `hero broker` runs in this namespace (this Redis and \
                 db): its ticks fire only while one does. Start `hero broker` with the same URL, \
                 db and namespace"
            );
        }
        Ok(())
    }
}
