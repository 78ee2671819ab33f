//! A fair queue's limit keys (`gate.lua`): how many keys have jobs waiting in its gates, the
//! keys with the most, and the keys an operator paused, for `hero queues --keys`, the API and
//! the dashboard's queue page. Bounded by the page it answers, however many keys a queue has:
//! the keys are counted by each gate's ring length (one LLEN a stream), and the jobs waiting are
//! read for at most [`KEY_PAGE`] keys a call (one LLEN a key, pipelined), from a cursor into the
//! rings; nothing on a job's path reads it.

use std::collections::HashMap;

use super::Inspector;
use hero_protocol::error::Result;

/// Keys read per round trip.
const PAGE: usize = 1000;

/// The keys whose waiting jobs one [`Inspector::fair_keys`] call reads at most.
pub const KEY_PAGE: usize = 1000;

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
    /// Limit keys with jobs waiting in a gate, paused ones included: exact when one page read
    /// them all; past that, the rings' lengths (a key in the gates of two streams or shards
    /// counts in each).
    pub keys: u64,
    /// The keys with the most jobs waiting among those this call read, most first (ties by
    /// key).
    pub top: Vec<KeyWaiting>,
    /// How many keys this call read (at most [`KEY_PAGE`]), and where the next call goes on
    /// (`None`: it read to the last key).
    pub read: u64,
    pub next: Option<u64>,
    /// The keys paused by `hero pause <queue> --key` under or over this queue, as `<queue
    /// name>|<key>`.
    pub held: Vec<String>,
}

impl FairKeys {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "keys": self.keys,
            "top": self.top.iter().map(|k| serde_json::json!({"key": k.key, "waiting": k.waiting})).collect::<Vec<_>>(),
            "read": self.read,
            "next": self.next,
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
    /// The limit keys of `queue` with jobs waiting in its fair gates (counted, not read), and
    /// the `top` with the most among the [`KEY_PAGE`] keys read from `from` (0 at first, then a
    /// page's `next`), keys in ring order, shard after shard, the paused keys last: `hero_keys`
    /// on each shard, the reading Python's and Node's key views share.
    pub async fn fair_keys(&self, queue: &str, top: usize, from: u64) -> Result<FairKeys> {
        let mut by_key: HashMap<String, u64> = HashMap::new();
        let mut held = Vec::new();
        let (mut total, mut at, mut read) = (0u64, 0u64, 0u64);
        for (_, shard) in self.shards() {
            let room = (KEY_PAGE as u64).saturating_sub(read) as usize;
            let call = hero_protocol::function::fair_keys(
                &shard.keys,
                queue,
                from.saturating_sub(at),
                room,
            );
            let page = hero_protocol::function::KeysPage::parse(
                &shard.redis.query::<redis::Value>(&call).await?,
            )?;
            total += page.total;
            at += page.total;
            read += page.read;
            held.extend(page.held);
            for (key, n) in page.waiting {
                *by_key.entry(key).or_default() += n;
            }
        }
        held.sort();
        held.dedup();
        let mut keys: Vec<KeyWaiting> = by_key
            .into_iter()
            .map(|(key, waiting)| KeyWaiting { key, waiting })
            .collect();
        keys.sort_by(|a, b| b.waiting.cmp(&a.waiting).then_with(|| a.key.cmp(&b.key)));
        let distinct = keys.len() as u64;
        keys.truncate(top);
        let end = from + read;
        Ok(FairKeys {
            // read whole, the keys are counted exactly (a key in two streams or shards once);
            // past a page, by the rings' lengths (a key in two of them counts in each)
            keys: if from == 0 && end >= total {
                distinct
            } else {
                total
            },
            top: keys,
            read,
            next: (end < total).then_some(end),
            held,
        })
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
