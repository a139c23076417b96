//! Wall-clock time for the worker's comparisons with `startedAt` (D5, D9):
//! the system's, or one that advances with tokio's clock so that a paused
//! test runtime controls both scheduling and container ages.

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

/// Wall-clock time, compared with the runtime's `startedAt` timestamps.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let nanos = i128::try_from(since_epoch.as_nanos()).unwrap_or(i128::MAX);
        Timestamp::from_nanosecond(nanos).unwrap_or(Timestamp::MAX)
    }
}

/// Wall-clock time that advances with tokio's clock from a fixed origin, so
/// that a paused test runtime controls both scheduling and `startedAt` ages.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin_wall: Timestamp,
    origin: Instant,
}

impl TokioClock {
    /// A clock reading `origin_wall` now.
    pub fn new(origin_wall: Timestamp) -> Self {
        TokioClock {
            origin_wall,
            origin: Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = i128::try_from(self.origin.elapsed().as_nanos()).unwrap_or(i128::MAX);
        let nanos = self.origin_wall.as_nanosecond().saturating_add(elapsed);
        Timestamp::from_nanosecond(nanos).unwrap_or(Timestamp::MAX)
    }
}
