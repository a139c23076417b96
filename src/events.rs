//! Kubernetes Events, recorded as the kubelet records them: the prober's
//! `Unhealthy` and `ProbeWarning` (P3-P5), the `Killing` of a container
//! after a liveness or startup failure (K2), plus podprobe's own Warning for
//! an unusable `podprobe.io/probes` annotation.
//!
//! Recording never blocks a probe worker: [`EventSink::record`] puts the
//! event on a bounded queue and returns; if the queue is full the event is
//! dropped and counted (`podprobe_events_total{outcome="dropped"}`), like the
//! kubelet's broadcaster drops events when its queue is full. One task
//! ([`EventQueue::run`]) drains the queue through kube-rs's
//! [`Recorder`] (`events.k8s.io/v1`), with reporting controller `podprobe`
//! and the node name as reporting instance.
//!
//! [`Telemetry`] is the [`ProbeObserver`] that turns worker reports into
//! metrics and events.
//!
//! Two differences from the kubelet's `core/v1` recorder, both forced by the
//! `events.k8s.io/v1` API: a note is cut to 1024 bytes (the API rejects
//! longer ones; exec and HTTP outputs may be up to 10 KiB), and an event
//! repeated within six minutes becomes one Event with a growing
//! `series.count` (the kubelet bumps `count` the same way).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Client;
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::apiclient::{RequestError, bounded};
use crate::lint::Finding;
use crate::manager::ProbeChanges;
use crate::metrics::{EventOutcome, Metrics};
use crate::probe::prober::EventType;
use crate::probe::spec::budget::OverBudget;
use crate::probe::{ProbeEvent, ProbeKind, SpecError};
use crate::status::annotation::AnnotationError;
use crate::worker::{ProbeObserver, ProbeRun, WorkerConfig};

/// `reportingController` of every Event podprobe records.
pub const REPORTING_CONTROLLER: &str = "podprobe";

/// Events queued before new ones are dropped (the kubelet's
/// `maxQueuedEvents`).
pub const DEFAULT_QUEUE_CAPACITY: usize = 1000;

/// Longest note the `events.k8s.io/v1` API accepts, in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// How long an Event is remembered for folding repeats into its series
/// (kube-rs's recorder cache TTL).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Event reasons.
pub mod reasons {
    pub use crate::probe::prober::reasons::{
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
    /// [`crate::manager::probe_kills`] as podprobe can keep its promise.
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
    /// together (see [`crate::lint::gate_mismatch`]).
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

    fn container(&self) -> &str {
        self.regarding.field_path.as_deref().unwrap_or_default()
    }
}

/// Action of a probe event, which also keeps the events of two probe kinds
/// on one container apart (kube-rs folds events with equal
/// type/reason/action/object into one series).
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

/// `spec.containers{name}`, or `spec.initContainers{name}` when `name` is an
/// init container of `pod` (as [`WorkerConfig::field_path`]).
pub fn container_field_path(pod: &Pod, name: &str) -> String {
    let is_init = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.init_containers.as_ref())
        .is_some_and(|init| init.iter().any(|c| c.name == name));
    let list = if is_init {
        "initContainers"
    } else {
        "containers"
    };
    format!("spec.{list}{{{name}}}")
}

/// `note` cut to at most [`MAX_NOTE_BYTES`] on a character boundary.
fn truncate_note(mut note: String) -> String {
    note.truncate(note.floor_char_boundary(MAX_NOTE_BYTES));
    note
}

/// The sending side of the event queue; cheap to clone.
#[derive(Debug, Clone)]
pub struct EventSink {
    queue: mpsc::Sender<PodEvent>,
    metrics: Metrics,
    /// Set while events are being dropped, so a full queue logs once per
    /// episode instead of once per event.
    dropping: Arc<AtomicBool>,
}

/// The receiving side of the event queue; [`EventQueue::run`] drains it.
#[derive(Debug)]
pub struct EventQueue {
    queue: mpsc::Receiver<PodEvent>,
    metrics: Metrics,
}

/// A queue of `capacity` events: the sink for producers, the queue for the
/// task that publishes them.
pub fn channel(capacity: usize, metrics: Metrics) -> (EventSink, EventQueue) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let sink = EventSink {
        queue: tx,
        metrics: metrics.clone(),
        dropping: Arc::default(),
    };
    (sink, EventQueue { queue: rx, metrics })
}

impl EventSink {
    /// Queues `event` without waiting; drops it (counted, logged once per
    /// episode) if the queue is full, and ignores it after shutdown.
    pub fn record(&self, event: PodEvent) {
        match self.queue.try_send(event) {
            Ok(()) => {
                if self.dropping.swap(false, Ordering::Relaxed) {
                    tracing::info!("event queue has room again");
                }
            }
            Err(mpsc::error::TrySendError::Full(event)) => {
                self.metrics.event(EventOutcome::Dropped);
                if !self.dropping.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        namespace = event.regarding.namespace.as_deref().unwrap_or_default(),
                        pod = event.regarding.name.as_deref().unwrap_or_default(),
                        container = event.container(),
                        reason = event.reason,
                        "event queue full: dropping events until it drains"
                    );
                }
            }
            Err(mpsc::error::TrySendError::Closed(event)) => {
                tracing::debug!(reason = event.reason, "event after shutdown not recorded");
            }
        }
    }

    /// Queues `event` if there is one; see [`PodEvent`]'s constructors.
    pub fn record_opt(&self, event: Option<PodEvent>) {
        match event {
            Some(event) => self.record(event),
            // P5: the kubelet drops an event whose reference cannot be built.
            None => tracing::warn!("event for a pod without name or namespace not recorded"),
        }
    }
}

impl EventQueue {
    /// Publishes queued events one by one until every [`EventSink`] is
    /// dropped and the queue is empty (so dropping the sinks and awaiting
    /// this flushes what was queued). Failures are logged and counted, not
    /// retried.
    pub async fn run(mut self, client: Client, node_name: &str) {
        let mut recorders = Recorders::new(client, node_name);
        while let Some(event) = self.queue.recv().await {
            let outcome = match recorders.publish(&event).await {
                Ok(()) => EventOutcome::Recorded,
                Err(error) => {
                    tracing::warn!(
                        namespace = event.regarding.namespace.as_deref().unwrap_or_default(),
                        pod = event.regarding.name.as_deref().unwrap_or_default(),
                        container = event.container(),
                        reason = event.reason,
                        %error,
                        "cannot record event"
                    );
                    EventOutcome::Failed
                }
            };
            self.metrics.event(outcome);
        }
    }
}

/// One kube-rs [`Recorder`] per distinct note. A recorder folds every event
/// with the same type, reason, action and object into the series of the
/// first one, keeping the first note; the kubelet folds only identical
/// events. Separate recorders per note keep a changed message (a new status
/// code, an error after failures) visible as its own Event.
struct Recorders {
    client: Client,
    reporter: Reporter,
    by_note: HashMap<String, (Recorder, Instant)>,
}

impl Recorders {
    fn new(client: Client, node_name: &str) -> Self {
        Recorders {
            client,
            reporter: Reporter {
                controller: REPORTING_CONTROLLER.to_string(),
                instance: Some(node_name.to_string()),
            },
            by_note: HashMap::new(),
        }
    }

    async fn publish(&mut self, event: &PodEvent) -> Result<(), RequestError> {
        let note = truncate_note(event.note.clone());
        let now = Instant::now();
        make_room(&mut self.by_note, &note, now);
        let (recorder, last_used) = self.by_note.entry(note.clone()).or_insert_with(|| {
            (
                Recorder::new(self.client.clone(), self.reporter.clone()),
                now,
            )
        });
        *last_used = now;
        let kube_event = Event {
            type_: match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: event.reason.to_string(),
            note: Some(note),
            action: event.action.to_string(),
            secondary: None,
        };
        // Bounded: events go out one by one, and one hung request must not
        // hold every later one.
        bounded(recorder.publish(&kube_event, &event.regarding)).await
    }
}

/// Recorders kept at most, one per distinct note; client-go's event
/// correlator bounds its caches at the same size.
const MAX_RECORDERS: usize = 4096;

/// Forgets the recorders unused for the TTL (they have forgotten all their
/// events anyway) and, when a new `note` finds `by_note` full, the least
/// recently used one. Without the bound a pod whose failure text changes on
/// every run (an exec probe printing a counter) would add a recorder, and
/// its cached Event, per run for six minutes.
fn make_room<T>(by_note: &mut HashMap<String, (T, Instant)>, note: &str, now: Instant) {
    by_note.retain(|_, (_, last_used)| now.duration_since(*last_used) < SERIES_TTL);
    if by_note.len() < MAX_RECORDERS || by_note.contains_key(note) {
        return;
    }
    let oldest = by_note
        .iter()
        .min_by_key(|(_, (_, last_used))| *last_used)
        .map(|(oldest, _)| oldest.clone());
    if let Some(oldest) = oldest {
        by_note.remove(&oldest);
    }
}

/// The [`ProbeObserver`] of `podprobe run`: probe metrics (M2, M3, M5) and
/// the events of probe runs (P3-P5).
#[derive(Debug, Clone)]
pub struct Telemetry {
    metrics: Metrics,
    events: EventSink,
}

impl Telemetry {
    /// Feeds `metrics` and queues events on `events`.
    pub fn new(metrics: Metrics, events: EventSink) -> Self {
        Telemetry { metrics, events }
    }
}

impl ProbeObserver for Telemetry {
    fn probe_ran(&self, run: &ProbeRun<'_>) {
        match run.result {
            Some(result) => self
                .metrics
                .probe_completed(run.config, result, run.duration),
            None => self.metrics.probe_errored(run.config.kind()),
        }
        // Errored runs have their event too (P3).
        if let Some(event) = &run.verdict.event {
            self.events.record_opt(PodEvent::probe(run.config, event));
        }
    }

    fn worker_stopped(&self, config: &WorkerConfig) {
        self.metrics.worker_stopped(config);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorders_are_bounded_and_the_least_recently_used_goes_first() {
        let start = Instant::now();
        let at = |millis: usize| start + Duration::from_millis(millis as u64);
        let mut by_note: HashMap<String, ((), Instant)> = (0..MAX_RECORDERS)
            .map(|i| (format!("note {i}"), ((), at(i))))
            .collect();
        by_note.get_mut("note 0").expect("present").1 = at(MAX_RECORDERS);
        let now = at(MAX_RECORDERS + 1);

        // A note already kept needs no room.
        make_room(&mut by_note, "note 7", now);
        assert_eq!(by_note.len(), MAX_RECORDERS);

        // A new note evicts the least recently used: note 1, since note 0
        // was used last.
        make_room(&mut by_note, "a new note", now);
        assert_eq!(by_note.len(), MAX_RECORDERS - 1);
        assert!(!by_note.contains_key("note 1"));
        assert!(by_note.contains_key("note 0"));

        // Past the TTL every unused recorder goes.
        make_room(&mut by_note, "a new note", now + SERIES_TTL);
        assert!(by_note.is_empty());
    }
    use crate::probe::ProbeVerdict;
    use crate::probe::{Outcome, ProbeError, ProbeResult};
    use crate::results::CachedResult;
    use crate::worker::testing::{container, pod, probe_spec, sidecar};

    fn worker(kind: ProbeKind, pod: Pod, name: &str) -> WorkerConfig {
        let container = pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .find(|c| c.name == name)
            .cloned()
            .expect("container in pod");
        WorkerConfig::new(kind, probe_spec(10, 0, 1, 3), Arc::new(pod), &container)
    }

    #[test]
    fn p4_p5_failure_event_is_unhealthy_on_the_container() {
        let config = worker(
            ProbeKind::Readiness,
            pod("uid-1", vec![container("app")], vec![]),
            "app",
        );
        let verdict = ProbeVerdict::from_attempt(
            ProbeKind::Readiness,
            Ok(Outcome::new(
                ProbeResult::Failure,
                "HTTP probe failed with statuscode: 503",
            )),
            1,
        );
        let event = PodEvent::probe(&config, verdict.event.as_ref().unwrap()).unwrap();
        assert_eq!(
            event,
            PodEvent {
                regarding: ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some("pod-uid-1".into()),
                    namespace: Some("default".into()),
                    uid: Some("uid-1".into()),
                    field_path: Some("spec.containers{app}".into()),
                    resource_version: None,
                },
                type_: EventType::Warning,
                reason: "Unhealthy",
                action: "ReadinessProbe",
                note: "Readiness probe failed: HTTP probe failed with statuscode: 503".into(),
            }
        );
    }

    #[test]
    fn p5_sidecar_event_points_at_init_containers() {
        let config = worker(
            ProbeKind::Startup,
            pod("uid-1", vec![container("app")], vec![sidecar("proxy")]),
            "proxy",
        );
        let verdict = ProbeVerdict::from_attempt(
            ProbeKind::Startup,
            Ok(Outcome::new(ProbeResult::Warning, "redirect")),
            1,
        );
        let event = PodEvent::probe(&config, verdict.event.as_ref().unwrap()).unwrap();
        assert_eq!(
            event.regarding.field_path.as_deref(),
            Some("spec.initContainers{proxy}")
        );
        assert_eq!(event.reason, "ProbeWarning");
        assert_eq!(event.note, "Startup probe warning: redirect");
    }

    #[test]
    fn p5_pod_without_namespace_has_no_event() {
        let mut bare = pod("uid-1", vec![container("app")], vec![]);
        bare.metadata.namespace = None;
        let config = worker(ProbeKind::Liveness, bare, "app");
        let event = ProbeEvent {
            type_: EventType::Warning,
            reason: reasons::UNHEALTHY,
            message: "Liveness probe failed: ".into(),
        };
        assert_eq!(PodEvent::probe(&config, &event), None);
    }

    #[test]
    fn k2_killing_event_is_normal_with_the_kill_message() {
        let app = pod("uid-1", vec![container("app")], vec![sidecar("proxy")]);
        let event = PodEvent::killing(
            &app,
            "app",
            "Container app failed liveness probe, will be restarted".into(),
        )
        .unwrap();
        assert_eq!(event.type_, EventType::Normal);
        assert_eq!(event.reason, "Killing");
        assert_eq!(
            event.note,
            "Container app failed liveness probe, will be restarted"
        );
        assert_eq!(
            event.regarding.field_path.as_deref(),
            Some("spec.containers{app}")
        );

        let sidecar_kill = PodEvent::killing(
            &app,
            "proxy",
            "Init container proxy failed liveness probe".into(),
        )
        .unwrap();
        assert_eq!(
            sidecar_kill.regarding.field_path.as_deref(),
            Some("spec.initContainers{proxy}")
        );
    }

    #[test]
    fn invalid_annotation_is_a_warning_on_the_pod() {
        let app = pod("uid-1", vec![container("app")], vec![]);
        let error = AnnotationError::UnknownContainer {
            container: "web".into(),
        };
        let event = PodEvent::invalid_annotation(&app, &error).unwrap();
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.reason, "ProbeAnnotationInvalid");
        assert_eq!(event.regarding.field_path, None);
        assert_eq!(
            event.note,
            r#"podprobe.io/probes: container "web" is not in the pod"#
        );
    }

    #[test]
    fn note_is_cut_to_the_api_limit_on_a_char_boundary() {
        let note = format!("{}é", "a".repeat(MAX_NOTE_BYTES - 1));
        let cut = truncate_note(note);
        assert_eq!(cut.len(), MAX_NOTE_BYTES - 1);
        assert_eq!(truncate_note("short".into()), "short");
    }

    #[test]
    fn full_queue_drops_and_counts() {
        let metrics = Metrics::new();
        let (sink, _queue) = channel(1, metrics.clone());
        let app = pod("uid-1", vec![container("app")], vec![]);
        let event = PodEvent::killing(&app, "app", "m".into()).unwrap();
        sink.record(event.clone());
        sink.record(event.clone());
        sink.record(event);
        assert!(
            metrics
                .encode()
                .lines()
                .any(|l| l == r#"podprobe_events_total{outcome="dropped"} 2"#)
        );
    }

    #[test]
    fn telemetry_counts_and_queues_the_verdict_event() {
        let metrics = Metrics::new();
        let (sink, mut queue) = channel(8, metrics.clone());
        let telemetry = Telemetry::new(metrics.clone(), sink);
        let config = worker(
            ProbeKind::Liveness,
            pod("uid-1", vec![container("app")], vec![]),
            "app",
        );
        let failed = ProbeVerdict::from_attempt(
            ProbeKind::Liveness,
            Ok(Outcome::new(ProbeResult::Failure, "")),
            1,
        );
        telemetry.probe_ran(&ProbeRun {
            config: &config,
            container_id: "containerd://abc",
            verdict: &failed,
            result: Some(CachedResult::Failure),
            duration: Duration::from_millis(5),
        });
        // D11/M2: an errored run is not counted but its event is recorded (P3).
        let errored = ProbeVerdict::from_attempt(
            ProbeKind::Liveness,
            Err(ProbeError::unknown("connection refused")),
            3,
        );
        telemetry.probe_ran(&ProbeRun {
            config: &config,
            container_id: "containerd://abc",
            verdict: &errored,
            result: None,
            duration: Duration::from_millis(5),
        });

        let text = metrics.encode();
        let total: Vec<_> = text
            .lines()
            .filter(|l| l.starts_with("prober_probe_total"))
            .collect();
        assert_eq!(
            total,
            [
                r#"prober_probe_total{container="app",namespace="default",pod="pod-uid-1",pod_uid="uid-1",probe_type="Liveness",result="failed"} 1"#
            ]
        );
        // ... but counted as an error, by probe type.
        assert!(
            text.lines()
                .any(|l| l == r#"podprobe_probe_errors_total{probe_type="Liveness"} 1"#),
            "{text}"
        );
        let notes: Vec<_> = std::iter::from_fn(|| queue.queue.try_recv().ok())
            .map(|e| e.note)
            .collect();
        assert_eq!(
            notes,
            [
                "Liveness probe failed: ".to_string(),
                "Liveness probe errored and resulted in unknown state: connection refused"
                    .to_string(),
            ]
        );

        telemetry.worker_stopped(&config);
        assert!(!metrics.encode().contains("prober_probe_total{"));
    }
}
