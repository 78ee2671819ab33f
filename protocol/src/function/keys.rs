//! The `hero_keys` call (`keys.lua`): one page of a fair queue's limit keys on one shard,
//! counted by the gates' ring lengths and read for a bounded number of keys, the reading every
//! language's key view shares (hero-admin's `Inspector::fair_keys`, Python's `Queue.keys`,
//! Node's `getKeys`).

use super::{Call, Function};
use crate::error::Result;
use crate::keys::Keyspace;
use crate::reply;

/// Reads up to `page` (0-1000; 0 counts only) of `queue`'s keys on this shard from index
/// `from`.
pub fn fair_keys(keys: &Keyspace, queue: &str, from: u64, page: usize) -> Call {
    let mut c = Call::new(Function::Keys, 2);
    c.key("queue registry set", keys.queues())
        .key("held-keys set", keys.held());
    c.arg("queue name", queue)
        .arg("from", from)
        .arg("the most keys to read", page);
    c
}

/// What one [`fair_keys`] call answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeysPage {
    /// Keys in the rings of this shard's streams of the queue (a paused key once a stream).
    pub total: u64,
    /// Keys this call read.
    pub read: u64,
    /// The paused keys under or over the queue, `<queue name>|<key>`.
    pub held: Vec<String>,
    /// The keys read with jobs waiting, and how many.
    pub waiting: Vec<(String, u64)>,
}

impl KeysPage {
    pub fn parse(v: &redis::Value) -> Result<KeysPage> {
        let items = reply::array(v)?;
        let [total, read, held, waiting] = items else {
            return Err(reply::unexpected("hero_keys answered other than 4 items"));
        };
        let waiting = reply::array(waiting)?;
        let mut pairs = Vec::with_capacity(waiting.len() / 2);
        for kv in waiting.chunks(2) {
            if let [k, n] = kv {
                pairs.push((reply::text(k)?, reply::int(n)?.max(0) as u64));
            }
        }
        Ok(KeysPage {
            total: reply::int(total)?.max(0) as u64,
            read: reply::int(read)?.max(0) as u64,
            held: reply::array(held)?
                .iter()
                .map(reply::text)
                .collect::<Result<_>>()?,
            waiting: pairs,
        })
    }
}
