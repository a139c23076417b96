//! Client-side rates as client-go's `flowcontrol` token bucket has them
//! (rule 9.6): the API client's request limit, the Event writes' and the
//! probe-run budgets (#25) all count with it.

use std::time::Duration;

use tokio::time::Instant;

/// A client-side request rate: `qps` requests a second on average and up
/// to `burst` at once, as client-go's token bucket (`flowcontrol`) has it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Requests a second; zero, a negative or a non-finite number means no
    /// limit, as the kubelet's `eventRecordQPS: 0` does.
    pub qps: f64,
    /// Requests allowed at once; at least one is, whatever it says, so a
    /// limit never stops requests altogether.
    pub burst: u32,
}

impl RateLimit {
    pub const fn new(qps: f64, burst: u32) -> Self {
        RateLimit { qps, burst }
    }

    /// A full bucket of this limit at `now`; `None` if it limits nothing.
    pub fn bucket(self, now: Instant) -> Option<TokenBucket> {
        if !(self.qps.is_finite() && self.qps > 0.0) {
            return None;
        }
        // `try_from_secs_f64` fails only for rates so low that one token
        // would take longer than `Duration::MAX`: no refill then.
        let per_token = Duration::try_from_secs_f64(1.0 / self.qps).unwrap_or(Duration::MAX);
        Some(TokenBucket::new(self.burst, per_token, now))
    }
}

/// A token bucket: `burst` tokens, one more every `per_token` up to
/// `burst`, full at the start (client-go's `NewTokenBucketRateLimiter`).
///
/// Time is passed in, never read, so the bucket is plain data that tests
/// drive with any clock; tokens are counted in whole numbers and time in
/// nanoseconds, so a refill every 300 s gives a token at exactly 300 s.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    burst: i64,
    per_token: Duration,
    /// Tokens in the bucket; negative when [`TokenBucket::reserve`] lent
    /// tokens ahead of their refill.
    tokens: i64,
    /// Since when the next token has been filling.
    since: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens (at least one) at `now`.
    pub fn new(burst: u32, per_token: Duration, now: Instant) -> Self {
        let burst = i64::from(burst.max(1));
        TokenBucket {
            burst,
            per_token,
            tokens: burst,
            since: now,
        }
    }

    /// Adds the tokens that filled up to `now`.
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.since);
        let per_token = self.per_token.as_nanos().max(1);
        let filled = i64::try_from(elapsed.as_nanos() / per_token).unwrap_or(i64::MAX);
        if self.tokens.saturating_add(filled) >= self.burst {
            self.tokens = self.burst;
            self.since = now;
        } else {
            self.tokens += filled;
            // `filled` tokens of `per_token` fit in `elapsed`, so this
            // stays at or before `now`.
            self.since += self.per_token * u32::try_from(filled).unwrap_or(u32::MAX);
        }
    }

    /// Whether the bucket is full at `now`: then it is the same as a new
    /// one, and a cache of buckets may forget it.
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.burst
    }

    /// Takes a token if there is one at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            false
        }
    }

    /// Takes a token now or ahead of its refill, and says how long to wait
    /// before using it (zero if it was there): callers that wait in turn
    /// go out at the bucket's rate, in the order they reserved.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1;
        if self.tokens >= 0 {
            return Duration::ZERO;
        }
        // The token lent is the `-tokens`-th to fill from `since`.
        let owed = u32::try_from(-self.tokens).unwrap_or(u32::MAX);
        (self.since + self.per_token.saturating_mul(owed)).saturating_duration_since(now)
    }

    /// Puts back a token taken or reserved and then not used (up to
    /// `burst`): the next reservation goes out one token sooner, so a
    /// caller that gave up leaves no gap in the bucket's rate.
    pub fn give_back(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens + 1).min(self.burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule9_6_token_bucket_bursts_then_refills_at_its_rate() {
        let start = Instant::now();
        let every = Duration::from_secs(300);
        let mut bucket = TokenBucket::new(25, every, start);
        assert!((0..25).all(|_| bucket.try_take(start)));
        assert!(!bucket.try_take(start));
        assert!(!bucket.try_take(start + every - Duration::from_nanos(1)));
        assert!(bucket.try_take(start + every));
        assert!(!bucket.try_take(start + every));
        // Idle for long, it holds its burst and no more.
        let later = start + every * 1000;
        assert!(bucket.is_full(later));
        assert!((0..25).all(|_| bucket.try_take(later)));
        assert!(!bucket.try_take(later));
        // Full again one refill per token taken later, not before.
        assert!(!bucket.is_full(later + every * 25 - Duration::from_nanos(1)));
        assert!(bucket.is_full(later + every * 25));
    }

    #[test]
    fn rule9_6_reservations_go_out_at_the_rate_in_turn() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2, Duration::from_millis(500), start);
        let waits: Vec<_> = (0..4).map(|_| bucket.reserve(start)).collect();
        let ms = Duration::from_millis;
        assert_eq!(waits, [ms(0), ms(0), ms(500), ms(1000)]);
        assert_eq!(bucket.reserve(start + ms(250)), ms(1250));
        // Tokens lent ahead are not there to take.
        assert!(!bucket.try_take(start + ms(1500)));
        assert!(bucket.try_take(start + ms(2000)));
    }

    #[test]
    fn a_token_given_back_goes_to_the_next_caller() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut bucket = TokenBucket::new(1, ms(500), start);
        assert_eq!(bucket.reserve(start), ms(0));
        assert_eq!(bucket.reserve(start), ms(500));
        bucket.give_back(start);
        assert_eq!(bucket.reserve(start), ms(500));
        // A full bucket holds no more than its burst.
        let later = start + ms(5000);
        bucket.give_back(later);
        assert!(bucket.try_take(later));
        assert!(!bucket.try_take(later));
    }

    #[test]
    fn rule9_6_a_rate_of_zero_limits_nothing() {
        let now = Instant::now();
        assert!(RateLimit::new(0.0, 10).bucket(now).is_none());
        assert!(RateLimit::new(f64::NAN, 10).bucket(now).is_none());
        let mut fifty = RateLimit::new(50.0, 0).bucket(now).expect("a limit");
        // A burst of zero still lets one through.
        assert_eq!(fifty.reserve(now), Duration::ZERO);
        assert_eq!(fifty.reserve(now), Duration::from_millis(20));
    }
}
