//! A failed attempt's retry delay when no queue policy sets one. (Reconnecting is paced by
//! `hero_protocol::outage`, shared with the broker.)

use std::time::Duration;

/// Back-off of a failed attempt before its retry: 1 s doubling per attempt, capped at one hour,
/// with ±20 % jitter so a burst of failures does not come back as a burst.
pub fn retry_delay(attempt: u32) -> Duration {
    let base = Duration::from_secs(1).saturating_mul(1u32 << attempt.saturating_sub(1).min(12));
    let base = base.min(Duration::from_secs(3600));
    let jitter = 0.8 + rand::random::<f64>() * 0.4;
    base.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_grows_with_attempts_within_jitter() {
        assert!(retry_delay(1) <= Duration::from_millis(1200));
        assert!(retry_delay(3) >= Duration::from_millis(3200));
        assert!(retry_delay(40) <= Duration::from_secs(4320));
    }
}
