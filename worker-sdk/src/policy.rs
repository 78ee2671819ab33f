//! The worker's copy of the queue policies (`hero_client::queue`): read at start and every
//! [`REFRESH`] after, so `hero queue set` reaches running workers within seconds without a read
//! per job. It gives the fetch its concurrency-limit argument, the job task each job's time
//! limit, retry budget and back-off, and the lease loop its renewal period.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use hero_client::queue::{Backoff, Policies, Policy};
use hero_client::{Job, DEFAULT_TIMEOUT};
use tokio_util::sync::CancellationToken;

use crate::outcome::Outcome;
use crate::shared::Shared;

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

    /// The shortest lease any policy of `types` sets, if one does.
    pub fn shortest_lease(&self, types: &[hero_client::ScriptType]) -> Option<Duration> {
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
    if job.timeout != DEFAULT_TIMEOUT {
        return job.timeout;
    }
    policy
        .and_then(|p| p.timeout_ms)
        .map_or(job.timeout, Duration::from_millis)
}

/// A failure as the queue's policy shapes it: retried after the policy's back-off, and while
/// the attempt is within the policy's retry budget even when the job's own budget (`retries`,
/// which the server function applies) is smaller. Returns the delay before the retry and
/// whether the policy's budget retries it.
pub fn shape(
    policy: Option<&Policy>,
    attempt: u32,
    retries: u32,
    outcome: &Outcome,
) -> (Option<Duration>, bool) {
    let (Some(p), Outcome::Fail(_)) = (policy, outcome) else {
        return (None, false);
    };
    {
        let attempt = attempt.max(1);
        let delay = p
            .backoff
            .unwrap_or(Backoff::DEFAULT)
            .delay(attempt, rand::random::<f64>());
        let budget = p.retries.unwrap_or(0);
        // the policy's budget retries what the job's own would not: the call is told to
        let again = budget > retries && attempt <= budget;
        (Some(delay), again)
    }
}

/// Reads the policies once; on failure keeps the ones it had.
pub(crate) async fn refresh_once(s: &Shared) {
    let client_policies = match hero_client::queue::read_policies(&s.redis, &s.keys).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "reading queue policies failed; keeping the last ones");
            return;
        }
    };
    let limits = limits_arg(s, &client_policies);
    if let Ok(mut c) = s.policy.current.write() {
        c.policies = client_policies;
        c.limits = limits.into();
    }
}

/// Refreshes the cache every [`REFRESH`] until stopped.
pub(crate) async fn refresh(s: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(REFRESH) => {} }
        refresh_once(&s).await;
    }
}

/// `<stream index> <max> <limit key>` for every stream of this worker a limit covers.
fn limits_arg(s: &Shared, policies: &Policies) -> String {
    let mut out = String::new();
    if policies.is_empty() {
        return out;
    }
    for (i, stream) in s.streams.iter().enumerate() {
        let Ok((target, _)) = hero_client::Target::parse_queue(&s.keys.queue_name(stream)) else {
            continue;
        };
        let group = target.group.as_ref().map(|g| g.as_str());
        if let Some((queue, max)) = policies.limit_of(target.script_type.as_str(), group) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&format!("{} {max} {}", i + 1, s.keys.limit(&queue)));
        }
    }
    out
}
