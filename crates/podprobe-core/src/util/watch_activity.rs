//! When the pod watch last heard from the API server: written by the API
//! client's watch tracking, read by `/readyz` and the metrics.

use std::fmt::Display;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// When the pod watch last received something from the API server (a
/// watch's response, an event, a bookmark) and whether it failed since.
#[derive(Debug)]
pub struct WatchActivity {
    state: Mutex<ActivityState>,
}

#[derive(Debug)]
struct ActivityState {
    /// The last receipt, or when tracking started.
    received: Instant,
    /// A failure after the last receipt, and why.
    failure: Option<String>,
}

impl WatchActivity {
    /// Tracking from now on, with nothing received yet.
    pub fn new() -> Arc<WatchActivity> {
        Arc::new(WatchActivity {
            state: Mutex::new(ActivityState {
                received: Instant::now(),
                failure: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A watch response or part of one arrived.
    pub fn received(&self) {
        let mut state = self.lock();
        state.received = Instant::now();
        state.failure = None;
    }

    /// A watch request or its stream failed.
    pub fn failed(&self, why: impl Display) {
        self.lock().failure = Some(why.to_string());
    }

    /// How long since the watch last received anything (or since tracking
    /// started).
    pub fn idle(&self) -> Duration {
        self.lock().received.elapsed()
    }

    /// `Ok` while the watch works: no failure since it last received, and
    /// it received within `silence_bound`; else why not.
    pub fn health(&self, silence_bound: Duration) -> Result<(), String> {
        let state = self.lock();
        if let Some(why) = &state.failure {
            return Err(format!("pod watch failing: {why}"));
        }
        let idle = state.received.elapsed();
        if idle > silence_bound {
            return Err(format!(
                "pod watch silent for {:.0}s (limit {:.0}s)",
                idle.as_secs_f64(),
                silence_bound.as_secs_f64()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failure_counts_until_the_watch_receives_again() {
        let activity = WatchActivity::new();
        let bound = Duration::from_secs(90);
        assert_eq!(activity.health(bound), Ok(()));
        activity.failed("connection refused");
        assert_eq!(
            activity.health(bound),
            Err("pod watch failing: connection refused".into())
        );
        activity.received();
        assert_eq!(activity.health(bound), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_watch_turns_unhealthy_after_the_bound() {
        let activity = WatchActivity::new();
        let bound = Duration::from_secs(90);
        tokio::time::advance(Duration::from_secs(89)).await;
        assert_eq!(activity.health(bound), Ok(()));
        activity.received();
        tokio::time::advance(Duration::from_secs(91)).await;
        assert_eq!(
            activity.health(bound),
            Err("pod watch silent for 91s (limit 90s)".into())
        );
        assert_eq!(activity.idle(), Duration::from_secs(91));
    }
}
