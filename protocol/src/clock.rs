//! Time as the server functions receive it: milliseconds since the epoch for scores and
//! ISO 8601 (RFC 3339, UTC, milliseconds) for the job record's timestamps. The functions stamp
//! records and scores with the time they are given, so tests can reason about what they wrote.
//! Two go by Redis's own clock where only it will do: `hero_expire` (retention entries are aged
//! by their ids, which Redis stamped) and `hero_recover`'s idle mode (XPENDING's idle times).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
