//! Reconnect back-off for the worker's loops: 100 ms doubling to 5 s, reset on success.

use std::time::Duration;

pub struct Backoff {
    next: Duration,
}

const FIRST: Duration = Duration::from_millis(100);
const MAX: Duration = Duration::from_secs(5);

impl Backoff {
    pub fn new() -> Self {
        Self { next: FIRST }
    }

    /// The delay to wait now; the following one is twice as long, up to 5 s.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(MAX);
        d
    }

    pub fn reset(&mut self) {
        self.next = FIRST;
    }
}

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
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new();
        let seen: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert_eq!(seen[0], FIRST);
        assert_eq!(seen[1], FIRST * 2);
        assert_eq!(*seen.last().unwrap(), MAX);
        b.reset();
        assert_eq!(b.next_delay(), FIRST);
    }

    #[test]
    fn retry_delay_grows_with_attempts_within_jitter() {
        assert!(retry_delay(1) <= Duration::from_millis(1200));
        assert!(retry_delay(3) >= Duration::from_millis(3200));
        assert!(retry_delay(40) <= Duration::from_secs(4320));
    }
}
