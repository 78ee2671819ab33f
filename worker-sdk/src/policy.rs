//! The worker's copy of the queue policies (`hero_protocol::queue`): read at start and every
//! [`REFRESH`] after, so `hero queue set` reaches running workers within seconds without a read
//! per job. It gives the fetch its concurrency-limit argument, the job task each job's time
//! limit, retry budget and back-off, and the lease loop its renewal period. The loop that
//! fills it is `refresh`'s.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use hero_protocol::policy::{Backoff, Policies, Policy};
use hero_protocol::{Job, DEFAULT_TIMEOUT};

use crate::outcome::Outcome;

/// How often the policies are read again.
pub const REFRESH: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Current {
    policies: Policies,
    /// The fetch's concurrency-limit argument for this worker's streams ('' without limits).
    limits: Arc<str>,
}

#[derive(Default)]
pub(crate) struct PolicyCache {
    current: RwLock<Current>,
}

impl PolicyCache {
    /// The fetch's ARGV for the limits of `streams` (see `hero_fetch`).
    pub fn limits(&self) -> Arc<str> {
        self.current
            .read()
            .map(|c| c.limits.clone())
            .unwrap_or_default()
    }

    /// The policy of `job`'s queue, if it has one (no allocation when no queue has one).
    pub fn of(&self, job: &Job) -> Option<Policy> {
        let t = job.script_type.as_ref()?;
        let c = self.current.read().ok()?;
        if c.policies.is_empty() {
            return None;
        }
        c.policies
            .of(t.as_str(), job.group.as_ref().map(|g| g.as_str()))
    }

    /// Replaces the policies and the fetch's limits argument made from them.
    pub fn set(&self, policies: Policies, limits: String) {
        if let Ok(mut c) = self.current.write() {
            c.policies = policies;
            c.limits = limits.into();
        }
    }

    /// The shortest lease any policy of `types` sets, if one does.
    pub fn shortest_lease(&self, types: &[hero_protocol::ScriptType]) -> Option<Duration> {
        let c = self.current.read().ok()?;
        c.policies
            .iter()
            .filter(|(q, _)| {
                let t = q.split('/').next().unwrap_or_default();
                types.iter().any(|x| x.as_str() == t)
            })
            .filter_map(|(_, p)| p.lease_ms)
            .min()
            .map(Duration::from_millis)
    }
}

/// The time limit of `job`: its own, or its queue's (`policy`) when it named none.
pub fn timeout(job: &Job, policy: Option<&Policy>) -> Duration {
    job.timeout
        .or_else(|| policy.and_then(|p| p.timeout_ms).map(Duration::from_millis))
        .unwrap_or(DEFAULT_TIMEOUT)
}

/// What a queue's policy makes of a failed attempt (see [`shape`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Retry {
    /// The delay before the retry, under the policy's back-off (`None`: the worker's default).
    pub delay: Option<Duration>,
    /// The policy's retry budget retries it even where the job's own budget would not: the
    /// completion says so (`Ending::Again`).
    pub by_policy: bool,
}

/// A failure as the queue's policy shapes it: retried after the policy's back-off, and while
/// the attempt is within the policy's retry budget even when the job's own budget (`retries`,
/// which the server function applies) is smaller. Anything but a failure under a policy is left
/// as it is (`Retry::default()`).
pub fn shape(policy: Option<&Policy>, attempt: u32, retries: u32, outcome: &Outcome) -> Retry {
    let (Some(p), Outcome::Fail(_)) = (policy, outcome) else {
        return Retry::default();
    };
    let attempt = attempt.max(1);
    let delay = p
        .backoff
        .unwrap_or(Backoff::DEFAULT)
        .delay(attempt, rand::random::<f64>());
    let budget = p.retries.unwrap_or(0);
    Retry {
        delay: Some(delay),
        // the policy's budget retries what the job's own would not: the call is told to
        by_policy: budget > retries && attempt <= budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(timeout: Option<Duration>) -> Job {
        let target =
            hero_protocol::Target::of_type(hero_protocol::ScriptType::new("osis").unwrap());
        let mut j = Job::new(hero_protocol::JobId::new("j1").unwrap(), &target, "noop");
        j.timeout = timeout;
        j
    }

    #[test]
    fn a_job_naming_a_time_limit_keeps_it_even_when_it_is_the_default() {
        let policy = Policy {
            timeout_ms: Some(5_000),
            ..Policy::default()
        };
        assert_eq!(
            timeout(&job(Some(DEFAULT_TIMEOUT)), Some(&policy)),
            DEFAULT_TIMEOUT
        );
        assert_eq!(timeout(&job(None), Some(&policy)), Duration::from_secs(5));
        assert_eq!(timeout(&job(None), None), DEFAULT_TIMEOUT);
        assert_eq!(
            timeout(&job(Some(Duration::from_secs(7))), Some(&policy)),
            Duration::from_secs(7)
        );
    }
}
