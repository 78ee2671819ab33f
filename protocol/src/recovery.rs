//! Taking deliveries back from a consumer: the cursor loop over `hero_recover` a worker's own
//! hand-back at shutdown makes (and the tests', for a named consumer). Recovering dead workers'
//! jobs and idle deliveries is `hero_duties`' (`crate::duties`), inside Redis.

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
