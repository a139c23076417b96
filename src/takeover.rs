//! Restart without flapping: what podprobe takes over from the API on first
//! sight of a pod, so that a restarted podprobe resumes where the previous
//! one left off instead of resetting `started`/`ready` (the kubelet's D5/S4
//! rules alone would reset containers that started shortly before it).
//!
//! podprobe's own condition vouches for the containers it covered: in gate
//! mode `podprobe.io/ready`, in authority mode `ContainersReady` (both are
//! fed only by podprobe's readiness verdicts). While it is `True`, every
//! container running since no later than its last transition was probed,
//! started and ready; a container that restarted since then did so while no
//! podprobe watched, and starts over.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;

use crate::manager::PodProbes;
use crate::status::conditions::{CONTAINERS_READY, TRUE};
use crate::status::{Mode, READY_CONDITION};

/// The condition podprobe's readiness verdicts feed in `mode`.
pub fn own_condition_type(mode: Mode) -> &'static str {
    match mode {
        Mode::Gate => READY_CONDITION,
        Mode::Authority => CONTAINERS_READY,
    }
}

fn own_condition(pod: &Pod, mode: Mode) -> Option<&PodCondition> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let type_ = own_condition_type(mode);
    conditions.iter().find(|c| c.type_ == type_)
}

/// S4's "pod was Ready": podprobe's own condition is `True`. The kubelet
/// reads the pod's `Ready`, which also folds in readiness gates (and, in gate
/// mode, the kubelet's own containers); podprobe's verdicts fed only its own
/// condition, so a `False` gate elsewhere does not reset ready containers.
pub fn own_condition_is_true(pod: &Pod, mode: Mode) -> bool {
    own_condition(pod, mode).is_some_and(|c| c.status == TRUE)
}

/// When podprobe's own condition turned `True`, if it is `True`.
pub fn vouched_until(pod: &Pod, mode: Mode) -> Option<Timestamp> {
    own_condition(pod, mode)
        .filter(|c| c.status == TRUE)
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// `probes` vouching for the containers podprobe's condition covers.
pub fn vouched(mut probes: PodProbes, pod: &Pod, mode: Mode) -> PodProbes {
    if let Some(until) = vouched_until(pod, mode) {
        probes.vouch_until(until);
    }
    probes
}

/// podprobe's `started` verdicts on first sight of a pod, by container ID.
///
/// - Gate mode: the running containers [`vouched_until`] covers.
/// - Authority mode: the running containers whose `started` is `true` in the
///   API: podprobe owns that field there, so it is a previous podprobe's
///   verdict about that very instance.
pub fn seed_started(pod: &Pod, mode: Mode) -> HashMap<String, bool> {
    let until = vouched_until(pod, mode);
    let seeded = |c: &ContainerStatus| match mode {
        Mode::Gate => until.is_some_and(|until| running_since(c).is_some_and(|t| t <= until)),
        Mode::Authority => running_since(c).is_some() && c.started == Some(true),
    };
    let status = pod.status.as_ref();
    let init = status.and_then(|s| s.init_container_statuses.as_ref());
    let regular = status.and_then(|s| s.container_statuses.as_ref());
    init.into_iter()
        .flatten()
        .chain(regular.into_iter().flatten())
        .filter(|c| seeded(c))
        .filter_map(|c| Some((c.container_id.clone()?, true)))
        .collect()
}

/// When a running container started; `None` when it does not run.
fn running_since(container: &ContainerStatus) -> Option<Timestamp> {
    let running = container.state.as_ref()?.running.as_ref()?;
    running.started_at.as_ref().map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;

    use super::*;
    use crate::status::testutil::{container, container_status, pod, time, timed};

    const ID: &str = "containerd://app";
    /// When [`container_status`]'s container started.
    const STARTED: &str = "2025-03-01T10:00:03Z";

    /// `app` running since [`STARTED`] with `started`, and podprobe's
    /// condition `(type, status, since)`.
    fn app_pod(started: bool, condition: Option<(&str, &str, &str)>) -> Pod {
        let mut app = container_status("app", false);
        app.started = Some(started);
        let status = PodStatus {
            conditions: condition
                .map(|(type_, status, since)| vec![timed(type_, status, None, None, since)]),
            container_statuses: Some(vec![app]),
            ..PodStatus::default()
        };
        pod(vec![], vec![container("app")], &[], status)
    }

    #[test]
    fn gate_seeds_only_containers_running_since_the_gate_went_true() {
        let seed = |p: &Pod| seed_started(p, Mode::Gate);
        let gate = |status, since| Some((READY_CONDITION, status, since));
        assert_eq!(
            seed(&app_pod(false, gate("True", "2025-03-01T10:00:05Z"))),
            HashMap::from([(ID.to_string(), true)])
        );
        // Restarted after the gate turned True: no podprobe saw it start.
        assert!(seed(&app_pod(false, gate("True", "2025-03-01T10:00:01Z"))).is_empty());
        assert!(seed(&app_pod(false, gate("False", "2025-03-01T10:00:05Z"))).is_empty());
        assert!(seed(&app_pod(false, None)).is_empty());
    }

    #[test]
    fn authority_seeds_the_started_podprobe_wrote() {
        let seed = |p: &Pod| seed_started(p, Mode::Authority);
        assert_eq!(
            seed(&app_pod(true, None)),
            HashMap::from([(ID.to_string(), true)])
        );
        assert!(seed(&app_pod(false, None)).is_empty());
    }

    #[test]
    fn the_own_condition_depends_on_the_mode() {
        let ready = app_pod(true, Some((CONTAINERS_READY, "True", STARTED)));
        assert!(own_condition_is_true(&ready, Mode::Authority));
        assert!(!own_condition_is_true(&ready, Mode::Gate));
        assert_eq!(
            vouched_until(&ready, Mode::Authority),
            Some(time(STARTED).0),
            "ContainersReady vouches in authority mode"
        );
        assert_eq!(vouched_until(&ready, Mode::Gate), None);
    }
}
