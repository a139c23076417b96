//! Restart without flapping: what podprobe takes over from the API on first
//! sight of a pod, so that a restarted podprobe resumes where the previous
//! one left off instead of resetting `started`/`ready` (the kubelet's D5/S4
//! rules alone would reset containers that started shortly before it, and
//! every container with a readiness probe in a pod that is not Ready).
//!
//! A previous podprobe vouches for the container instances it reported
//! ready; they count as predating the prober and keep `ready` until their
//! probes say otherwise:
//!
//! - gate mode: while podprobe's `podprobe.io/ready` is `True`, every
//!   container running since no later than its last transition (podprobe
//!   wrote no per-container verdict there); a container that restarted since
//!   then did so while no podprobe watched, and starts over;
//! - authority mode: the instances whose `ready` is `true` in the API
//!   (podprobe owns that field there, so it is a previous podprobe's verdict
//!   about that very instance).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;

use crate::status::conditions::{CONTAINERS_READY, TRUE};
use crate::status::{Mode, READY_CONDITION};
use crate::util::pod::all_container_statuses;

/// A container that started this long before the prober is taken to have
/// been running before a restart of the prober (`kubeletRestartGracePeriod`).
pub const RESTART_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// Which running container instances survived a restart of the prober and
/// keep what was reported about them (D5, S4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Takeover {
    /// The kubelet's start-time rule alone: running since before the
    /// prober's start minus [`RESTART_GRACE_PERIOD`] (the prober's own
    /// simulations, which know no previous verdicts).
    #[default]
    ByStartTime,
    /// S6: exactly the instances (status `containerID`s) a previous podprobe
    /// reported ready (see [`vouched_instances`]). As the kubelet checks since
    /// its fixes for replaced containers (kubernetes #141342, #141487),
    /// what was reported about a container is kept only for that very
    /// instance: a replacement that started while no prober watched starts
    /// over, whenever it started.
    Vouched(HashSet<String>),
}

/// Whether the container predates a restart of the prober, per `takeover`
/// (D5, S4, S6).
pub fn predates_prober(
    status: &ContainerStatus,
    prober_start: Timestamp,
    takeover: &Takeover,
) -> bool {
    let Some(started_at) = status
        .state
        .as_ref()
        .and_then(|state| state.running.as_ref())
        .and_then(|running| running.started_at.as_ref())
    else {
        return false;
    };
    match takeover {
        Takeover::ByStartTime => {
            let grace = i128::try_from(RESTART_GRACE_PERIOD.as_nanos()).unwrap_or(i128::MAX);
            started_at.0.as_nanosecond() < prober_start.as_nanosecond() - grace
        }
        Takeover::Vouched(ids) => status
            .container_id
            .as_ref()
            .is_some_and(|id| ids.contains(id)),
    }
}

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

/// The running container instances (status `containerID`s) a previous
/// podprobe reported ready (see the module doc).
pub fn vouched_instances(pod: &Pod, mode: Mode) -> HashSet<String> {
    let gate_true_since = own_condition(pod, Mode::Gate)
        .filter(|c| c.status == TRUE)
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    running_statuses(pod)
        .filter(|(c, started_at)| match mode {
            Mode::Gate => gate_true_since.is_some_and(|until| *started_at <= until),
            Mode::Authority => c.ready,
        })
        .filter_map(|(c, _)| c.container_id.clone())
        .collect()
}

/// podprobe's `started` verdicts on first sight of a pod, by container ID:
/// in gate mode the [`vouched_instances`]; in authority mode the running
/// instances whose `started` is `true` in the API (podprobe's own field
/// there, ready or not).
pub fn seed_started(pod: &Pod, mode: Mode) -> HashMap<String, bool> {
    let ids = match mode {
        Mode::Gate => vouched_instances(pod, mode),
        Mode::Authority => running_statuses(pod)
            .filter(|(c, _)| c.started == Some(true))
            .filter_map(|(c, _)| c.container_id.clone())
            .collect(),
    };
    ids.into_iter().map(|id| (id, true)).collect()
}

/// Every running container status of the pod (init and regular), with when
/// it started.
fn running_statuses(pod: &Pod) -> impl Iterator<Item = (&ContainerStatus, Timestamp)> {
    all_container_statuses(pod).filter_map(|c| {
        let running = c.state.as_ref()?.running.as_ref()?;
        Some((c, running.started_at.as_ref()?.0))
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;

    use super::*;
    use crate::testing::{
        container, container_status, first_container_status, running_pod as pod, timed,
    };

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
    }

    #[test]
    fn authority_vouches_for_the_instances_podprobe_reported_ready() {
        let mut pod = app_pod(true, Some((CONTAINERS_READY, "False", STARTED)));
        assert!(vouched_instances(&pod, Mode::Authority).is_empty());
        let app = first_container_status(&mut pod);
        app.ready = true;
        assert_eq!(
            vouched_instances(&pod, Mode::Authority),
            HashSet::from([ID.to_string()])
        );
        // Gate mode reads only its condition: the kubelet wrote that ready.
        assert!(vouched_instances(&pod, Mode::Gate).is_empty());
    }
}
