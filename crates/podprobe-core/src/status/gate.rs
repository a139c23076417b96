//! Gate mode's one condition, `podprobe.io/ready`.
//!
//! A pod opts in to it by listing it in `spec.readinessGates`; the kubelet
//! then folds it into `Ready` (status.md rule 3.2). podprobe writes nothing
//! else in gate mode.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::annotation::AnnotatedProbes;
use super::conditions::{self, NotReady, replace_or_append, set_transition_time};
use super::{ContainerProbeView, readiness_containers, status_named, view_for};
use crate::util::pod::is_running;

/// The condition type podprobe owns in gate mode.
pub const READY_CONDITION: &str = "podprobe.io/ready";

/// `podprobe.io/ready`, worded like the kubelet's `ContainersReady` over the
/// containers whose annotation has a readiness or a startup probe (a startup
/// probe holds readiness back until it succeeds, status.md rule 1.2; a
/// liveness probe alone never does). Containers are walked as the kubelet
/// walks them: restartable init containers, then regular containers.
///
/// - `True` (no reason, no message) when every such container's status shows
///   it running and podprobe's verdict about that very instance is started
///   and ready; in particular when the annotation has no readiness or startup
///   probe at all;
/// - `False`, reason `ContainersNotReady`, message
///   `containers with unknown status: [a]` for containers without a status
///   and/or `containers with unready status: [b]` for the others, joined by
///   `", "`; a container without a verdict about its current instance (just
///   restarted) is unready, as the kubelet's results start over per instance;
/// - in a terminal phase, `False` with reason `PodCompleted` (`Succeeded`, when
///   no container is unknown) or `PodFailed` (`Failed`), as `ContainersReady`.
///
/// Beyond the kubelet's wording, so that `kubectl describe pod` says why: when
/// an unready container's verdict carries a failure note (the first such
/// container in that order), the reason names its probe
/// ([`reason::STARTUP_PROBE_FAILED`], [`reason::READINESS_PROBE_FAILED`]) and
/// the message ends in `; <container>: <note>`, the note being the probe's
/// last `Unhealthy` event text, at most [`MAX_CONDITION_NOTE_BYTES`] long.
///
/// The result has no timestamps; see [`desired_gate_status`].
///
/// [`MAX_CONDITION_NOTE_BYTES`]: crate::prober::results::MAX_CONDITION_NOTE_BYTES
pub fn gate_condition(
    pod: &Pod,
    probes: &AnnotatedProbes,
    views: &[ContainerProbeView],
    floor: Option<&FloorHold>,
) -> PodCondition {
    let assessed = assess(pod, probes, views);
    match floor {
        Some(hold) if assessed.readiness_only => held(assessed.condition, hold),
        _ => assessed.condition,
    }
}

/// Whether `podprobe.io/ready` is False for readiness probes alone (WG3):
/// every container it waits for runs and has started, and at least one's
/// readiness probe fails. Only such a gate may be held by a readiness
/// floor; a container that does not run or has not started is not Ready
/// by the kubelet's own account either.
pub fn readiness_failing(
    pod: &Pod,
    probes: &AnnotatedProbes,
    views: &[ContainerProbeView],
) -> bool {
    assess(pod, probes, views).readiness_only
}

/// The gate as the kubelet's rules word it, and whether it is False for
/// failing readiness probes alone.
struct Assessed {
    condition: PodCondition,
    readiness_only: bool,
}

fn assess(pod: &Pod, probes: &AnnotatedProbes, views: &[ContainerProbeView]) -> Assessed {
    let (no_spec, no_status) = (PodSpec::default(), PodStatus::default());
    let spec = pod.spec.as_ref().unwrap_or(&no_spec);
    let status = pod.status.as_ref().unwrap_or(&no_status);
    let mut not_ready = NotReady::default();
    let mut held_by = None;
    let mut readiness_only = true;
    for container in readiness_containers(spec).filter(|c| probes.gates_readiness(&c.name)) {
        match status_named(status, &container.name) {
            None => not_ready.unknown.push(container.name.clone()),
            Some(current) if !is_ready(current, views) => {
                not_ready.unready.push(container.name.clone());
                held_by = held_by.or_else(|| noted(current, views));
                readiness_only &=
                    is_running(current) && view_for(views, current).is_some_and(|v| v.started);
            }
            Some(_) => {}
        }
    }
    readiness_only &= not_ready.unknown.is_empty() && !not_ready.unready.is_empty();
    let mut condition = not_ready.into_condition(READY_CONDITION, status.phase.as_deref());
    let kubelets_not_ready =
        condition.reason.as_deref() == Some(conditions::reason::CONTAINERS_NOT_READY);
    readiness_only &= kubelets_not_ready;
    if let Some(view) = held_by.filter(|_| kubelets_not_ready) {
        condition.reason = Some(
            if view.started {
                reason::READINESS_PROBE_FAILED
            } else {
                reason::STARTUP_PROBE_FAILED
            }
            .to_string(),
        );
        let note = view.note.as_deref().unwrap_or_default();
        let message = condition.message.get_or_insert_with(String::new);
        message.push_str(&format!("; {}: {note}", view.name));
    }
    Assessed {
        condition,
        readiness_only,
    }
}

/// A readiness floor's hold on a pod's gate (WG3): the workload counted
/// `ready` Ready pods with this one's gate let go, against `floor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorHold {
    pub ready: usize,
    pub floor: usize,
}

/// `condition`, False for readiness probes alone, held True: reason
/// [`reason::READINESS_FLOOR`], and a message that says why it is True and
/// what it would have said.
fn held(condition: PodCondition, hold: &FloorHold) -> PodCondition {
    let was = condition.message.as_deref().unwrap_or_default();
    PodCondition {
        status: conditions::TRUE.to_string(),
        reason: Some(reason::READINESS_FLOOR.to_string()),
        message: Some(format!(
            "held Ready by the readiness floor: {} of the workload's pods are Ready without this one, minReady is {}; {was}",
            hold.ready, hold.floor
        )),
        ..condition
    }
}

/// Reasons of `podprobe.io/ready` beyond the kubelet's `ContainersReady`
/// ones: which probe holds a container back.
pub mod reason {
    /// An unready container's startup probe has failed.
    pub const STARTUP_PROBE_FAILED: &str = "StartupProbeFailed";
    /// A started, unready container's readiness probe has failed.
    pub const READINESS_PROBE_FAILED: &str = "ReadinessProbeFailed";
    /// The gate is True although a readiness probe fails: the workload's
    /// readiness floor holds it (WG3).
    pub const READINESS_FLOOR: &str = "ReadinessFloor";
}

/// The verdict about `status`'s instance, if it carries a failure note.
fn noted<'a>(
    status: &ContainerStatus,
    views: &'a [ContainerProbeView],
) -> Option<&'a ContainerProbeView> {
    view_for(views, status).filter(|view| view.note.is_some())
}

/// Running by the API, started and ready by podprobe's verdict.
fn is_ready(status: &ContainerStatus, views: &[ContainerProbeView]) -> bool {
    let running = is_running(status);
    running && view_for(views, status).is_some_and(|view| view.started && view.ready)
}

/// `pod`'s status with `podprobe.io/ready` as [`gate_condition`] computes it
/// (held True by `floor` when given and the gate fails for readiness alone),
/// its `lastTransitionTime` kept from the current condition unless the status
/// changes (rule 4). Replaces the condition in place, or appends it.
pub fn desired_gate_status(
    pod: &Pod,
    probes: &AnnotatedProbes,
    views: &[ContainerProbeView],
    floor: Option<&FloorHold>,
    now: &Time,
) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let mut condition = gate_condition(pod, probes, views, floor);
    set_transition_time(
        &mut condition,
        status.conditions.as_deref().unwrap_or_default(),
        now,
    );
    replace_or_append(status.conditions.get_or_insert_with(Vec::new), condition);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::probe_spec::{Handler, TcpSocketAction};
    use crate::spec::{ProbeKind, ProbeSpec};
    use crate::status::annotation::AnnotatedProbe;
    use crate::status::conditions::{FALSE, TRUE, reason};
    use crate::testing::{
        container, container_status, first_container_status, running_pod as pod, sidecar, time,
        timed, view,
    };
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated};

    fn probes(entries: &[(&str, ProbeKind)]) -> AnnotatedProbes {
        let spec = ProbeSpec {
            handler: Handler::TcpSocket(TcpSocketAction {
                host: None,
                port: 8080,
            }),
            initial_delay_seconds: 0,
            timeout_seconds: 1,
            period_seconds: 10,
            period_milliseconds: None,
            success_threshold: 1,
            failure_threshold: 3,
            termination_grace_period_seconds: None,
            network: Default::default(),
            markers: Vec::new(),
            workload: Default::default(),
        };
        AnnotatedProbes::from_probes(
            entries
                .iter()
                .map(|(container, kind)| AnnotatedProbe {
                    container: container.to_string(),
                    kind: *kind,
                    spec: spec.clone(),
                })
                .collect(),
        )
    }

    fn two_container_pod(phase: &str) -> Pod {
        let status = PodStatus {
            phase: Some(phase.to_string()),
            container_statuses: Some(vec![
                container_status("app", true),
                container_status("proxy", true),
            ]),
            ..PodStatus::default()
        };
        pod(
            vec![],
            vec![container("app"), container("proxy")],
            &[READY_CONDITION],
            status,
        )
    }

    fn verdict(condition: &PodCondition) -> (&str, Option<&str>, Option<&str>) {
        (
            condition.status.as_str(),
            condition.reason.as_deref(),
            condition.message.as_deref(),
        )
    }

    #[test]
    fn gate_true_when_every_probed_container_is_ready() {
        let pod = two_container_pod("Running");
        let probes = probes(&[("app", ProbeKind::Readiness)]);
        let got = gate_condition(&pod, &probes, &[view("app", true, true)], None);
        assert_eq!(verdict(&got), (TRUE, None, None));
        assert_eq!(got.type_, READY_CONDITION);
    }

    #[test]
    fn gate_false_names_unready_containers_like_the_kubelet() {
        let pod = two_container_pod("Running");
        let probes = probes(&[
            ("app", ProbeKind::Readiness),
            ("proxy", ProbeKind::Readiness),
        ]);
        let views = [view("app", true, false), view("proxy", true, false)];
        let got = gate_condition(&pod, &probes, &views, None);
        assert_eq!(
            verdict(&got),
            (
                FALSE,
                Some(reason::CONTAINERS_NOT_READY),
                Some("containers with unready status: [app proxy]")
            )
        );
    }

    fn noted(name: &str, started: bool, note: &str) -> ContainerProbeView {
        ContainerProbeView {
            note: Some(note.into()),
            ..view(name, started, false)
        }
    }

    #[test]
    fn gate_false_names_the_probe_and_failure_holding_the_pod_back() {
        let pod = two_container_pod("Running");
        let probes = probes(&[("app", ProbeKind::Readiness), ("proxy", ProbeKind::Startup)]);
        // The first unready container in the kubelet's order that has a note.
        let views = [
            view("app", true, false),
            noted("proxy", false, "Startup probe failed: dial tcp: refused"),
        ];
        assert_eq!(
            verdict(&gate_condition(&pod, &probes, &views, None)),
            (
                FALSE,
                Some(super::reason::STARTUP_PROBE_FAILED),
                Some(
                    "containers with unready status: [app proxy]; \
                     proxy: Startup probe failed: dial tcp: refused"
                )
            )
        );
        let views = [
            noted(
                "app",
                true,
                "Readiness probe failed: HTTP probe failed with statuscode: 503",
            ),
            noted("proxy", false, "Startup probe failed: dial tcp: refused"),
        ];
        assert_eq!(
            verdict(&gate_condition(&pod, &probes, &views, None)),
            (
                FALSE,
                Some(super::reason::READINESS_PROBE_FAILED),
                Some(
                    "containers with unready status: [app proxy]; \
                     app: Readiness probe failed: HTTP probe failed with statuscode: 503"
                )
            )
        );
        // A ready container's note, or one about another instance, says nothing.
        let stale = ContainerProbeView {
            container_id: Some("containerd://previous".to_string()),
            ..noted("app", true, "Readiness probe failed: old")
        };
        let views = [stale, view("proxy", true, true)];
        assert_eq!(
            verdict(&gate_condition(&pod, &probes, &views, None)).1,
            Some(reason::CONTAINERS_NOT_READY)
        );
        // Terminal phases keep the kubelet's reasons.
        let done = two_container_pod("Failed");
        let views = [noted("app", true, "Readiness probe failed: x")];
        assert_eq!(
            verdict(&gate_condition(&done, &probes, &views, None)).1,
            Some(reason::POD_FAILED)
        );
    }

    #[test]
    fn gate_unknown_when_container_has_no_status() {
        let mut pod = two_container_pod("Pending");
        pod.status.as_mut().unwrap().container_statuses =
            Some(vec![container_status("proxy", true)]);
        let probes = probes(&[
            ("app", ProbeKind::Readiness),
            ("proxy", ProbeKind::Readiness),
        ]);
        let got = gate_condition(&pod, &probes, &[view("proxy", true, false)], None);
        assert_eq!(
            got.message.as_deref(),
            Some("containers with unknown status: [app], containers with unready status: [proxy]")
        );
    }

    #[test]
    fn gate_true_without_readiness_or_startup_probes() {
        let pod = two_container_pod("Running");
        let probes = probes(&[("app", ProbeKind::Liveness)]);
        assert_eq!(
            verdict(&gate_condition(&pod, &probes, &[], None)),
            (TRUE, None, None)
        );
        assert_eq!(
            verdict(&gate_condition(
                &pod,
                &AnnotatedProbes::default(),
                &[],
                None
            )),
            (TRUE, None, None)
        );
    }

    #[test]
    fn gate_startup_probe_holds_readiness_until_started() {
        let pod = two_container_pod("Running");
        let probes = probes(&[("app", ProbeKind::Startup)]);
        let got = gate_condition(&pod, &probes, &[view("app", false, false)], None);
        assert_eq!(
            got.message.as_deref(),
            Some("containers with unready status: [app]")
        );
        let got = gate_condition(&pod, &probes, &[view("app", true, true)], None);
        assert_eq!(got.status, TRUE);
    }

    #[test]
    fn gate_rule2_1_verdict_about_an_old_instance_does_not_count() {
        let pod = two_container_pod("Running");
        let probes = probes(&[("app", ProbeKind::Readiness)]);
        let stale = ContainerProbeView {
            container_id: Some("containerd://previous".to_string()),
            ..view("app", true, true)
        };
        assert_eq!(gate_condition(&pod, &probes, &[stale], None).status, FALSE);
    }

    #[test]
    fn gate_rule1_not_running_is_not_ready() {
        let mut pod = two_container_pod("Running");
        let app = first_container_status(&mut pod);
        app.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
        let probes = probes(&[("app", ProbeKind::Readiness)]);
        let got = gate_condition(&pod, &probes, &[view("app", true, true)], None);
        assert_eq!(
            got.message.as_deref(),
            Some("containers with unready status: [app]")
        );
    }

    #[test]
    fn gate_sidecars_listed_before_regular_containers() {
        let status = PodStatus {
            init_container_statuses: Some(vec![container_status("proxy", false)]),
            container_statuses: Some(vec![container_status("app", false)]),
            ..PodStatus::default()
        };
        let pod = pod(vec![sidecar("proxy")], vec![container("app")], &[], status);
        let probes = probes(&[
            ("app", ProbeKind::Readiness),
            ("proxy", ProbeKind::Readiness),
        ]);
        let got = gate_condition(&pod, &probes, &[], None);
        assert_eq!(
            got.message.as_deref(),
            Some("containers with unready status: [proxy app]")
        );
    }

    #[test]
    fn gate_rule3_1_terminal_phases() {
        let probes = probes(&[("app", ProbeKind::Readiness)]);
        let views = [view("app", true, true)];
        let got = gate_condition(&two_container_pod("Succeeded"), &probes, &views, None);
        assert_eq!(verdict(&got), (FALSE, Some(reason::POD_COMPLETED), None));
        let got = gate_condition(&two_container_pod("Failed"), &probes, &views, None);
        assert_eq!(verdict(&got), (FALSE, Some(reason::POD_FAILED), None));
    }

    #[test]
    fn gate_rule4_transition_time_kept_while_status_holds() {
        let mut pod = two_container_pod("Running");
        let probes = probes(&[("app", ProbeKind::Readiness)]);
        let earlier = timed(
            READY_CONDITION,
            FALSE,
            Some(reason::CONTAINERS_NOT_READY),
            Some("containers with unknown status: [app]"),
            "2025-03-01T10:00:00Z",
        );
        pod.status.as_mut().unwrap().conditions = Some(vec![earlier]);
        let now = time("2025-03-01T10:00:31Z");

        let unready = desired_gate_status(&pod, &probes, &[view("app", true, false)], None, &now);
        let conditions = unready.conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            conditions[0].last_transition_time,
            Some(time("2025-03-01T10:00:00Z"))
        );
        assert_eq!(
            conditions[0].message.as_deref(),
            Some("containers with unready status: [app]")
        );

        let ready = desired_gate_status(&pod, &probes, &[view("app", true, true)], None, &now);
        assert_eq!(ready.conditions.unwrap()[0].last_transition_time, Some(now));
    }

    #[test]
    fn gate_condition_appended_after_existing_conditions() {
        let mut pod = two_container_pod("Running");
        pod.status.as_mut().unwrap().conditions = Some(vec![timed(
            "PodScheduled",
            TRUE,
            None,
            None,
            "2025-03-01T10:00:00Z",
        )]);
        let now = time("2025-03-01T10:00:31Z");
        let status = desired_gate_status(&pod, &AnnotatedProbes::default(), &[], None, &now);
        let types: Vec<_> = status
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(types, ["PodScheduled", READY_CONDITION]);
    }
}
