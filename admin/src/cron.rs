//! The operator's side of recurring jobs: list them with their state, pause or resume one,
//! remove one. Adding one is the producer's (`hero_client::Client::cron_add`); firing the ticks
//! is the broker's pass.

use hero_protocol::cron::{self, CronEntry};
use hero_protocol::{Error, Result};

use crate::Admin;

impl Admin {
    /// Removes a recurring job; false when there was none of that name.
    pub async fn cron_remove(&self, name: &str) -> Result<bool> {
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL").arg(self.keys().cron()).arg(name);
        pipe.cmd("HDEL")
            .arg(self.keys().cron_next())
            .arg(name)
            .arg(format!("{name}|fires"))
            .arg(format!("{name}|last"))
            .ignore();
        let r = self.redis().pipeline(&pipe).await?;
        let removed = r
            .into_iter()
            .next()
            .and_then(|v| v.ok())
            .and_then(|v| redis::from_redis_value::<i64>(v).ok())
            .unwrap_or(0);
        Ok(removed > 0)
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
        cron::store(self.redis(), self.keys(), &e.job).await
    }

    /// Every recurring job, sorted by name.
    pub async fn cron_list(&self) -> Result<Vec<CronEntry>> {
        cron::list(self.redis(), self.keys()).await
    }
}
