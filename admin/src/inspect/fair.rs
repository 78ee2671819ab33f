//! A fair queue's limit keys (`gate.lua`): how many keys have jobs waiting in its gates, the
//! keys with the most, and the keys an operator paused, for `hero queues --keys`, the API and
//! the dashboard's queue page. An operator's question: each gate's ring is read whole with one
//! LLEN per key, pipelined 1,000 at a time, so it costs O(keys with work); nothing on a job's
//! path reads it.

use std::collections::HashMap;

use super::Inspector;
use hero_protocol::error::Result;
use hero_protocol::reply;

/// Keys read per round trip.
const PAGE: usize = 1000;

/// One limit key and its jobs waiting in the gates of the queue asked about ('' for the jobs
/// without a key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyWaiting {
    pub key: String,
    pub waiting: u64,
}

/// The keys of one queue, summed over its work streams (every priority, group and instance
/// under the name) and shards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FairKeys {
    /// Distinct limit keys with jobs waiting in a gate, paused ones included.
    pub keys: u64,
    /// The keys with the most jobs waiting, most first (ties by key).
    pub top: Vec<KeyWaiting>,
    /// The keys paused by `hero pause <queue> --key` under or over this queue, as `<queue
    /// name>|<key>`.
    pub held: Vec<String>,
}

impl FairKeys {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "keys": self.keys,
            "top": self.top.iter().map(|k| serde_json::json!({"key": k.key, "waiting": k.waiting})).collect::<Vec<_>>(),
            "held": self.held,
        })
    }
}

/// Whether the work stream of queue name `stream_name` (`Keyspace::queue_name`) is under
/// `queue` (`<type>[/<group>[/<instance>]]`).
fn under(stream_name: &str, queue: &str) -> bool {
    let path = stream_name.split(" prio ").next().unwrap_or(stream_name);
    path == queue || path.strip_prefix(queue).is_some_and(|r| r.starts_with('/'))
}

impl Inspector {
    /// The limit keys of `queue` with jobs waiting in its fair gates, and the `top` with the
    /// most.
    pub async fn fair_keys(&self, queue: &str, top: usize) -> Result<FairKeys> {
        let mut by_key: HashMap<String, u64> = HashMap::new();
        let mut held = Vec::new();
        for (_, shard) in self.shards() {
            let members: Vec<String> = shard
                .redis
                .query(redis::cmd("SMEMBERS").arg(shard.keys.held()))
                .await?;
            let here: Vec<String> = members
                .into_iter()
                .filter(|m| {
                    m.split_once('|')
                        .is_some_and(|(q, _)| under(q, queue) || under(queue, q))
                })
                .collect();
            let held_keys: Vec<String> = here
                .iter()
                .filter_map(|m| m.split_once('|').map(|(_, k)| k.to_string()))
                .collect();
            shard.fair_keys_here(queue, &held_keys, &mut by_key).await?;
            held.extend(here);
        }
        held.sort();
        held.dedup();
        let mut keys: Vec<KeyWaiting> = by_key
            .into_iter()
            .map(|(key, waiting)| KeyWaiting { key, waiting })
            .collect();
        keys.sort_by(|a, b| b.waiting.cmp(&a.waiting).then_with(|| a.key.cmp(&b.key)));
        let n = keys.len() as u64;
        keys.truncate(top);
        Ok(FairKeys {
            keys: n,
            top: keys,
            held,
        })
    }

    /// Adds this shard's keys of `queue` with their waiting jobs to `by_key`: those in each
    /// gate's ring, and the `held` keys (out of the rings while paused).
    async fn fair_keys_here(
        &self,
        queue: &str,
        held: &[String],
        by_key: &mut HashMap<String, u64>,
    ) -> Result<()> {
        for stream in self.queue_streams().await? {
            if !under(&self.keys.queue_name(&stream), queue) {
                continue;
            }
            let mut ring: Vec<String> = self
                .redis
                .query(
                    redis::cmd("LRANGE")
                        .arg(self.keys.fair_ring(&stream))
                        .arg(0)
                        .arg(-1),
                )
                .await?;
            ring.extend(held.iter().cloned());
            let mut here: HashMap<String, u64> = HashMap::new();
            for page in ring.chunks(PAGE) {
                let mut pipe = redis::pipe();
                for key in page {
                    pipe.cmd("LLEN").arg(self.keys.fair_lane(&stream, key));
                }
                let replies = self.redis.pipeline(&pipe).await?;
                for (key, n) in page.iter().zip(replies) {
                    let n = reply::int(&n?)?.max(0) as u64;
                    // a key twice in one ring is one lane, counted once; a held key's lane
                    // may be empty here
                    if n > 0 {
                        here.insert(key.clone(), n);
                    }
                }
            }
            for (key, n) in here {
                *by_key.entry(key).or_default() += n;
            }
        }
        Ok(())
    }
}

/// Where a listing of a gate's jobs goes on: the ring's index of the key, and the index in its
/// lane (`<key index>:<lane index>` in cursors).
pub(super) type GateCursor = (usize, usize);

/// Parses `<key index>:<lane index>`.
pub(super) fn gate_cursor(s: &str) -> Option<GateCursor> {
    let (k, l) = s.split_once(':')?;
    Some((k.parse().ok()?, l.parse().ok()?))
}

impl Inspector {
    /// Up to `limit` ids of the jobs waiting in fair stream `stream`'s gate, key after key in
    /// ring order from `from` and then the paused keys', and where to go on (None when the gate
    /// was read to its end). The ring turns as workers take jobs, so a listing over several
    /// pages is a best effort (as a stream's listing is while it is trimmed).
    pub(super) async fn gate_page(
        &self,
        stream: &str,
        from: GateCursor,
        limit: usize,
    ) -> Result<(Vec<String>, Option<GateCursor>)> {
        let (mut k, mut l) = from;
        let mut ids = Vec::new();
        let ring = self.keys.fair_ring(stream);
        let ring_len: usize = self.redis.query(redis::cmd("LLEN").arg(&ring)).await?;
        let held = self.held_keys_of(stream).await?;
        loop {
            let keys: Vec<String> = if k < ring_len {
                self.redis
                    .query(redis::cmd("LRANGE").arg(&ring).arg(k).arg(k + PAGE - 1))
                    .await?
            } else {
                held.iter().skip(k - ring_len).take(PAGE).cloned().collect()
            };
            if keys.is_empty() {
                return Ok((ids, None));
            }
            for key in &keys {
                let want = limit - ids.len();
                let items: Vec<String> = self
                    .redis
                    .query(
                        redis::cmd("LRANGE")
                            .arg(self.keys.fair_lane(stream, key))
                            .arg(l)
                            .arg(l + want - 1),
                    )
                    .await?;
                let got = items.len();
                ids.extend(
                    items
                        .into_iter()
                        .filter_map(|i| i.split(' ').next().map(str::to_string)),
                );
                if ids.len() >= limit {
                    return Ok((ids, Some((k, l + got))));
                }
                k += 1;
                l = 0;
            }
        }
    }

    /// The keys paused (`hero pause --key`) under a name that covers `stream`.
    async fn held_keys_of(&self, stream: &str) -> Result<Vec<String>> {
        let members: Vec<String> = self
            .redis
            .query(redis::cmd("SMEMBERS").arg(self.keys.held()))
            .await?;
        let name = self.keys.queue_name(stream);
        let mut keys: Vec<String> = members
            .iter()
            .filter_map(|m| m.split_once('|'))
            .filter(|(q, _)| under(&name, q))
            .map(|(_, k)| k.to_string())
            .collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::under;

    #[test]
    fn a_name_covers_the_streams_under_it() {
        assert!(under("osis", "osis"));
        assert!(under("osis prio 2", "osis"));
        assert!(under("osis/io/a", "osis"));
        assert!(under("osis/io", "osis/io"));
        assert!(!under("osis2", "osis"));
        assert!(!under("osis", "osis/io"));
    }
}
