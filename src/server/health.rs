//! Liveness and readiness of `podprobe run`, set by the daemon and read by
//! `/healthz` and `/readyz`.
//!
//! Ready means podprobe's view of the node's pods is current and it can act
//! on it: the pod watch has listed the pods, has not failed since it last
//! received and has not been silent beyond [`WATCH_SILENCE_BOUND`]; the API
//! server answered the latest check; the container runtime answered its
//! latest check (or is not needed). A podprobe that is not ready keeps
//! probing and retrying: readiness only tells operators and monitoring that
//! pod status may be going stale.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use podprobe_core::util::watch_activity::WatchActivity;

/// The pod watch's server-side timeout: the API server ends every watch
/// after this and podprobe starts the next, so a healthy watch receives a
/// response at least this often even on a node where no pod changes.
pub const WATCH_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the pod watch may receive nothing before `/readyz` fails: the
/// watch's timeout plus room for a reconnect at the watch backoff's cap on
/// a loaded API server.
pub const WATCH_SILENCE_BOUND: Duration = Duration::from_secs(90);

/// Whether podprobe can reach a service it depends on (the API server, the
/// container runtime).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reachability {
    /// Not configured and not needed (a runtime without exec probes or
    /// kills); readiness does not wait for it.
    NotNeeded,
    /// Not (yet) answering; the text says why.
    Unreachable(String),
    /// Answered the last check.
    Reachable,
}

#[derive(Debug)]
struct HealthState {
    last_beat: Instant,
    pods_synced: bool,
    api: Reachability,
    cri: Reachability,
}

/// Liveness and readiness of the daemon. Cheap to clone; all clones share
/// one state.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<Mutex<HealthState>>,
    watch: Arc<WatchActivity>,
    stale_after: Duration,
}

impl Health {
    /// Alive until `stale_after` passes without a [`Health::beat`]; not
    /// ready until the pod watch has synced and both the API server and the
    /// runtime answered a check.
    pub fn new(stale_after: Duration, watch: Arc<WatchActivity>) -> Self {
        let not_checked = || Reachability::Unreachable("not checked yet".to_string());
        Health {
            state: Arc::new(Mutex::new(HealthState {
                last_beat: Instant::now(),
                pods_synced: false,
                api: not_checked(),
                cri: not_checked(),
            })),
            watch,
            stale_after,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HealthState> {
        // The state stays consistent whatever a panicking holder did: every
        // write is a single field assignment.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The main loop is alive; call at least once per `stale_after`.
    pub fn beat(&self) {
        self.lock().last_beat = Instant::now();
    }

    /// Whether the pod watch has listed the node's pods.
    pub fn set_pods_synced(&self, synced: bool) {
        self.lock().pods_synced = synced;
    }

    /// Records the result of the daemon's latest API server check.
    pub fn set_api(&self, api: Reachability) {
        self.lock().api = api;
    }

    /// Records the result of the daemon's latest runtime check.
    pub fn set_cri(&self, cri: Reachability) {
        self.lock().cri = cri;
    }

    /// `Ok` if alive, else why not.
    pub fn liveness(&self) -> Result<(), String> {
        let since = self.lock().last_beat.elapsed();
        if since <= self.stale_after {
            Ok(())
        } else {
            Err(format!(
                "main loop has not run for {:.1}s (limit {:.1}s)",
                since.as_secs_f64(),
                self.stale_after.as_secs_f64()
            ))
        }
    }

    /// `Ok` if ready, else every reason why not.
    pub fn readiness(&self) -> Result<(), String> {
        let state = self.lock();
        let mut reasons = Vec::new();
        if !state.pods_synced {
            reasons.push("pod watch has not synced".to_string());
        }
        if let Err(why) = self.watch.health(WATCH_SILENCE_BOUND) {
            reasons.push(why);
        }
        if let Reachability::Unreachable(why) = &state.api {
            reasons.push(format!("API server unreachable: {why}"));
        }
        if let Reachability::Unreachable(why) = &state.cri {
            reasons.push(format!("container runtime unreachable: {why}"));
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn healthz_goes_stale_without_beats() {
        let health = Health::new(Duration::from_secs(30), WatchActivity::new());
        assert_eq!(health.liveness(), Ok(()));
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(
            health.liveness(),
            Err("main loop has not run for 31.0s (limit 30.0s)".to_string())
        );
        health.beat();
        assert_eq!(health.liveness(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn readyz_lists_every_reason() {
        let watch = WatchActivity::new();
        let health = Health::new(Duration::from_secs(30), watch.clone());
        assert_eq!(
            health.readiness(),
            Err(
                "pod watch has not synced; API server unreachable: not checked yet; \
                 container runtime unreachable: not checked yet"
                    .into()
            )
        );
        health.set_pods_synced(true);
        health.set_api(Reachability::Reachable);
        health.set_cri(Reachability::Reachable);
        assert_eq!(health.readiness(), Ok(()));
        health.set_cri(Reachability::NotNeeded);
        assert_eq!(health.readiness(), Ok(()));
        watch.failed("connection reset");
        health.set_api(Reachability::Unreachable("timed out".into()));
        assert_eq!(
            health.readiness(),
            Err("pod watch failing: connection reset; API server unreachable: timed out".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn readyz_fails_when_the_watch_goes_silent() {
        let watch = WatchActivity::new();
        let health = Health::new(Duration::from_secs(300), watch.clone());
        health.set_pods_synced(true);
        health.set_api(Reachability::Reachable);
        health.set_cri(Reachability::NotNeeded);
        tokio::time::advance(WATCH_SILENCE_BOUND).await;
        assert_eq!(health.readiness(), Ok(()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(health.readiness().unwrap_err().contains("silent"));
        watch.received();
        assert_eq!(health.readiness(), Ok(()));
    }
}
