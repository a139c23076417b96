//! Bounded exponential backoff with jitter, shared by everything that
//! retries against the API server: the status patcher between attempts of
//! one intent, and the pod watch between reconnects.
//!
//! Jitter keeps the DaemonSet's pods (one per node) from retrying in step
//! after an API server outage they all saw at once, as client-go's
//! `wait.Jitter` does for the kubelet.

use std::time::Duration;

/// The largest fraction of a delay that jitter adds to it.
pub const JITTER: f64 = 0.5;

/// Bounded exponential backoff between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub initial: Duration,
    pub max: Duration,
    /// Attempts before giving up, where the user gives up at all (the
    /// patcher; its periodic resync submits the intent again later).
    pub attempts: u32,
}

impl Default for RetryPolicy {
    /// The status patcher's.
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(5),
            attempts: 6,
        }
    }
}

impl RetryPolicy {
    /// The pod watch's: reconnects start at client-go's reflector delay
    /// (800 ms) but stop growing at 5 s instead of 30 s, so that pod status
    /// converges within seconds of an API server's return (RELIABILITY.md).
    pub const WATCH: RetryPolicy = RetryPolicy {
        initial: Duration::from_millis(800),
        max: Duration::from_secs(5),
        attempts: u32::MAX,
    };

    /// The wait after failed attempt number `attempt` (1-based), before
    /// jitter.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// [`delay`](Self::delay) plus up to [`JITTER`] of it, at random.
    pub fn jittered(&self, attempt: u32) -> Duration {
        with_jitter(self.delay(attempt), rand::random::<f64>())
    }
}

/// `delay` plus the fraction `unit` (in `[0, 1)`) of its [`JITTER`].
pub(crate) fn with_jitter(delay: Duration, unit: f64) -> Duration {
    delay + delay.mul_f64(JITTER * unit.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_up_to_the_cap() {
        let policy = RetryPolicy::default();
        let delays: Vec<_> = (1..=7).map(|a| policy.delay(a).as_millis()).collect();
        assert_eq!(delays, [200, 400, 800, 1600, 3200, 5000, 5000]);
    }

    #[test]
    fn jitter_adds_at_most_half() {
        let second = Duration::from_secs(1);
        assert_eq!(with_jitter(second, 0.0), second);
        assert_eq!(with_jitter(second, 0.5), Duration::from_millis(1250));
        assert_eq!(with_jitter(second, 7.0), Duration::from_millis(1500));
        for attempt in 1..=10 {
            let policy = RetryPolicy::default();
            let jittered = policy.jittered(attempt);
            assert!(jittered >= policy.delay(attempt), "{jittered:?}");
            assert!(
                jittered <= policy.delay(attempt).mul_f64(1.5),
                "{jittered:?}"
            );
        }
    }
}
