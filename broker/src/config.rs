//! The broker's settings, with the defaults a production queue would pick. Flags and `HERO_*`
//! environment variables fill it (see `cli`).

use std::time::Duration;

/// The event log's default cap, in entries. An entry holds one job's event, or those of all the
/// jobs of one call (up to a few hundred): 10,000 entries keep the last ~10,000 to ~250,000
/// job events in at most ~10 MB.
pub const DEFAULT_EVENTS_MAX: u64 = 10_000;

#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// How long finished and failed jobs are kept before the broker deletes them.
    pub retention: Duration,
    /// How long a dead letter stays in the dead-letter stream (its own retention; by default as
    /// long as the job it names, which retention deletes with the other ended jobs).
    pub dead_retention: Duration,
    /// How long a run-and-wait reply stays for a caller that has not picked it up.
    pub reply_ttl: Duration,
    /// Idle time after which a delivery is reclaimed (XPENDING IDLE + XCLAIM). Must be at least the
    /// workers' lease (they renew every third of theirs).
    pub lease: Duration,
    /// A job is dead-lettered once recovery finds it has been delivered this many times (or
    /// its `retries + 1`, when larger).
    pub max_attempts: u32,
    /// The event log's cap, in entries (approximate: Redis trims whole nodes); 0 turns the log
    /// off. Every function that changes a job's state reads it.
    pub events_max: u64,
    /// How often dead consumers are looked for, and
    pub presence_poll: Duration,
    /// due delayed jobs promoted: the broker, while it holds the duty lease, calls
    /// `hero_duties` every the shorter of the two (`hero_protocol::duties`).
    pub promote_poll: Duration,
    /// Legacy bridge mappings (SPEC §6).
    pub bridges: Vec<crate::bridge::mapping::BridgeMapping>,
    /// Compatibility mode: completions also answer `hero:reply:<id>` the seed-001 way.
    /// `None`: on when any bridge mapping is configured.
    pub legacy_replies: Option<bool>,
    /// How often the bridge hands out jobs and looks at the ones legacy actors hold.
    pub bridge_poll: Duration,
    /// A maxmemory policy other than noeviction the operator accepts (`--accept-eviction`):
    /// submits are taken under it, and jobs may be lost to eviction.
    pub accept_eviction: Option<String>,
}

impl BrokerConfig {
    pub fn legacy_replies(&self) -> bool {
        self.legacy_replies.unwrap_or(!self.bridges.is_empty())
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(24 * 3600),
            reply_ttl: Duration::from_secs(3600),
            dead_retention: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            max_attempts: 5,
            events_max: DEFAULT_EVENTS_MAX,
            presence_poll: Duration::from_millis(250),
            promote_poll: Duration::from_millis(100),
            bridges: Vec::new(),
            legacy_replies: None,
            bridge_poll: Duration::from_millis(100),
            accept_eviction: None,
        }
    }
}
