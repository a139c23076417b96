//! The kubelet's `ContainersReady` and `Ready` conditions (status.md rule 3,
//! upstream `pkg/kubelet/status/generate.go`) and their `lastTransitionTime`
//! (rule 4).
//!
//! Generated conditions carry no timestamps and no `observedGeneration`; the
//! caller adds both (see [`set_transition_time`]).

use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::readiness_containers;

/// Condition type: every container (and sidecar) is ready.
pub const CONTAINERS_READY: &str = "ContainersReady";
/// Condition type: the pod can serve traffic.
pub const POD_READY: &str = "Ready";

/// Condition status `True`.
pub const TRUE: &str = "True";
/// Condition status `False`.
pub const FALSE: &str = "False";

/// Reasons the kubelet puts on `False` conditions.
pub mod reason {
    /// The pod status has no container statuses at all.
    pub const UNKNOWN_CONTAINER_STATUSES: &str = "UnknownContainerStatuses";
    /// Phase `Succeeded` and every container has a status.
    pub const POD_COMPLETED: &str = "PodCompleted";
    /// Phase `Failed`.
    pub const POD_FAILED: &str = "PodFailed";
    /// Some container has no status or is not ready.
    pub const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
    /// Some readiness gate's condition is missing or not `True`.
    pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";
}

/// Containers that keep a readiness-like condition from being `True`, in the
/// order they were found (rule 3.1 step 2).
#[derive(Debug, Default)]
pub(crate) struct NotReady {
    /// Containers with no status.
    pub unknown: Vec<String>,
    /// Containers whose status says they are not ready.
    pub unready: Vec<String>,
}

impl NotReady {
    /// The condition of type `type_` for this verdict in pod phase `phase`
    /// (rule 3.1 steps 3-6): terminal phases first, then the kubelet's
    /// `containers with unknown status: [a], containers with unready status: [b]`.
    pub fn into_condition(self, type_: &str, phase: Option<&str>) -> PodCondition {
        match phase {
            Some("Succeeded") if self.unknown.is_empty() => {
                return condition(type_, FALSE, Some(reason::POD_COMPLETED), None);
            }
            Some("Failed") => return condition(type_, FALSE, Some(reason::POD_FAILED), None),
            _ => {}
        }
        let mut fragments = Vec::new();
        if !self.unknown.is_empty() {
            fragments.push(format!(
                "containers with unknown status: {}",
                go_list(&self.unknown)
            ));
        }
        if !self.unready.is_empty() {
            fragments.push(format!(
                "containers with unready status: {}",
                go_list(&self.unready)
            ));
        }
        if fragments.is_empty() {
            condition(type_, TRUE, None, None)
        } else {
            let message = fragments.join(", ");
            condition(
                type_,
                FALSE,
                Some(reason::CONTAINERS_NOT_READY),
                Some(message),
            )
        }
    }
}

/// `ContainersReady` (rule 3.1, `GenerateContainersReadyCondition`).
///
/// `statuses` is init container statuses followed by container statuses;
/// `None` stands for Go's nil list (the pod has no container statuses at all),
/// which the kubelet reports as `UnknownContainerStatuses`.
pub fn containers_ready_condition(
    spec: &PodSpec,
    statuses: Option<&[ContainerStatus]>,
    phase: Option<&str>,
) -> PodCondition {
    let Some(statuses) = statuses else {
        return condition(
            CONTAINERS_READY,
            FALSE,
            Some(reason::UNKNOWN_CONTAINER_STATUSES),
            None,
        );
    };
    let mut not_ready = NotReady::default();
    for container in readiness_containers(spec) {
        match statuses.iter().find(|s| s.name == container.name) {
            None => not_ready.unknown.push(container.name.clone()),
            Some(status) if !status.ready => not_ready.unready.push(container.name.clone()),
            Some(_) => {}
        }
    }
    not_ready.into_condition(CONTAINERS_READY, phase)
}

/// `Ready` (rule 3.2, `GeneratePodReadyCondition`): `ContainersReady`'s verdict
/// when that is not `True`, otherwise the verdict of `spec.readinessGates`
/// against `conditions` (the first condition of each gate's type counts).
pub fn pod_ready_condition(
    spec: &PodSpec,
    conditions: &[PodCondition],
    statuses: Option<&[ContainerStatus]>,
    phase: Option<&str>,
) -> PodCondition {
    let containers_ready = containers_ready_condition(spec, statuses, phase);
    if containers_ready.status != TRUE {
        return PodCondition {
            type_: POD_READY.to_string(),
            ..containers_ready
        };
    }
    let fragments: Vec<String> = spec
        .readiness_gates
        .iter()
        .flatten()
        .filter_map(|gate| gate_fragment(&gate.condition_type, conditions))
        .collect();
    if fragments.is_empty() {
        condition(POD_READY, TRUE, None, None)
    } else {
        let message = fragments.join(", ");
        condition(
            POD_READY,
            FALSE,
            Some(reason::READINESS_GATES_NOT_READY),
            Some(message),
        )
    }
}

/// Why the readiness gate `gate_type` holds the pod back, if it does.
fn gate_fragment(gate_type: &str, conditions: &[PodCondition]) -> Option<String> {
    match conditions.iter().find(|c| c.type_ == gate_type) {
        None => Some(format!(
            "corresponding condition of pod readiness gate {} does not exist.",
            go_quote(gate_type)
        )),
        Some(c) if c.status != TRUE => Some(format!(
            "the status of pod readiness gate {} is not \"True\", but {}",
            go_quote(gate_type),
            c.status
        )),
        Some(_) => None,
    }
}

/// Rule 4: keeps the `lastTransitionTime` of the condition of the same type in
/// `old` when its `status` is unchanged (reason or message changes alone never
/// move it), and stamps `now` otherwise. Whole seconds only, as the API server
/// stores them (rule 4.4).
pub fn set_transition_time(condition: &mut PodCondition, old: &[PodCondition], now: &Time) {
    let previous = old.iter().find(|c| c.type_ == condition.type_);
    condition.last_transition_time = match previous {
        Some(previous) if previous.status == condition.status => {
            previous.last_transition_time.clone()
        }
        _ => Some(whole_seconds(now)),
    };
}

/// Replaces the first condition of `condition`'s type in place, or appends it
/// (`ReplaceOrAppendPodCondition`).
pub fn replace_or_append(conditions: &mut Vec<PodCondition>, condition: PodCondition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

/// `time` truncated to whole seconds.
fn whole_seconds(time: &Time) -> Time {
    Time(Timestamp::from_second(time.0.as_second()).unwrap_or(time.0))
}

/// A condition without timestamps; `None` reason/message are omitted in JSON,
/// as Go omits empty strings.
pub(crate) fn condition(
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        ..PodCondition::default()
    }
}

/// A string list as Go's `%s` prints a `[]string`: `[a b c]`.
fn go_list(names: &[String]) -> String {
    format!("[{}]", names.join(" "))
}

/// A string as Go's `%q` prints it, for the characters a condition type can
/// hold (qualified names: letters, digits, `-_./`), which need no escaping.
fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{container, container_status, time};
    use k8s_openapi::api::core::v1::{Container, PodReadinessGate};

    fn spec(init: &[(&str, bool)], containers: &[&str], gates: &[&str]) -> PodSpec {
        PodSpec {
            init_containers: Some(
                init.iter()
                    .map(|(name, restartable)| Container {
                        name: name.to_string(),
                        restart_policy: restartable.then(|| "Always".to_string()),
                        ..Container::default()
                    })
                    .collect(),
            ),
            containers: containers.iter().map(|name| container(name)).collect(),
            readiness_gates: Some(
                gates
                    .iter()
                    .map(|g| PodReadinessGate {
                        condition_type: g.to_string(),
                    })
                    .collect(),
            ),
            ..PodSpec::default()
        }
    }

    fn ready(name: &str) -> ContainerStatus {
        container_status(name, true)
    }

    fn unready(name: &str) -> ContainerStatus {
        container_status(name, false)
    }

    fn expect(type_: &str, status: &str, reason: &str, message: &str) -> PodCondition {
        condition(
            type_,
            status,
            (!reason.is_empty()).then_some(reason),
            (!message.is_empty()).then(|| message.to_string()),
        )
    }

    struct Case {
        name: &'static str,
        spec: PodSpec,
        conditions: Vec<PodCondition>,
        statuses: Option<Vec<ContainerStatus>>,
        phase: &'static str,
        want: (&'static str, &'static str, &'static str),
    }

    /// Upstream `TestGenerateContainersReadyCondition`, plus the phase
    /// `Failed` and unknown-before-unready cases it lacks.
    #[test]
    fn rule3_1_containers_ready_upstream_table() {
        let cases = [
            Case {
                name: "nil statuses",
                spec: spec(&[], &[], &[]),
                conditions: vec![],
                statuses: None,
                phase: "Running",
                want: (FALSE, reason::UNKNOWN_CONTAINER_STATUSES, ""),
            },
            Case {
                name: "empty statuses, no containers",
                spec: spec(&[], &[], &[]),
                conditions: vec![],
                statuses: Some(vec![]),
                phase: "Running",
                want: (TRUE, "", ""),
            },
            Case {
                name: "container without status",
                spec: spec(&[], &["1234"], &[]),
                conditions: vec![],
                statuses: Some(vec![]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unknown status: [1234]",
                ),
            },
            Case {
                name: "all ready",
                spec: spec(&[], &["1234", "5678"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("1234"), ready("5678")]),
                phase: "Running",
                want: (TRUE, "", ""),
            },
            Case {
                name: "one without status",
                spec: spec(&[], &["1234", "5678"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("1234")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unknown status: [5678]",
                ),
            },
            Case {
                name: "one unready",
                spec: spec(&[], &["1234", "5678"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("1234"), unready("5678")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unready status: [5678]",
                ),
            },
            Case {
                name: "succeeded",
                spec: spec(&[], &["1234"], &[]),
                conditions: vec![],
                statuses: Some(vec![unready("1234")]),
                phase: "Succeeded",
                want: (FALSE, reason::POD_COMPLETED, ""),
            },
            Case {
                name: "sidecar without status",
                spec: spec(&[("restartable-init-1", true)], &["regular-1"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("regular-1")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unknown status: [restartable-init-1]",
                ),
            },
            Case {
                name: "sidecars all ready",
                spec: spec(
                    &[("restartable-init-1", true), ("restartable-init-2", true)],
                    &["regular-1"],
                    &[],
                ),
                conditions: vec![],
                statuses: Some(vec![
                    ready("restartable-init-1"),
                    ready("restartable-init-2"),
                    ready("regular-1"),
                ]),
                phase: "Running",
                want: (TRUE, "", ""),
            },
            Case {
                name: "second sidecar without status",
                spec: spec(
                    &[("restartable-init-1", true), ("restartable-init-2", true)],
                    &["regular-1"],
                    &[],
                ),
                conditions: vec![],
                statuses: Some(vec![ready("restartable-init-1"), ready("regular-1")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unknown status: [restartable-init-2]",
                ),
            },
            Case {
                name: "second sidecar unready",
                spec: spec(
                    &[("restartable-init-1", true), ("restartable-init-2", true)],
                    &["regular-1"],
                    &[],
                ),
                conditions: vec![],
                statuses: Some(vec![
                    ready("restartable-init-1"),
                    unready("restartable-init-2"),
                    ready("regular-1"),
                ]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unready status: [restartable-init-2]",
                ),
            },
            Case {
                name: "failed",
                spec: spec(&[], &["1234"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("1234")]),
                phase: "Failed",
                want: (FALSE, reason::POD_FAILED, ""),
            },
            Case {
                name: "succeeded with a container without status",
                spec: spec(&[], &["a", "b"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("a")]),
                phase: "Succeeded",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unknown status: [b]",
                ),
            },
            Case {
                name: "unknown fragment before unready fragment",
                spec: spec(&[("s1", true)], &["a", "b", "c"], &[]),
                conditions: vec![],
                statuses: Some(vec![unready("a"), unready("s1")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unknown status: [b c], containers with unready status: [s1 a]",
                ),
            },
            Case {
                name: "classic init containers never count",
                spec: spec(&[("init", false)], &["a"], &[]),
                conditions: vec![],
                statuses: Some(vec![unready("init"), ready("a")]),
                phase: "Running",
                want: (TRUE, "", ""),
            },
        ];
        for case in cases {
            let got =
                containers_ready_condition(&case.spec, case.statuses.as_deref(), Some(case.phase));
            let (status, reason, message) = case.want;
            assert_eq!(
                got,
                expect(CONTAINERS_READY, status, reason, message),
                "{}",
                case.name
            );
        }
    }

    /// Upstream `TestGeneratePodReadyCondition`, plus `Unknown` gate status and
    /// several gate fragments joined.
    #[test]
    fn rule3_2_pod_ready_upstream_table() {
        let gate = |type_: &str, status: &str| expect(type_, status, "", "");
        let cases = [
            Case {
                name: "nil statuses",
                spec: spec(&[], &[], &[]),
                conditions: vec![],
                statuses: None,
                phase: "Running",
                want: (FALSE, reason::UNKNOWN_CONTAINER_STATUSES, ""),
            },
            Case {
                name: "empty statuses, no containers",
                spec: spec(&[], &[], &[]),
                conditions: vec![],
                statuses: Some(vec![]),
                phase: "Running",
                want: (TRUE, "", ""),
            },
            Case {
                name: "container without status",
                spec: spec(&[], &["1234"], &[]),
                conditions: vec![],
                statuses: Some(vec![]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unknown status: [1234]",
                ),
            },
            Case {
                name: "all ready",
                spec: spec(&[], &["1234", "5678"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("1234"), ready("5678")]),
                phase: "Running",
                want: (TRUE, "", ""),
            },
            Case {
                name: "one without status",
                spec: spec(&[], &["1234", "5678"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("1234")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unknown status: [5678]",
                ),
            },
            Case {
                name: "one unready",
                spec: spec(&[], &["1234", "5678"], &[]),
                conditions: vec![],
                statuses: Some(vec![ready("1234"), unready("5678")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unready status: [5678]",
                ),
            },
            Case {
                name: "succeeded",
                spec: spec(&[], &["1234"], &[]),
                conditions: vec![],
                statuses: Some(vec![unready("1234")]),
                phase: "Succeeded",
                want: (FALSE, reason::POD_COMPLETED, ""),
            },
            Case {
                name: "gate missing",
                spec: spec(&[], &[], &["gate1"]),
                conditions: vec![],
                statuses: Some(vec![]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::READINESS_GATES_NOT_READY,
                    r#"corresponding condition of pod readiness gate "gate1" does not exist."#,
                ),
            },
            Case {
                name: "gate false",
                spec: spec(&[], &[], &["gate1"]),
                conditions: vec![gate("gate1", FALSE)],
                statuses: Some(vec![]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::READINESS_GATES_NOT_READY,
                    r#"the status of pod readiness gate "gate1" is not "True", but False"#,
                ),
            },
            Case {
                name: "gate true",
                spec: spec(&[], &[], &["gate1"]),
                conditions: vec![gate("gate1", TRUE)],
                statuses: Some(vec![]),
                phase: "Running",
                want: (TRUE, "", ""),
            },
            Case {
                name: "second gate missing",
                spec: spec(&[], &[], &["gate1", "gate2"]),
                conditions: vec![gate("gate1", TRUE)],
                statuses: Some(vec![]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::READINESS_GATES_NOT_READY,
                    r#"corresponding condition of pod readiness gate "gate2" does not exist."#,
                ),
            },
            Case {
                name: "second gate false",
                spec: spec(&[], &[], &["gate1", "gate2"]),
                conditions: vec![gate("gate1", TRUE), gate("gate2", FALSE)],
                statuses: Some(vec![]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::READINESS_GATES_NOT_READY,
                    r#"the status of pod readiness gate "gate2" is not "True", but False"#,
                ),
            },
            Case {
                name: "both gates true",
                spec: spec(&[], &[], &["gate1", "gate2"]),
                conditions: vec![gate("gate1", TRUE), gate("gate2", TRUE)],
                statuses: Some(vec![]),
                phase: "Running",
                want: (TRUE, "", ""),
            },
            Case {
                name: "containers not ready hide the gates",
                spec: spec(&[], &["1234"], &["gate1"]),
                conditions: vec![gate("gate1", TRUE)],
                statuses: Some(vec![unready("1234")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::CONTAINERS_NOT_READY,
                    "containers with unready status: [1234]",
                ),
            },
            Case {
                name: "fragments joined in gate order, status printed raw",
                spec: spec(&[], &["a"], &["g1", "g2", "g3"]),
                conditions: vec![gate("g3", "Unknown"), gate("g2", TRUE)],
                statuses: Some(vec![ready("a")]),
                phase: "Running",
                want: (
                    FALSE,
                    reason::READINESS_GATES_NOT_READY,
                    r#"corresponding condition of pod readiness gate "g1" does not exist., the status of pod readiness gate "g3" is not "True", but Unknown"#,
                ),
            },
        ];
        for case in cases {
            let got = pod_ready_condition(
                &case.spec,
                &case.conditions,
                case.statuses.as_deref(),
                Some(case.phase),
            );
            let (status, reason, message) = case.want;
            assert_eq!(
                got,
                expect(POD_READY, status, reason, message),
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn rule3_ready_false_when_gate_missing() {
        let spec = spec(&[], &["app"], &["example.com/lb"]);
        let got = pod_ready_condition(&spec, &[], Some(&[ready("app")]), Some("Running"));
        assert_eq!(got.status, FALSE);
        assert_eq!(got.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            got.message.as_deref(),
            Some(
                r#"corresponding condition of pod readiness gate "example.com/lb" does not exist."#
            )
        );
    }

    #[test]
    fn rule3_2_first_condition_of_a_gate_type_counts() {
        let spec = spec(&[], &["app"], &["g"]);
        let conditions = [expect("g", TRUE, "", ""), expect("g", FALSE, "", "")];
        let got = pod_ready_condition(&spec, &conditions, Some(&[ready("app")]), Some("Running"));
        assert_eq!(got.status, TRUE);
    }

    #[test]
    fn rule3_2_ready_copies_containers_ready_verdict() {
        let spec = spec(&[], &["app"], &["g"]);
        let got = pod_ready_condition(&spec, &[], None, Some("Running"));
        assert_eq!(
            got,
            expect(POD_READY, FALSE, reason::UNKNOWN_CONTAINER_STATUSES, "")
        );
        let got = pod_ready_condition(&spec, &[], Some(&[ready("app")]), Some("Failed"));
        assert_eq!(got, expect(POD_READY, FALSE, reason::POD_FAILED, ""));
    }

    #[test]
    fn rule3_first_status_of_a_name_counts() {
        let spec = spec(&[], &["app"], &[]);
        let got = containers_ready_condition(
            &spec,
            Some(&[unready("app"), ready("app")]),
            Some("Running"),
        );
        assert_eq!(got.status, FALSE);
    }

    #[test]
    fn rule4_transition_time_kept_when_status_unchanged() {
        let mut old = expect(
            POD_READY,
            FALSE,
            reason::CONTAINERS_NOT_READY,
            "containers with unready status: [a]",
        );
        old.last_transition_time = Some(time("2025-03-01T10:00:00Z"));
        let mut new = expect(POD_READY, FALSE, reason::READINESS_GATES_NOT_READY, "other");
        set_transition_time(&mut new, &[old], &time("2025-03-01T10:00:31Z"));
        assert_eq!(new.last_transition_time, Some(time("2025-03-01T10:00:00Z")));
    }

    #[test]
    fn rule4_transition_time_set_to_now_on_change() {
        let mut old = expect(POD_READY, FALSE, "", "");
        old.last_transition_time = Some(time("2025-03-01T10:00:00Z"));
        let mut new = expect(POD_READY, TRUE, "", "");
        set_transition_time(&mut new, &[old], &time("2025-03-01T10:00:31.750Z"));
        assert_eq!(new.last_transition_time, Some(time("2025-03-01T10:00:31Z")));
    }

    #[test]
    fn rule4_transition_time_set_to_now_for_a_new_condition() {
        let mut new = expect(CONTAINERS_READY, TRUE, "", "");
        let other = expect(POD_READY, TRUE, "", "");
        set_transition_time(&mut new, &[other], &time("2025-03-01T10:00:31Z"));
        assert_eq!(new.last_transition_time, Some(time("2025-03-01T10:00:31Z")));
    }

    #[test]
    fn rule2_4_replace_in_place_or_append() {
        let mut conditions = vec![
            expect("PodScheduled", TRUE, "", ""),
            expect(POD_READY, FALSE, "", ""),
        ];
        replace_or_append(&mut conditions, expect(POD_READY, TRUE, "", ""));
        replace_or_append(&mut conditions, expect(CONTAINERS_READY, TRUE, "", ""));
        let types: Vec<_> = conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            types,
            [
                ("PodScheduled", TRUE),
                (POD_READY, TRUE),
                (CONTAINERS_READY, TRUE)
            ]
        );
    }
}
