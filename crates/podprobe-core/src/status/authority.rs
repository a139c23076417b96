//! Authority mode: container `ready`/`started` and the `ContainersReady` and
//! `Ready` conditions, computed as the kubelet computes them in a full pod
//! sync (status.md rules 1-4) from the pod as the API server has it.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::conditions::{
    containers_ready_condition, pod_ready_condition, replace_or_append, set_transition_time,
};
use super::{ContainerProbeView, view_for};

/// `pod`'s status with podprobe's verdicts written into the container
/// statuses and `Ready`/`ContainersReady` regenerated from them.
///
/// - Each init and regular container status takes `ready` and `started` from
///   the verdict about its instance (same name and container ID). `views` is
///   expected to hold a verdict for every status (rule 1 covers all of them);
///   a status without one is left as it is.
/// - `Ready` and `ContainersReady` are generated (rule 3) from init container
///   statuses followed by container statuses and the pod's phase; readiness
///   gates are read from the pod's current conditions, as in a full pod sync.
///   A pod with neither status list gets `UnknownContainerStatuses`.
/// - Both carry `observedGeneration = metadata.generation`
///   (PodObservedGenerationTracking, on in 1.35) and their transition time by
///   rule 4 against the pod's current conditions; each replaces the condition
///   of its type in place, or is appended, `Ready` first (the kubelet's
///   SetContainerReadiness order).
///
/// The terminal-phase override of rule 3.3 is not needed: it only rewrites a
/// `True` condition in phase `Succeeded`/`Failed`, and generation from that
/// same phase never yields `True`.
pub fn desired_authority_status(pod: &Pod, views: &[ContainerProbeView], now: &Time) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    for list in [
        &mut status.init_container_statuses,
        &mut status.container_statuses,
    ] {
        apply_views(list.iter_mut().flatten(), views);
    }
    let statuses = all_statuses(&status);
    let no_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&no_spec);
    let phase = status.phase.as_deref();
    let current = status.conditions.clone().unwrap_or_default();
    let mut ready = pod_ready_condition(spec, &current, statuses.as_deref(), phase);
    let mut containers_ready = containers_ready_condition(spec, statuses.as_deref(), phase);
    let generation = pod.metadata.generation.filter(|g| *g != 0);
    for condition in [&mut ready, &mut containers_ready] {
        condition.observed_generation = generation;
        set_transition_time(condition, &current, now);
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    replace_or_append(conditions, ready);
    replace_or_append(conditions, containers_ready);
    status
}

/// Writes each verdict into the status of the instance it is about.
fn apply_views<'a>(
    statuses: impl Iterator<Item = &'a mut ContainerStatus>,
    views: &[ContainerProbeView],
) {
    for status in statuses {
        if let Some(view) = view_for(views, status) {
            status.ready = view.ready;
            status.started = Some(view.started);
        }
    }
}

/// Init container statuses followed by container statuses; `None` when the
/// pod has neither list (Go's nil slice).
fn all_statuses(status: &PodStatus) -> Option<Vec<ContainerStatus>> {
    if status.init_container_statuses.is_none() && status.container_statuses.is_none() {
        return None;
    }
    let init = status.init_container_statuses.iter().flatten();
    Some(
        init.chain(status.container_statuses.iter().flatten())
            .cloned()
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::conditions::{CONTAINERS_READY, FALSE, POD_READY, TRUE, reason};
    use crate::testing::{
        container, container_status, running_pod as pod, sidecar, time, timed, view,
    };
    use k8s_openapi::api::core::v1::PodCondition;

    fn condition<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
        let conditions = status.conditions.as_deref().unwrap_or_default();
        conditions
            .iter()
            .find(|c| c.type_ == type_)
            .expect("condition present")
    }

    fn shop_pod() -> Pod {
        let status = PodStatus {
            conditions: Some(vec![
                timed(
                    "example.com/lb-registered",
                    TRUE,
                    None,
                    None,
                    "2025-03-01T10:00:10Z",
                ),
                timed("Initialized", TRUE, None, None, "2025-03-01T10:00:02Z"),
                timed(
                    POD_READY,
                    FALSE,
                    Some(reason::CONTAINERS_NOT_READY),
                    Some("containers with unready status: [app]"),
                    "2025-03-01T10:00:02Z",
                ),
                timed(
                    CONTAINERS_READY,
                    FALSE,
                    Some(reason::CONTAINERS_NOT_READY),
                    Some("containers with unready status: [app]"),
                    "2025-03-01T10:00:02Z",
                ),
            ]),
            container_statuses: Some(vec![
                container_status("app", false),
                container_status("proxy", true),
            ]),
            ..PodStatus::default()
        };
        pod(
            vec![],
            vec![container("app"), container("proxy")],
            &["example.com/lb-registered"],
            status,
        )
    }

    #[test]
    fn rule1_verdicts_set_ready_and_started() {
        let views = [view("app", true, true), view("proxy", true, true)];
        let status = desired_authority_status(&shop_pod(), &views, &time("2025-03-01T10:00:31Z"));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert!(app.ready);
        assert_eq!(app.started, Some(true));
        assert_eq!(condition(&status, POD_READY).status, TRUE);
        assert_eq!(condition(&status, CONTAINERS_READY).status, TRUE);
        assert_eq!(
            condition(&status, POD_READY).last_transition_time,
            Some(time("2025-03-01T10:00:31Z"))
        );
    }

    #[test]
    fn rule2_1_verdict_about_an_old_instance_is_ignored() {
        let stale = ContainerProbeView {
            container_id: Some("containerd://previous".to_string()),
            ..view("app", true, true)
        };
        let status = desired_authority_status(&shop_pod(), &[stale], &time("2025-03-01T10:00:31Z"));
        assert!(!status.container_statuses.as_ref().unwrap()[0].ready);
        assert_eq!(condition(&status, POD_READY).status, FALSE);
    }

    #[test]
    fn rule3_2_gates_read_from_the_pods_current_conditions() {
        let mut pod = shop_pod();
        let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions[0].status = FALSE.to_string();
        let views = [view("app", true, true), view("proxy", true, true)];
        let status = desired_authority_status(&pod, &views, &time("2025-03-01T10:00:31Z"));
        let ready = condition(&status, POD_READY);
        assert_eq!(
            ready.reason.as_deref(),
            Some(reason::READINESS_GATES_NOT_READY)
        );
        assert_eq!(
            ready.message.as_deref(),
            Some(
                r#"the status of pod readiness gate "example.com/lb-registered" is not "True", but False"#
            )
        );
        assert_eq!(condition(&status, CONTAINERS_READY).status, TRUE);
        assert_eq!(
            ready.last_transition_time,
            Some(time("2025-03-01T10:00:02Z"))
        );
    }

    #[test]
    fn rule3_1_sidecar_statuses_count() {
        let status = PodStatus {
            init_container_statuses: Some(vec![container_status("proxy", true)]),
            container_statuses: Some(vec![container_status("app", true)]),
            ..PodStatus::default()
        };
        let pod = pod(vec![sidecar("proxy")], vec![container("app")], &[], status);
        let views = [view("proxy", true, false), view("app", true, true)];
        let status = desired_authority_status(&pod, &views, &time("2025-03-01T10:00:31Z"));
        assert_eq!(
            condition(&status, CONTAINERS_READY).message.as_deref(),
            Some("containers with unready status: [proxy]")
        );
    }

    #[test]
    fn rule3_1_no_status_lists_is_unknown_container_statuses() {
        let pod = pod(vec![], vec![container("app")], &[], PodStatus::default());
        let status = desired_authority_status(&pod, &[], &time("2025-03-01T10:00:31Z"));
        assert_eq!(
            condition(&status, POD_READY).reason.as_deref(),
            Some(reason::UNKNOWN_CONTAINER_STATUSES)
        );
    }

    #[test]
    fn rule2_4_missing_conditions_appended_ready_first() {
        let status = PodStatus {
            conditions: Some(vec![timed(
                "PodScheduled",
                TRUE,
                None,
                None,
                "2025-03-01T10:00:00Z",
            )]),
            container_statuses: Some(vec![container_status("app", true)]),
            ..PodStatus::default()
        };
        let pod = pod(vec![], vec![container("app")], &[], status);
        let status = desired_authority_status(
            &pod,
            &[view("app", true, true)],
            &time("2025-03-01T10:00:31Z"),
        );
        let types: Vec<_> = status
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(types, ["PodScheduled", POD_READY, CONTAINERS_READY]);
    }

    #[test]
    fn rule3_7_observed_generation_is_the_pods_generation() {
        let mut pod = shop_pod();
        pod.metadata.generation = Some(3);
        let status = desired_authority_status(&pod, &[], &time("2025-03-01T10:00:31Z"));
        assert_eq!(condition(&status, POD_READY).observed_generation, Some(3));
        assert_eq!(
            condition(&status, CONTAINERS_READY).observed_generation,
            Some(3)
        );
        assert_eq!(condition(&status, "Initialized").observed_generation, None);
    }
}
