//! Gate-mode set-up mistakes that leave a pod NotReady for ever or its
//! probes without effect: the `podprobe.io/probes` annotation without the
//! `podprobe.io/ready` readiness gate, the gate without the annotation, and
//! an annotation podprobe refuses. `podprobe run` reports the mismatch on a
//! pod's first sight; `podprobe lint` runs every check offline.

use k8s_openapi::api::core::v1::Pod;

use super::{PROBES_ANNOTATION, READY_CONDITION, check_hosts, pod_probes};
use crate::spec::destinations::Destinations;
use crate::spec::probe_spec::budget::PodBudget;

/// One set-up mistake of a pod (template).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Probes run, but their verdict never counts for the pod's `Ready`.
    GateMissing,
    /// Nothing sets the gate, so the pod never turns Ready.
    AnnotationMissing,
    /// The annotation is refused (as `ProbeAnnotationInvalid` says when the
    /// pod runs), so the gate stays unset.
    AnnotationInvalid(String),
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::GateMissing => write!(
                f,
                "the pod has the {PROBES_ANNOTATION} annotation but does not list the readiness gate \
                 {READY_CONDITION} in spec.readinessGates: podprobe runs its probes, but their \
                 verdict does not count for the pod's Ready (add `readinessGates: \
                 [{{conditionType: {READY_CONDITION}}}]`)"
            ),
            Finding::AnnotationMissing => write!(
                f,
                "the pod lists the readiness gate {READY_CONDITION} but has no {PROBES_ANNOTATION} \
                 annotation: nothing sets the gate, so the pod stays NotReady (add the annotation, \
                 or remove the gate)"
            ),
            Finding::AnnotationInvalid(error) => {
                write!(f, "the {PROBES_ANNOTATION} annotation is refused: {error}")
            }
        }
    }
}

/// Whether `pod` lists `podprobe.io/ready` in `spec.readinessGates`.
fn lists_gate(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|spec| spec.readiness_gates.iter().flatten())
        .any(|gate| gate.condition_type == READY_CONDITION)
}

/// Whether `pod` has the `podprobe.io/probes` annotation.
pub fn has_annotation(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PROBES_ANNOTATION))
}

/// The mismatch between annotation and gate, if any: what the daemon
/// reports on a pod's first sight (the annotation's own errors it reports
/// as `ProbeAnnotationInvalid` when it parses it).
pub fn gate_mismatch(pod: &Pod) -> Option<Finding> {
    match (has_annotation(pod), lists_gate(pod)) {
        (true, false) => Some(Finding::GateMissing),
        (false, true) => Some(Finding::AnnotationMissing),
        _ => None,
    }
}

/// Every finding of `pod` under the gate-mode destination policy
/// `destinations`: the mismatch, and whether the daemon would refuse the
/// annotation.
pub fn pod_findings(pod: &Pod, destinations: &Destinations) -> Vec<Finding> {
    let mut findings: Vec<Finding> = gate_mismatch(pod).into_iter().collect();
    if has_annotation(pod) {
        let checked = pod_probes(pod, &mut PodBudget::default())
            .and_then(|probes| check_hosts(&probes, destinations));
        if let Err(error) = checked {
            findings.push(Finding::AnnotationInvalid(error.to_string()));
        }
    }
    findings
}
