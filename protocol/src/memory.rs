//! What hero needs of Redis's memory and says when it is missing: the maxmemory policy must be
//! `noeviction`, or Redis may evict a job's record and lose the job without a trace.
//! `hero_submit` refuses jobs under any other policy (checked from INFO at most once a second,
//! `lib/settings.lua`); every process that reads the policy (the heartbeat's answer, the
//! broker's pass) says so here, as an ERROR once per change of policy, not once per read.

use std::sync::Mutex;

static LAST: Mutex<String> = Mutex::new(String::new());

/// True for a maxmemory policy that may evict keys (anything but `noeviction`).
pub fn evicting(policy: &str) -> bool {
    !policy.is_empty() && policy != "noeviction"
}

/// True when `hero_submit` refuses jobs under `policy`: it may evict, and the operator did not
/// accept it by name (`accepted`, the config hash's `accept_eviction`; `lib/settings.lua`'s
/// `refuse_evicting` is the same rule inside Redis).
pub fn refused(policy: &str, accepted: Option<&str>) -> bool {
    evicting(policy) && accepted != Some(policy)
}

/// Notes the policy a read found: an ERROR when it turned evicting, an INFO when it is
/// `noeviction` again, nothing when it did not change.
pub fn note_policy(policy: &str) {
    if policy.is_empty() {
        return;
    }
    let Ok(mut last) = LAST.lock() else { return };
    if *last == policy {
        return;
    }
    let was = std::mem::replace(&mut *last, policy.to_string());
    if evicting(policy) {
        tracing::error!(
            policy,
            "Redis's maxmemory-policy is {policy}: Redis may evict any key, a job's record included, and lose the job without a trace. Submits are refused until it is noeviction (CONFIG SET maxmemory-policy noeviction), unless accepted with `hero broker --accept-eviction {policy}`"
        );
    } else if evicting(&was) {
        tracing::info!(
            policy,
            "Redis's maxmemory-policy is {policy} again: submits are accepted"
        );
    }
}
