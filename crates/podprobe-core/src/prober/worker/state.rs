//! The worker's state machine, pure: what one iteration of the kubelet's
//! `doProbe` decides before probing (D1-D10) and after a result (D11-D17).
//! The async loop in [`super`] applies what it returns.

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use k8s_openapi::jiff::Timestamp;

use super::WorkerConfig;
use crate::prober::results::CachedResult;
use crate::prober::takeover::predates_prober;
use crate::spec::restart_policy::container_should_restart;
use crate::spec::{ProbeKind, ProbeVerdict};

/// One change to the worker's results cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheWrite {
    Remove(String),
    Set(String, CachedResult),
}

/// What the worker does after [`WorkerState::before_probe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Wait for the next tick without probing.
    Continue,
    /// End the worker.
    Stop,
    /// Run the probe now.
    Probe,
}

/// Outcome of the pre-probe part of one iteration: cache writes to apply in
/// order, then the action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub writes: Vec<CacheWrite>,
    pub action: Action,
}

/// What one iteration observes besides the worker's own state.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// The status source's current status for the pod, if any.
    pub status: Option<&'a PodStatus>,
    /// Wall-clock now.
    pub now: Timestamp,
    /// Wall-clock time the prober (manager) started.
    pub prober_start: Timestamp,
}

/// The mutable state of one worker (the kubelet's `worker` fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerState {
    /// The last container ID seen in the pod status.
    pub container_id: Option<String>,
    /// The last probe result; starts as `Success`, the zero value (D19).
    pub last_result: CachedResult,
    /// How many times in a row the probe returned `last_result`.
    pub result_run: i64,
    /// Skip probing until the container ID changes (D6, D16).
    pub on_hold: bool,
}

impl WorkerState {
    /// Everything one iteration decides before probing (D1-D10).
    pub fn before_probe(&mut self, config: &WorkerConfig, observed: &Observation<'_>) -> Step {
        let mut writes = Vec::new();
        let action = self.decide(config, observed, &mut writes);
        Step { writes, action }
    }

    fn decide(
        &mut self,
        config: &WorkerConfig,
        observed: &Observation<'_>,
        writes: &mut Vec<CacheWrite>,
    ) -> Action {
        // D1: the pod is not known yet, or no longer.
        let Some(status) = observed.status else {
            return Action::Continue;
        };
        // D2: a terminal pod never runs its containers again.
        if matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")) {
            return Action::Stop;
        }
        // D3: the container has not been created yet, or was deleted.
        let Some((container, id)) = find_container_status(status, config.container_name()) else {
            return Action::Continue;
        };
        if self.container_id.as_deref() != Some(id) {
            self.adopt_container(config, observed, container, id, writes);
        }
        // D6
        if self.on_hold {
            return Action::Continue;
        }
        let running = container
            .state
            .as_ref()
            .and_then(|state| state.running.as_ref());
        let Some(running) = running else {
            // D7
            writes.push(CacheWrite::Set(id.to_string(), CachedResult::Failure));
            return if keeps_probing_stopped_container(config, container) {
                Action::Continue
            } else {
                Action::Stop
            };
        };
        // D8: quiet shutdown of a pod that was already being deleted.
        let deleting = config.pod.metadata.deletion_timestamp.is_some();
        if deleting && matches!(config.kind, ProbeKind::Liveness | ProbeKind::Startup) {
            writes.push(CacheWrite::Set(id.to_string(), CachedResult::Success));
            return Action::Stop;
        }
        // D9
        let started_at = running.started_at.as_ref().map(|t| t.0);
        if within_initial_delay(started_at, observed.now, config.spec.initial_delay_seconds) {
            return Action::Continue;
        }
        // D10: startup probes run until the container is started, the
        // others only after.
        let started = container.started == Some(true);
        let is_startup = config.kind == ProbeKind::Startup;
        if started == is_startup {
            return Action::Continue;
        }
        Action::Probe
    }

    /// D4/D5: a new container ID replaces the old one.
    fn adopt_container(
        &mut self,
        config: &WorkerConfig,
        observed: &Observation<'_>,
        container: &ContainerStatus,
        id: &str,
        writes: &mut Vec<CacheWrite>,
    ) {
        if let Some(previous) = self.container_id.take() {
            writes.push(CacheWrite::Remove(previous));
        }
        self.container_id = Some(id.to_string());
        // ChangeContainerStatusOnKubeletRestart (deprecated, off by default
        // since 1.35): a container that predates the prober keeps whatever
        // was reported before, so no initial value is written for it.
        let started_sidecar = config.is_restartable_init_container()
            && config.kind == ProbeKind::Startup
            && container.started == Some(true);
        if started_sidecar {
            writes.push(CacheWrite::Set(id.to_string(), CachedResult::Success));
        }
        if !predates_prober(container, observed.prober_start, &config.takeover) {
            writes.push(CacheWrite::Set(id.to_string(), config.initial_value()));
        }
        self.on_hold = false;
    }

    /// D13: how many runs in a row will have had `result` once it is
    /// recorded.
    pub fn run_after(&self, result: CachedResult) -> i64 {
        if result == self.last_result {
            self.result_run.saturating_add(1)
        } else {
            1
        }
    }

    /// Thresholds and holding after a probe returned `result` without error
    /// (D13-D17): the write to make, if the result crossed its threshold.
    pub fn after_probe(
        &mut self,
        config: &WorkerConfig,
        result: CachedResult,
    ) -> Option<CacheWrite> {
        // D13
        self.result_run = self.run_after(result);
        self.last_result = result;
        // D14
        let below_threshold = match result {
            CachedResult::Failure => self.result_run < i64::from(config.spec.failure_threshold),
            CachedResult::Success => self.result_run < i64::from(config.spec.success_threshold),
            CachedResult::Unknown => false,
        };
        if below_threshold {
            return None;
        }
        // D16: the container will be restarted (liveness failure) or has
        // reached its startup verdict; wait for a new container.
        let holds = match config.kind {
            ProbeKind::Liveness => result == CachedResult::Failure,
            ProbeKind::Startup => true,
            ProbeKind::Readiness => false,
        };
        if holds {
            self.on_hold = true;
            self.result_run = 0;
        }
        // D15
        let id = self.container_id.clone()?;
        Some(CacheWrite::Set(id, result))
    }
}

/// D3: the container's status with a non-empty ID, from `containerStatuses`
/// and failing that `initContainerStatuses`; first entry by name in each.
fn find_container_status<'a>(
    status: &'a PodStatus,
    name: &str,
) -> Option<(&'a ContainerStatus, &'a str)> {
    let with_id = |statuses: Option<&'a Vec<ContainerStatus>>| {
        let container = statuses?.iter().find(|c| c.name == name)?;
        let id = container
            .container_id
            .as_deref()
            .filter(|id| !id.is_empty())?;
        Some((container, id))
    };
    with_id(status.container_statuses.as_ref())
        .or_else(|| with_id(status.init_container_statuses.as_ref()))
}

/// D7: whether a worker keeps going when its container is not running.
fn keeps_probing_stopped_container(config: &WorkerConfig, container: &ContainerStatus) -> bool {
    // ContainerRestartRules (beta, on by default since 1.35): keep probing
    // while the container would be restarted. A waiting container may still
    // start.
    let terminated = container
        .state
        .as_ref()
        .and_then(|state| state.terminated.as_ref());
    let Some(terminated) = terminated else {
        return true;
    };
    let pod_policy = config
        .pod
        .spec
        .as_ref()
        .and_then(|spec| spec.restart_policy.as_deref());
    container_should_restart(config.container(), pod_policy, terminated.exit_code)
}

/// D9: whether the container is younger than `initialDelaySeconds`, in whole
/// seconds truncated toward zero as Go's `int32(time.Since(t).Seconds())`.
/// A running container always has `startedAt`; without one there is no delay.
fn within_initial_delay(started_at: Option<Timestamp>, now: Timestamp, initial_delay: i32) -> bool {
    let Some(started_at) = started_at else {
        return false;
    };
    let age_seconds = (now.as_nanosecond() - started_at.as_nanosecond()) / 1_000_000_000;
    age_seconds < i128::from(initial_delay)
}

/// The cached result of a verdict, or `None` if it errored (D11).
pub fn verdict_result(verdict: &ProbeVerdict) -> Option<CachedResult> {
    if verdict.error.is_some() {
        return None;
    }
    Some(if verdict.is_success() {
        CachedResult::Success
    } else {
        CachedResult::Failure
    })
}

#[cfg(test)]
mod tests;
