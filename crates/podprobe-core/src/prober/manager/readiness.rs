//! The kubelet's `UpdatePodStatus`, pure: container `started` and `ready`
//! from the results caches (S1-S5), and which readiness workers to nudge.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;

use super::pod_probes::PodProbes;
use super::view::ProbeStateView;
use crate::prober::results::CachedResult;
use crate::prober::takeover::{Takeover, predates_prober};
use crate::spec::ProbeKind;
use crate::util::pod::{is_restartable_init_container, is_running};

/// Whether the pod's `Ready` condition is `True`.
pub fn pod_ready_condition(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Inputs of [`set_started_and_ready`] besides the prober's state.
#[derive(Debug, Clone, Copy)]
pub struct StatusInputs<'a> {
    /// The pod: its spec matches init container statuses (S5).
    pub pod: &'a Pod,
    /// Which containers have a readiness probe (S4).
    pub probes: &'a PodProbes,
    /// Wall-clock time the prober started (S4).
    pub prober_start: Timestamp,
    /// Whether the pod was Ready before this update (S4): the kubelet reads
    /// the pod's current `Ready` condition; see [`pod_ready_condition`].
    pub pod_ready: bool,
}

/// The pure part of `UpdatePodStatus` (S1-S5): sets `started` of every
/// container and init container status and `ready` where the kubelet does.
/// Returns the names of the containers whose readiness worker should be
/// triggered to probe now (S3).
pub fn set_started_and_ready(
    inputs: &StatusInputs<'_>,
    view: &impl ProbeStateView,
    status: &mut PodStatus,
) -> Vec<String> {
    let mut nudges = Vec::new();
    let spec = inputs.pod.spec.as_ref();
    let regular: HashSet<&str> = spec
        .into_iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.as_str()))
        .collect();
    for container in status.container_statuses.iter_mut().flatten() {
        let started = is_started(view, container);
        container.started = Some(started);
        // S2: the field keeps what the status was built with.
        if started {
            let has_spec = regular.contains(container.name.as_str());
            container.ready = readiness(inputs, view, container, has_spec, &mut nudges);
        }
    }
    let init_specs = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    for (index, container) in status
        .init_container_statuses
        .iter_mut()
        .flatten()
        .enumerate()
    {
        let started = is_started(view, container);
        container.started = Some(started);
        // Init statuses are kept in spec order; a mismatch is skipped.
        let Some(init_spec) = init_specs.get(index).filter(|c| c.name == container.name) else {
            continue;
        };
        if !is_restartable_init_container(init_spec) {
            // S5: a regular init container is ready once it exited 0.
            if exited_successfully(container) {
                container.ready = true;
            }
            continue;
        }
        if started {
            container.ready = readiness(inputs, view, container, true, &mut nudges);
        }
    }
    nudges
}

/// S1.
fn is_started(view: &impl ProbeStateView, container: &ContainerStatus) -> bool {
    if !is_running(container) {
        return false;
    }
    let id = container.container_id.as_deref().unwrap_or_default();
    if let Some(result) = view.cached(ProbeKind::Startup, id) {
        return result == CachedResult::Success;
    }
    // ChangeContainerStatusOnKubeletRestart (deprecated, off by default since
    // 1.35): a container already reported started stays started.
    if container.started == Some(true) {
        return true;
    }
    // A startup probe that has not run yet.
    !view.has_worker(&container.name, ProbeKind::Startup)
}

/// S3 and S4, for a started container.
fn readiness(
    inputs: &StatusInputs<'_>,
    view: &impl ProbeStateView,
    container: &ContainerStatus,
    has_spec: bool,
    nudges: &mut Vec<String>,
) -> bool {
    if !is_running(container) {
        return false;
    }
    let id = container.container_id.as_deref().unwrap_or_default();
    let cached = view.cached(ProbeKind::Readiness, id);
    if cached == Some(CachedResult::Success) {
        return true;
    }
    let has_worker = view.has_worker(&container.name, ProbeKind::Readiness);
    if has_worker {
        nudges.push(container.name.clone());
    }
    let mut ready = !has_worker;
    // ChangeContainerStatusOnKubeletRestart (deprecated, off by default since
    // 1.35): S4, keep a container that predates the prober ready across a
    // restart of the prober unless the pod was not Ready (or, beyond the
    // kubelet, the instance itself was vouched for as ready).
    let takeover = inputs.probes.takeover();
    if has_spec && predates_prober(container, inputs.prober_start, takeover) {
        if !ready && cached.is_none() {
            ready = true;
        }
        let has_readiness_probe = inputs
            .probes
            .get(&container.name, ProbeKind::Readiness)
            .is_some();
        let vouched_ready = matches!(**takeover, Takeover::Vouched(_));
        if has_readiness_probe && !inputs.pod_ready && !vouched_ready {
            ready = false;
        }
    }
    ready
}

fn exited_successfully(container: &ContainerStatus) -> bool {
    let terminated = container.state.as_ref().and_then(|s| s.terminated.as_ref());
    terminated.is_some_and(|t| t.exit_code == 0)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodCondition;

    use super::*;
    use crate::testing::*;

    const C1: &str = "containerd://c1";

    /// Runs the derivation for one regular container "app" whose status is
    /// `container`; the prober started at `epoch()`.
    fn derive(
        view: &FakeView,
        container: ContainerStatus,
        probes: &PodProbes,
        pod_ready: bool,
    ) -> (ContainerStatus, Vec<String>) {
        let pod = pod("uid-1", vec![self::container("app")], vec![]);
        let inputs = StatusInputs {
            pod: &pod,
            probes,
            prober_start: epoch(),
            pod_ready,
        };
        let mut status = pod_status(vec![container], vec![]);
        let nudges = set_started_and_ready(&inputs, view, &mut status);
        (status.container_statuses.unwrap().remove(0), nudges)
    }

    fn fresh(started: Option<bool>) -> ContainerStatus {
        running("app", C1, at(100), started)
    }

    #[test]
    fn s1_started_derivation() {
        use CachedResult::{Failure, Success, Unknown};
        let none = PodProbes::new();
        let cases = [
            (
                "not running",
                FakeView::default(),
                waiting("app", C1),
                false,
            ),
            (
                "startup success",
                FakeView::default().with_result(ProbeKind::Startup, C1, Success),
                fresh(None),
                true,
            ),
            (
                "startup unknown beats started flag",
                FakeView::default().with_result(ProbeKind::Startup, C1, Unknown),
                fresh(Some(true)),
                false,
            ),
            (
                "startup failure",
                FakeView::default().with_result(ProbeKind::Startup, C1, Failure),
                fresh(None),
                false,
            ),
            (
                "already started, no result",
                FakeView::default().with_worker("app", ProbeKind::Startup),
                fresh(Some(true)),
                true,
            ),
            (
                "startup worker pending",
                FakeView::default().with_worker("app", ProbeKind::Startup),
                fresh(Some(false)),
                false,
            ),
            ("no startup probe", FakeView::default(), fresh(None), true),
        ];
        for (name, view, container, want) in cases {
            let (status, _) = derive(&view, container, &none, true);
            assert_eq!(status.started, Some(want), "{name}");
        }
    }

    #[test]
    fn s2_ready_untouched_until_started() {
        let view = FakeView::default()
            .with_worker("app", ProbeKind::Startup)
            .with_worker("app", ProbeKind::Readiness)
            .with_result(ProbeKind::Readiness, C1, CachedResult::Success);
        let (status, nudges) = derive(&view, fresh(None), &PodProbes::new(), true);
        assert_eq!(status.started, Some(false));
        assert!(!status.ready);
        assert!(nudges.is_empty(), "no nudge before the container started");
    }

    #[test]
    fn s3_ready_derivation_and_nudges() {
        let probes = pod_probes(&[("app", ProbeKind::Readiness)]);
        let success = FakeView::default()
            .with_worker("app", ProbeKind::Readiness)
            .with_result(ProbeKind::Readiness, C1, CachedResult::Success);
        assert_eq!(
            derive(&success, fresh(None), &probes, true),
            (
                ContainerStatus {
                    started: Some(true),
                    ready: true,
                    ..fresh(None)
                },
                vec![]
            )
        );

        let failing = FakeView::default()
            .with_worker("app", ProbeKind::Readiness)
            .with_result(ProbeKind::Readiness, C1, CachedResult::Failure);
        let (status, nudges) = derive(&failing, fresh(None), &probes, true);
        assert!(!status.ready);
        assert_eq!(nudges, vec!["app".to_string()]);

        let pending = FakeView::default().with_worker("app", ProbeKind::Readiness);
        let (status, nudges) = derive(&pending, fresh(None), &probes, true);
        assert!(!status.ready);
        assert_eq!(nudges, vec!["app".to_string()]);

        let (status, nudges) = derive(&FakeView::default(), fresh(None), &PodProbes::new(), false);
        assert!(status.ready, "no readiness probe: ready when started");
        assert!(nudges.is_empty());
    }

    #[test]
    fn s4_container_older_than_prober_keeps_ready() {
        let probes = pod_probes(&[("app", ProbeKind::Readiness)]);
        let old = || running("app", C1, at(-11), Some(true));
        let pending = FakeView::default().with_worker("app", ProbeKind::Readiness);
        let (status, nudges) = derive(&pending, old(), &probes, true);
        assert!(
            status.ready,
            "pod was Ready: stays ready until a result is cached"
        );
        assert_eq!(
            nudges,
            vec!["app".to_string()],
            "the worker is still nudged"
        );

        let (status, _) = derive(&pending, old(), &probes, false);
        assert!(
            !status.ready,
            "pod was not Ready: a readiness probe decides"
        );

        let failed = pending.with_result(ProbeKind::Readiness, C1, CachedResult::Failure);
        let (status, _) = derive(&failed, old(), &probes, true);
        assert!(!status.ready, "a cached result wins");

        let recent = FakeView::default().with_worker("app", ProbeKind::Readiness);
        let (status, _) = derive(
            &recent,
            running("app", C1, at(-9), Some(true)),
            &probes,
            true,
        );
        assert!(
            !status.ready,
            "started within the grace period: no adjustment"
        );
    }

    #[test]
    fn s5_init_containers() {
        let pod = pod(
            "uid-1",
            vec![container("app")],
            vec![container("setup"), sidecar("side"), container("late")],
        );
        let probes = pod_probes(&[("side", ProbeKind::Readiness), ("side", ProbeKind::Startup)]);
        let inputs = StatusInputs {
            pod: &pod,
            probes: &probes,
            prober_start: epoch(),
            pod_ready: true,
        };
        let view = FakeView::default()
            .with_worker("side", ProbeKind::Readiness)
            .with_worker("side", ProbeKind::Startup)
            .with_result(
                ProbeKind::Startup,
                "containerd://side",
                CachedResult::Success,
            );
        let mut status = pod_status(
            vec![],
            vec![
                terminated("setup", "containerd://setup", 0),
                running("side", "containerd://side", at(100), None),
                // Out of spec order: skipped after `started`.
                terminated("other", "containerd://other", 0),
            ],
        );
        let nudges = set_started_and_ready(&inputs, &view, &mut status);
        let init = status.init_container_statuses.unwrap();
        assert_eq!(
            (init[0].started, init[0].ready),
            (Some(false), true),
            "exited 0"
        );
        assert_eq!(
            (init[1].started, init[1].ready),
            (Some(true), false),
            "sidecar: readiness pending"
        );
        assert_eq!(
            (init[2].started, init[2].ready),
            (Some(false), false),
            "mismatched entry"
        );
        assert_eq!(nudges, vec!["side".to_string()]);

        let mut failed = pod_status(vec![], vec![terminated("setup", "containerd://setup", 1)]);
        set_started_and_ready(&inputs, &view, &mut failed);
        assert!(!failed.init_container_statuses.unwrap()[0].ready);
    }

    #[test]
    fn pod_ready_condition_reads_ready_true() {
        let mut pod = pod("uid-1", vec![], vec![]);
        assert!(!pod_ready_condition(&pod));
        let condition = |type_: &str, status: &str| PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            ..PodCondition::default()
        };
        pod.status = Some(PodStatus {
            conditions: Some(vec![
                condition("ContainersReady", "True"),
                condition("Ready", "False"),
            ]),
            ..PodStatus::default()
        });
        assert!(!pod_ready_condition(&pod));
        pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].status = "True".to_string();
        assert!(pod_ready_condition(&pod));
    }
}
