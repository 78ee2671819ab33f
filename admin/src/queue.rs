//! The operator's controls of a queue as a whole: pause and resume (`hero_pause`), and the
//! per-queue policy (set, clear, read). A queue is named as operators type it,
//! `<type>[/<group>[/<instance>]]`, and a control covers every stream under the name at every
//! priority.

use hero_protocol::function;
use hero_protocol::policy::{
    decode_policy, queue_name, read_policies, Policies, Policy, AGED_FIELD, LIMITED_FIELD,
    POLICED_FIELD, RATED_FIELD,
};
use hero_protocol::{Error, Result};

use crate::Admin;

impl Admin {
    /// Pauses a queue: within one fetch no worker takes a new job from it (running ones
    /// finish); submits still queue. Lasts until [`Admin::resume`], across restarts of every
    /// process. Answers how many work streams it covered now.
    pub async fn pause(&self, queue: &str) -> Result<u64> {
        self.pause_call(queue, true).await
    }

    /// Resumes a paused queue and wakes the workers waiting on it at once. A stream a broader
    /// or narrower name still pauses stays paused.
    pub async fn resume(&self, queue: &str) -> Result<u64> {
        self.pause_call(queue, false).await
    }

    async fn pause_call(&self, queue: &str, pause: bool) -> Result<u64> {
        let name = queue_name(queue)?;
        self.redis()
            .query(&function::pause(self.keys(), &name, pause))
            .await
    }
}

impl Admin {
    /// Sets the fields `policy` sets for `queue` (`<type>` or `<type>/<group>`), keeping the
    /// others; answers the queue's whole policy now. Workers and brokers see it within seconds.
    pub async fn set_policy(&self, queue: &str, policy: &Policy) -> Result<Policy> {
        let name = queue_name(queue)?;
        if name.matches('/').count() > 1 {
            return Err(Error::InvalidInput(format!(
                "queue {queue:?}: a policy is per type or type/group, not per instance"
            )));
        }
        if policy.aging_ms == Some(0) {
            return Err(Error::InvalidInput(
                "aging of 0 would serve every job at the highest level: give a period, e.g. 30s"
                    .into(),
            ));
        }
        if policy.concurrency == Some(0) {
            return Err(Error::InvalidInput(
                "concurrency 0 would run nothing: pause the queue instead (hero pause)".into(),
            ));
        }
        let merged = self.policy(&name).await?.merged(policy);
        let json = serde_json::to_string(&merged)
            .map_err(|e| hero_protocol::reply::unexpected(e.to_string()))?;
        self.redis()
            .query::<()>(
                redis::cmd("HSET")
                    .arg(self.keys().policy())
                    .arg(&name)
                    .arg(json),
            )
            .await?;
        self.publish_limited().await?;
        Ok(merged)
    }

    /// Counts the queues with a concurrency limit into the config hash's `limited`: while it is
    /// above 0, a fetch that passes no limits (a worker of another language or an older one)
    /// reads them from the policies itself (`limits_from_policies` in `fetch.lua`), so a limit
    /// holds whatever the worker.
    async fn publish_limited(&self) -> Result<()> {
        let policies = self.policies().await?;
        let count = |f: fn(&Policy) -> bool| policies.iter().filter(|(_, p)| f(p)).count();
        self.redis()
            .query::<()>(
                redis::cmd("HSET")
                    .arg(self.keys().config())
                    .arg(LIMITED_FIELD)
                    .arg(count(|p| p.concurrency.is_some()))
                    .arg(RATED_FIELD)
                    .arg(count(|p| p.rate.is_some() || p.key_rate.is_some()))
                    .arg(POLICED_FIELD)
                    .arg(count(|p| {
                        p.retries.is_some() || p.backoff.is_some() || p.retention_ms.is_some()
                    }))
                    .arg(AGED_FIELD)
                    .arg(count(|p| p.aging_ms.is_some())),
            )
            .await
    }

    /// Removes `queue`'s policy: its jobs get the defaults again.
    pub async fn clear_policy(&self, queue: &str) -> Result<bool> {
        let name = queue_name(queue)?;
        let n: u64 = self
            .redis()
            .query(redis::cmd("HDEL").arg(self.keys().policy()).arg(&name))
            .await?;
        self.publish_limited().await?;
        Ok(n > 0)
    }

    /// The policy set for `queue` itself (empty when none).
    pub async fn policy(&self, queue: &str) -> Result<Policy> {
        let name = queue_name(queue)?;
        let raw: Option<String> = self
            .redis()
            .query(redis::cmd("HGET").arg(self.keys().policy()).arg(&name))
            .await?;
        Ok(raw
            .map(|r| decode_policy(&name, &r))
            .transpose()?
            .unwrap_or_default())
    }

    /// Every queue's policy (one HGETALL).
    pub async fn policies(&self) -> Result<Policies> {
        read_policies(self.redis(), self.keys()).await
    }
}
