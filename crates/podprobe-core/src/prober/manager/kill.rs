//! Which containers a liveness or startup failure kills, with which message
//! and grace period (K2, K3): the decision half of the kubelet's pod sync
//! kill; the actuator carries it out through a [`Killer`].

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};

use super::pod_probes::PodProbes;
use super::view::ProbeStateView;
use crate::prober::results::CachedResult;
use crate::spec::ProbeKind;
use crate::spec::probe_spec::extension::workload_options::RestartBudget;
use crate::spec::restart_policy::RestartPolicy;
use crate::util::pod::{is_restartable_init_container, is_running};

/// The kubelet's minimum grace period for stopping a container
/// (`minimumGracePeriodInSeconds`).
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;

/// A running container that a probe failure kills (K2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeKill {
    pub container: String,
    /// Container ID as in the pod status (`containerd://abc`).
    pub container_id: String,
    /// `Liveness` or `Startup`.
    pub kind: ProbeKind,
    /// Message of the Normal `Killing` event.
    pub message: String,
    /// The kubelet's grace period for the kill (K3), before a preStop hook
    /// takes its time out of it; `StopContainer` gets
    /// [`grace_left`](crate::lifecycle::grace_left) of it (K7).
    pub grace_period_seconds: i64,
    /// A liveness kill's `podprobe.restartBudget` (WG2): the kill waits for
    /// a unit of the workload's budget.
    pub restart_budget: Option<RestartBudget>,
}

/// Carries out the kills [`probe_kills`] decides (K2). The daemon's sync
/// loop asks again on every pod sync while the container runs with the
/// failure cached, so an implementation returns at once and stops each
/// container instance once. `kill_container::ContainerKiller` stops it
/// through the runtime; the loop's unit tests record what it is asked.
pub trait Killer {
    /// Starts stopping `kill`'s container of `pod` unless it is already
    /// being stopped; never waits.
    fn kill(&self, pod: &Pod, kill: ProbeKill);

    /// Forgets every stopped container ID but those in `listed` (the IDs
    /// pod statuses still name).
    fn retain(&self, listed: &HashSet<String>);

    /// Container IDs it keeps (#39): none once no pod status names one.
    fn containers(&self) -> usize;
}

/// Which running containers of `pod` the kubelet's pod sync would kill
/// because of a cached liveness or startup `Failure` (K2), in spec order.
///
/// Regular containers: liveness first, then startup; the message gets
/// `, will be restarted` when the container would be restarted. Restartable
/// init containers (the init-container path): startup first, and liveness
/// only once startup succeeded (or there is no startup probe); messages say
/// `Init container` and never carry the suffix.
pub fn probe_kills(
    pod: &Pod,
    probes: &PodProbes,
    status: &PodStatus,
    view: &impl ProbeStateView,
) -> Vec<ProbeKill> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let find = |statuses: Option<&Vec<ContainerStatus>>, name: &str| {
        let status = statuses?.iter().find(|c| c.name == name)?;
        let id = status.container_id.as_deref().filter(|id| !id.is_empty())?;
        is_running(status).then(|| id.to_string())
    };
    let mut kills = Vec::new();
    for container in &spec.containers {
        let Some(id) = find(status.container_statuses.as_ref(), &container.name) else {
            continue;
        };
        let failed = |kind| view.cached(kind, &id) == Some(CachedResult::Failure);
        let Some(kind) = [ProbeKind::Liveness, ProbeKind::Startup]
            .into_iter()
            .find(|&k| failed(k))
        else {
            continue;
        };
        let mut message = format!(
            "Container {} failed {} probe",
            container.name,
            kill_reason(kind)
        );
        // The kubelet restarts a container it kills unless its policy is
        // `Never`, whatever the exit code.
        if RestartPolicy::of(container, spec.restart_policy.as_deref()) != RestartPolicy::Never {
            message.push_str(", will be restarted");
        }
        kills.push(probe_kill(pod, probes, container, id, kind, message));
    }
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_restartable_init_container(c));
    for container in sidecars {
        let Some(id) = find(status.init_container_statuses.as_ref(), &container.name) else {
            continue;
        };
        let Some(kind) = sidecar_kill_kind(probes, view, &container.name, &id) else {
            continue;
        };
        let message = format!(
            "Init container {} failed {} probe",
            container.name,
            kill_reason(kind)
        );
        kills.push(probe_kill(pod, probes, container, id, kind, message));
    }
    kills
}

/// The init-container path's order: a startup probe must have succeeded
/// before liveness is looked at.
fn sidecar_kill_kind(
    probes: &PodProbes,
    view: &impl ProbeStateView,
    name: &str,
    id: &str,
) -> Option<ProbeKind> {
    if probes.get(name, ProbeKind::Startup).is_some() {
        match view.cached(ProbeKind::Startup, id)? {
            CachedResult::Success => {}
            CachedResult::Failure => return Some(ProbeKind::Startup),
            CachedResult::Unknown => return None,
        }
    }
    let has_liveness = probes.get(name, ProbeKind::Liveness).is_some();
    let failed = view.cached(ProbeKind::Liveness, id) == Some(CachedResult::Failure);
    (has_liveness && failed).then_some(ProbeKind::Liveness)
}

fn probe_kill(
    pod: &Pod,
    probes: &PodProbes,
    container: &Container,
    container_id: String,
    kind: ProbeKind,
    message: String,
) -> ProbeKill {
    let spec = probes.get(&container.name, kind);
    let probe_grace = spec.and_then(|spec| spec.termination_grace_period_seconds);
    ProbeKill {
        container: container.name.clone(),
        container_id,
        kind,
        message,
        grace_period_seconds: kill_grace_period(pod, probe_grace),
        restart_budget: spec.and_then(|spec| spec.workload.restart_budget),
    }
}

pub fn kill_reason(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Liveness => "liveness",
        ProbeKind::Readiness => "readiness",
        ProbeKind::Startup => "startup",
    }
}

/// K3: the grace period for killing a container after a probe failure, as
/// the kubelet's `setTerminationGracePeriod` computes it: the pod's
/// `deletionGracePeriodSeconds` if set; else, when the pod spec has
/// `terminationGracePeriodSeconds`, the failing probe's own
/// `terminationGracePeriodSeconds` (`probe_grace`) or failing that the
/// pod's; else [`MINIMUM_GRACE_PERIOD_SECONDS`]. A preStop hook runs only if
/// this is positive and takes its time out of it; `StopContainer` never gets
/// less than the minimum (K7, [`crate::lifecycle::grace_left`]).
pub fn kill_grace_period(pod: &Pod, probe_grace: Option<i64>) -> i64 {
    let pod_grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds);
    match (pod.metadata.deletion_grace_period_seconds, pod_grace) {
        (Some(deletion), _) => deletion,
        (None, Some(pod_grace)) => probe_grace.unwrap_or(pod_grace),
        (None, None) => MINIMUM_GRACE_PERIOD_SECONDS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    const C1: &str = "containerd://c1";

    fn kill_pod(restart_policy: Option<&str>) -> Pod {
        let mut pod = pod(
            "uid-1",
            vec![container("app"), container("other")],
            vec![sidecar("side")],
        );
        let spec = pod.spec.as_mut().unwrap();
        spec.restart_policy = restart_policy.map(str::to_string);
        spec.termination_grace_period_seconds = Some(30);
        pod
    }

    fn kill_status() -> PodStatus {
        pod_status(
            vec![
                running("app", C1, at(100), Some(true)),
                running("other", "containerd://c2", at(100), Some(true)),
            ],
            vec![running("side", "containerd://s", at(100), Some(true))],
        )
    }

    #[test]
    fn k2_liveness_failure_kills_with_restart_message() {
        let view = FakeView::default()
            .with_result(ProbeKind::Liveness, C1, CachedResult::Failure)
            .with_result(ProbeKind::Startup, C1, CachedResult::Failure)
            .with_result(
                ProbeKind::Liveness,
                "containerd://c2",
                CachedResult::Success,
            );
        let kills = probe_kills(&kill_pod(None), &PodProbes::new(), &kill_status(), &view);
        assert_eq!(
            kills,
            vec![ProbeKill {
                container: "app".to_string(),
                container_id: C1.to_string(),
                kind: ProbeKind::Liveness,
                message: "Container app failed liveness probe, will be restarted".to_string(),
                grace_period_seconds: 30,
                restart_budget: None,
            }]
        );
    }

    #[test]
    fn k2_startup_failure_and_never_policy() {
        let view = FakeView::default().with_result(ProbeKind::Startup, C1, CachedResult::Failure);
        let kills = probe_kills(
            &kill_pod(Some("Never")),
            &PodProbes::new(),
            &kill_status(),
            &view,
        );
        assert_eq!(kills.len(), 1);
        assert_eq!(kills[0].kind, ProbeKind::Startup);
        assert_eq!(kills[0].message, "Container app failed startup probe");
    }

    #[test]
    fn k2_stopped_container_is_not_killed() {
        let view = FakeView::default().with_result(ProbeKind::Liveness, C1, CachedResult::Failure);
        let status = pod_status(vec![terminated("app", C1, 1)], vec![]);
        assert!(probe_kills(&kill_pod(None), &PodProbes::new(), &status, &view).is_empty());
    }

    #[test]
    fn k2_restartable_init_container_checks_startup_first() {
        let sidecar_probes =
            pod_probes(&[("side", ProbeKind::Startup), ("side", ProbeKind::Liveness)]);
        let side = "containerd://s";
        let liveness_failed =
            FakeView::default().with_result(ProbeKind::Liveness, side, CachedResult::Failure);
        assert!(
            probe_kills(
                &kill_pod(None),
                &sidecar_probes,
                &kill_status(),
                &liveness_failed
            )
            .is_empty(),
            "no startup result yet: liveness is not looked at"
        );
        let started = liveness_failed.with_result(ProbeKind::Startup, side, CachedResult::Success);
        let kills = probe_kills(&kill_pod(None), &sidecar_probes, &kill_status(), &started);
        assert_eq!(kills.len(), 1);
        assert_eq!(
            kills[0].message,
            "Init container side failed liveness probe"
        );
        let startup_failed =
            FakeView::default().with_result(ProbeKind::Startup, side, CachedResult::Failure);
        let kills = probe_kills(
            &kill_pod(None),
            &sidecar_probes,
            &kill_status(),
            &startup_failed,
        );
        assert_eq!(kills[0].message, "Init container side failed startup probe");
        assert_eq!(kills[0].kind, ProbeKind::Startup);
    }

    #[test]
    fn k3_grace_period_rules() {
        let mut pod = kill_pod(None);
        assert_eq!(
            kill_grace_period(&pod, None),
            30,
            "pod terminationGracePeriodSeconds"
        );
        assert_eq!(
            kill_grace_period(&pod, Some(5)),
            5,
            "probe-level value wins"
        );
        assert_eq!(
            kill_grace_period(&pod, Some(60)),
            60,
            "even when larger than the pod's"
        );
        assert_eq!(
            kill_grace_period(&pod, Some(1)),
            1,
            "not floored before the preStop hook (K7 floors what is left)"
        );
        pod.metadata.deletion_grace_period_seconds = Some(7);
        assert_eq!(
            kill_grace_period(&pod, Some(5)),
            7,
            "deletion grace period first"
        );
        pod.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(
            kill_grace_period(&pod, None),
            0,
            "no time for a preStop hook"
        );
        pod.metadata.deletion_grace_period_seconds = None;
        pod.spec.as_mut().unwrap().termination_grace_period_seconds = None;
        assert_eq!(
            kill_grace_period(&pod, Some(20)),
            2,
            "probe value needs a pod value"
        );
    }

    #[test]
    fn k3_probe_kill_uses_the_failing_probes_grace_period() {
        let mut probes = PodProbes::new();
        let mut liveness = probe_spec(10, 0, 1, 3);
        liveness.termination_grace_period_seconds = Some(9);
        probes.insert("app", ProbeKind::Liveness, liveness);
        let view = FakeView::default().with_result(ProbeKind::Liveness, C1, CachedResult::Failure);
        let kills = probe_kills(&kill_pod(None), &probes, &kill_status(), &view);
        assert_eq!(kills[0].grace_period_seconds, 9);
    }
}
