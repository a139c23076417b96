//! Kubernetes Events, recorded as the kubelet records them: the prober's
//! `Unhealthy` and `ProbeWarning` (P3-P5), the `Killing` of a container
//! after a liveness or startup failure (K2), plus podprobe's own Warning for
//! an unusable `podprobe.io/probes` annotation.
//!
//! Recording never blocks a probe worker: [`EventSink::record`] puts the
//! event on its pod's queue and returns. One task ([`EventQueue::run`])
//! takes the events, a pod at a time in turn, and writes them to the API
//! server (`events.k8s.io/v1`) with reporting controller `podprobe` and the
//! node name as reporting instance. A pod whose failure text changes on
//! every run (a server that resets the connection puts the client's port in
//! it) must not turn into one API write per probe run, nor crowd out other
//! pods' events, so on the way (rules 9.4-9.6):
//!
//! - **Queue**: at most [`DEFAULT_POD_QUEUE_CAPACITY`] events of one pod
//!   and [`DEFAULT_QUEUE_CAPACITY`] in all (the kubelet's
//!   `maxQueuedEvents`). When full, the pod with the most queued events
//!   loses its oldest one that is not a `Killing`, so one pod's flood never
//!   drops another pod's event. Drops are counted
//!   (`podprobe_events_total{outcome="dropped"}`).
//! - **Correlator** (client-go's `EventCorrelator`, see [`correlator`]):
//!   similar events with ten different notes within ten minutes are
//!   combined into one Event noted `(combined from similar events): ...`;
//!   repeats of an Event within six minutes become its `series.count`,
//!   written with the second event and then, as client-go's
//!   `events.k8s.io` broadcaster does, every 30 minutes and when the series
//!   ends (counted meanwhile as `outcome="held"`); and each pod may have 25
//!   events written at once, then one per five minutes (refused ones
//!   counted as `outcome="filtered"`).
//! - **Write rate**: at most [`DEFAULT_EVENT_QPS`] writes a second, bursts
//!   of [`DEFAULT_EVENT_BURST`] (the kubelet's `eventRecordQPS` and
//!   `eventBurst`).
//!
//! The sink is the [`recorder::EventRecorder`] the daemon and the killer
//! record through; `telemetry` turns worker reports into metrics and
//! Events.
//!
//! Differences from the kubelet's `core/v1` recorder:
//! - A note is cut to 1024 bytes: `events.k8s.io/v1` rejects longer ones
//!   (exec and HTTP outputs may be up to 10 KiB).
//! - A repeat continues its Event's series only within six minutes of the
//!   last one (the kubelet bumps `count` as long as its cache remembers),
//!   and from the third event on its count is written every 30 minutes and
//!   when the series ends, not with each event.
//! - `events.k8s.io/v1` allows no change to an Event's note, object or
//!   action, so a combined Event keeps the note it was created with (the
//!   kubelet rewrites it to the latest) and combines events of one
//!   container and action only (the kubelet's combine a pod's containers).
//! - `Killing` is never refused by the spam filter, and a full queue drops
//!   it last: the node agent restarts a probe-killed container only when it
//!   finds the event (K8). The kubelet needs no event to know.
//! - The kubelet has one queue for all pods and drops the newcomer when it
//!   is full.
//! - A deleted pod's spam budget and aggregates are forgotten at the next
//!   check ([`EventSink::forget_pod`]); client-go keeps them until evicted.

mod correlator;
mod lru;
mod queue;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior};

use crate::api::apiclient::{RequestError, bounded};
use correlator::{Correlation, Correlator, EventWrite, SeriesUpdate};
use podprobe_core::prober::events::recorder::{EventObserver, EventOutcome, EventRecorder};
use podprobe_core::util::rate_limit::{RateLimit, TokenBucket};
use queue::{FairQueue, OverflowChange};

pub use podprobe_core::prober::events::record::{
    MAX_EVENT_NOTE_BYTES, PodEvent, REPORTING_CONTROLLER, pod_reference, reasons, series_patch,
};

/// Events queued, all pods together, before some are dropped (the
/// kubelet's `maxQueuedEvents`).
pub const DEFAULT_QUEUE_CAPACITY: usize = 1000;

/// Events of one pod queued before its oldest are dropped: a tenth of
/// [`DEFAULT_QUEUE_CAPACITY`], so ten flooding pods cannot fill it. The
/// spam filter lets 25 of a pod's events through at once anyway.
pub const DEFAULT_POD_QUEUE_CAPACITY: usize = 100;

/// How often the series are checked for counts they owe their Events
/// (rule 9.4): a series' last count lands at most this long after the six
/// idle minutes that end it.
pub const SERIES_CHECK: Duration = Duration::from_secs(60);

/// Event writes a second on average (the kubelet's `eventRecordQPS`).
pub const DEFAULT_EVENT_QPS: f64 = 50.0;

/// Event writes at once above [`DEFAULT_EVENT_QPS`] (the kubelet's
/// `eventBurst`).
pub const DEFAULT_EVENT_BURST: u32 = 100;

/// How much the event queue holds and how fast its events are written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueConfig {
    /// Events queued, all pods together.
    pub capacity: usize,
    /// Events queued of one pod.
    pub pod_capacity: usize,
    /// Event writes to the API server.
    pub writes: RateLimit,
}

impl Default for QueueConfig {
    /// [`DEFAULT_QUEUE_CAPACITY`], [`DEFAULT_POD_QUEUE_CAPACITY`],
    /// [`DEFAULT_EVENT_QPS`] and [`DEFAULT_EVENT_BURST`].
    fn default() -> Self {
        QueueConfig {
            capacity: DEFAULT_QUEUE_CAPACITY,
            pod_capacity: DEFAULT_POD_QUEUE_CAPACITY,
            writes: RateLimit::new(DEFAULT_EVENT_QPS, DEFAULT_EVENT_BURST),
        }
    }
}

/// What the sinks and the queue share.
#[derive(Debug)]
struct Shared {
    queue: Mutex<FairQueue>,
    /// Wakes the publisher: an event was queued or the last sink is gone.
    wake: Notify,
    /// Sinks alive; with none left and the queue empty the publisher ends.
    sinks: AtomicUsize,
    /// Cleared when the publisher is gone, so events are no longer queued.
    open: AtomicBool,
    /// UIDs of pods deleted since the publisher's last check, whose
    /// correlator entries it forgets then (at most the pods deleted from
    /// the node in a [`SERIES_CHECK`]).
    gone: Mutex<HashSet<String>>,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, FairQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take_gone(&self) -> HashSet<String> {
        std::mem::take(&mut self.gone.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The sending side of the event queue; cheap to clone.
#[derive(Debug)]
pub struct EventSink {
    shared: Arc<Shared>,
    metrics: Arc<dyn EventObserver>,
}

/// The receiving side of the event queue; [`EventQueue::run`] drains it.
#[derive(Debug)]
pub struct EventQueue {
    shared: Arc<Shared>,
    metrics: Arc<dyn EventObserver>,
    writes: RateLimit,
}

/// A queue as `config` says: the sink for producers, the queue for the
/// task that publishes them.
pub fn channel_with(config: QueueConfig, metrics: impl EventObserver) -> (EventSink, EventQueue) {
    let metrics: Arc<dyn EventObserver> = Arc::new(metrics);
    let shared = Arc::new(Shared {
        queue: Mutex::new(FairQueue::new(config.capacity, config.pod_capacity)),
        wake: Notify::new(),
        sinks: AtomicUsize::new(1),
        open: AtomicBool::new(true),
        gone: Mutex::default(),
    });
    let sink = EventSink {
        shared: shared.clone(),
        metrics: metrics.clone(),
    };
    let queue = EventQueue {
        shared,
        metrics,
        writes: config.writes,
    };
    (sink, queue)
}

impl Clone for EventSink {
    fn clone(&self) -> Self {
        self.shared.sinks.fetch_add(1, Ordering::Relaxed);
        EventSink {
            shared: self.shared.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl Drop for EventSink {
    fn drop(&mut self) {
        // Release: the publisher that sees no sink left sees every event
        // this one queued.
        if self.shared.sinks.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.wake.notify_one();
        }
    }
}

impl EventSink {
    /// Queues `event` without waiting; if its pod's queue or the whole
    /// queue is full, first drops the oldest event of its pod's or the
    /// longest queue (counted; logged when an overflow begins and ends, see
    /// [`OverflowChange`]). Ignores it after shutdown.
    pub fn record(&self, event: PodEvent) {
        if !self.shared.open.load(Ordering::Relaxed) {
            tracing::debug!(reason = event.reason, "event after shutdown not recorded");
            return;
        }
        let pushed = self.shared.queue().push(event);
        self.shared.wake.notify_one();
        if pushed.dropped.is_some() {
            self.metrics.event_done(EventOutcome::Dropped);
        }
        match (pushed.overflow, &pushed.dropped) {
            (Some(OverflowChange::Began), Some(dropped)) => tracing::warn!(
                namespace = dropped.regarding.namespace.as_deref().unwrap_or_default(),
                pod = dropped.regarding.name.as_deref().unwrap_or_default(),
                container = dropped.container(),
                reason = dropped.reason,
                "event queue full: dropping the oldest events of the pods with the most queued"
            ),
            (Some(OverflowChange::Ended { dropped }), _) => {
                tracing::info!(dropped, "event queue has room again");
            }
            _ => {}
        }
    }
}

impl EventRecorder for EventSink {
    fn record(&self, event: PodEvent) {
        EventSink::record(self, event);
    }

    /// Hands `uid` to the publisher, which forgets the pod's spam budget
    /// and aggregates at its next check.
    fn forget_pod(&self, uid: &str) {
        if self.shared.open.load(Ordering::Relaxed) {
            let mut gone = self
                .shared
                .gone
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            gone.insert(uid.to_string());
        }
    }
}

impl Drop for EventQueue {
    fn drop(&mut self) {
        self.shared.open.store(false, Ordering::Relaxed);
    }
}

impl EventQueue {
    /// Publishes queued events one by one until every [`EventSink`] is
    /// dropped and the queue is empty, and series' Events their counts as
    /// they fall due (rule 9.4); then writes every count still owed (so
    /// dropping the sinks and awaiting this flushes what was queued and
    /// counted). Failures are logged and counted, not retried.
    pub async fn run(self, client: Client, node_name: &str) {
        let publisher = KubePublisher {
            client,
            instance: node_name.to_string(),
        };
        let mut correlator = Correlator::new();
        let mut writes = self.writes.bucket(Instant::now());
        let mut check = tokio::time::interval_at(Instant::now() + SERIES_CHECK, SERIES_CHECK);
        check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                event = self.next() => match event {
                    Some(event) => event,
                    None => break,
                },
                _ = check.tick() => {
                    correlator.forget_pods(&self.shared.take_gone());
                    for update in correlator.due(Instant::now()) {
                        wait_for_write(&mut writes).await;
                        publisher.update(&update).await;
                    }
                    let (aggregates, series, spam) = correlator.entries();
                    self.metrics.correlator_entries("aggregates", aggregates);
                    self.metrics.correlator_entries("series", series);
                    self.metrics.correlator_entries("spam", spam);
                    continue;
                }
            };
            // Rule 9.4: a pod's flood of different notes costs a bounded
            // number of writes, however its notes differ.
            let write = match correlator.correlate(event, Instant::now()) {
                Correlation::Write(write) => write,
                Correlation::Held => {
                    self.metrics.event_done(EventOutcome::Held);
                    continue;
                }
                Correlation::Filtered(event) => {
                    // Debug only: a flooding pod would flood the log too.
                    tracing::debug!(
                        namespace = event.regarding.namespace.as_deref().unwrap_or_default(),
                        pod = event.regarding.name.as_deref().unwrap_or_default(),
                        container = event.container(),
                        reason = event.reason,
                        "event refused by the spam filter"
                    );
                    self.metrics.event_done(EventOutcome::Filtered);
                    continue;
                }
            };
            wait_for_write(&mut writes).await;
            let outcome = match publisher.publish(&write).await {
                Ok(Published::Created { name }) => {
                    correlator.created(&write.series, name);
                    EventOutcome::Recorded
                }
                Ok(Published::Updated) => EventOutcome::Recorded,
                Err(error) => {
                    let event = &write.event;
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
            self.metrics.event_done(outcome);
        }
        // The counts held since the series' last writes, which client-go's
        // broadcaster loses at exit; the daemon bounds the time this takes.
        for update in correlator.owed(Instant::now()) {
            wait_for_write(&mut writes).await;
            publisher.update(&update).await;
        }
    }

    /// The next event, in the pods' turn; `None` once no sink is left and
    /// the queue is empty.
    async fn next(&self) -> Option<PodEvent> {
        loop {
            // Read before looking at the queue: when no sink is left, all
            // they queued is there to see.
            let closed = self.shared.sinks.load(Ordering::Acquire) == 0;
            if let Some(event) = self.shared.queue().pop() {
                return Some(event);
            }
            if closed {
                return None;
            }
            // A wake-up between the look and this wait is kept by `Notify`.
            self.shared.wake.notified().await;
        }
    }
}

/// Rule 9.6: however many pods fail at once, the API server gets Events at
/// the kubelet's rate.
async fn wait_for_write(writes: &mut Option<TokenBucket>) {
    if let Some(bucket) = writes {
        let wait = bucket.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// What a write did at the API server.
#[derive(Debug, Clone, PartialEq)]
enum Published {
    /// A new Event of this name.
    Created { name: String },
    /// The series' Event has the new count.
    Updated,
}

/// Writes `events.k8s.io/v1` Events with the client.
struct KubePublisher {
    client: Client,
    /// `reportingInstance`: the node's name.
    instance: String,
}

impl KubePublisher {
    fn api(&self, event: &PodEvent) -> Api<Event> {
        self.api_in(event.regarding.namespace.as_deref())
    }

    fn api_in(&self, namespace: Option<&str>) -> Api<Event> {
        Api::namespaced(self.client.clone(), namespace.unwrap_or("default"))
    }

    async fn create(&self, write: &EventWrite, now: Timestamp) -> Result<Published, RequestError> {
        let object = write.event.to_api_event(&self.instance, write.count, now);
        bounded(
            self.api(&write.event)
                .create(&PostParams::default(), &object),
        )
        .await?;
        let name = object.metadata.name.unwrap_or_default();
        Ok(Published::Created { name })
    }

    /// Writes `write`: a new Event, or the series' new count on its Event.
    async fn publish(&self, write: &EventWrite) -> Result<Published, RequestError> {
        let now = Timestamp::now();
        let Some(name) = &write.name else {
            return self.create(write, now).await;
        };
        let patch = Patch::Merge(series_patch(write.count, now));
        let api = self.api(&write.event);
        match bounded(api.patch(name, &PatchParams::default(), &patch)).await {
            Ok(_) => Ok(Published::Updated),
            // The Event is gone (deleted, or expired by the API server's
            // event TTL): a new one continues the series, as client-go
            // creates one when its patch finds none.
            Err(RequestError::Kube(kube::Error::Api(status))) if status.is_not_found() => {
                self.create(write, now).await
            }
            Err(error) => Err(error),
        }
    }

    /// Gives a series' Event the count of the events held since its last
    /// write; a failure is logged, and the next update carries the count.
    async fn update(&self, update: &SeriesUpdate) {
        let namespace = update.namespace.as_deref().unwrap_or("default");
        let api = self.api_in(update.namespace.as_deref());
        let now = Timestamp::now();
        let last = now
            .checked_sub(Instant::now().saturating_duration_since(update.last))
            .unwrap_or(now);
        let patch = Patch::Merge(series_patch(update.count, last));
        if let Err(error) = bounded(api.patch(&update.name, &PatchParams::default(), &patch)).await
        {
            tracing::warn!(
                namespace,
                event = update.name,
                count = update.count,
                %error,
                "cannot update the count of an event series"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use http::{Method, StatusCode};
    use http_body_util::{BodyExt, Full};

    use super::*;
    use k8s_openapi::api::core::v1::{ObjectReference, Pod};

    use crate::api::event_metrics::EventMetrics;
    use podprobe_core::prober::events::record::truncate_note;
    use podprobe_core::spec::verdict::EventType;
    use podprobe_core::spec::{ProbeEvent, ProbeKind};
    use podprobe_core::status::annotation::AnnotationError;

    use crate::testing::{container, pod, probe_spec, registered, sidecar};
    use podprobe_core::prober::worker::WorkerConfig;
    use podprobe_core::spec::ProbeVerdict;
    use podprobe_core::spec::{Outcome, ProbeResult};

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
        let note = format!("{}é", "a".repeat(MAX_EVENT_NOTE_BYTES - 1));
        let cut = truncate_note(note);
        assert_eq!(cut.len(), MAX_EVENT_NOTE_BYTES - 1);
        assert_eq!(truncate_note("short".into()), "short");
    }

    #[test]
    fn full_queue_drops_and_counts() {
        let (events, metrics) = registered(EventMetrics::register);
        let (sink, _queue) = channel_with(
            QueueConfig {
                capacity: 1,
                ..QueueConfig::default()
            },
            events,
        );
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

    /// A write the fake API server received: when, how, about which pod.
    #[derive(Debug, Clone)]
    struct Received {
        at: Instant,
        method: Method,
        pod: String,
        body: serde_json::Value,
    }

    /// A client of a fake API server for Event writes, and what it
    /// received. It answers as the API server does: a create with the
    /// Event, a patch with the Event if `patched_events_exist`, else with
    /// the `NotFound` status.
    fn fake_api(patched_events_exist: bool) -> (Client, Arc<Mutex<Vec<Received>>>) {
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let log = log.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await?.to_bytes();
                let json: serde_json::Value = serde_json::from_slice(&body)?;
                let pod = if parts.method == Method::POST {
                    json["regarding"]["name"].as_str().unwrap_or_default()
                } else {
                    // A patch names the Event: `<pod>.<hex nanoseconds>`.
                    let event = parts.uri.path().rsplit('/').next().unwrap_or_default();
                    event.rsplit_once('.').map_or(event, |(pod, _)| pod)
                };
                log.lock().unwrap().push(Received {
                    at: Instant::now(),
                    method: parts.method.clone(),
                    pod: pod.to_string(),
                    body: json.clone(),
                });
                let (status, answer) = if parts.method == Method::POST {
                    (StatusCode::CREATED, body)
                } else if patched_events_exist {
                    let event = r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{}}"#;
                    (StatusCode::OK, Bytes::from_static(event.as_bytes()))
                } else {
                    let status = r#"{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}"#;
                    (StatusCode::NOT_FOUND, Bytes::from_static(status.as_bytes()))
                };
                let response = http::Response::builder()
                    .status(status)
                    .body(Full::new(answer))?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        (Client::new(service, "default"), received)
    }

    /// The `Unhealthy` event of a failed run of `config` with `output`.
    fn failure(config: &WorkerConfig, output: &str) -> PodEvent {
        let verdict = ProbeVerdict::from_attempt(
            config.kind(),
            Ok(Outcome::new(ProbeResult::Failure, output)),
            1,
        );
        PodEvent::probe(
            config,
            verdict.event.as_ref().expect("failure has an event"),
        )
        .expect("pod has name and namespace")
    }

    fn liveness_of(uid: &str) -> WorkerConfig {
        worker(
            ProbeKind::Liveness,
            pod(uid, vec![container("app")], vec![]),
            "app",
        )
    }

    /// API writes for 1,000 failing runs, `period` apart, of a probe whose
    /// output has the client's port in it (a server that resets the
    /// connection) and of one whose output is always the same.
    async fn writes_per_1000_failing_probes(period: Duration) -> (usize, usize) {
        let (client, received) = fake_api(true);
        let (sink, queue) =
            channel_with(QueueConfig::default(), registered(EventMetrics::register).0);
        let publisher = tokio::spawn(async move { queue.run(client, "node").await });
        let (reset, refused) = (liveness_of("uid-reset"), liveness_of("uid-refused"));
        for port in 40_000..41_000 {
            let reset_output = format!(
                "Get \"http://10.0.0.2:8080/\": read tcp 10.0.0.1:{port}->10.0.0.2:8080: read: connection reset by peer"
            );
            sink.record(failure(&reset, &reset_output));
            let refused_output = "Get \"http://10.0.0.3:8080/\": dial tcp 10.0.0.3:8080: connect: connection refused";
            sink.record(failure(&refused, refused_output));
            // The probe period, on the paused clock.
            tokio::time::sleep(period).await;
        }
        drop(sink);
        publisher.await.expect("publisher ends");
        let received = received.lock().unwrap();
        let writes = |pod: &str| received.iter().filter(|r| r.pod == pod).count();
        (writes("pod-uid-reset"), writes("pod-uid-refused"))
    }

    /// #39: a deleted pod's spent budget leaves the correlator at the
    /// publisher's next check, not when it has refilled two hours on;
    /// another pod's stays, and so does the gone pod's series, whose Event
    /// is still owed its last count.
    #[tokio::test(start_paused = true)]
    async fn rule9_4_a_deleted_pods_budget_is_forgotten_at_the_next_check() {
        let (client, received) = fake_api(true);
        let (metrics, exposition) = registered(EventMetrics::register);
        let (sink, queue) = channel_with(QueueConfig::default(), metrics);
        let publisher = tokio::spawn(async move { queue.run(client, "node").await });
        let (gone, stays) = (liveness_of("uid-gone"), liveness_of("uid-stays"));
        for port in 40_000..40_030 {
            let output = format!("read tcp 10.0.0.1:{port}->10.0.0.2:8080: connection reset");
            sink.record(failure(&gone, &output));
            sink.record(failure(&stays, &output));
        }
        sink.forget_pod("uid-gone");
        tokio::time::sleep(SERIES_CHECK + Duration::from_secs(1)).await;
        let entries = |cache: &str| {
            exposition
                .sample(&format!(
                    "podprobe_event_cache_entries{{cache=\"{cache}\"}}"
                ))
                .unwrap_or_else(|| panic!("no {cache} entries in {}", exposition.encode()))
        };
        assert_eq!(
            (entries("spam"), entries("aggregates")),
            ("1".into(), "1".into())
        );
        // Each pod's series: nine notes of their own, then the combined.
        assert_eq!(entries("series"), "20");
        drop(sink);
        publisher.await.expect("publisher ends");
        // The same writes for both, whatever the forgetting: nine Events,
        // the combined one and its count of two, and at shutdown its last
        // count.
        let received = received.lock().unwrap();
        let writes = |pod: &str| received.iter().filter(|r| r.pod == pod).count();
        assert_eq!((writes("pod-uid-gone"), writes("pod-uid-stays")), (12, 12));
    }

    #[tokio::test(start_paused = true)]
    async fn rule9_4_api_writes_per_1000_failing_probes() {
        // Every 10 s (the default period) for 9,990 s. The same note: the
        // Event's create and its count of two, an update every 30 minutes
        // (five) and the last count at shutdown. Notes that differ: nine
        // Events of their own, the combined one created and updated to
        // two, then as the same note. The kubelet (core/v1) writes each
        // repeat until the spam filter stops it: 25 at once, then one per
        // 5 minutes, 58 in all either way.
        assert_eq!(
            writes_per_1000_failing_probes(Duration::from_secs(10)).await,
            (9 + 2 + 5 + 1, 2 + 5 + 1)
        );
        // All at once: no update falls due before shutdown.
        assert_eq!(
            writes_per_1000_failing_probes(Duration::ZERO).await,
            (9 + 2 + 1, 2 + 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rule9_5_a_flood_of_one_pod_never_drops_another_pods_killing() {
        let (client, received) = fake_api(true);
        let (events, metrics) = registered(EventMetrics::register);
        let (sink, queue) = channel_with(QueueConfig::default(), events);
        let flood = liveness_of("uid-a");
        let b = pod("uid-b", vec![container("app")], vec![]);
        // Recorded faster than any publisher could write them.
        for port in 0..10_000 {
            sink.record(failure(&flood, &format!("read tcp 10.0.0.1:{port}: reset")));
            if port == 5_000 {
                sink.record_opt(PodEvent::killing(
                    &b,
                    "app",
                    "Container app failed liveness probe, will be restarted".into(),
                ));
            }
        }
        drop(sink);
        queue.run(client, "node").await;

        let of_b: Vec<_> = received
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.pod == "pod-uid-b")
            .map(|r| r.body["reason"].clone())
            .collect();
        assert_eq!(of_b, ["Killing"], "pod B's Killing was not written");
        // Pod A lost only its own events: 100 queued, nine written with
        // notes of their own, the tenth and eleventh as the combined
        // Event, the rest counted in it.
        let text = metrics.encode();
        for line in [
            r#"podprobe_events_total{outcome="dropped"} 9900"#,
            r#"podprobe_events_total{outcome="held"} 89"#,
            r#"podprobe_events_total{outcome="recorded"} 12"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rule9_6_event_writes_keep_to_the_write_rate() {
        let (client, received) = fake_api(true);
        let (sink, queue) =
            channel_with(QueueConfig::default(), registered(EventMetrics::register).0);
        // One event for each of 150 pods: no pod's spam budget is touched.
        for i in 0..150 {
            let app = pod(&format!("uid-{i}"), vec![container("app")], vec![]);
            sink.record_opt(PodEvent::killing(&app, "app", "stopped".into()));
        }
        drop(sink);
        let start = Instant::now();
        queue.run(client, "node").await;

        let after: Vec<Duration> = received
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.at - start)
            .collect();
        assert_eq!(after.len(), 150);
        // A burst of 100, then one every 20 ms (50 a second).
        assert!(after[..100].iter().all(Duration::is_zero), "{after:?}");
        assert_eq!(after[100], Duration::from_millis(20));
        assert_eq!(after[149], Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn rule9_4_repeats_update_their_events_series() {
        let (client, received) = fake_api(true);
        let (sink, queue) =
            channel_with(QueueConfig::default(), registered(EventMetrics::register).0);
        let publisher = tokio::spawn(async move { queue.run(client, "node").await });
        let config = liveness_of("uid-1");
        let start = Instant::now();
        for _ in 0..4 {
            sink.record(failure(&config, "refused"));
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        // Six idle minutes end the series; its count lands at the next check.
        tokio::time::sleep(correlator::SERIES_TTL + SERIES_CHECK).await;
        drop(sink);
        publisher.await.expect("publisher ends");

        let received = received.lock().unwrap();
        let writes: Vec<_> = received
            .iter()
            .map(|r| {
                (
                    r.method.clone(),
                    r.body["series"]["count"].as_u64(),
                    r.at - start,
                )
            })
            .collect();
        let check = |n: u64| SERIES_CHECK * u32::try_from(n).unwrap();
        assert_eq!(
            writes,
            [
                (Method::POST, None, Duration::ZERO),
                (Method::PATCH, Some(2), Duration::from_secs(10)),
                // The last event at 30 s; idle six minutes at 390 s.
                (Method::PATCH, Some(4), check(7)),
            ]
        );
        let created = &received[0].body;
        assert_eq!(created["note"], "Liveness probe failed: refused");
        assert_eq!(created["reportingController"], "podprobe");
        assert_eq!(created["reportingInstance"], "node");
        assert_eq!(created["regarding"]["fieldPath"], "spec.containers{app}");
        assert!(created["series"].is_null());
        // A patch sends the series alone: the API keeps the rest as it was.
        assert_eq!(received[2].body.as_object().map(|o| o.len()), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn rule9_4_a_series_whose_event_is_gone_goes_on_in_a_new_one() {
        let (client, received) = fake_api(false);
        let (events, metrics) = registered(EventMetrics::register);
        let (sink, queue) = channel_with(QueueConfig::default(), events);
        let config = liveness_of("uid-1");
        sink.record(failure(&config, "refused"));
        sink.record(failure(&config, "refused"));
        drop(sink);
        queue.run(client, "node").await;

        let received = received.lock().unwrap();
        let methods: Vec<_> = received.iter().map(|r| r.method.clone()).collect();
        assert_eq!(methods, [Method::POST, Method::PATCH, Method::POST]);
        assert_eq!(received[2].body["series"]["count"], 2);
        assert!(
            metrics
                .encode()
                .lines()
                .any(|l| l == r#"podprobe_events_total{outcome="recorded"} 2"#)
        );
    }
}
