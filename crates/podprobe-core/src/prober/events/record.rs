//! One Event podprobe records about a pod or its container: its reason,
//! note (within the API's limit), the object it regards and its series
//! patch, built from what happened (a probe, a kill, an annotation).

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use crate::prober::manager::ProbeChanges;
use crate::prober::markers::MarkerRefusal;
use crate::prober::worker::WorkerConfig;
use crate::spec::probe_spec::budget::OverBudget;
use crate::spec::probe_spec::timeout_caps::CappedTimeout;
use crate::spec::verdict::EventType;
use crate::spec::{ProbeEvent, ProbeKind, SpecError};
use crate::status::annotation::AnnotationError;
use crate::status::gate_setup::Finding;
use crate::util::pod::container_field_path;

/// `reportingController` of every Event podprobe records.
pub const REPORTING_CONTROLLER: &str = "podprobe";

/// Longest note the `events.k8s.io/v1` API accepts, in bytes.
pub const MAX_EVENT_NOTE_BYTES: usize = 1024;

/// Event reasons.
pub mod reasons {
    pub use crate::spec::verdict::reasons::{
        CLIENT_CERTIFICATE_UNAVAILABLE, PROBE_WARNING, UNHEALTHY,
    };

    /// A container is stopped (`events.KillingContainer`).
    pub const KILLING: &str = "Killing";
    /// The pod's `podprobe.io/probes` annotation cannot be used.
    pub const PROBE_ANNOTATION_INVALID: &str = "ProbeAnnotationInvalid";
    /// An edited annotation changed the pod's probes while they ran.
    pub const PROBES_CHANGED: &str = "ProbesChanged";
    /// Gate mode: the pod has probes in the annotation but does not list
    /// the `podprobe.io/ready` readiness gate, so they change nothing.
    pub const READINESS_GATE_MISSING: &str = "ReadinessGateMissing";
    /// Gate mode: the pod lists the `podprobe.io/ready` readiness gate but
    /// has no probes annotation, so it stays NotReady.
    pub const PROBE_ANNOTATION_MISSING: &str = "ProbeAnnotationMissing";
    /// A probe of the pod spec cannot run as written (authority mode).
    pub const PROBE_SPEC_INVALID: &str = "ProbeSpecInvalid";
    /// A probe would take its pod over one of the node's per-pod budgets
    /// (#25), so it does not run as written.
    pub const PROBE_BUDGET_EXCEEDED: &str = "ProbeBudgetExceeded";
    /// The runtime says the container the pod's status names belongs to
    /// another pod or container, so podprobe did not stop it.
    pub const CONTAINER_MISMATCH: &str = "ContainerMismatch";
    /// A preStop hook failed (`events.FailedPreStopHook`).
    pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
    /// An HTTPS hook only succeeded over HTTP (the kubelet's
    /// `LifecycleHTTPFallback`).
    pub const LIFECYCLE_HTTP_FALLBACK: &str = "LifecycleHTTPFallback";
    /// Gate mode: a container podprobe stopped for a probe exited 0 under
    /// `restartPolicy: OnFailure`, so the kubelet does not restart it (K8).
    pub const PROBE_KILL_NOT_RESTARTED: &str = "ProbeKillNotRestarted";
    /// The pod's liveness probes are paused (`podprobe.io/pause-liveness-until`,
    /// LP3), or their pause now ends at another time.
    pub const LIVENESS_PAUSED: &str = "LivenessPaused";
    /// The pod's liveness probes run again (LP3).
    pub const LIVENESS_RESUMED: &str = "LivenessResumed";
    /// The pod's pause annotation is refused (LP4).
    pub const LIVENESS_PAUSE_INVALID: &str = "LivenessPauseInvalid";
    /// A probe's marker is not written: its key is not allowed on the
    /// node, or another probe marks it (MK2).
    pub const MARKER_NOT_ALLOWED: &str = "MarkerNotAllowed";
    /// A probe's `timeoutSeconds` is longer than the node allows, so it is
    /// cut (#37).
    pub const PROBE_TIMEOUT_CAPPED: &str = "ProbeTimeoutCapped";
    /// A liveness restart waits for a unit of the workload's
    /// `restartBudget` (WG2).
    pub const LIVENESS_RESTART_DEFERRED: &str = "LivenessRestartDeferred";
    /// A `restartBudget` cannot be applied (no workload, the API failing),
    /// so the restart is the kubelet's (WG2).
    pub const RESTART_BUDGET_UNAVAILABLE: &str = "RestartBudgetUnavailable";
    /// A failing readiness probe's gate is held True by the workload's
    /// `readinessFloor` (WG3); the gate condition's reason too.
    pub const READINESS_FLOOR: &str = crate::status::gate::reason::READINESS_FLOOR;
    /// A `readinessFloor` cannot be applied (no workload, the API failing),
    /// so the gate goes False as the kubelet's readiness would (WG3).
    pub const READINESS_FLOOR_UNAVAILABLE: &str = "ReadinessFloorUnavailable";
}

/// One Event to record, with the object it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct PodEvent {
    /// The pod, with `fieldPath` naming the container for container events.
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: &'static str,
    /// `events.k8s.io/v1` requires an action: what podprobe did.
    pub action: &'static str,
    pub note: String,
}

impl PodEvent {
    /// The event of one probe run (P3, P4) on the worker's container (P5).
    /// `None` if the pod has no name or namespace to refer to.
    pub fn probe(config: &WorkerConfig, event: &ProbeEvent) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(config.pod(), Some(config.field_path()))?,
            type_: event.type_,
            reason: event.reason,
            action: probe_action(config.kind()),
            note: event.message.clone(),
        })
    }

    /// The Normal `Killing` event of a container stopped after a probe
    /// failure (K2) with `note`, the message of
    /// [`crate::prober::manager::probe_kills`] as podprobe can keep its promise.
    pub fn killing(pod: &Pod, container: &str, note: String) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, Some(container_field_path(pod, container)))?,
            type_: EventType::Normal,
            reason: reasons::KILLING,
            action: "StopContainer",
            note,
        })
    }

    /// A Warning on the pod: its `podprobe.io/probes` annotation cannot be
    /// used, so none of its annotated probes run.
    pub fn invalid_annotation(pod: &Pod, error: &AnnotationError) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, None)?,
            type_: EventType::Warning,
            reason: reasons::PROBE_ANNOTATION_INVALID,
            action: "ReadProbes",
            note: error.to_string(),
        })
    }

    /// A Normal event on the pod: its edited annotation changed which probes
    /// run (see [`ProbeChanges`]).
    pub fn probes_changed(pod: &Pod, changes: &ProbeChanges) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, None)?,
            type_: EventType::Normal,
            reason: reasons::PROBES_CHANGED,
            action: "ReadProbes",
            note: format!("podprobe.io/probes changed: {changes}"),
        })
    }

    /// A Warning on the pod: its annotation and readiness gate do not go
    /// together (see [`crate::status::gate_setup::gate_mismatch`]).
    pub fn gate_mismatch(pod: &Pod, finding: &Finding) -> Option<Self> {
        let reason = match finding {
            Finding::GateMissing => reasons::READINESS_GATE_MISSING,
            Finding::AnnotationMissing => reasons::PROBE_ANNOTATION_MISSING,
            Finding::AnnotationInvalid(_) => reasons::PROBE_ANNOTATION_INVALID,
        };
        Some(PodEvent {
            regarding: pod_reference(pod, None)?,
            type_: EventType::Warning,
            reason,
            action: "ReadProbes",
            note: finding.to_string(),
        })
    }

    /// A Warning on the container: podprobe did not stop it, because the
    /// runtime container its status names is not this container (`reason`).
    pub fn kill_refused(pod: &Pod, container: &str, reason: String) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, Some(container_field_path(pod, container)))?,
            type_: EventType::Warning,
            reason: reasons::CONTAINER_MISMATCH,
            action: "StopContainer",
            note: reason,
        })
    }

    /// A Warning about a preStop hook or what followed a kill (`reason` one
    /// of [`reasons`]' hook and restart reasons), on the container if one is
    /// named, else on the pod (as the kubelet records `LifecycleHTTPFallback`).
    pub fn kill_warning(
        pod: &Pod,
        container: Option<&str>,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, container.map(|c| container_field_path(pod, c)))?,
            type_: EventType::Warning,
            reason,
            action,
            note,
        })
    }

    /// A Warning on the pod about its readiness floor (WG3): `reason`
    /// [`reasons::READINESS_FLOOR`] or [`reasons::READINESS_FLOOR_UNAVAILABLE`].
    pub fn readiness_floor(pod: &Pod, reason: &'static str, note: String) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, None)?,
            type_: EventType::Warning,
            reason,
            action: "HoldReadiness",
            note: truncate_note(note),
        })
    }

    /// A Warning on the container: a probe of its spec cannot run as
    /// written, so it does not run, or has a field podprobe does not
    /// implement (V10), so every run of it errors.
    pub fn invalid_spec_probe(pod: &Pod, error: &SpecError) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, Some(container_field_path(pod, &error.container)))?,
            type_: EventType::Warning,
            reason: reasons::PROBE_SPEC_INVALID,
            action: "ReadProbes",
            note: error.to_string(),
        })
    }

    /// A Normal or Warning event on the pod about its liveness pause (LP3,
    /// LP4): `reason` one of [`reasons`]' pause reasons.
    pub fn liveness_pause(
        pod: &Pod,
        type_: EventType,
        reason: &'static str,
        note: String,
    ) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, None)?,
            type_,
            reason,
            action: "PauseLiveness",
            note: truncate_note(note),
        })
    }

    /// A Warning on the container: a marker of its probe is not written
    /// (MK2).
    pub fn marker_refused(pod: &Pod, refusal: &MarkerRefusal) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, Some(container_field_path(pod, &refusal.container)))?,
            type_: EventType::Warning,
            reason: reasons::MARKER_NOT_ALLOWED,
            action: "WriteMarkers",
            note: truncate_note(format!(
                "{} probe: {}",
                refusal.kind.as_str(),
                refusal.message
            )),
        })
    }

    /// A Warning on the container: one of its probes runs with a shorter
    /// timeout than it asks for.
    pub fn timeout_capped(pod: &Pod, capped: &CappedTimeout) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, Some(container_field_path(pod, &capped.container)))?,
            type_: EventType::Warning,
            reason: reasons::PROBE_TIMEOUT_CAPPED,
            action: "ReadProbes",
            note: truncate_note(capped.to_string()),
        })
    }

    /// A Warning on the container: one of its probes would take the pod
    /// over a budget (`over` says which, how much and the limit).
    pub fn over_budget(pod: &Pod, over: &OverBudget) -> Option<Self> {
        Some(PodEvent {
            regarding: pod_reference(pod, Some(container_field_path(pod, &over.container)))?,
            type_: EventType::Warning,
            reason: reasons::PROBE_BUDGET_EXCEEDED,
            action: "ReadProbes",
            note: over.to_string(),
        })
    }

    /// The `events.k8s.io/v1` Event that records this event, the `count`th
    /// of its series, as reported by node `instance` at `now`: what
    /// podprobe creates (and all that its admission policy lets it create:
    /// `charts/podprobe/templates/admission-policy.yaml`).
    pub fn to_api_event(&self, instance: &str, count: u32, now: Timestamp) -> Event {
        // The kubelet's names: `<object>.<hex nanoseconds>`.
        let name = format!(
            "{}.{:x}",
            self.regarding
                .name
                .as_deref()
                .unwrap_or(REPORTING_CONTROLLER),
            now.as_nanosecond()
        );
        Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: self.regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some(self.action.to_string()),
            reason: Some(self.reason.to_string()),
            note: Some(self.note.clone()),
            type_: Some(type_name(self.type_).to_string()),
            regarding: Some(self.regarding.clone()),
            event_time: Some(MicroTime(now)),
            reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
            reporting_instance: Some(instance.to_string()),
            // A series whose earlier events were not written (the spam
            // filter, a failed write, a vanished Event) starts with its
            // count so far.
            series: (count > 1).then(|| series(count, now)),
            ..Event::default()
        }
    }

    pub fn container(&self) -> &str {
        self.regarding.field_path.as_deref().unwrap_or_default()
    }
}

/// The merge patch that continues an Event's series: its count is now
/// `count`, the last time `now`. The only change podprobe makes to an Event.
pub fn series_patch(count: u32, now: Timestamp) -> serde_json::Value {
    serde_json::json!({ "series": series(count, now) })
}

/// Action of a probe event, which also keeps the events of two probe kinds
/// on one container apart (a series has one action).
fn probe_action(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Liveness => "LivenessProbe",
        ProbeKind::Readiness => "ReadinessProbe",
        ProbeKind::Startup => "StartupProbe",
    }
}

/// A reference to `pod` (as the kubelet's `ref.GetReference`, without the
/// `resourceVersion`, which changes with every status patch and would split
/// one series into many), optionally narrowed to a container by `field_path`.
pub fn pod_reference(pod: &Pod, field_path: Option<String>) -> Option<ObjectReference> {
    let meta = &pod.metadata;
    Some(ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        name: Some(meta.name.clone()?),
        namespace: Some(meta.namespace.clone()?),
        uid: meta.uid.clone(),
        field_path,
        resource_version: None,
    })
}

/// `note` cut to at most [`MAX_EVENT_NOTE_BYTES`] on a character boundary.
pub fn truncate_note(mut note: String) -> String {
    note.truncate(note.floor_char_boundary(MAX_EVENT_NOTE_BYTES));
    note
}

/// The API's name of an event type.
pub fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// The `series` of an Event seen `count` times, the last time `now`.
pub(super) fn series(count: u32, now: Timestamp) -> EventSeries {
    EventSeries {
        count: i32::try_from(count).unwrap_or(i32::MAX),
        last_observed_time: MicroTime(now),
    }
}
