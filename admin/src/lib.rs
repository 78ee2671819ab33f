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
//! - [`jobs`]: a queue's job counts; a job promoted or removed.
//! - [`cron`]: recurring jobs as an operator sees them.
//! - [`shards`]: a sharded namespace's shards and their counts.
//!
//! Made from a `hero_client::Client` (`From<&Client>`), both reach every shard of a sharded
//! namespace: controls are written to each shard, the queues summed, the events merged, the
//! audit run per shard, and a job's requeue sent to the shard that holds it.

pub mod cleanup;
pub mod cron;
pub mod inspect;
pub mod jobs;
pub mod queue;
pub mod repair;
pub mod shards;

pub use inspect::{Inspector, JobSummary, ListFilter, Page};
pub use jobs::JobCounts;
pub use repair::{DeadOutcome, Requeued};

use hero_protocol::{ConnectOptions, Keyspace, Redis, Result};

/// The operator's handle on a namespace. Cheap to clone; shares the connection it was made with.
#[derive(Clone)]
pub struct Admin {
    redis: Redis,
    keys: Keyspace,
    /// The namespace's other shards (a sharded namespace's controls reach every shard; see
    /// `queue`), and its active shard count, which a limit is split by.
    others: Vec<(u16, Admin)>,
    k: u16,
    /// The producer handle it was made from, which finds a job's shard.
    client: Option<hero_client::Client>,
}

impl Admin {
    /// Connects to `url` in the `hero` namespace.
    pub async fn connect(url: &str) -> Result<Admin> {
        Self::with_options(ConnectOptions::new(url)).await
    }

    pub async fn with_options(opts: ConnectOptions) -> Result<Admin> {
        let client = hero_client::Client::with_options(opts).await?;
        Ok(Admin::from(&client))
    }

    /// An operator's handle over a connection already open (a producer's, a broker's), on one
    /// shard (use `Admin::from(&client)` to reach every shard of a sharded namespace).
    pub fn new(redis: Redis, keys: Keyspace) -> Admin {
        Admin {
            redis,
            keys,
            others: Vec::new(),
            k: 1,
            client: None,
        }
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    /// The read side of the same namespace (every shard of it).
    pub fn inspector(&self) -> Inspector {
        let others = self
            .others
            .iter()
            .map(|(n, a)| (*n, Inspector::new(a.redis.clone(), a.keys.clone())))
            .collect();
        Inspector::new(self.redis.clone(), self.keys.clone()).with_shards(others)
    }

    /// This shard alone.
    fn here(&self) -> Admin {
        Admin::new(self.redis.clone(), self.keys.clone())
    }

    /// Every shard's handle, shard 0 first.
    pub fn shards(&self) -> Vec<(u16, Admin)> {
        let mut out = vec![(0, self.here())];
        out.extend(self.others.iter().cloned());
        out
    }

    /// The handle of the shard that holds job `id` (this one in an unsharded namespace).
    pub(crate) async fn holder(&self, id: &hero_protocol::JobId) -> Result<Admin> {
        match &self.client {
            Some(c) if !self.others.is_empty() => {
                let shard = c.for_job(id).await?;
                Ok(Admin::new(shard.redis().clone(), shard.keys().clone()))
            }
            _ => Ok(self.clone()),
        }
    }
}

impl From<&hero_client::Client> for Admin {
    fn from(c: &hero_client::Client) -> Admin {
        let mut admin = Admin::new(c.redis().clone(), c.keys().clone());
        admin.k = c.shard_map().k;
        admin.client = Some(c.clone());
        admin.others = c
            .all_shard_clients()
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, s)| (n, Admin::new(s.redis().clone(), s.keys().clone())))
            .collect();
        admin
    }
}

impl From<&hero_client::Client> for Inspector {
    fn from(c: &hero_client::Client) -> Inspector {
        let others = c
            .all_shard_clients()
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, s)| (n, Inspector::new(s.redis().clone(), s.keys().clone())))
            .collect();
        Inspector::new(c.redis().clone(), c.keys().clone()).with_shards(others)
    }
}
