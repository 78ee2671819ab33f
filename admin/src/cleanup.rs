//! Failed-job tooling and a queue's cleanup, what BullMQ users reach for (`job.retry()`,
//! `queue.clean`, `queue.drain`, `queue.obliterate`, `queue.isPaused`): each through the server
//! functions every language calls (`hero_requeue`, `hero_clean`, `hero_drain`), a bounded step
//! a call, over every shard of the namespace.

use std::time::Duration;

use hero_protocol::function::{self, Cleaned, Drained};
use hero_protocol::policy::queue_name;
use hero_protocol::{Error, JobId, Result, Status};

use crate::Admin;

/// The jobs one `hero_clean` or `hero_drain` call deletes at most: a call stays a few
/// milliseconds of Redis.
const STEP: usize = 500;

impl Admin {
    /// Every shard, this one first.
    fn all_shards(&self) -> impl Iterator<Item = &Admin> {
        std::iter::once(self).chain(self.others.iter().map(|(_, a)| a))
    }

    /// Runs a failed job (`error`, its attempts spent, timed out, or dead-lettered) again with
    /// a fresh retry budget, in its own queue (BullMQ's `job.retry()`); any other status is
    /// refused, naming it.
    pub async fn retry(&self, id: &JobId) -> Result<()> {
        let holder = self.holder(id).await?;
        let status: Option<String> = holder
            .redis()
            .query(redis::cmd("HGET").arg(holder.keys().job(id)).arg("status"))
            .await?;
        match status.as_deref() {
            None => Err(Error::JobNotFound(id.to_string())),
            Some(s) if s == Status::Error.as_str() => {
                self.requeue(id, None).await?;
                Ok(())
            }
            Some(s) => Err(Error::InvalidInput(format!(
                "job {id} is {s}, not failed: only a failed job is retried (requeue moves any job)"
            ))),
        }
    }

    /// Deletes up to `limit` jobs of `queue` (`None`: every queue) that ended with `status`
    /// (`Finished`, `Error`; `None`: either) at least `grace` ago, oldest first (BullMQ's
    /// `queue.clean(grace, limit, 'completed' | 'failed')`); answers their ids.
    pub async fn clean(
        &self,
        queue: Option<&str>,
        grace: Duration,
        status: Option<Status>,
        limit: usize,
    ) -> Result<Vec<String>> {
        let name = queue.map(queue_name).transpose()?.unwrap_or_default();
        let status = match status {
            None => "",
            Some(Status::Finished) => "finished",
            Some(Status::Error) => "error",
            Some(other) => {
                return Err(Error::InvalidInput(format!(
                    "clean takes finished or error jobs, not {}: drain deletes waiting ones",
                    other.as_str()
                )))
            }
        };
        let mut out = Vec::new();
        for shard in self.all_shards() {
            let mut cursor = String::new();
            while out.len() < limit {
                let call = function::clean(
                    shard.keys(),
                    grace,
                    status,
                    &name,
                    (limit - out.len()).min(STEP),
                    &cursor,
                );
                let c = Cleaned::parse(&shard.redis().query::<redis::Value>(&call).await?)?;
                out.extend(c.ids);
                match c.next {
                    Some(n) => cursor = n,
                    None => break,
                }
            }
        }
        Ok(out)
    }

    /// The ids of up to `limit` jobs of `queue` (`None`: every queue) in `state` (one of
    /// [`function::LIST_STATES`]: `finished` and `error` newest end first, `delayed` soonest
    /// first, `waiting`, `running`), shard after shard: `hero_list`, the listing Python's
    /// `get_jobs` and Node's `getJobs` call, so each language answers the same jobs. Each call
    /// reads at most 1,000 candidates; this reads on until it holds `limit` or the listing ends.
    pub async fn jobs_in(
        &self,
        queue: Option<&str>,
        state: &str,
        limit: usize,
    ) -> Result<Vec<String>> {
        if !function::LIST_STATES.contains(&state) {
            return Err(Error::InvalidInput(format!(
                "no job state {state:?}: give one of {}",
                function::LIST_STATES.join(", ")
            )));
        }
        let name = queue.map(queue_name).transpose()?.unwrap_or_default();
        let mut out = Vec::new();
        for shard in self.all_shards() {
            let mut cursor = String::new();
            while out.len() < limit {
                let call = function::list(
                    shard.keys(),
                    state,
                    &name,
                    &cursor,
                    (limit - out.len()).min(1000),
                );
                let page =
                    function::Listed::parse(&shard.redis().query::<redis::Value>(&call).await?)?;
                out.extend(page.ids);
                match page.next {
                    Some(n) => cursor = n,
                    None => break,
                }
            }
        }
        Ok(out)
    }

    /// Deletes every waiting job of `queue` (and its delayed ones when `delayed`), leaving the
    /// running ones (BullMQ's `queue.drain(delayed)`); answers how many it deleted.
    pub async fn drain(&self, queue: &str, delayed: bool) -> Result<u64> {
        let name = queue_name(queue)?;
        let mut deleted = 0;
        for shard in self.all_shards() {
            deleted += shard.drain_steps(&name, delayed, false).await?.0;
        }
        Ok(deleted)
    }

    /// Removes `queue` whole (BullMQ's `queue.obliterate()`): paused first so no worker takes
    /// more, its waiting and delayed jobs deleted, its ended jobs deleted, then its streams, its
    /// names and its policy. Refused while jobs of it run (nothing is deleted then): stop them
    /// (`hero stop`) or wait for their end. Answers how many jobs it deleted.
    pub async fn obliterate(&self, queue: &str) -> Result<u64> {
        let name = queue_name(queue)?;
        let running = self.job_counts(&name).await?.running;
        if running > 0 {
            return Err(Error::InvalidInput(format!(
                "{running} jobs of {name} are running: stop them (hero stop <id>) or wait for \
                 their end, then obliterate"
            )));
        }
        self.pause(&name).await?;
        let mut deleted = 0;
        for shard in self.all_shards() {
            deleted += shard.drain_steps(&name, true, false).await?.0;
        }
        loop {
            let ids = self
                .clean(Some(&name), Duration::ZERO, None, 10 * STEP)
                .await?;
            deleted += ids.len() as u64;
            if ids.len() < 10 * STEP {
                break;
            }
        }
        for shard in self.all_shards() {
            let (n, running) = shard.drain_steps(&name, true, true).await?;
            deleted += n;
            if running > 0 {
                return Err(Error::InvalidInput(format!(
                    "{running} jobs of {name} started meanwhile: obliterate again once they end"
                )));
            }
        }
        self.clear_policy(&name).await?;
        Ok(deleted)
    }

    /// `hero_drain` steps on this shard until it says there is no more: (deleted, running).
    async fn drain_steps(&self, name: &str, delayed: bool, remove: bool) -> Result<(u64, u64)> {
        let mut cursor = "0".to_string();
        let mut deleted = 0;
        loop {
            let call = function::drain(self.keys(), name, delayed, STEP, remove, &cursor);
            let d = Drained::parse(&self.redis().query::<redis::Value>(&call).await?)?;
            deleted += d.deleted;
            if !d.more {
                return Ok((deleted, d.running));
            }
            cursor = d.cursor;
        }
    }

    /// Whether `queue` is paused (BullMQ's `queue.isPaused()`): by the name itself, as `hero
    /// pause` paused it.
    pub async fn is_paused(&self, queue: &str) -> Result<bool> {
        let name = queue_name(queue)?;
        let n: u64 = self
            .redis()
            .query(
                redis::cmd("SISMEMBER")
                    .arg(self.keys().paused_names())
                    .arg(&name),
            )
            .await?;
        Ok(n == 1)
    }
}
