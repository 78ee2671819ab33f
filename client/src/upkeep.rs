//! Nothing waits silently: a producer that submits a job only the queue's upkeep can move (a
//! delayed job, one with a retry budget) or stores a recurring job into a namespace where no live process does that
//! upkeep (no holder of the duty lease: no worker with duties on, no broker) is told once, as a
//! WARN naming the namespace, the Redis and its db. Checked once per client, at its first such
//! submit (one EXISTS, that once: a short-lived producer such as `hero submit` says it too).

use std::sync::atomic::{AtomicBool, Ordering};

use hero_protocol::{Keyspace, NewJob, Redis};

/// Whether this client has looked yet.
#[derive(Debug, Default)]
pub(crate) struct Upkeep {
    looked: AtomicBool,
}

/// Whether `job` waits on the upkeep at some point: a run-at in the future, or retries.
fn needs_upkeep(job: &NewJob) -> bool {
    job.run_at_ms().is_some() || job.record().retries > 0
}

impl Upkeep {
    /// Looks once, when one of `jobs` needs the upkeep.
    pub(crate) async fn note(&self, redis: &Redis, keys: &Keyspace, jobs: &[NewJob]) {
        if jobs.iter().any(needs_upkeep) {
            self.needed(redis, keys).await;
        }
    }

    /// Looks once: something this client stored (a recurring job) waits on the upkeep.
    pub(crate) async fn needed(&self, redis: &Redis, keys: &Keyspace) {
        if self.looked.load(Ordering::Relaxed) || self.looked.swap(true, Ordering::Relaxed) {
            return;
        }
        {
            let held: hero_protocol::Result<bool> =
                redis.query(redis::cmd("EXISTS").arg(keys.duties())).await;
            if let Ok(false) = held {
                tracing::warn!(
                    namespace = %keys.prefix(),
                    redis = %hero_protocol::conn::shown_url(&redis.url()),
                    "no live process does the queue's upkeep in this namespace (no worker with \
                     duties on, no `hero broker`, on this Redis and db): delayed jobs, retries and \
                     recurring jobs' ticks wait until one runs. Start a worker (workers do it by default) or `hero broker` \
                     with the same URL, db and namespace"
                );
            }
        }
    }
}
