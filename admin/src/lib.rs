//! hero-admin: the operator's side of hero-broker, what the `hero` CLI and the broker's HTTP
//! face do: read the whole system ([`Inspector`]: listings, the event log, queue stats, workers,
//! dead letters, batches, the audit) and change it as an operator ([`Admin`]: pause and resume,
//! queue policies, requeue, dead letters retried or purged, the audit's repairs, tracked jobs,
//! recurring jobs listed, paused, removed). Each change is one server function call, so a job is
//! never in two places or in none.
//!
//! # Layout
//! - [`inspect`]: the read side ([`Inspector`]).
//! - [`repair`]: the repairs and requeue.
//! - [`queue`]: pause, resume and policies.
//! - [`cron`]: recurring jobs as an operator sees them.

pub mod cron;
pub mod inspect;
pub mod queue;
pub mod repair;

pub use inspect::{Inspector, JobSummary, ListFilter, Page};
pub use repair::{DeadOutcome, Requeued};

use hero_protocol::{ConnectOptions, Keyspace, Redis, Result};

/// The operator's handle on a namespace. Cheap to clone; shares the connection it was made with.
#[derive(Clone)]
pub struct Admin {
    redis: Redis,
    keys: Keyspace,
}

impl Admin {
    /// Connects to `url` in the `hero` namespace.
    pub async fn connect(url: &str) -> Result<Admin> {
        Self::with_options(ConnectOptions::new(url)).await
    }

    pub async fn with_options(opts: ConnectOptions) -> Result<Admin> {
        let (redis, keys) = opts.open().await?;
        Ok(Admin { redis, keys })
    }

    /// An operator's handle over a connection already open (a producer's, a broker's).
    pub fn new(redis: Redis, keys: Keyspace) -> Admin {
        Admin { redis, keys }
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    /// The read side of the same namespace.
    pub fn inspector(&self) -> Inspector {
        Inspector::new(self.redis.clone(), self.keys.clone())
    }
}

impl From<&hero_client::Client> for Admin {
    fn from(c: &hero_client::Client) -> Admin {
        Admin::new(c.redis().clone(), c.keys().clone())
    }
}

impl From<&hero_client::Client> for Inspector {
    fn from(c: &hero_client::Client) -> Inspector {
        Inspector::new(c.redis().clone(), c.keys().clone())
    }
}
