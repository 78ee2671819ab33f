//! The loop that keeps the worker's policy cache (`policy`) fresh: reads the queue policies at
//! start and every [`REFRESH`] after, and builds the fetch's concurrency-limit argument for this
//! worker's streams.

use std::sync::Arc;

use hero_protocol::policy::Policies;
use tokio_util::sync::CancellationToken;

use crate::policy::REFRESH;
use crate::shared::Shared;

/// Reads the policies once; on failure keeps the ones it had.
pub(crate) async fn refresh_once(s: &Shared) {
    let client_policies = match hero_protocol::policy::read_policies(&s.redis, &s.keys).await {
        Ok(p) => p,
        Err(e) => {
            hero_protocol::outage::report("reading queue policies (the last ones are kept)", &e);
            return;
        }
    };
    let limits = limits_arg(s, &client_policies);
    s.policy.set(client_policies, limits);
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
        let Ok((target, _)) = hero_protocol::Target::parse_queue(&s.keys.queue_name(stream)) else {
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
