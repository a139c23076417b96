//! The strategic-merge patch for `pods/<name>/status` (status.md rule 5),
//! restricted to the fields podprobe owns in its [`Mode`] (design.md).
//!
//! The body has the shape the kubelet's two-way strategic-merge diff
//! (`PatchPodStatus`, `CreateTwoWayMergePatch` over the core/v1 `Pod`
//! schema) produces:
//!
//! - `conditions` merge by `type`: only changed conditions are sent, each with
//!   its `type` and the keys that changed (`null` for keys that went away, as
//!   `reason`/`message` when a condition turns `True`), in the order of the
//!   new list, together with `$setElementOrder/conditions` listing every type
//!   of the new list; when the pod has no conditions yet the new list is sent
//!   whole, without the order directive;
//! - `containerStatuses` and `initContainerStatuses` are atomic lists: sent
//!   whole, and only when something in them changed;
//! - `metadata.uid` always rides along as a precondition (a pod recreated
//!   under the same name is never patched with the old pod's status), and in
//!   authority mode `metadata.resourceVersion` too, because a whole container
//!   status list replaces the node agent's and must not overwrite a newer one.
//!
//! Keys are sorted, as Go marshals maps. Fields podprobe does not own never
//! appear. Container status lists are re-serialised from the k8s-openapi
//! types, so a field newer than the crate's API version would be dropped from
//! them; the resourceVersion precondition does not protect against that.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use serde_json::{Map, Value, json};

use super::Mode;
use super::conditions::{CONTAINERS_READY, POD_READY};
use super::gate::READY_CONDITION;

/// Why no patch can be built for a pod.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("pod has no metadata.uid: a status patch needs the UID precondition")]
    MissingUid,
    #[error(
        "pod has no metadata.resourceVersion: authority mode replaces container status lists only under a \
         resourceVersion precondition"
    )]
    MissingResourceVersion,
    #[error("cannot serialise the pod status patch: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// The condition types podprobe owns in `mode`.
pub fn owned_conditions(mode: Mode) -> &'static [&'static str] {
    match mode {
        Mode::Gate => &[READY_CONDITION],
        Mode::Authority => &[POD_READY, CONTAINERS_READY],
    }
}

/// The patch that takes the owned fields of `pod` (the object as the API
/// server has it) to their values in `desired`, or `None` when they already
/// agree and no request should be sent.
///
/// Owned conditions are compared on `status`, `reason` and `message` (and, in
/// authority mode where the kubelet stamps it, `observedGeneration`);
/// timestamps alone never cause a patch (coexistence checklist item 3). In
/// authority mode container statuses take only `ready` and `started` from
/// `desired`, matched by name; all their other fields stay as in `pod`.
pub fn build_patch(
    mode: Mode,
    pod: &Pod,
    desired: &PodStatus,
) -> Result<Option<Value>, PatchError> {
    let uid = pod.metadata.uid.as_deref().ok_or(PatchError::MissingUid)?;
    let no_status = PodStatus::default();
    let current = pod.status.as_ref().unwrap_or(&no_status);
    let current_conditions = current.conditions.as_deref().unwrap_or_default();
    let desired_conditions = desired.conditions.as_deref().unwrap_or_default();
    let conditions = with_owned_conditions(mode, current_conditions, desired_conditions);

    let mut status = Map::new();
    diff_conditions(current_conditions, &conditions, &mut status)?;
    let mut metadata = Map::from_iter([("uid".to_string(), json!(uid))]);
    if mode == Mode::Authority {
        let lists = [
            (
                "initContainerStatuses",
                &current.init_container_statuses,
                &desired.init_container_statuses,
            ),
            (
                "containerStatuses",
                &current.container_statuses,
                &desired.container_statuses,
            ),
        ];
        for (key, current_list, desired_list) in lists {
            let merged = with_probe_fields(current_list, desired_list);
            if merged != *current_list {
                status.insert(key.to_string(), serde_json::to_value(merged)?);
            }
        }
        if !status.is_empty() {
            let version = pod
                .metadata
                .resource_version
                .as_deref()
                .ok_or(PatchError::MissingResourceVersion)?;
            metadata.insert("resourceVersion".to_string(), json!(version));
        }
    }
    if status.is_empty() {
        return Ok(None);
    }
    Ok(Some(json!({"metadata": metadata, "status": status})))
}

/// `current` with each owned condition of `desired` replacing the one of its
/// type when its verdict differs, or appended when the type is new.
fn with_owned_conditions(
    mode: Mode,
    current: &[PodCondition],
    desired: &[PodCondition],
) -> Vec<PodCondition> {
    let owned = owned_conditions(mode);
    let mut merged = current.to_vec();
    for wanted in desired.iter().filter(|c| owned.contains(&c.type_.as_str())) {
        match merged.iter_mut().find(|c| c.type_ == wanted.type_) {
            Some(existing) if same_verdict(mode, existing, wanted) => {}
            Some(existing) => *existing = wanted.clone(),
            None => merged.push(wanted.clone()),
        }
    }
    merged
}

fn same_verdict(mode: Mode, a: &PodCondition, b: &PodCondition) -> bool {
    let same = a.status == b.status && a.reason == b.reason && a.message == b.message;
    same && (mode == Mode::Gate || a.observed_generation == b.observed_generation)
}

/// `current` container statuses with `ready` and `started` taken from the
/// first status of the same name in `desired`.
fn with_probe_fields(
    current: &Option<Vec<ContainerStatus>>,
    desired: &Option<Vec<ContainerStatus>>,
) -> Option<Vec<ContainerStatus>> {
    let desired = desired.as_deref().unwrap_or_default();
    current.as_ref().map(|statuses| {
        statuses
            .iter()
            .map(
                |status| match desired.iter().find(|d| d.name == status.name) {
                    Some(wanted) => ContainerStatus {
                        ready: wanted.ready,
                        started: wanted.started,
                        ..status.clone()
                    },
                    None => status.clone(),
                },
            )
            .collect()
    })
}

/// Adds to `patch` the two-way strategic-merge diff of a `conditions` list
/// (merge key `type`) from `original` to `modified`. `modified` keeps every
/// type of `original`, so no delete directive is ever needed.
fn diff_conditions(
    original: &[PodCondition],
    modified: &[PodCondition],
    patch: &mut Map<String, Value>,
) -> Result<(), serde_json::Error> {
    if original == modified {
        return Ok(());
    }
    if original.is_empty() {
        // Go omits an empty list, so the diff sees an added key and sends it whole.
        patch.insert("conditions".to_string(), serde_json::to_value(modified)?);
        return Ok(());
    }
    let mut entries = Vec::new();
    for new in modified {
        let new_fields = fields(new)?;
        let Some(old) = original.iter().find(|c| c.type_ == new.type_) else {
            entries.push(Value::Object(new_fields));
            continue;
        };
        let mut changed = diff_fields(&fields(old)?, &new_fields);
        if !changed.is_empty() {
            changed.insert("type".to_string(), json!(new.type_));
            entries.push(Value::Object(changed));
        }
    }
    if entries.is_empty() {
        return Ok(());
    }
    let order = modified.iter().map(|c| json!({"type": c.type_})).collect();
    patch.insert(
        "$setElementOrder/conditions".to_string(),
        Value::Array(order),
    );
    patch.insert("conditions".to_string(), Value::Array(entries));
    Ok(())
}

/// A condition's JSON fields.
fn fields(condition: &PodCondition) -> Result<Map<String, Value>, serde_json::Error> {
    match serde_json::to_value(condition)? {
        Value::Object(fields) => Ok(fields),
        // A struct always serialises as an object.
        _ => Ok(Map::new()),
    }
}

/// The fields of a flat object that differ from `old` to `new`, `null` for
/// those `new` lacks.
fn diff_fields(old: &Map<String, Value>, new: &Map<String, Value>) -> Map<String, Value> {
    let changed = new
        .iter()
        .filter(|(key, value)| old.get(*key) != Some(*value));
    let removed = old.keys().filter(|key| !new.contains_key(*key));
    changed
        .map(|(key, value)| (key.clone(), value.clone()))
        .chain(removed.map(|key| (key.clone(), Value::Null)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::annotation::AnnotatedProbes;
    use crate::status::conditions::{FALSE, TRUE, reason};
    use crate::status::{ContainerProbeView, desired_authority_status, desired_gate_status};
    use crate::testing::{UID, container, container_status, running_pod as pod, time, timed, view};
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning};

    const AT: &str = "2025-03-01T10:00:31Z";

    fn gated_pod(conditions: Vec<PodCondition>) -> Pod {
        let status = PodStatus {
            conditions: Some(conditions),
            container_statuses: Some(vec![container_status("app", true)]),
            ..PodStatus::default()
        };
        pod(vec![], vec![container("app")], &[READY_CONDITION], status)
    }

    fn kubelet_conditions() -> Vec<PodCondition> {
        vec![
            timed("Initialized", TRUE, None, None, "2025-03-01T10:00:02Z"),
            timed(
                POD_READY,
                FALSE,
                Some(reason::READINESS_GATES_NOT_READY),
                Some("x"),
                "2025-03-01T10:00:02Z",
            ),
            timed(CONTAINERS_READY, TRUE, None, None, "2025-03-01T10:00:02Z"),
            timed("PodScheduled", TRUE, None, None, "2025-03-01T10:00:00Z"),
        ]
    }

    fn gate_patch(pod: &Pod) -> Option<Value> {
        let desired = desired_gate_status(pod, &AnnotatedProbes::default(), &[], None, &time(AT));
        build_patch(Mode::Gate, pod, &desired).expect("patch")
    }

    #[test]
    fn rule5_gate_patch_adds_own_condition_with_element_order() {
        let got = gate_patch(&gated_pod(kubelet_conditions()));
        let want = json!({
            "metadata": {"uid": UID},
            "status": {
                "$setElementOrder/conditions": [
                    {"type": "Initialized"}, {"type": "Ready"}, {"type": "ContainersReady"},
                    {"type": "PodScheduled"}, {"type": "podprobe.io/ready"}
                ],
                "conditions": [
                    {"lastTransitionTime": AT, "status": "True", "type": "podprobe.io/ready"}
                ]
            }
        });
        assert_eq!(got, Some(want));
    }

    #[test]
    fn rule5_4_condition_turning_true_nulls_reason_and_message() {
        let mut conditions = kubelet_conditions();
        conditions.push(timed(
            READY_CONDITION,
            FALSE,
            Some(reason::CONTAINERS_NOT_READY),
            Some("containers with unready status: [app]"),
            "2025-03-01T10:00:05Z",
        ));
        let got = gate_patch(&gated_pod(conditions)).expect("a patch");
        assert_eq!(
            got["status"]["conditions"],
            json!([{
                "lastTransitionTime": AT, "message": null, "reason": null,
                "status": "True", "type": "podprobe.io/ready"
            }])
        );
    }

    #[test]
    fn rule5_2_no_patch_when_nothing_changes() {
        let mut conditions = kubelet_conditions();
        conditions.push(timed(
            READY_CONDITION,
            TRUE,
            None,
            None,
            "2025-03-01T10:00:05Z",
        ));
        assert_eq!(gate_patch(&gated_pod(conditions)), None);
    }

    #[test]
    fn coexistence3_gate_patch_skipped_when_status_reason_message_unchanged() {
        let mut mine = timed(READY_CONDITION, TRUE, None, None, "2025-03-01T10:00:05Z");
        mine.last_probe_time = Some(time("2025-03-01T10:00:20Z"));
        mine.observed_generation = Some(7);
        let mut conditions = kubelet_conditions();
        conditions.push(mine);
        assert_eq!(gate_patch(&gated_pod(conditions)), None);
    }

    #[test]
    fn rule5_4_first_condition_sends_the_whole_list_without_order() {
        let got = gate_patch(&gated_pod(vec![]));
        let want = json!({
            "metadata": {"uid": UID},
            "status": {"conditions": [{"lastTransitionTime": AT, "status": "True", "type": "podprobe.io/ready"}]}
        });
        assert_eq!(got, Some(want));
    }

    #[test]
    fn design_gate_patch_ignores_kubelet_fields_in_desired() {
        let pod = gated_pod(kubelet_conditions());
        let mut desired =
            desired_gate_status(&pod, &AnnotatedProbes::default(), &[], None, &time(AT));
        desired.phase = Some("Failed".to_string());
        desired.conditions.as_mut().unwrap()[1].status = TRUE.to_string();
        desired.container_statuses.as_mut().unwrap()[0].ready = false;
        let got = build_patch(Mode::Gate, &pod, &desired).unwrap().unwrap();
        assert_eq!(got["status"]["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(got["status"]["conditions"][0]["type"], READY_CONDITION);
        assert_eq!(got["status"].as_object().unwrap().len(), 2);
        assert_eq!(got["metadata"], json!({"uid": UID}));
    }

    #[test]
    fn rule5_3_no_uid_no_patch() {
        let mut pod = gated_pod(vec![]);
        pod.metadata.uid = None;
        let desired = desired_gate_status(&pod, &AnnotatedProbes::default(), &[], None, &time(AT));
        assert!(matches!(
            build_patch(Mode::Gate, &pod, &desired),
            Err(PatchError::MissingUid)
        ));
    }

    /// status.md rule 5.6: `app` turns ready in `shop/web-0`, whose readiness
    /// gate is already True. Conditions are listed in the new list's order
    /// (`Ready` before `ContainersReady`), as upstream's diff orders them.
    #[test]
    fn rule5_6_authority_patch_matches_the_kubelets() {
        let running = || {
            Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time("2025-03-01T10:00:03Z")),
                }),
                ..ContainerState::default()
            })
        };
        let app = ContainerStatus {
            container_id: Some("containerd://9a1b".to_string()),
            image: "registry.example.com/shop/app:1.4.2".to_string(),
            image_id: "registry.example.com/shop/app@sha256:3f5e".to_string(),
            last_state: Some(ContainerState::default()),
            name: "app".to_string(),
            ready: false,
            started: Some(true),
            state: running(),
            ..ContainerStatus::default()
        };
        let proxy = ContainerStatus {
            container_id: Some("containerd://c4d2".to_string()),
            image: "docker.io/envoyproxy/envoy:v1.31.0".to_string(),
            image_id: "docker.io/envoyproxy/envoy@sha256:77ab".to_string(),
            last_state: Some(ContainerState::default()),
            name: "proxy".to_string(),
            ready: true,
            started: Some(true),
            state: running(),
            ..ContainerStatus::default()
        };
        let unready = Some("containers with unready status: [app]");
        let status = PodStatus {
            conditions: Some(vec![
                timed(
                    "example.com/lb-registered",
                    TRUE,
                    None,
                    None,
                    "2025-03-01T10:00:20Z",
                ),
                timed(
                    "PodReadyToStartContainers",
                    TRUE,
                    None,
                    None,
                    "2025-03-01T10:00:01Z",
                ),
                timed("Initialized", TRUE, None, None, "2025-03-01T10:00:01Z"),
                timed(
                    POD_READY,
                    FALSE,
                    Some(reason::CONTAINERS_NOT_READY),
                    unready,
                    "2025-03-01T10:00:01Z",
                ),
                timed(
                    CONTAINERS_READY,
                    FALSE,
                    Some(reason::CONTAINERS_NOT_READY),
                    unready,
                    "2025-03-01T10:00:01Z",
                ),
                timed("PodScheduled", TRUE, None, None, "2025-03-01T10:00:00Z"),
            ]),
            container_statuses: Some(vec![app, proxy]),
            ..PodStatus::default()
        };
        let pod = pod(
            vec![],
            vec![container("app"), container("proxy")],
            &["example.com/lb-registered"],
            status,
        );
        let views = [
            ContainerProbeView {
                name: "app".to_string(),
                container_id: Some("containerd://9a1b".to_string()),
                started: true,
                ready: true,
                note: None,
            },
            ContainerProbeView {
                name: "proxy".to_string(),
                container_id: Some("containerd://c4d2".to_string()),
                started: true,
                ready: true,
                note: None,
            },
        ];
        let desired = desired_authority_status(&pod, &views, &time(AT));
        let got = build_patch(Mode::Authority, &pod, &desired).unwrap();
        let want = json!({
            "metadata": {"resourceVersion": "42", "uid": UID},
            "status": {
                "$setElementOrder/conditions": [
                    {"type": "example.com/lb-registered"}, {"type": "PodReadyToStartContainers"},
                    {"type": "Initialized"}, {"type": "Ready"}, {"type": "ContainersReady"},
                    {"type": "PodScheduled"}
                ],
                "conditions": [
                    {"lastTransitionTime": AT, "message": null, "reason": null, "status": "True", "type": "Ready"},
                    {"lastTransitionTime": AT, "message": null, "reason": null, "status": "True",
                     "type": "ContainersReady"}
                ],
                "containerStatuses": [
                    {"containerID": "containerd://9a1b", "image": "registry.example.com/shop/app:1.4.2",
                     "imageID": "registry.example.com/shop/app@sha256:3f5e", "lastState": {}, "name": "app",
                     "ready": true, "restartCount": 0, "started": true,
                     "state": {"running": {"startedAt": "2025-03-01T10:00:03Z"}}},
                    {"containerID": "containerd://c4d2", "image": "docker.io/envoyproxy/envoy:v1.31.0",
                     "imageID": "docker.io/envoyproxy/envoy@sha256:77ab", "lastState": {}, "name": "proxy",
                     "ready": true, "restartCount": 0, "started": true,
                     "state": {"running": {"startedAt": "2025-03-01T10:00:03Z"}}}
                ]
            }
        });
        assert_eq!(got, Some(want));
        let body = serde_json::to_string(&got).unwrap();
        assert!(
            body.starts_with(r#"{"metadata":{"resourceVersion":"42","uid":"#),
            "{body}"
        );
        assert!(
            body.contains(r#""status":{"$setElementOrder/conditions":"#),
            "{body}"
        );
    }

    #[test]
    fn design_authority_patch_only_conditions_when_statuses_agree() {
        let status = PodStatus {
            conditions: Some(vec![timed(
                POD_READY,
                FALSE,
                Some("Other"),
                None,
                "2025-03-01T10:00:00Z",
            )]),
            container_statuses: Some(vec![container_status("app", true)]),
            ..PodStatus::default()
        };
        let pod = pod(vec![], vec![container("app")], &[], status);
        let desired = desired_authority_status(&pod, &[view("app", true, true)], &time(AT));
        let got = build_patch(Mode::Authority, &pod, &desired)
            .unwrap()
            .unwrap();
        assert_eq!(
            got["status"]["$setElementOrder/conditions"],
            json!([{"type": "Ready"}, {"type": "ContainersReady"}])
        );
        assert!(got["status"].get("containerStatuses").is_none());
        assert_eq!(got["metadata"]["resourceVersion"], "42");
    }

    #[test]
    fn design_authority_patch_needs_a_resource_version() {
        let status = PodStatus {
            container_statuses: Some(vec![container_status("app", false)]),
            ..PodStatus::default()
        };
        let mut pod = pod(vec![], vec![container("app")], &[], status);
        pod.metadata.resource_version = None;
        let desired = desired_authority_status(&pod, &[view("app", true, true)], &time(AT));
        assert!(matches!(
            build_patch(Mode::Authority, &pod, &desired),
            Err(PatchError::MissingResourceVersion)
        ));
    }

    #[test]
    fn rule6_5_authority_reacts_to_observed_generation() {
        let status = PodStatus {
            conditions: Some(vec![
                timed(POD_READY, TRUE, None, None, "2025-03-01T10:00:00Z"),
                timed(CONTAINERS_READY, TRUE, None, None, "2025-03-01T10:00:00Z"),
            ]),
            container_statuses: Some(vec![container_status("app", true)]),
            ..PodStatus::default()
        };
        let mut pod = pod(vec![], vec![container("app")], &[], status);
        pod.metadata.generation = Some(2);
        let desired = desired_authority_status(&pod, &[view("app", true, true)], &time(AT));
        let got = build_patch(Mode::Authority, &pod, &desired)
            .unwrap()
            .unwrap();
        assert_eq!(
            got["status"]["conditions"],
            json!([{"observedGeneration": 2, "type": "Ready"}, {"observedGeneration": 2, "type": "ContainersReady"}])
        );
    }
}
