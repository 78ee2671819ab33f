//! Retiring drained shards. After `hero shards set` lowers K, the shards beyond it take no new
//! jobs but are still served (workers fetch there, every duty runs there) until they are empty.
//! A drained shard is taken out of the map once it has drained for at least
//! `shard::DRAIN_GRACE` (so no producer still routes to it from a map read before the change)
//! and holds no job that is queued, running, delayed or waiting on prerequisites. A retired
//! shard keeps its tag: the duties go on trimming its ended jobs, readers look there.
//!
//! It spans several Redis instances (the map on shard 0, the emptiness of each draining
//! shard), so no one server function can do it: every Rust worker with duties on, and every
//! broker, runs [`Client::retire_drained_shards`] each `shard::REFRESH`. With nothing draining
//! it reads only the map this client already holds (no call to Redis); the retirement itself
//! is a compare-and-set in `shard::retire`, so many processes at it retire a shard once.
//! `hero shards retire` does one pass by hand (a deployment of Python or Node workers alone).

use hero_protocol::shard;

use crate::client::Client;

impl Client {
    /// Forgets the earlier values of K older than the retention time, and retires every
    /// drained shard that is empty; answers how many it retired, or `None` when there was
    /// nothing to ask Redis (so this pass says nothing of whether Redis is reachable).
    pub async fn retire_drained_shards(
        &self,
        retention: std::time::Duration,
    ) -> hero_protocol::Result<Option<u64>> {
        let client = self;
        let map = client.shard_map();
        let now = hero_protocol::clock::now_ms();
        let cutoff = now.saturating_sub(retention.as_millis() as u64);
        let stale_history = map.history.iter().any(|&(_, at)| at < cutoff);
        if stale_history {
            let forgot = shard::forget_before(client.redis(), client.keys(), cutoff).await?;
            if forgot > 0 {
                tracing::info!(forgot, "forgot shard counts older than the retention time");
                client.refresh_shards().await?;
            }
        }
        if map.draining.is_empty() {
            return Ok(stale_history.then_some(0));
        }
        let grace = shard::DRAIN_GRACE.as_millis() as u64;
        let members = client.all_shard_clients();
        let mut retired = 0;
        for (&n, &since) in &map.draining {
            if now < since.saturating_add(grace) {
                continue;
            }
            let Some((_, member)) = members.iter().find(|(m, _)| *m == n) else {
                continue;
            };
            if !member.holds_no_jobs().await? {
                continue;
            }
            if shard::retire(client.redis(), client.keys(), n, since).await? {
                tracing::info!(shard = n, "retired a drained shard: it is empty");
                retired += 1;
            }
        }
        if retired > 0 {
            client.refresh_shards().await?;
        }
        Ok(Some(retired))
    }

    /// No job of this client's shard (or unsharded namespace) is delayed, waiting on prerequisites, queued or running: every work
    /// stream (registered or paused) has no entry undelivered (lag) or unacknowledged (pending).
    pub async fn holds_no_jobs(&self) -> hero_protocol::Result<bool> {
        let redis = self.redis();
        let keys = self.keys();
        let delayed: u64 = redis.query(redis::cmd("ZCARD").arg(keys.delayed())).await?;
        let waiting: u64 = redis
            .query(redis::cmd("SCARD").arg(keys.waiting_on()))
            .await?;
        if delayed > 0 || waiting > 0 {
            return Ok(false);
        }
        let mut streams: Vec<String> = redis
            .query(redis::cmd("SMEMBERS").arg(keys.queues()))
            .await?;
        let paused: Vec<String> = redis
            .query(redis::cmd("SMEMBERS").arg(keys.paused_queues()))
            .await?;
        streams.extend(paused);
        for stream in streams {
            let groups: redis::Value = redis
                .query(redis::cmd("XINFO").arg("GROUPS").arg(&stream))
                .await
                .unwrap_or(redis::Value::Nil);
            if !groups_idle(&groups) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Every consumer group of an XINFO GROUPS reply has nothing pending and no lag.
fn groups_idle(groups: &redis::Value) -> bool {
    let redis::Value::Array(list) = groups else {
        return true;
    };
    list.iter().all(|g| {
        let redis::Value::Array(items) = g else {
            return false;
        };
        let num = |name: &str| {
            items.chunks(2).find_map(|kv| match kv {
                [redis::Value::BulkString(k), redis::Value::Int(v)] if k == name.as_bytes() => {
                    Some(*v)
                }
                _ => None,
            })
        };
        num("pending") == Some(0) && num("lag") == Some(0)
    })
}
