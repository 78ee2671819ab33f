//! The operator's controls of a queue as a whole: pause and resume (`hero_pause`), and the
//! per-queue policy (set, clear, read). A queue is named as operators type it,
//! `<type>[/<group>[/<instance>]]`, and a control covers every stream under the name at every
//! priority.

use hero_protocol::function;
use hero_protocol::policy::{decode_policy, queue_name, read_policies, Policies, Policy};
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

    /// Pauses one limit key of a fair queue: its jobs wait in the gate (`gate.lua`) while the
    /// queue's other keys flow; lasts until [`Admin::resume_key`]. Refused (by `hero_pause`) for
    /// a queue that is not fair: only the gate can hold a key's jobs back. Answers in how many work streams
    /// the key had jobs.
    pub async fn pause_key(&self, queue: &str, key: &str) -> Result<u64> {
        self.key_call(queue, key, true).await
    }

    /// Resumes a paused limit key: it gets its turns again where it has jobs.
    pub async fn resume_key(&self, queue: &str, key: &str) -> Result<u64> {
        self.key_call(queue, key, false).await
    }

    async fn key_call(&self, queue: &str, key: &str, pause: bool) -> Result<u64> {
        let name = queue_name(queue)?;
        hero_protocol::fleet::Fleet::read(self.redis(), self.keys())
            .await?
            .require(
                &format!("pausing a key of queue {name}"),
                &[hero_protocol::fleet::Feature::Fair],
            )?;
        let mut covered = 0;
        for shard in std::iter::once(self).chain(self.others.iter().map(|(_, a)| a)) {
            let n: u64 = shard
                .redis()
                .query(&function::pause_key(shard.keys(), &name, key, pause))
                .await?;
            covered += n;
        }
        Ok(covered)
    }

    async fn pause_call(&self, queue: &str, pause: bool) -> Result<u64> {
        let name = queue_name(queue)?;
        let mut covered = 0;
        // every shard of a sharded namespace: shard 0 first, so its count answers
        for shard in std::iter::once(self).chain(self.others.iter().map(|(_, a)| a)) {
            let n: u64 = shard
                .redis()
                .query(&function::pause(shard.keys(), &name, pause))
                .await?;
            covered += n;
        }
        Ok(covered)
    }

    /// Copies shard 0's controls (paused queues, policies split by shard) to every other
    /// shard: after `hero shards set` added shards, which start with none.
    pub async fn spread_controls(&self) -> Result<()> {
        let paused = self.inspector().paused().await?;
        for (_, shard) in &self.others {
            for name in &paused {
                shard
                    .redis()
                    .query::<u64>(&function::pause(shard.keys(), name, true))
                    .await?;
            }
        }
        let held: Vec<String> = self
            .redis()
            .query(redis::cmd("SMEMBERS").arg(self.keys().held()))
            .await?;
        for (_, shard) in &self.others {
            for member in &held {
                if let Some((name, key)) = member.rsplit_once('|') {
                    shard
                        .redis()
                        .query::<u64>(&function::pause_key(shard.keys(), name, key, true))
                        .await?;
                }
            }
        }
        for (queue, policy) in self.policies().await?.iter() {
            let json = serde_json::to_string(policy)
                .map_err(|e| hero_protocol::reply::unexpected(e.to_string()))?;
            self.redis()
                .query::<()>(
                    redis::cmd("HSET")
                        .arg(self.keys().whole_policies())
                        .arg(queue)
                        .arg(json),
                )
                .await?;
            self.store_split(queue, policy).await?;
        }
        Ok(())
    }

    /// Stores `policy` of `queue` on every shard, each with its share of the queue's
    /// concurrency and rate (`split`).
    async fn store_split(&self, queue: &str, policy: &Policy) -> Result<()> {
        if self.others.is_empty() {
            return Ok(());
        }
        let all = std::iter::once((0u16, self)).chain(self.others.iter().map(|(n, a)| (*n, a)));
        for (n, shard) in all {
            shard.store(queue, &split(policy, n, self.k)).await?;
        }
        Ok(())
    }

    /// Stores `policy` as `queue`'s on this shard (`hero_policy`: checked, and the policies
    /// the functions apply counted again); an empty one clears it.
    async fn store(&self, queue: &str, policy: &Policy) -> Result<()> {
        let json = if policy.is_empty() {
            String::new()
        } else {
            serde_json::to_string(policy)
                .map_err(|e| hero_protocol::reply::unexpected(e.to_string()))?
        };
        self.redis()
            .query::<String>(&function::set_policy(self.keys(), queue, &json))
            .await?;
        Ok(())
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
        if policy.fair == Some(true) {
            // a worker before 30 would never release the gate's jobs: refused while one is live
            hero_protocol::fleet::Fleet::read(self.redis(), self.keys())
                .await?
                .require(
                    &format!("queue {name}"),
                    &[hero_protocol::fleet::Feature::Fair],
                )?;
        }
        if policy.fair == Some(false) {
            return Err(Error::InvalidInput(
                "fair is set with true; to serve the queue first in, first out again, clear its policy (hero queue clear) and set the rest again".into(),
            ));
        }
        let merged = self.policy(&name).await?.merged(policy);
        let json = serde_json::to_string(&merged)
            .map_err(|e| hero_protocol::reply::unexpected(e.to_string()))?;
        if self.others.is_empty() {
            self.store(&name, &merged).await?;
        } else {
            self.redis()
                .query::<()>(
                    redis::cmd("HSET")
                        .arg(self.keys().whole_policies())
                        .arg(&name)
                        .arg(json),
                )
                .await?;
        }
        self.store_split(&name, &merged).await?;
        Ok(merged)
    }

    /// Removes `queue`'s policy: its jobs get the defaults again.
    pub async fn clear_policy(&self, queue: &str) -> Result<bool> {
        let name = queue_name(queue)?;
        let n: u64 = self
            .redis()
            .query(redis::cmd("HEXISTS").arg(self.keys().policy()).arg(&name))
            .await?;
        self.store(&name, &Policy::default()).await?;
        let _: u64 = self
            .redis()
            .query(
                redis::cmd("HDEL")
                    .arg(self.keys().whole_policies())
                    .arg(&name),
            )
            .await?;
        for (_, shard) in &self.others {
            shard.store(&name, &Policy::default()).await?;
        }
        Ok(n > 0)
    }

    /// The policy set for `queue` itself (empty when none).
    pub async fn policy(&self, queue: &str) -> Result<Policy> {
        let name = queue_name(queue)?;
        let whole: Option<String> = if self.others.is_empty() {
            None
        } else {
            self.redis()
                .query(
                    redis::cmd("HGET")
                        .arg(self.keys().whole_policies())
                        .arg(&name),
                )
                .await?
        };
        let raw: Option<String> = match whole {
            Some(w) => Some(w),
            None => {
                self.redis()
                    .query(redis::cmd("HGET").arg(self.keys().policy()).arg(&name))
                    .await?
            }
        };
        Ok(raw
            .map(|r| decode_policy(&name, &r))
            .transpose()?
            .unwrap_or_default())
    }

    /// Every queue's policy (one HGETALL).
    pub async fn policies(&self) -> Result<Policies> {
        if !self.others.is_empty() {
            let whole = hero_protocol::policy::read_policies_from(
                self.redis(),
                &self.keys().whole_policies(),
            )
            .await?;
            if !whole.is_empty() {
                return Ok(whole);
            }
        }
        read_policies(self.redis(), self.keys()).await
    }
}

/// Shard `n`'s share of a policy over `k` active shards. A concurrency limit or a queue rate
/// cannot be checked atomically with a claim on another slot, so each shard enforces its part:
/// `c / k`, the remainder to the first shards, and at least 1 (a shard with none would never
/// run its jobs). The bound: at most `max(c, k)` jobs of the queue run at once, and
/// `max(r, k)` start per window. A shard beyond `k` (draining) gets the share of 1.
/// Key rates need no split: jobs with one limit key share a shard (their key's home).
pub fn split(policy: &Policy, n: u16, k: u16) -> Policy {
    let k = u32::from(k.max(1));
    let n = u32::from(n);
    let share = |total: u32| {
        if n >= k {
            return 1;
        }
        (total / k + u32::from(n < total % k)).max(1)
    };
    let mut p = policy.clone();
    if let Some(c) = p.concurrency {
        p.concurrency = Some(share(c));
    }
    if let Some(r) = &mut p.rate {
        r.max = share(r.max);
    }
    p
}
