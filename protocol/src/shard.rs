//! Sharded namespaces: one namespace spread over K shards, each its own hash tag (so its own
//! slot, and in a cluster, its own master), described by the shard map `<ns>:meta:shards`
//! (a hash on shard 0, the namespace's own tag; `Keyspace::shard_map`).
//!
//! The map holds:
//! - `k`: the active shards, `0..k`, where new jobs go;
//! - `tag:<n>`: shard `n`'s hash tag (shard 0's is the namespace itself, never written), chosen
//!   by [`tag_for`] so that the shards' slots spread over the slot range and so over the masters;
//! - `drain:<n>`: a shard beyond `k` still served (it holds jobs) since that time (ms); the broker
//!   retires it once it is empty ([`retire`]);
//! - `history`: the earlier values of `k` and when each ended (`<k>@<ms>`, oldest first), and
//!   `epoch`, bumped by every change. Brokers forget an entry once it is older than their
//!   retention time ([`forget_before`]): by then the state made under it has ended.
//!
//! Where a job goes: a key (route, batch, uniqueness, limit key, a chosen id) has a home,
//! `jump(hash(key), k)` (jump consistent hash: growing K moves only the keys that go to the new
//! shards, and shrinking back moves only those). Resharding never moves a key's home under it:
//! while the map's history holds a K under which the key's home was elsewhere, that old home is
//! asked first whether it holds the key's state (an open batch, a held uniqueness key, a job with
//! that id) and, if so, stays the home ([`ShardMap::older_homes`]). A generated id names its
//! shard (`<uuid>.s<n>`, [`sharded_id`]). With no map (K = 1) nothing of this runs: the
//! namespace is its shard 0, as before shards existed.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::conn::Redis;
use crate::error::{Error, Result};
use crate::keys::Keyspace;
use crate::name::JobId;

/// The most shards a namespace may have.
pub const MAX_SHARDS: u16 = 64;

/// How often a long-running process (client, worker, broker) reads the map again. A shard is
/// drained at least [`DRAIN_GRACE`] (several of these) before it may be retired, so no process
/// still routes to it by then.
pub const REFRESH: Duration = Duration::from_secs(2);

/// How long a shard stays in the map after it stopped taking new jobs, at least.
pub const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// The shard map of one namespace (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMap {
    pub epoch: u64,
    pub k: u16,
    /// Every shard's hash tag, by shard number; `tags[0]` is the namespace.
    tags: BTreeMap<u16, String>,
    /// Shards beyond `k` still served, and since when (ms) they take no new jobs.
    pub draining: BTreeMap<u16, u64>,
    /// Earlier values of `k`, oldest first, each with when it ended (ms).
    pub history: Vec<(u16, u64)>,
}

impl ShardMap {
    /// An unsharded namespace: shard 0 only, its tag the namespace.
    pub fn single(namespace_tag: &str) -> ShardMap {
        ShardMap {
            epoch: 0,
            k: 1,
            tags: BTreeMap::from([(0, namespace_tag.to_string())]),
            draining: BTreeMap::new(),
            history: Vec::new(),
        }
    }

    /// More than one shard is served (K above 1, or a shard still draining).
    pub fn is_sharded(&self) -> bool {
        self.k > 1 || !self.draining.is_empty()
    }

    /// The shards workers and brokers serve: the active ones, then the draining ones.
    pub fn served(&self) -> Vec<u16> {
        (0..self.k).chain(self.draining.keys().copied()).collect()
    }

    /// Every shard that ever had a tag: the served ones and the retired ones, which may still
    /// hold ended jobs until their retention time (brokers keep trimming them; readers look
    /// there for a job found nowhere else).
    pub fn tagged(&self) -> Vec<u16> {
        self.tags.keys().copied().collect()
    }

    /// Shard `n`'s hash tag (shard 0's is the namespace).
    pub fn tag(&self, n: u16) -> Option<&str> {
        self.tags.get(&n).map(String::as_str)
    }

    /// Shard `n`'s keyspace, beside `base` (shard 0's).
    pub fn keyspace(&self, base: &Keyspace, n: u16) -> Option<Keyspace> {
        if n == 0 {
            return Some(base.clone());
        }
        self.tag(n).map(|t| base.with_tag(t))
    }

    /// A key's home under the current K.
    pub fn home(&self, key: &str) -> u16 {
        jump(hash(key), self.k)
    }

    /// The homes `key` had under earlier values of K that differ from its home now and are
    /// still served, newest first: where its state may still live.
    pub fn older_homes(&self, key: &str) -> Vec<u16> {
        let now = self.home(key);
        let served = self.served();
        let mut out = Vec::new();
        for &(k, _) in self.history.iter().rev() {
            let h = jump(hash(key), k);
            if h != now && !out.contains(&h) && served.contains(&h) {
                out.push(h);
            }
        }
        out
    }

    fn parse(namespace_tag: &str, fields: &BTreeMap<String, String>) -> Result<ShardMap> {
        let bad = |what: &str, v: &str| {
            Error::InvalidInput(format!(
                "the shard map of {namespace_tag} holds {what} = {v:?}, which is not a number: \
                 set it again with `hero shards set K`"
            ))
        };
        let mut map = ShardMap::single(namespace_tag);
        for (f, v) in fields {
            let num = |what: &str| v.parse::<u64>().map_err(|_| bad(what, v));
            if f == "k" {
                map.k = num("k")?.clamp(1, u64::from(MAX_SHARDS)) as u16;
            } else if f == "epoch" {
                map.epoch = num("epoch")?;
            } else if f == "history" {
                map.history = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        let (k, at) = s.split_once('@').unwrap_or((s, "0"));
                        match (k.parse::<u16>(), at.parse::<u64>()) {
                            (Ok(k), Ok(at)) => Ok((k.clamp(1, MAX_SHARDS), at)),
                            _ => Err(bad("history", v)),
                        }
                    })
                    .collect::<Result<_>>()?;
            } else if let Some(n) = f.strip_prefix("tag:").and_then(|n| n.parse::<u16>().ok()) {
                if n > 0 {
                    map.tags.insert(n, v.clone());
                }
            } else if let Some(n) = f.strip_prefix("drain:").and_then(|n| n.parse::<u16>().ok()) {
                map.draining.insert(n, num("drain")?);
            }
            // a field this version does not know was written by a newer one: ignored
        }
        // a shard is served only when its tag is known
        map.draining.retain(|n, _| map.tags.contains_key(n));
        if (1..map.k).any(|n| !map.tags.contains_key(&n)) {
            return Err(Error::InvalidInput(format!(
                "the shard map of {namespace_tag} has k = {} but lacks a shard's tag: set it \
                 again with `hero shards set {}`",
                map.k, map.k
            )));
        }
        Ok(map)
    }
}

/// Reads the shard map of the namespace whose shard 0 is `base` (one HGETALL; an absent map is
/// the unsharded namespace).
pub async fn read(redis: &Redis, base: &Keyspace) -> Result<ShardMap> {
    let fields: BTreeMap<String, String> = redis
        .query(redis::cmd("HGETALL").arg(base.shard_map()))
        .await?;
    ShardMap::parse(base.shard_tag(), &fields)
}

/// Sets K: shards `0..k` take new jobs from now; a shard that was active or draining beyond `k`
/// drains (still served, retired by a broker once empty). Atomic against other changes and a
/// broker's retirement (WATCH/MULTI on the map).
pub async fn set(redis: &Redis, base: &Keyspace, k: u16, now_ms: u64) -> Result<ShardMap> {
    if k == 0 || k > MAX_SHARDS {
        return Err(Error::InvalidInput(format!(
            "a namespace has 1 to {MAX_SHARDS} shards, not {k}"
        )));
    }
    let key = base.shard_map();
    let mut conn = redis.dedicated(Duration::from_secs(5)).await?;
    for _ in 0..10 {
        let _: () = redis::cmd("WATCH").arg(&key).query_async(&mut conn).await?;
        let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        let old = ShardMap::parse(base.shard_tag(), &fields)?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        let mut next = old.clone();
        if old.k != k {
            next.history.push((old.k, now_ms));
            // the history a key's home may still depend on: the last few changes
            if next.history.len() > 8 {
                next.history.remove(0);
            }
            next.epoch += 1;
            next.k = k;
        }
        let base_slot = key_slot(base.prefix());
        for n in 1..k.max(old.k) {
            next.tags.entry(n).or_insert_with(|| {
                let t = tag_for(base.shard_tag(), n, base_slot);
                pipe.hset(&key, format!("tag:{n}"), &t);
                t
            });
        }
        // shards now active stop draining; shards now beyond k start
        for n in 0..k {
            if next.draining.remove(&n).is_some() {
                pipe.hdel(&key, format!("drain:{n}"));
            }
        }
        for n in k..old.k {
            next.draining.insert(n, now_ms);
            pipe.hset(&key, format!("drain:{n}"), now_ms);
        }
        let history = history_field(&next.history);
        pipe.hset(&key, "k", k)
            .hset(&key, "epoch", next.epoch)
            .hset(&key, "history", history);
        let done: Option<redis::Value> = pipe.query_async(&mut conn).await?;
        if done.is_some() {
            return Ok(next);
        }
    }
    Err(Error::InvalidInput(
        "the shard map kept changing while it was being set; try again".into(),
    ))
}

fn history_field(history: &[(u16, u64)]) -> String {
    let parts: Vec<String> = history.iter().map(|(k, at)| format!("{k}@{at}")).collect();
    parts.join(",")
}

/// Forgets the earlier values of K that ended before `cutoff_ms` (a broker passes now minus its
/// retention time): keys made under them hold no state any more, so their old homes need not be
/// asked. Answers how many it forgot.
pub async fn forget_before(redis: &Redis, base: &Keyspace, cutoff_ms: u64) -> Result<usize> {
    let key = base.shard_map();
    let mut conn = redis.dedicated(Duration::from_secs(5)).await?;
    let _: () = redis::cmd("WATCH").arg(&key).query_async(&mut conn).await?;
    let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(&key)
        .query_async(&mut conn)
        .await?;
    let map = ShardMap::parse(base.shard_tag(), &fields)?;
    let kept: Vec<(u16, u64)> = map
        .history
        .iter()
        .copied()
        .filter(|&(_, at)| at >= cutoff_ms)
        .collect();
    if kept.len() == map.history.len() {
        let _: () = redis::cmd("UNWATCH").query_async(&mut conn).await?;
        return Ok(0);
    }
    let done: Option<redis::Value> = redis::pipe()
        .atomic()
        .hset(&key, "history", history_field(&kept))
        .query_async(&mut conn)
        .await?;
    Ok(if done.is_some() {
        map.history.len() - kept.len()
    } else {
        0
    })
}

/// Takes shard `n` out of the map if it is still draining since `since` (nobody made it active
/// again, or drained it anew, meanwhile): answers whether it did.
pub async fn retire(redis: &Redis, base: &Keyspace, n: u16, since: u64) -> Result<bool> {
    let key = base.shard_map();
    let mut conn = redis.dedicated(Duration::from_secs(5)).await?;
    let _: () = redis::cmd("WATCH").arg(&key).query_async(&mut conn).await?;
    let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(&key)
        .query_async(&mut conn)
        .await?;
    let now = ShardMap::parse(base.shard_tag(), &fields)?;
    if now.draining.get(&n) != Some(&since) {
        let _: () = redis::cmd("UNWATCH").query_async(&mut conn).await?;
        return Ok(false);
    }
    let done: Option<redis::Value> = redis::pipe()
        .atomic()
        .hdel(&key, format!("drain:{n}"))
        .hincr(&key, "epoch", 1)
        .query_async(&mut conn)
        .await?;
    Ok(done.is_some())
}

/// A fresh id that names shard `n` (`<uuid>.s<n>`; shard 0's ids are plain UUIDs).
pub fn sharded_id(n: u16) -> JobId {
    let id = JobId::random();
    if n == 0 {
        return id;
    }
    JobId::new(format!("{id}.s{n}")).unwrap_or(id)
}

/// The shard an id names, when it has the form [`sharded_id`] gives (a caller may choose an id
/// of that form too: a reader that does not find the job there looks at its home).
pub fn shard_of_id(id: &str) -> Option<u16> {
    let (_, n) = id.rsplit_once(".s")?;
    if n.is_empty() || n.len() > 2 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse::<u16>().ok().filter(|&n| n < MAX_SHARDS)
}

/// Jump consistent hash (Lamping and Veach, 2014): a bucket in `0..buckets` for `key`, such
/// that going from `n` to `n + 1` buckets moves only the keys that land in the new one.
pub fn jump(mut key: u64, buckets: u16) -> u16 {
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2862933555777941757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b.max(0) as u16
}

/// FNV-1a (64 bit) of a key: simple enough for every client language to compute the same.
pub fn hash(key: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Redis Cluster's slot of a key (CRC16/XMODEM of its hash tag, or of the whole key).
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let part = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16(part) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Shard `n`'s tag (`<ns>:s<n>-<salt>`): the first salt whose slot lies near `base_slot` plus
/// the bit-reversed `n` of the slot range (½, ¼, ¾, ⅛, …), so that the first K shards cut the
/// slot range into K near-equal parts, and a cluster whose masters own equal ranges gets
/// them on different masters whenever K ≤ masters.
pub fn tag_for(namespace_tag: &str, n: u16, base_slot: u16) -> String {
    let target = (u32::from(base_slot) + (u32::from(n).reverse_bits() >> 18)) % 16384;
    let mut best = (u32::MAX, String::new());
    for salt in 0..4096u32 {
        let tag = format!("{namespace_tag}:s{n}-{salt}");
        let slot = u32::from(crc16(tag.as_bytes())) % 16384;
        let d = slot.abs_diff(target).min(16384 - slot.abs_diff(target));
        if d < best.0 {
            best = (d, tag);
        }
        if d <= 64 {
            break;
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_redis_cluster() {
        // CLUSTER KEYSLOT answers: foo 12182, bar 5061, {user1000}.following 3443
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot("{user1000}.following"), 3443);
    }

    #[test]
    fn jump_moves_only_keys_to_new_buckets() {
        for i in 0..2000u64 {
            let key = hash(&format!("k{i}"));
            let at4 = jump(key, 4);
            let at8 = jump(key, 8);
            assert!(at8 == at4 || at8 >= 4, "key {i}: {at4} → {at8}");
            assert!(at4 < 4 && at8 < 8);
            assert_eq!(jump(key, 1), 0);
        }
    }

    #[test]
    fn homes_are_the_ones_every_client_language_computes() {
        // the same five homes are asserted by hero-py (python/tests/test_package.py)
        let homes: Vec<u16> = [
            ("k1", 4),
            ("acct-7", 8),
            ("u3", 4),
            ("customer-42", 64),
            ("x", 2),
        ]
        .iter()
        .map(|(k, n)| jump(hash(k), *n))
        .collect();
        assert_eq!(homes, vec![2, 2, 3, 61, 1]);
        assert_eq!(hash("acct-7"), 0xeadd7ebdb5b16a96);
    }

    #[test]
    fn jump_spreads_evenly() {
        let mut counts = [0u32; 8];
        for i in 0..8000 {
            counts[jump(hash(&format!("key-{i}")), 8) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn tags_spread_over_the_slot_range() {
        let base = key_slot("{hero}");
        let mut slots: Vec<u32> = (1..8u16)
            .map(|n| u32::from(key_slot(&format!("{{{}}}", tag_for("hero", n, base)))))
            .collect();
        slots.push(u32::from(base));
        slots.sort_unstable();
        // eight shards, one per eighth of the range (within the salt search's reach)
        for pair in slots.windows(2) {
            let gap = pair[1] - pair[0];
            assert!((1800..2300).contains(&gap), "{slots:?}");
        }
    }

    #[test]
    fn sharded_ids_name_their_shard() {
        assert_eq!(shard_of_id(sharded_id(3).as_str()), Some(3));
        assert_eq!(shard_of_id(sharded_id(0).as_str()), None);
        assert_eq!(shard_of_id("order.s12"), Some(12));
        assert_eq!(shard_of_id("order.sx"), None);
        assert_eq!(shard_of_id("order.s999"), None);
    }

    #[test]
    fn older_homes_are_the_homes_under_earlier_ks() {
        let mut map = ShardMap::single("hero");
        for n in 1..4 {
            map.tags.insert(n, format!("t{n}"));
        }
        map.k = 4;
        map.history = vec![(1, 5), (2, 9)];
        for i in 0..200 {
            let key = format!("u{i}");
            let older = map.older_homes(&key);
            let under2 = jump(hash(&key), 2);
            if map.home(&key) == under2 {
                assert!(older.is_empty() || older == vec![0]);
            } else {
                assert!(older.contains(&under2));
            }
        }
        // a field a newer version wrote is ignored
        let fields = BTreeMap::from([
            ("k".to_string(), "2".to_string()),
            ("tag:1".to_string(), "hero:s1-7".to_string()),
            ("colour".to_string(), "blue".to_string()),
        ]);
        assert_eq!(ShardMap::parse("hero", &fields).unwrap().k, 2);
    }
}
