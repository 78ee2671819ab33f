//! Time as the server functions receive it: milliseconds since the epoch for scores and
//! ISO 8601 (RFC 3339, UTC, milliseconds) for the job record's timestamps, on Redis's clock.
//!
//! One clock: every deadline the functions compare is Redis's. The functions that set one take
//! it from `TIME` themselves (the heartbeat's liveness deadline, a fetch's `started_at`, a
//! retry's and a delayed submit's due time rebased from the caller's), and a process's own
//! reads and passes (promotion, recovery, time limits, cron ticks, the fleet) use [`now_ms`]:
//! this machine's clock corrected by the offset to Redis's that the process last measured
//! ([`observe`], from each heartbeat's answer). A clock more than [`SKEW_WARN_MS`] off Redis's
//! is said once (WARN) and shown in `hero actors`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How far this machine's clock may be from Redis's before the process says so.
pub const SKEW_WARN_MS: i64 = 2_000;

/// Redis's clock minus this machine's, as last measured (0 until then).
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);
static SKEW_SAID: AtomicBool = AtomicBool::new(false);

/// This machine's clock, uncorrected: for measuring the offset only.
pub fn local_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Redis's clock as this process knows it: the local clock plus the offset last measured.
pub fn now_ms() -> u64 {
    local_ms().saturating_add_signed(OFFSET_MS.load(Ordering::Relaxed))
}

/// Records Redis's time `redis_ms`, read by a call sent at local `sent_ms` and answered at
/// local `got_ms` (the server's reading is taken as the round trip's middle). Says once, as a
/// WARN, when the clocks differ by more than [`SKEW_WARN_MS`], and once when they agree again.
/// Returns the offset (Redis's minus local) in ms.
pub fn observe(redis_ms: u64, sent_ms: u64, got_ms: u64) -> i64 {
    let mid = sent_ms / 2 + got_ms / 2;
    let offset = redis_ms as i64 - mid as i64;
    OFFSET_MS.store(offset, Ordering::Relaxed);
    let off = offset.abs() > SKEW_WARN_MS;
    if off && !SKEW_SAID.swap(true, Ordering::AcqRel) {
        tracing::warn!(
            skew_ms = -offset,
            "this machine's clock is {:.1} s {} Redis's: hero goes by Redis's clock (deadlines, retries, delays, liveness), but fix the clock (NTP)",
            offset.abs() as f64 / 1000.0,
            if offset < 0 { "ahead of" } else { "behind" }
        );
    } else if !off && SKEW_SAID.swap(false, Ordering::AcqRel) {
        tracing::info!("this machine's clock agrees with Redis's again");
    }
    offset
}

/// The offset last measured: Redis's clock minus this machine's, in ms.
pub fn offset_ms() -> i64 {
    OFFSET_MS.load(Ordering::Relaxed)
}

pub fn iso(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub fn now_iso() -> String {
    iso(now_ms())
}

/// The time an RFC 3339 timestamp of a record names, in ms since the epoch (None when `s` is
/// not one).
pub fn parse_iso_ms(s: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339_weak(s).ok()?;
    u64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()
}

/// True when `s` is an RFC 3339 timestamp as the record stores them.
pub fn is_iso(s: &str) -> bool {
    humantime::parse_rfc3339_weak(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_is_rfc3339_with_milliseconds() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert!(is_iso(&now_iso()));
        assert!(!is_iso("yesterday"));
    }
}
