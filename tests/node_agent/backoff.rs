//! The kubelet's CrashLoopBackOff: the first restart of a container happens
//! at once; after that the wait before each restart doubles from 10 s up to
//! 300 s, counted from the moment the previous instance exited.
//!
//! The kubelet keeps the current wait per container in memory; here it is
//! derived from the restart count of the instance that exited (the CRI
//! attempt), so an agent restart does not reset it.

use std::time::Duration;

/// The first wait (the kubelet's `initialContainerBackoff` / `backOffPeriod`).
pub const INITIAL: Duration = Duration::from_secs(10);
/// The longest wait (the kubelet's `MaxContainerBackOff`).
pub const MAX: Duration = Duration::from_secs(300);

/// What to do about an exited instance that should be restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Restart it now.
    Now,
    /// Wait `remaining` more; `backoff` is the whole wait, as the kubelet's
    /// message shows it (`back-off 20s restarting failed container=...`).
    After {
        backoff: Duration,
        remaining: Duration,
    },
}

/// The wait before restarting an instance whose restart count is
/// `restart_count`: none for the first restart, then 10 s, 20 s, 40 s, ...
/// up to [`MAX`].
pub fn wait_after(restart_count: u32) -> Duration {
    if restart_count == 0 {
        return Duration::ZERO;
    }
    let doublings = (restart_count - 1).min(31);
    INITIAL.saturating_mul(1 << doublings).min(MAX)
}

/// Whether an instance with `restart_count` restarts before it, that exited
/// `since_exit` ago, may be restarted now.
pub fn restart(restart_count: u32, since_exit: Duration) -> Restart {
    let backoff = wait_after(restart_count);
    match backoff.checked_sub(since_exit) {
        Some(remaining) if !remaining.is_zero() => Restart::After { backoff, remaining },
        _ => Restart::Now,
    }
}

/// A wait as Go's `time.Duration` prints whole seconds and minutes
/// (`10s`, `2m40s`, `5m0s`), for the CrashLoopBackOff message.
pub fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m{}s", secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_restart_is_immediate_then_the_wait_doubles_to_five_minutes() {
        let waits: Vec<u64> = (0..9).map(|n| wait_after(n).as_secs()).collect();
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(wait_after(u32::MAX), MAX);
    }

    #[test]
    fn restart_waits_out_the_backoff_from_the_exit() {
        assert_eq!(restart(0, Duration::ZERO), Restart::Now);
        assert_eq!(
            restart(2, Duration::from_secs(5)),
            Restart::After {
                backoff: Duration::from_secs(20),
                remaining: Duration::from_secs(15)
            }
        );
        assert_eq!(restart(2, Duration::from_secs(20)), Restart::Now);
        assert_eq!(restart(1, Duration::from_secs(60)), Restart::Now);
    }

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(160)), "2m40s");
        assert_eq!(go_duration(MAX), "5m0s");
    }
}
