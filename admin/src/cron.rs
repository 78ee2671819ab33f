//! The operator's side of recurring jobs: list them with their state, pause or resume one,
//! remove one. Adding one is the producer's (`hero_client::Client::cron_add`); firing the ticks
//! is the duties' (`hero_duties`).

use hero_protocol::cron::{self, CronEntry};
use hero_protocol::{Error, Result};

use crate::Admin;

impl Admin {
    /// Removes a recurring job and its state; false when there was none of that name.
    pub async fn cron_remove(&self, name: &str) -> Result<bool> {
        cron::remove(self.redis(), self.keys(), name).await
    }

    /// Pauses (`paused` true) or resumes a recurring job; a resumed one goes on from its next
    /// tick after now (under its missed-tick policy). Errors when there is none of that name.
    pub async fn cron_pause(&self, name: &str, paused: bool) -> Result<()> {
        let mut all = self.cron_list().await?;
        let Some(mut e) = all.drain(..).find(|e| e.job.name == name) else {
            return Err(Error::InvalidInput(format!(
                "no recurring job named {name:?} (see hero cron list)"
            )));
        };
        e.job.paused = paused;
        cron::store(self.redis(), self.keys(), &e.job).await?;
        Ok(())
    }

    /// Every recurring job, sorted by name.
    pub async fn cron_list(&self) -> Result<Vec<CronEntry>> {
        cron::list(self.redis(), self.keys()).await
    }
}
