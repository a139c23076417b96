//! Fakes and builders shared by the unit tests (this crate's, and the
//! `podprobe` crate's through the `testing` feature): the
//! prober's (a scripted probe runner, a status cache the test sets, an
//! observer that records what workers report, pods and container statuses
//! of the worker tests), the desired status's (the running pod `shop/web-0`
//! and its container statuses, probe views and conditions, the status
//! patcher's pods and intents), PodDisruptionBudgets and a client
//! certificate.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodReadinessGate, PodSpec,
    PodStatus, Probe,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tokio::time::Instant;

use crate::prober::events::record::PodEvent;
use crate::prober::events::recorder::EventRecorder;
use crate::prober::manager::{PodProbes, ProbeStateView};
use crate::prober::results::CachedResult;
use crate::prober::worker::{ProbeObserver, ProbeRun, ProbeRunner, StatusSource, WorkerConfig};
use crate::spec::probe_spec::extension::disruption_budget::GUARDS_ANNOTATION;
use crate::spec::probe_spec::{Handler, TcpSocketAction};
use crate::spec::{
    Outcome, ProbeError, ProbeKind, ProbeResult, ProbeSpec, ProbeTarget, ProbeVerdict,
};
use crate::status::conditions::{TRUE, condition};
use crate::status::{ContainerProbeView, Intent, Mode, Owned, PROBES_ANNOTATION, READY_CONDITION};

// The prober: workers, the manager, and what observes them.

/// 2027-01-15T08:00:00Z, the wall clock's origin in tests.
pub fn epoch() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(epoch().as_second() + seconds).unwrap()
}

/// A TCP probe with the API defaults except the given numbers.
pub fn probe_spec(period: i32, initial_delay: i32, success: i32, failure: i32) -> ProbeSpec {
    ProbeSpec {
        handler: Handler::TcpSocket(TcpSocketAction {
            host: None,
            port: 8080,
        }),
        initial_delay_seconds: initial_delay,
        timeout_seconds: 1,
        period_seconds: period,
        period_milliseconds: None,
        success_threshold: success,
        failure_threshold: failure,
        termination_grace_period_seconds: None,
        network: Default::default(),
        markers: Vec::new(),
        workload: Default::default(),
    }
}

/// The default probe of the worker tests: every 10 s, no initial delay,
/// thresholds 1 and 3.
pub fn default_spec() -> ProbeSpec {
    probe_spec(10, 0, 1, 3)
}

/// [`probe_spec`] with `podprobe.periodMilliseconds: millis`.
pub fn millisecond_spec(millis: i32, success: i32, failure: i32) -> ProbeSpec {
    ProbeSpec {
        period_milliseconds: Some(millis),
        ..probe_spec(10, 0, success, failure)
    }
}

/// The `kind` probe `spec` of container `app` in pod `uid-1`.
pub fn worker_config(kind: ProbeKind, spec: ProbeSpec) -> WorkerConfig {
    let pod = pod("uid-1", vec![container("app")], vec![]);
    worker_config_in(kind, spec, pod, "app")
}

/// The `kind` probe `spec` of container `name` (regular or init) of `pod`.
pub fn worker_config_in(kind: ProbeKind, spec: ProbeSpec, pod: Pod, name: &str) -> WorkerConfig {
    let spec_of = pod.spec.as_ref().unwrap();
    let mut all = spec_of
        .containers
        .iter()
        .chain(spec_of.init_containers.iter().flatten());
    let container = all.find(|c| c.name == name).unwrap().clone();
    WorkerConfig::new(kind, spec, Arc::new(pod), &container)
}

pub fn container(name: &str) -> Container {
    Container {
        name: name.to_string(),
        ..Container::default()
    }
}

pub fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some("Always".to_string()),
        ..container(name)
    }
}

pub fn pod(uid: &str, containers: Vec<Container>, init_containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("default".to_string()),
            uid: Some(uid.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers,
            init_containers: Some(init_containers),
            ..PodSpec::default()
        }),
        status: None,
    }
}

pub fn running(
    name: &str,
    id: &str,
    started_at: Timestamp,
    started: Option<bool>,
) -> ContainerStatus {
    ContainerStatus {
        name: name.to_string(),
        container_id: Some(id.to_string()),
        started,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(started_at)),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

pub fn waiting(name: &str, id: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.to_string(),
        container_id: Some(id.to_string()),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

pub fn terminated(name: &str, id: &str, exit_code: i32) -> ContainerStatus {
    ContainerStatus {
        name: name.to_string(),
        container_id: Some(id.to_string()),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

pub fn pod_status(containers: Vec<ContainerStatus>, init: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        phase: Some("Running".to_string()),
        pod_ip: Some("10.0.0.7".to_string()),
        container_statuses: Some(containers),
        init_container_statuses: Some(init),
        ..PodStatus::default()
    }
}

pub fn verdict(kind: ProbeKind, result: ProbeResult) -> ProbeVerdict {
    ProbeVerdict::from_attempt(kind, Ok(Outcome::new(result, "")), 1)
}

pub fn errored(kind: ProbeKind) -> ProbeVerdict {
    ProbeVerdict::from_attempt(kind, Err(ProbeError::unknown("boom")), 3)
}

/// What a [`ScriptedRunner`] does on one call.
#[derive(Debug, Clone)]
pub enum Scripted {
    Return(ProbeResult),
    Error,
    /// Takes this long, then returns the result.
    Slow(Duration, ProbeResult),
    Panic,
}

/// One call seen by a [`ScriptedRunner`].
#[derive(Debug, Clone)]
pub struct Call {
    pub at: Instant,
    pub kind: ProbeKind,
    pub pod_ip: String,
    pub container_id: Option<String>,
}

/// A probe runner playing a script, then `Return(fallback)` forever.
#[derive(Debug)]
pub struct ScriptedRunner {
    script: Mutex<VecDeque<Scripted>>,
    fallback: ProbeResult,
    calls: Mutex<Vec<Call>>,
}

impl ScriptedRunner {
    pub fn new(script: impl IntoIterator<Item = Scripted>, fallback: ProbeResult) -> Arc<Self> {
        Arc::new(ScriptedRunner {
            script: Mutex::new(script.into_iter().collect()),
            fallback,
            calls: Mutex::new(Vec::new()),
        })
    }

    pub fn always(result: ProbeResult) -> Arc<Self> {
        Self::new([], result)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Seconds since `origin` of every call.
    pub fn call_times(&self, origin: Instant) -> Vec<f64> {
        self.calls()
            .iter()
            .map(|call| (call.at - origin).as_secs_f64())
            .collect()
    }

    fn next(&self, kind: ProbeKind, target: ProbeTarget<'_>) -> Scripted {
        self.calls.lock().unwrap().push(Call {
            at: Instant::now(),
            kind,
            pod_ip: target.pod_ip.to_string(),
            container_id: target.container_id.map(str::to_string),
        });
        let next = self.script.lock().unwrap().pop_front();
        next.unwrap_or(Scripted::Return(self.fallback))
    }
}

impl ProbeRunner for ScriptedRunner {
    fn probe(
        &self,
        kind: ProbeKind,
        _spec: &ProbeSpec,
        target: ProbeTarget<'_>,
    ) -> impl Future<Output = ProbeVerdict> + Send {
        let step = self.next(kind, target);
        async move {
            match step {
                Scripted::Return(result) => verdict(kind, result),
                Scripted::Error => errored(kind),
                Scripted::Slow(duration, result) => {
                    tokio::time::sleep(duration).await;
                    verdict(kind, result)
                }
                Scripted::Panic => panic!("scripted probe panic"),
            }
        }
    }
}

/// A status manager cache the test sets directly.
#[derive(Debug, Default)]
pub struct FakeStatuses {
    statuses: Mutex<HashMap<String, PodStatus>>,
}

impl FakeStatuses {
    pub fn new() -> Arc<Self> {
        Arc::new(FakeStatuses::default())
    }

    pub fn set(&self, pod_uid: &str, status: PodStatus) {
        self.statuses
            .lock()
            .unwrap()
            .insert(pod_uid.to_string(), status);
    }
}

impl StatusSource for FakeStatuses {
    fn pod_status(&self, pod_uid: &str) -> Option<Arc<PodStatus>> {
        self.statuses
            .lock()
            .unwrap()
            .get(pod_uid)
            .cloned()
            .map(Arc::new)
    }
}

/// One [`ProbeRun`], owned.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRun {
    pub container: String,
    pub kind: ProbeKind,
    pub container_id: String,
    pub result: Option<CachedResult>,
    pub event_reason: Option<&'static str>,
    pub duration: Duration,
}

/// Records what workers report.
#[derive(Debug, Default)]
pub struct RecordingObserver {
    pub runs: Mutex<Vec<RecordedRun>>,
    pub stopped: Mutex<Vec<(String, String, ProbeKind)>>,
}

impl ProbeObserver for RecordingObserver {
    fn probe_ran(&self, run: &ProbeRun<'_>) {
        self.runs.lock().unwrap().push(RecordedRun {
            container: run.config.container_name().to_string(),
            kind: run.config.kind(),
            container_id: run.container_id.to_string(),
            result: run.result,
            event_reason: run.verdict.event.as_ref().map(|e| e.reason),
            duration: run.duration,
        });
    }

    fn worker_stopped(&self, config: &WorkerConfig) {
        self.stopped.lock().unwrap().push((
            config.pod_uid().to_string(),
            config.container_name().to_string(),
            config.kind(),
        ));
    }
}

/// A [`ProbeStateView`] the test fills: cached results and workers.
#[derive(Default)]
pub struct FakeView {
    cached: HashMap<(ProbeKind, String), CachedResult>,
    workers: HashSet<(String, ProbeKind)>,
}

impl FakeView {
    pub fn with_worker(mut self, container: &str, kind: ProbeKind) -> Self {
        self.workers.insert((container.to_string(), kind));
        self
    }

    pub fn with_result(mut self, kind: ProbeKind, id: &str, result: CachedResult) -> Self {
        self.cached.insert((kind, id.to_string()), result);
        self
    }
}

impl ProbeStateView for FakeView {
    fn cached(&self, kind: ProbeKind, container_id: &str) -> Option<CachedResult> {
        self.cached.get(&(kind, container_id.to_string())).copied()
    }

    fn has_worker(&self, container: &str, kind: ProbeKind) -> bool {
        self.workers.contains(&(container.to_string(), kind))
    }
}

/// Probes of the given containers and kinds, every one `probe_spec(10, 0, 1, 3)`.
pub fn pod_probes(entries: &[(&str, ProbeKind)]) -> PodProbes {
    let mut probes = PodProbes::new();
    for &(container, kind) in entries {
        probes.insert(container, kind, default_spec());
    }
    probes
}

// Desired status: the status module's tests, takeover and the daemon.

pub const UID: &str = "5f0c1a2e-8b7d-4c3e-9a41-2f6d7e8c9b10";

pub fn time(rfc3339: &str) -> Time {
    Time(rfc3339.parse().expect("test timestamp"))
}

/// A running container's status with ID `containerd://<name>`.
pub fn container_status(name: &str, ready: bool) -> ContainerStatus {
    ContainerStatus {
        name: name.to_string(),
        container_id: Some(format!("containerd://{name}")),
        image: format!("docker.io/local/{name}:1"),
        image_id: format!("docker.io/local/{name}@sha256:00"),
        ready,
        started: Some(ready),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(time("2025-03-01T10:00:03Z")),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// The verdict about the instance [`container_status`] describes.
pub fn view(name: &str, started: bool, ready: bool) -> ContainerProbeView {
    ContainerProbeView {
        name: name.to_string(),
        container_id: Some(format!("containerd://{name}")),
        started,
        ready,
        note: None,
    }
}

/// A condition with a transition time.
pub fn timed(
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    at: &str,
) -> PodCondition {
    PodCondition {
        last_transition_time: Some(time(at)),
        ..condition(type_, status, reason, message.map(str::to_string))
    }
}

/// A running pod `shop/web-0` with UID [`UID`] and resourceVersion `42`
/// (the status tests import it as `pod`).
pub fn running_pod(
    init_containers: Vec<Container>,
    containers: Vec<Container>,
    gates: &[&str],
    status: PodStatus,
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some("shop".to_string()),
            name: Some("web-0".to_string()),
            uid: Some(UID.to_string()),
            resource_version: Some("42".to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            init_containers: (!init_containers.is_empty()).then_some(init_containers),
            containers,
            readiness_gates: (!gates.is_empty()).then(|| {
                gates
                    .iter()
                    .map(|g| PodReadinessGate {
                        condition_type: g.to_string(),
                    })
                    .collect()
            }),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: status.phase.clone().or_else(|| Some("Running".to_string())),
            ..status
        }),
    }
}

/// A running pod with [`running_pod`]'s `app` and the readiness gate
/// `podprobe.io/ready`, whose condition has status `gate` (none when
/// `None`), at resourceVersion 1: the status patcher's gate-mode pod.
pub fn gate_pod(gate: Option<&str>) -> Pod {
    let conditions = gate
        .map(|status| {
            vec![PodCondition {
                type_: READY_CONDITION.to_string(),
                status: status.to_string(),
                ..PodCondition::default()
            }]
        })
        .unwrap_or_default();
    let status = PodStatus {
        conditions: Some(conditions),
        container_statuses: Some(vec![container_status("app", true)]),
        ..PodStatus::default()
    };
    let mut pod = running_pod(vec![], vec![container("app")], &[READY_CONDITION], status);
    pod.metadata.resource_version = Some("1".into());
    pod
}

/// A gate-mode [`Intent`] for [`gate_pod`]: `app`, started, is `ready`
/// by its annotated readiness probe.
pub fn gate_intent(ready: bool) -> Intent {
    let spec = PodSpec {
        containers: vec![container("app")],
        ..Default::default()
    };
    let annotation = r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}}}}"#;
    let probes = Arc::new(
        crate::status::annotation::parse_probes(
            &spec,
            annotation,
            &mut crate::spec::probe_spec::budget::PodBudget::default(),
        )
        .unwrap(),
    );
    Intent {
        namespace: "shop".into(),
        name: "web-0".into(),
        uid: UID.into(),
        owned: Owned::Gate(probes),
        views: vec![view("app", true, ready)],
        result_at: None,
        floor: None,
    }
}

/// A pod on an agent's node: `app` running, not ready yet, no conditions
/// from podprobe, at resourceVersion 1.
pub fn agent_pod() -> Pod {
    let mut app = container_status("app", false);
    app.restart_count = 0;
    let status = PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: TRUE.into(),
            ..PodCondition::default()
        }]),
        container_statuses: Some(vec![app]),
        ..PodStatus::default()
    };
    let mut pod = running_pod(vec![], vec![container("app")], &[], status);
    pod.metadata.resource_version = Some("1".into());
    pod
}

/// [`gate_intent`] in authority mode, for [`agent_pod`].
pub fn authority_intent(ready: bool) -> Intent {
    Intent {
        owned: Owned::Authority,
        ..gate_intent(ready)
    }
}

/// The status of condition `type_` in a status patch.
pub fn condition_in<'a>(patch: &'a Value, type_: &str) -> Option<&'a str> {
    patch["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

/// The first container status of `pod`, to change in a test.
pub fn first_container_status(pod: &mut Pod) -> &mut ContainerStatus {
    let status = pod.status.as_mut().expect("pod status");
    let statuses = status
        .container_statuses
        .as_mut()
        .expect("container statuses");
    &mut statuses[0]
}

// Client certificates: the Secret cache's tests and the probe spec's.

/// A client certificate and its key, PEM.
pub fn pem_pair() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["client".to_string()]).unwrap();
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

// Events: what the daemon's loop records.

/// An [`EventRecorder`] that keeps every Event it is given, and the pods
/// it holds Events of and was not told are gone.
#[derive(Debug, Default)]
pub struct RecordingEvents {
    events: Mutex<Vec<PodEvent>>,
    remembered: Mutex<HashSet<String>>,
}

impl RecordingEvents {
    /// The reasons of the Events recorded so far, in order.
    pub fn reasons(&self) -> Vec<&'static str> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.reason)
            .collect()
    }

    /// The pods with Events recorded that [`EventRecorder::forget_pod`]
    /// was not called for since.
    pub fn remembered_pods(&self) -> usize {
        self.remembered.lock().unwrap().len()
    }
}

impl EventRecorder for RecordingEvents {
    fn record(&self, event: PodEvent) {
        if let Some(uid) = &event.regarding.uid {
            self.remembered.lock().unwrap().insert(uid.clone());
        }
        self.events.lock().unwrap().push(event);
    }

    fn forget_pod(&self, uid: &str) {
        self.remembered.lock().unwrap().remove(uid);
    }
}

// The pod tracker: one pod, as the daemon's and the tracker's tests see it.

/// The container ID of [`tracked_pod`]'s `app`.
pub const TRACKED_ID: &str = "containerd://app-1";

/// [`tracked_pod`]'s `podprobe.io/probes`: a readiness probe of `app`.
pub const TRACKED_ANNOTATION: &str =
    r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}}}}"#;

/// A pod whose `app` container runs since `started_at` (seconds since the
/// Unix epoch), with a readiness probe in its annotation and in its spec,
/// and podprobe's own condition in `mode` as `(status, since)`.
pub fn tracked_pod(mode: Mode, started_at: i64, own: Option<(&str, i64)>) -> Pod {
    let time = |second| Time(Timestamp::from_second(second).unwrap());
    let conditions = own.map(|(status, since)| PodCondition {
        type_: crate::prober::takeover::own_condition_type(mode).into(),
        status: status.into(),
        last_transition_time: Some(time(since)),
        ..PodCondition::default()
    });
    let readiness: Probe = serde_json::from_value(serde_json::json!(
        {"exec": {"command": ["true"]}}
    ))
    .unwrap();
    Pod {
        metadata: ObjectMeta {
            uid: Some("uid".into()),
            annotations: Some(
                [(
                    PROBES_ANNOTATION.to_string(),
                    TRACKED_ANNOTATION.to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                readiness_probe: Some(readiness),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: conditions.map(|c| vec![c]),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                container_id: Some(TRACKED_ID.into()),
                // Gate mode: the kubelet's own verdict (it knows no
                // annotated probe); authority mode: podprobe's last one.
                ready: own.is_some_and(|(status, _)| status == "True"),
                started: Some(own.is_some()),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(time(started_at)),
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

// PodDisruptionBudgets (WG5).

/// A PodDisruptionBudget `namespace/name` selecting with `selector`,
/// opted in with `podprobe.io/guards: <guards>` when `guards` is given,
/// with `maxUnavailable: max` and `minAvailable: min`.
pub fn guarding_pdb(
    (namespace, name): (&str, &str),
    guards: Option<&str>,
    max: Option<IntOrString>,
    min: Option<IntOrString>,
    selector: LabelSelector,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            namespace: (!namespace.is_empty()).then(|| namespace.into()),
            name: Some(name.into()),
            annotations: guards.map(|guards| {
                BTreeMap::from([(GUARDS_ANNOTATION.to_string(), guards.to_string())])
            }),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: max,
            min_available: min,
            selector: Some(selector),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}
