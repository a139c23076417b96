//! The kubelet's CrashLoopBackOff (`doBackOff` over client-go's
//! `flowcontrol.Backoff`), per container of one pod, in memory as in the
//! kubelet (an agent restart forgets it, as a kubelet restart does).
//!
//! Before starting a container again the kubelet looks at the newest
//! *exited* instance in the pod status it synced with: none, and the start
//! goes ahead without touching the back-off; otherwise, if less than the
//! current back-off has passed since that instance finished, the start is
//! held (`back-off 10s restarting failed container=...`), else the back-off
//! doubles (first 10 s, at most 300 s) and the start goes ahead. So a
//! container that keeps crashing restarts at once, then after 10 s, 20 s,
//! 40 s, ...
//!
//! A container the kubelet kills for a failed liveness or startup probe is
//! started again in the same sync, whose pod status still shows the killed
//! instance running: the exited instance it looks at is the one *before* the
//! killed one. Here podprobe kills (a `Killing` event), and the agent
//! applies the same rule the first time it sees the killed instance exited;
//! if that start is held, later syncs look at the killed instance as usual.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// The first wait (the kubelet's `initialContainerBackoff` / `backOffPeriod`).
pub const INITIAL: Duration = Duration::from_secs(10);
/// The longest wait (the kubelet's `MaxContainerBackOff`).
pub const MAX: Duration = Duration::from_secs(300);

/// What to do about a container that should be started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Start it now.
    Now,
    /// Held: `backoff` is the current wait, as the kubelet's message shows
    /// it (`back-off 20s restarting failed container=...`).
    After { backoff: Duration },
}

/// One container's back-off (`flowcontrol.Backoff`'s entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    backoff: Duration,
    last_update: Timestamp,
}

/// The back-off of every container of one pod, by container name.
#[derive(Debug, Default)]
pub struct Backoff {
    entries: BTreeMap<String, Entry>,
    /// Killed instances (CRI IDs) whose kill-time start was held: from then
    /// on the killed instance itself is the one looked at.
    held_kills: BTreeSet<String>,
}

impl Backoff {
    /// `doBackOff` for `container`, whose newest exited instance (the one
    /// the kubelet looks at) finished at `exited_at`, if there is one.
    pub fn restart(
        &mut self,
        container: &str,
        exited_at: Option<Timestamp>,
        now: Timestamp,
    ) -> Restart {
        let Some(exited_at) = exited_at else {
            return Restart::Now;
        };
        let entry = self
            .entries
            .get(container)
            .filter(|e| !expired(exited_at, e.last_update));
        if let Some(entry) = entry
            && elapsed(exited_at, now) < entry.backoff
        {
            return Restart::After {
                backoff: entry.backoff,
            };
        }
        let backoff = entry.map_or(INITIAL, |e| e.backoff.saturating_mul(2).min(MAX));
        self.entries.insert(
            container.to_string(),
            Entry {
                backoff,
                last_update: now,
            },
        );
        Restart::Now
    }

    /// [`restart`](Self::restart) for `container` whose newest instance
    /// `killed` (a CRI ID) was stopped by a probe; `before` is when the
    /// instance before it finished, `killed_at` when the killed one did.
    pub fn restart_killed(
        &mut self,
        container: &str,
        killed: &str,
        before: Option<Timestamp>,
        killed_at: Timestamp,
        now: Timestamp,
    ) -> Restart {
        if self.held_kills.contains(killed) {
            return self.restart(container, Some(killed_at), now);
        }
        let restart = self.restart(container, before, now);
        if restart != Restart::Now {
            self.held_kills.insert(killed.to_string());
        }
        restart
    }
}

/// `hasExpired`: an entry not updated for twice the maximum is forgotten.
fn expired(event: Timestamp, last_update: Timestamp) -> bool {
    elapsed(last_update, event) > MAX * 2
}

/// `to - from`, zero when `to` is earlier.
fn elapsed(from: Timestamp, to: Timestamp) -> Duration {
    to.duration_since(from).try_into().unwrap_or(Duration::ZERO)
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

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn held(seconds: u64) -> Restart {
        Restart::After {
            backoff: Duration::from_secs(seconds),
        }
    }

    #[test]
    fn a_crashing_container_restarts_at_once_then_after_10_20_40_seconds() {
        let mut backoff = Backoff::default();
        // Exits at 0: restarted at once.
        assert_eq!(backoff.restart("app", Some(at(0)), at(0)), Restart::Now);
        // Exits at 1: held until 10 s after that exit.
        assert_eq!(backoff.restart("app", Some(at(1)), at(5)), held(10));
        assert_eq!(backoff.restart("app", Some(at(1)), at(11)), Restart::Now);
        // Exits at 12: now 20 s.
        assert_eq!(backoff.restart("app", Some(at(12)), at(31)), held(20));
        assert_eq!(backoff.restart("app", Some(at(12)), at(32)), Restart::Now);
        assert_eq!(backoff.restart("app", Some(at(33)), at(34)), held(40));
    }

    #[test]
    fn the_wait_stops_doubling_at_five_minutes() {
        let mut backoff = Backoff::default();
        let mut t = 0;
        let mut waits = Vec::new();
        for _ in 0..9 {
            // The container exits at t, as soon as it started.
            let wait = match backoff.restart("app", Some(at(t)), at(t)) {
                Restart::Now => 0,
                Restart::After { backoff: wait } => {
                    let wait = wait.as_secs() as i64;
                    let later = backoff.restart("app", Some(at(t)), at(t + wait));
                    assert_eq!(later, Restart::Now, "after {wait}s");
                    wait
                }
            };
            waits.push(wait);
            t += wait;
        }
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn an_entry_unused_for_ten_minutes_is_forgotten() {
        let mut backoff = Backoff::default();
        assert_eq!(backoff.restart("app", Some(at(0)), at(0)), Restart::Now);
        assert_eq!(backoff.restart("app", Some(at(1)), at(2)), held(10));
        assert_eq!(backoff.restart("app", Some(at(700)), at(701)), Restart::Now);
        assert_eq!(backoff.restart("app", Some(at(702)), at(703)), held(10));
    }

    #[test]
    fn a_probe_kill_looks_at_the_instance_before_the_killed_one() {
        let mut backoff = Backoff::default();
        // First kill: no exited instance before it, no back-off at all.
        assert_eq!(
            backoff.restart_killed("app", "c1", None, at(15), at(15)),
            Restart::Now
        );
        // Second kill, 15 s later: the first one finished 15 s ago; no entry
        // yet, so it starts at 10 s and the start goes ahead.
        assert_eq!(
            backoff.restart_killed("app", "c2", Some(at(15)), at(30), at(30)),
            Restart::Now
        );
        // Third kill: 15 s since the second >= 10 s: goes ahead, now 20 s.
        assert_eq!(
            backoff.restart_killed("app", "c3", Some(at(30)), at(45), at(45)),
            Restart::Now
        );
        // Fourth kill: 15 s since the third < 20 s: held, and from then on
        // the killed instance's own exit counts.
        assert_eq!(
            backoff.restart_killed("app", "c4", Some(at(45)), at(60), at(60)),
            held(20)
        );
        assert_eq!(
            backoff.restart_killed("app", "c4", Some(at(45)), at(60), at(67)),
            held(20)
        );
        assert_eq!(
            backoff.restart_killed("app", "c4", Some(at(45)), at(60), at(80)),
            Restart::Now
        );
    }

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(160)), "2m40s");
        assert_eq!(go_duration(MAX), "5m0s");
    }
}
