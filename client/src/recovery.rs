//! Taking deliveries back from a consumer: the cursor loop over `hero_recover` that the broker's
//! recovery (a dead worker's jobs, idle deliveries) and a worker's own hand-back at shutdown
//! share.

use redis::Value;

use crate::conn::Redis;
use crate::error::Result;
use crate::function::Recovered;
use crate::function::{self, Recovery};
use crate::keys::Keyspace;

/// Entries one call looks at: enough to make the call worth its cost, few enough to keep it
/// short (Redis runs nothing else meanwhile).
const PER_CALL: usize = 200;

/// Totals of the deliveries taken back from one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// Queued again as new entries of the same stream.
    pub requeued: u64,
    /// Past their attempt budget: dead-lettered.
    pub dead: u64,
}

impl Taken {
    pub fn add(&mut self, other: Taken) {
        self.requeued += other.requeued;
        self.dead += other.dead;
    }
}

/// Runs `hero_recover` over `stream` from its first pending entry to its last.
pub async fn recover_stream(
    redis: &Redis,
    keys: &Keyspace,
    stream: &str,
    which: Recovery<'_>,
    max_attempts: u32,
) -> Result<Taken> {
    let mut taken = Taken::default();
    let mut cursor = "0-0".to_string();
    loop {
        let cmd = function::recover(
            keys,
            stream,
            which,
            PER_CALL,
            max_attempts,
            &cursor,
            redis.caps().xackdel_flag(),
        );
        let r = Recovered::decode(&redis.query::<Value>(&cmd).await?)?;
        taken.add(Taken {
            requeued: r.requeued,
            dead: r.dead,
        });
        if r.cursor == "0-0" {
            return Ok(taken);
        }
        cursor = r.cursor;
    }
}

/// Deletes the consumers of `stream` that hold nothing, have been idle `min_idle_ms` or longer
/// and are in no worker's liveness entry: what a worker killed with a command still in flight
/// leaves behind (the command reached Redis after the presence pass had removed the consumer,
/// made it again, and whatever it claimed was reclaimed since), which no other pass would ever
/// delete. Each goes through `hero_fix`, which deletes it only while it still holds nothing, so
/// a consumer that took a job meanwhile stays (and a live worker's is made again by its next
/// read). The bridge's consumers are its own. Returns how many went.
pub async fn sweep_consumers(
    redis: &Redis,
    keys: &Keyspace,
    stream: &str,
    min_idle_ms: u64,
) -> Result<u64> {
    let info: Value = match redis
        .query(
            redis::cmd("XINFO")
                .arg("CONSUMERS")
                .arg(stream)
                .arg(crate::keys::CONSUMER_GROUP),
        )
        .await
    {
        Ok(v) => v,
        // no such stream or group (deleted by hand, or made again by the next fetch)
        Err(crate::Error::Redis(_)) => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut idle = Vec::new();
    for c in crate::reply::array(&info)? {
        let fields = crate::reply::pairs(c.clone())?;
        let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
        let pending = get("pending").and_then(|v| v.parse::<u64>().ok());
        let idle_ms = get("idle").and_then(|v| v.parse::<u64>().ok());
        if let (Some(name), Some(0), Some(ms)) = (get("name"), pending, idle_ms) {
            let name = name.to_string();
            if ms >= min_idle_ms && !crate::keys::is_bridge_consumer(&name) {
                idle.push(name);
            }
        }
    }
    if idle.is_empty() {
        return Ok(0);
    }
    let scores: Vec<Option<f64>> = redis
        .query(redis::cmd("ZMSCORE").arg(keys.consumers()).arg(&idle))
        .await?;
    let mut gone = 0;
    for (name, score) in idle.iter().zip(scores) {
        if score.is_some() {
            // a worker's liveness entry: the presence pass deals with it after its deadline
            continue;
        }
        let repair = function::Repair::IdleConsumer {
            stream,
            consumer: name,
        };
        let answer: String = redis.query(&function::fix(keys, repair)).await?;
        gone += u64::from(answer == "fixed");
    }
    Ok(gone)
}
