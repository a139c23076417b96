//! What the status patcher sends for an [`Intent`], and the pod it diffs
//! against: the patcher's decisions as pure functions over the pod as
//! podprobe last knew it, so that the patcher itself (the root crate's
//! `api::patcher`) only reads, patches and retries.
//!
//! The base of a diff is the freshest pod object podprobe knows
//! ([`diff_base`]): the watch's cache, unless the API server's answer to
//! podprobe's last write is newer (the watch lags behind podprobe's own
//! write). Of each answer the patcher keeps what [`kept`] keeps. Against
//! that base, [`decide`] builds the patch ([`build_patch`]), or says why
//! none is sent.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::Value;

use super::conditions::replace_or_append;
use super::{
    Intent, Mode, Owned, PatchError, READY_CONDITION, build_patch, desired_authority_status,
    desired_gate_status,
};

/// What to do for an intent, given the pod as the API server has it.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchDecision {
    /// Send this patch body.
    Send(Value),
    /// The owned fields already have the desired values.
    Unchanged,
    /// The pod no longer exists.
    PodGone,
    /// A pod of that name exists, but it is another pod (recreated).
    UidChanged,
}

/// The pure decision: the patch that takes `pod` to the intent's desired
/// status at `now`, if any.
pub fn decide(pod: Option<&Pod>, intent: &Intent, now: &Time) -> Result<PatchDecision, PatchError> {
    let Some(pod) = pod else {
        return Ok(PatchDecision::PodGone);
    };
    if pod.metadata.uid.as_deref() != Some(intent.uid.as_str()) {
        return Ok(PatchDecision::UidChanged);
    }
    let desired = match &intent.owned {
        Owned::Gate(probes) => {
            desired_gate_status(pod, probes, &intent.views, intent.floor.as_ref(), now)
        }
        // Until the node agent reports containers there is nothing to derive
        // from (the kubelet always has its runtime's view of them).
        Owned::Authority if !has_container_statuses(pod) => return Ok(PatchDecision::Unchanged),
        Owned::Authority => desired_authority_status(pod, &intent.views, now),
    };
    Ok(match build_patch(intent.owned.mode(), pod, &desired)? {
        Some(patch) => PatchDecision::Send(patch),
        None => PatchDecision::Unchanged,
    })
}

fn has_container_statuses(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .is_some_and(|s| s.container_statuses.is_some() || s.init_container_statuses.is_some())
}

/// The pod to diff against in `mode`: the watch's `cached` object, brought
/// up to date with `returned`, what the patcher [`kept`] of the pod the API
/// server last returned to it (a patch's answer or a fresh read), when that
/// is newer: in gate mode the cache with podprobe's own condition as
/// `returned` has it; in authority mode `returned`. The authority patch
/// replaces whole container status lists under a `resourceVersion`
/// precondition, so a stale base costs one conflict and a fresh read, never
/// a lost write of the node agent's.
pub fn diff_base(mode: Mode, cached: &Pod, returned: Option<&Pod>) -> Pod {
    let Some(returned) = returned else {
        return cached.clone();
    };
    if !newer(returned, cached) {
        // The watch has caught up with podprobe's write, or seen a later
        // one: whatever it shows now is what podprobe must repair if it
        // differs (the kubelet's `needsReconcile`).
        return cached.clone();
    }
    match mode {
        Mode::Gate => with_own_condition(cached, returned),
        Mode::Authority => returned.clone(),
    }
}

/// What the patcher keeps of a pod the API server returned, for as long as
/// the pod lives: in gate mode only what [`diff_base`] reads of it (its
/// identity, resourceVersion and podprobe's condition), a few hundred bytes
/// instead of the whole pod; in authority mode, the pod, the base of the
/// next diff.
pub fn kept(mode: Mode, pod: Pod) -> Pod {
    match mode {
        Mode::Authority => pod,
        Mode::Gate => {
            let own = own_condition(&pod).cloned();
            Pod {
                metadata: ObjectMeta {
                    name: pod.metadata.name,
                    namespace: pod.metadata.namespace,
                    uid: pod.metadata.uid,
                    resource_version: pod.metadata.resource_version,
                    ..ObjectMeta::default()
                },
                status: Some(PodStatus {
                    conditions: own.map(|c| vec![c]),
                    ..PodStatus::default()
                }),
                ..Pod::default()
            }
        }
    }
}

/// `cached` with podprobe's gate condition as in `returned`.
fn with_own_condition(cached: &Pod, returned: &Pod) -> Pod {
    let mut pod = cached.clone();
    if let Some(written) = own_condition(returned) {
        let status = pod.status.get_or_insert_with(Default::default);
        replace_or_append(
            status.conditions.get_or_insert_with(Vec::new),
            written.clone(),
        );
    }
    pod
}

/// Whether `a` is a later version of the pod than `b`. resourceVersions are
/// opaque to clients; comparing them as numbers (etcd revisions) only picks
/// the base to diff against, and a wrong pick costs one conflict.
fn newer(a: &Pod, b: &Pod) -> bool {
    let version = |pod: &Pod| {
        pod.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    matches!((version(a), version(b)), (Some(a), Some(b)) if a > b)
}

/// podprobe's gate condition (`podprobe.io/ready`) of `pod`, if it has one.
pub fn own_condition(pod: &Pod) -> Option<&PodCondition> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == READY_CONDITION)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::status::conditions::{FALSE, POD_READY, TRUE};
    use crate::testing::{
        UID, agent_pod, authority_intent, condition_in, gate_intent as intent,
        gate_pod as gated_pod,
    };

    fn now() -> Time {
        Time(Timestamp::from_second(1_740_823_231).unwrap())
    }

    fn gate_in(patch: &Value) -> Option<&str> {
        condition_in(patch, READY_CONDITION)
    }

    #[test]
    fn decide_sends_the_gate_with_the_uid_precondition() {
        let pod = gated_pod(Some(FALSE));
        let PatchDecision::Send(patch) = decide(Some(&pod), &intent(true), &now()).unwrap() else {
            panic!("expected a patch");
        };
        assert_eq!(patch["metadata"]["uid"], UID);
        assert_eq!(gate_in(&patch), Some(TRUE));
    }

    #[test]
    fn decide_skips_when_nothing_changes() {
        let pod = gated_pod(Some(TRUE));
        assert_eq!(
            decide(Some(&pod), &intent(true), &now()).unwrap(),
            PatchDecision::Unchanged
        );
    }

    #[test]
    fn decide_never_patches_a_recreated_pod() {
        let mut pod = gated_pod(Some(FALSE));
        pod.metadata.uid = Some("another-uid".into());
        assert_eq!(
            decide(Some(&pod), &intent(true), &now()).unwrap(),
            PatchDecision::UidChanged
        );
        assert_eq!(
            decide(None, &intent(true), &now()).unwrap(),
            PatchDecision::PodGone
        );
    }

    #[test]
    fn a_gate_patcher_keeps_only_what_it_reads_of_a_returned_pod() {
        let mut pod = gated_pod(Some(TRUE));
        pod.metadata.resource_version = Some("7".into());
        let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions.push(PodCondition {
            type_: "Ready".into(),
            status: TRUE.into(),
            ..PodCondition::default()
        });
        assert!(pod.spec.is_some());
        let slim = kept(Mode::Gate, pod.clone());
        assert_eq!(slim.metadata.uid, pod.metadata.uid);
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(own_condition(&slim), own_condition(&pod));
        assert_eq!(slim.spec, None);
        let conditions = slim.status.as_ref().unwrap().conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 1, "only podprobe's condition");
        // Authority mode diffs against the whole pod.
        assert_eq!(kept(Mode::Authority, pod.clone()), pod);
    }

    #[test]
    fn decide_in_authority_mode_waits_for_the_agents_container_statuses() {
        let mut pod = agent_pod();
        pod.status.as_mut().unwrap().container_statuses = None;
        assert_eq!(
            decide(Some(&pod), &authority_intent(true), &now()).unwrap(),
            PatchDecision::Unchanged
        );
        let PatchDecision::Send(patch) =
            decide(Some(&agent_pod()), &authority_intent(true), &now()).unwrap()
        else {
            panic!("expected a patch");
        };
        assert_eq!(patch["metadata"]["resourceVersion"], "1");
        assert_eq!(patch["status"]["containerStatuses"][0]["ready"], true);
        assert_eq!(condition_in(&patch, POD_READY), Some(TRUE));
    }

    #[test]
    fn newer_compares_resource_versions_as_numbers_only() {
        let at = |v: Option<&str>| Pod {
            metadata: ObjectMeta {
                resource_version: v.map(str::to_string),
                ..Default::default()
            },
            ..Pod::default()
        };
        assert!(newer(&at(Some("10")), &at(Some("9"))));
        assert!(!newer(&at(Some("9")), &at(Some("10"))));
        assert!(!newer(&at(Some("abc")), &at(Some("9"))));
        assert!(!newer(&at(None), &at(Some("9"))));
    }
}
