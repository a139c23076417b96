//! The simulation proper: the real [`ProberManager`] and its workers on a
//! paused tokio clock, a scripted probe runner, and a simulated kubelet that
//! runs the containers and feeds what happens to podprobe's own
//! [`PodTracker`], the step function `podprobe run` drives, carrying out
//! the effects it asks for.
//!
//! The simulated kubelet:
//! - adds the pod (the tracker reads its probes and starts the workers),
//!   then starts each container `startAfter` later: status `running`,
//!   container ID `containerd://<name>-<instance>`, `startedAt` now,
//!   `restartCount` one less than the instance number;
//! - delivers every result change (K1) and every new pod status (a
//!   container started or stopped) to the tracker; the tracker regenerates
//!   `started` and `ready` (S1-S5, with the manual readiness triggers of
//!   W8), which the simulation writes where the workers read them, and asks
//!   to kill every container whose liveness or startup probe failed (K2),
//!   with the grace period of K3;
//! - a liveness pause (`podprobe.io/pause-liveness-until`) ends at its time,
//!   as the daemon's loop ends it (LP3);
//! - a kill takes effect at once: the grace period is reported, not waited
//!   out, and the container is `terminated` with exit code 137 (SIGKILL);
//!   if its restart policy restarts it, it runs again `restartDelay` later as
//!   the next instance;
//!
//! The status the workers read carries `started`/`ready` as that sync last
//! derived them. In gate mode those are podprobe's own verdicts from the
//! annotation's probes (the kubelet's, from the spec's probes, are not
//! simulated); they decide `podprobe.io/ready`.
//!
//! Left out: the node's rules for annotated hosts and pod networks (the
//! simulation connects nowhere), Events, markers and metrics (the tracker
//! asks for them; nothing here records them); the kubelet's periodic pod resync (every 60-90 s, jittered),
//! whose only effect here would be extra manual readiness triggers while a
//! container is not ready; crash-loop back-off (script it with
//! `restartDelay`); the ordering of init containers (every container starts
//! on its own `startAfter`; classic init containers count as completed from
//! the start). The prober has been running since long before the pod, so
//! workers start without jitter (W5).
//!
//! Everything runs on one thread in virtual time, and nothing depends on
//! randomness or hash order, so the same input gives the same events.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use tokio::time::Instant;

use super::script::{ContainerScript, ScriptedResult};
use super::simulation::Simulation;
use podprobe_core::prober::manager::{ProbeKill, ProberManager};
use podprobe_core::prober::markers::MarkerKeys;
use podprobe_core::prober::pod_tracker::{Effect, Input, Now, PodTracker, Reading, TrackerConfig};
use podprobe_core::prober::results::{ProbeCaches, ResultReceivers, ResultUpdate};
use podprobe_core::prober::worker::{Clock, NoopObserver, ProbeRunner, StatusSource, TokioClock};
use podprobe_core::spec::probe_spec::budget::{BudgetLimits, NodeBudget};
use podprobe_core::spec::probe_spec::timeout_caps::TimeoutCaps;
use podprobe_core::spec::restart_policy::container_should_restart;
use podprobe_core::spec::verdict::probe_with_retries;
use podprobe_core::spec::{
    Attempt, Outcome, ProbeError, ProbeKind, ProbeResult, ProbeSpec, ProbeTarget, ProbeVerdict,
};
use podprobe_core::status::gate::{READY_CONDITION, gate_condition};
use podprobe_core::status::{AnnotatedProbes, ContainerProbeView, Intent, Mode, Owned};
use podprobe_core::util::pod::{ContainerList, is_restartable_init_container, probed_containers};

/// Exit code of a container stopped by a probe failure: it was killed
/// (SIGKILL), having ignored SIGTERM.
pub const KILLED_EXIT_CODE: i32 = 137;

/// The wall clock's reading when the prober starts: 2026-01-01T00:00:00Z.
/// Only differences of wall-clock times matter.
const WALL_ORIGIN_SECONDS: i64 = 1_767_225_600;

/// One observable change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    /// Since the pod's first container started.
    #[serde(serialize_with = "as_seconds")]
    pub t: Duration,
    /// `None` for pod-level events (conditions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// 1 for a container's first run, one more per restart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<u32>,
    #[serde(flatten)]
    pub event: Event,
}

/// What changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A container instance started running.
    StartedRunning { container_id: String },
    /// A probe ran and answered the scripted `result`.
    Probe {
        kind: ProbeKind,
        result: ScriptedResult,
    },
    /// The container status's `started` changed.
    Started { value: bool },
    /// The container status's `ready` changed.
    Ready { value: bool },
    /// A liveness or startup failure killed the container (K2, K3).
    Killed {
        kind: ProbeKind,
        grace_seconds: i64,
        /// The `Killing` event's message.
        message: String,
    },
    /// Gate mode: the status of the `podprobe.io/ready` condition changed.
    Condition {
        #[serde(rename = "type")]
        type_: String,
        status: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
}

/// The last line: where things stand at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Always `summary`.
    pub event: &'static str,
    #[serde(serialize_with = "as_seconds")]
    pub duration: Duration,
    pub containers: BTreeMap<String, ContainerSummary>,
    /// Gate mode: the final status of the `podprobe.io/ready` condition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ContainerSummary {
    pub restarts: u32,
    pub started: bool,
    pub ready: bool,
}

/// A finished simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulationReport {
    /// In time order; at equal times by container name, pod-level last.
    pub records: Vec<Record>,
    pub summary: Summary,
}

fn as_seconds<S: serde::Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(d.as_millis() as f64 / 1000.0)
}

/// Runs `simulation` on a fresh single-threaded runtime with a paused clock.
pub fn run(simulation: &Simulation) -> std::io::Result<SimulationReport> {
    run_with(simulation, tracker_config(simulation))
}

/// Runs `simulation` with a tracker configured as `config` says.
fn run_with(simulation: &Simulation, config: TrackerConfig) -> std::io::Result<SimulationReport> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    Ok(runtime.block_on(simulate(simulation, config)))
}

async fn simulate(simulation: &Simulation, config: TrackerConfig) -> SimulationReport {
    let clock = TokioClock::new(Timestamp::from_second(WALL_ORIGIN_SECONDS).unwrap_or_default());
    let containers = SimContainer::all(simulation);
    let first_start = containers
        .iter()
        .map(|c| c.script.start_after)
        .min()
        .unwrap_or_default();
    let lead = longest_period(simulation, &containers);
    let prober_start = Instant::now();
    let origin = prober_start + lead + first_start;
    let log = Arc::new(EventLog::new(origin));
    let runner = Arc::new(ScriptedProbes::new(simulation, log.clone()));
    let statuses = Arc::new(SimStatuses::new(&simulation.pod));
    let (caches, receivers) = ProbeCaches::new();
    let manager = ProberManager::new(
        runner.clone(),
        statuses.clone(),
        caches,
        Arc::new(clock),
        Arc::new(NoopObserver),
    );
    // W5: a worker created within one period of the prober's start sleeps a
    // random part of its period first; this prober started long before.
    // `sleep_until`: tokio cuts a `sleep` to 30 years, and a period may be
    // up to 68; the run would then start decades before `origin`.
    tokio::time::sleep_until(prober_start + lead).await;
    let mut kubelet = Kubelet {
        simulation,
        // Its pod resync falls at a fixed point of its jitter, so that
        // runs repeat.
        tracker: PodTracker::new(config, Box::new(|| 0.0)),
        manager,
        runner,
        statuses,
        clock,
        containers,
        log: log.clone(),
        condition: None,
    };
    kubelet.add_pod().await;
    // Events at exactly `duration` still happen; the millisecond after is cut.
    let end = origin + simulation.duration + Duration::from_millis(1);
    kubelet.run(receivers, end).await;
    let records = log.take(simulation.duration);
    let summary = summarize(simulation, &kubelet.containers, &records);
    SimulationReport { records, summary }
}

/// podprobe's tracker configuration for the simulated pod: the daemon's,
/// without a node's rules for annotated hosts and pod networks (the
/// simulation connects nowhere), with the default budgets, no marker keys
/// and no timeout caps.
fn tracker_config(simulation: &Simulation) -> TrackerConfig {
    let mode = if simulation.gate.is_some() {
        Mode::Gate
    } else {
        Mode::Authority
    };
    TrackerConfig {
        mode,
        annotation_rules: None,
        budget: BudgetLimits::default(),
        node_budget: NodeBudget::new(),
        max_liveness_pause: podprobe_core::prober::liveness_pause::DEFAULT_MAX_PAUSE,
        marker_keys: MarkerKeys::new([]),
        timeout_caps: TimeoutCaps {
            exec: Duration::MAX,
            network: Duration::MAX,
        },
    }
}

/// The longest probe period of the pod (at least a second).
fn longest_period(simulation: &Simulation, containers: &[SimContainer]) -> Duration {
    containers
        .iter()
        .flat_map(|c| ProbeKind::ALL.map(|kind| simulation.probes.get(&c.name, kind)))
        .flatten()
        .map(ProbeSpec::period)
        .max()
        .unwrap_or_default()
        .max(Duration::from_secs(1))
}

/// The end state, read from the events themselves so that it agrees with
/// them exactly.
fn summarize(simulation: &Simulation, containers: &[SimContainer], records: &[Record]) -> Summary {
    let mut summaries: BTreeMap<String, ContainerSummary> = containers
        .iter()
        .map(|c| (c.name.clone(), ContainerSummary::default()))
        .collect();
    let mut condition = None;
    for record in records {
        if let Event::Condition { status, .. } = &record.event {
            condition = Some(status.clone());
        }
        let Some(summary) = record.container.as_ref().and_then(|c| summaries.get_mut(c)) else {
            continue;
        };
        match record.event {
            Event::StartedRunning { .. } => {
                summary.restarts = record.instance.unwrap_or(1).saturating_sub(1);
            }
            Event::Started { value } => summary.started = value,
            Event::Ready { value } => summary.ready = value,
            _ => {}
        }
    }
    Summary {
        event: "summary",
        duration: simulation.duration,
        containers: summaries,
        condition,
    }
}

/// Collects events with their virtual time.
#[derive(Debug)]
struct EventLog {
    origin: Instant,
    records: Mutex<Vec<Record>>,
}

impl EventLog {
    fn new(origin: Instant) -> Self {
        EventLog {
            origin,
            records: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, container: Option<&str>, instance: Option<u32>, event: Event) {
        let record = Record {
            t: Instant::now().saturating_duration_since(self.origin),
            container: container.map(str::to_string),
            instance,
            event,
        };
        self.lock().push(record);
    }

    /// The records up to `until`, sorted by time, then container, with
    /// pod-level records last; records of one container at one time keep
    /// the order they happened in.
    fn take(&self, until: Duration) -> Vec<Record> {
        let mut records = std::mem::take(&mut *self.lock());
        records.retain(|r| r.t <= until);
        records.sort_by(|a, b| {
            let key = |r: &Record| (r.t, r.container.is_none());
            key(a)
                .cmp(&key(b))
                .then_with(|| a.container.cmp(&b.container))
        });
        records
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Record>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A container instance the runner answers for.
#[derive(Debug, Clone)]
struct Instance {
    container: String,
    number: u32,
    started: Instant,
}

/// Answers probes from the script, for the instance probed and its age.
#[derive(Debug)]
struct ScriptedProbes {
    scripts: BTreeMap<String, ContainerScript>,
    /// By runtime container ID (`app-1`).
    instances: Mutex<HashMap<String, Instance>>,
    log: Arc<EventLog>,
}

impl ScriptedProbes {
    fn new(simulation: &Simulation, log: Arc<EventLog>) -> Self {
        ScriptedProbes {
            scripts: simulation.script.containers.clone(),
            instances: Mutex::new(HashMap::new()),
            log,
        }
    }

    fn register(&self, runtime_id: String, instance: Instance) {
        let mut instances = self
            .instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        instances.insert(runtime_id, instance);
    }

    /// The scripted answer to a `kind` probe of `runtime_id` now, recorded.
    fn answer(&self, kind: ProbeKind, runtime_id: Option<&str>) -> Attempt {
        let instance = runtime_id.and_then(|id| {
            let instances = self
                .instances
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            instances.get(id).cloned()
        });
        let Some(instance) = instance else {
            return Err(ProbeError::unknown(format!(
                "no simulated container {runtime_id:?}"
            )));
        };
        let age = Instant::now().saturating_duration_since(instance.started);
        let result = self
            .scripts
            .get(&instance.container)
            .map_or(ScriptedResult::Success, |script| {
                script.result_at(kind, age)
            });
        self.log.record(
            Some(&instance.container),
            Some(instance.number),
            Event::Probe { kind, result },
        );
        scripted_attempt(result)
    }
}

/// One handler run answering `result`, in the shape a real handler returns.
fn scripted_attempt(result: ScriptedResult) -> Attempt {
    match result {
        ScriptedResult::Success => Ok(Outcome::new(ProbeResult::Success, "")),
        ScriptedResult::Warning => Ok(Outcome::new(ProbeResult::Warning, "scripted warning")),
        ScriptedResult::Failure => Ok(Outcome::new(ProbeResult::Failure, "scripted failure")),
        ScriptedResult::Error => Err(ProbeError::unknown("scripted error")),
    }
}

impl ProbeRunner for ScriptedProbes {
    fn probe(
        &self,
        kind: ProbeKind,
        _spec: &ProbeSpec,
        target: ProbeTarget<'_>,
    ) -> impl Future<Output = ProbeVerdict> + Send {
        // The script answers the same at every attempt of one run: all
        // attempts happen at the same virtual instant.
        let attempt = self.answer(kind, target.container_id);
        probe_with_retries(kind, move || std::future::ready(attempt.clone()))
    }
}

/// The pod status the workers read (the kubelet's status manager cache).
#[derive(Debug)]
struct SimStatuses {
    pod_uid: String,
    status: Mutex<PodStatus>,
}

impl SimStatuses {
    fn new(pod: &Pod) -> Self {
        SimStatuses {
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            status: Mutex::new(initial_status(pod)),
        }
    }

    fn get(&self) -> PodStatus {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, status: PodStatus) {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }
}

impl StatusSource for SimStatuses {
    fn pod_status(&self, pod_uid: &str) -> Option<Arc<PodStatus>> {
        (pod_uid == self.pod_uid).then(|| Arc::new(self.get()))
    }
}

/// `Pending`, every container waiting to be created, classic init
/// containers already completed.
fn initial_status(pod: &Pod) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let init = spec.init_containers.unwrap_or_default();
    PodStatus {
        phase: Some("Pending".to_string()),
        pod_ip: Some("10.0.0.1".to_string()),
        container_statuses: Some(spec.containers.iter().map(creating).collect()),
        init_container_statuses: Some(
            init.iter()
                .map(|c| {
                    if is_restartable_init_container(c) {
                        creating(c)
                    } else {
                        completed(c)
                    }
                })
                .collect(),
        ),
        ..PodStatus::default()
    }
}

fn creating(container: &Container) -> ContainerStatus {
    ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".to_string()),
                ..ContainerStateWaiting::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn completed(container: &Container) -> ContainerStatus {
    let id = container_id(&container.name, 1);
    ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        container_id: Some(id.clone()),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".to_string()),
                container_id: Some(id),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// The runtime's ID of a container instance.
fn runtime_id(name: &str, instance: u32) -> String {
    format!("{name}-{instance}")
}

/// The ID as the pod status shows it.
fn container_id(name: &str, instance: u32) -> String {
    format!("containerd://{}", runtime_id(name, instance))
}

/// A container the simulated kubelet runs: a regular container or a
/// restartable init container.
#[derive(Debug)]
struct SimContainer {
    name: String,
    spec: Container,
    /// Whether its status lives in `initContainerStatuses`.
    init: bool,
    script: ContainerScript,
    /// 0 until it first runs.
    instance: u32,
    /// When it (re)starts next, if it will.
    next_start: Option<Instant>,
    running: bool,
    /// `started` and `ready` as last reported.
    shown: (bool, bool),
}

impl SimContainer {
    /// The pod's probed containers in the kubelet's order.
    fn all(simulation: &Simulation) -> Vec<SimContainer> {
        let spec = simulation.pod.spec.as_ref();
        spec.into_iter()
            .flat_map(probed_containers)
            .map(|placed| {
                let init = placed.list == ContainerList::InitContainers;
                (placed.container.clone(), init)
            })
            .map(|(spec, init)| SimContainer {
                name: spec.name.clone(),
                script: simulation
                    .script
                    .containers
                    .get(&spec.name)
                    .cloned()
                    .unwrap_or_default(),
                spec,
                init,
                instance: 0,
                next_start: None,
                running: false,
                shown: (false, false),
            })
            .collect()
    }

    /// This container's entry in `status`.
    fn status_in<'s>(&self, status: &'s mut PodStatus) -> Option<&'s mut ContainerStatus> {
        let list = if self.init {
            status.init_container_statuses.as_mut()
        } else {
            status.container_statuses.as_mut()
        };
        list?.iter_mut().find(|s| s.name == self.name)
    }
}

struct Kubelet<'a> {
    simulation: &'a Simulation,
    /// podprobe's reaction to what happens, as the daemon's.
    tracker: PodTracker,
    manager: ProberManager<Arc<ScriptedProbes>, Arc<SimStatuses>>,
    runner: Arc<ScriptedProbes>,
    statuses: Arc<SimStatuses>,
    clock: TokioClock,
    containers: Vec<SimContainer>,
    log: Arc<EventLog>,
    /// Gate mode: the condition's status as last reported.
    condition: Option<String>,
}

impl Kubelet<'_> {
    /// Admits the pod: its workers start now and its containers on their
    /// `startAfter`. As in the kubelet, a worker's first run comes before
    /// its container runs (the kubelet starts containers in the pod sync
    /// that follows the admission), so it finds nothing to probe and waits;
    /// the sync after a container starts nudges it (S3) into its first
    /// probe. A container that started first would get that nudge on top
    /// of the first run: an extra probe the kubelet never makes.
    async fn add_pod(&mut self) {
        self.feed(Input::PodApplied {
            pod: self.pod(),
            unknown: Vec::new(),
        });
        let now = Instant::now();
        for container in &mut self.containers {
            container.next_start = Some(now + container.script.start_after);
        }
        // On this current-thread runtime the new workers run their first
        // iteration (no container running: no await that pends) before this
        // task resumes.
        tokio::task::yield_now().await;
        self.start_due();
    }

    async fn run(&mut self, mut receivers: ResultReceivers, end: Instant) {
        loop {
            let next_start = self.containers.iter().filter_map(|c| c.next_start).min();
            tokio::select! {
                biased;
                Some(update) = receivers.startup.recv() => self.on_result(&update),
                Some(update) = receivers.readiness.recv() => self.on_result(&update),
                Some(update) = receivers.liveness.recv() => self.on_result(&update),
                () = sleep_until(next_start) => self.start_due(),
                // LP3: a pause ends as in `podprobe run`.
                () = sleep_until(self.tracker.pause_timer(self.now())) => {
                    self.feed(Input::PauseTimer(vec![self.pod()]));
                }
                () = tokio::time::sleep_until(end) => return,
            }
        }
    }

    /// K1: podprobe's reaction to a results cache change.
    fn on_result(&mut self, update: &ResultUpdate) {
        self.feed(Input::Result {
            pod: Some(self.pod()),
            update: update.clone(),
        });
    }

    fn start_due(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = (0..self.containers.len())
            .filter(|&i| self.containers[i].next_start.is_some_and(|at| at <= now))
            .collect();
        if due.is_empty() {
            return;
        }
        for index in due {
            self.start(index);
        }
        self.pod_changed();
    }

    /// Runs the next instance of a container.
    fn start(&mut self, index: usize) {
        let container = &mut self.containers[index];
        container.next_start = None;
        container.running = true;
        container.instance += 1;
        let instance = container.instance;
        let id = container_id(&container.name, instance);
        self.runner.register(
            runtime_id(&container.name, instance),
            Instance {
                container: container.name.clone(),
                number: instance,
                started: Instant::now(),
            },
        );
        let mut status = self.statuses.get();
        if let Some(entry) = container.status_in(&mut status) {
            let previous = entry.state.take().filter(|s| s.terminated.is_some());
            *entry = ContainerStatus {
                name: container.name.clone(),
                image: entry.image.clone(),
                container_id: Some(id.clone()),
                restart_count: i32::try_from(instance - 1).unwrap_or(i32::MAX),
                last_state: previous,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(self.clock.now())),
                    }),
                    ..ContainerState::default()
                }),
                started: Some(false),
                ready: false,
                ..ContainerStatus::default()
            };
        }
        self.statuses.set(status);
        self.log.record(
            Some(&container.name),
            Some(instance),
            Event::StartedRunning { container_id: id },
        );
    }

    /// The pod as the API server would have it now: the manifest with the
    /// simulated status.
    fn pod(&self) -> Arc<Pod> {
        let mut status = self.statuses.get();
        status.phase = Some(self.phase().to_string());
        Arc::new(Pod {
            status: Some(status),
            ..self.simulation.pod.clone()
        })
    }

    /// A container started or stopped: the watch delivers the pod.
    fn pod_changed(&mut self) {
        self.feed(Input::PodApplied {
            pod: self.pod(),
            unknown: Vec::new(),
        });
    }

    /// Feeds `input` to the tracker and carries out its effects, and the
    /// inputs they bring about, until none is left.
    fn feed(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            let mut killed = false;
            for effect in self.tracker.step(input, self.now(), &self.manager) {
                match effect {
                    Effect::ReadAnnotation {
                        uid,
                        pod,
                        annotation,
                        budget,
                    } => inputs.push_back(Input::AnnotationRead {
                        reading: Reading::read(uid, pod, annotation, budget),
                        current: Some(self.pod()),
                    }),
                    Effect::Workers(command) => command.apply(&self.manager),
                    Effect::ShowStarted { started, .. } => self.show(|status| {
                        let id = status.container_id.as_deref().unwrap_or_default();
                        if let Some(&value) = started.get(id) {
                            status.started = Some(value);
                        }
                    }),
                    Effect::Patch(intent) => self.write_status(&intent),
                    Effect::Kill { kill, .. } => {
                        self.kill(kill);
                        killed = true;
                    }
                    // Events, markers and metrics are not simulated.
                    Effect::WriteMarkers { .. }
                    | Effect::Record(_)
                    | Effect::BudgetRefused(_)
                    | Effect::PausedPods(_) => {}
                }
            }
            if killed {
                inputs.push_back(Input::PodApplied {
                    pod: self.pod(),
                    unknown: Vec::new(),
                });
            }
        }
    }

    /// The time of a step now.
    fn now(&self) -> Now {
        Now {
            at: Instant::now(),
            wall: self.clock.now(),
        }
    }

    /// Applies `change` to every container status the workers read.
    fn show(&self, change: impl Fn(&mut ContainerStatus)) {
        let mut status = self.statuses.get();
        let all = (status.container_statuses.iter_mut())
            .chain(status.init_container_statuses.iter_mut())
            .flatten();
        all.for_each(change);
        self.statuses.set(status);
    }

    /// podprobe's status write: `started` and `ready` as its verdicts say,
    /// and in gate mode its condition.
    fn write_status(&mut self, intent: &Intent) {
        self.show(|status| {
            let id = status.container_id.as_deref();
            if let Some(view) = intent
                .views
                .iter()
                .find(|v| v.container_id.as_deref() == id)
            {
                status.started = Some(view.started);
                status.ready = view.ready;
            }
        });
        let pod = self.pod();
        let mut status = pod.status.clone().unwrap_or_default();
        self.report_changes(&mut status);
        if let Owned::Gate(annotated) = &intent.owned {
            self.report_condition(&pod, annotated, &intent.views);
        }
    }

    /// `Pending` until a container ran; `Failed` once every regular
    /// container was killed for good; `Running` otherwise.
    fn phase(&self) -> &'static str {
        let ended = |c: &SimContainer| c.instance > 0 && !c.running && c.next_start.is_none();
        if self.containers.iter().all(|c| c.instance == 0) {
            "Pending"
        } else if self.containers.iter().filter(|c| !c.init).all(ended) {
            "Failed"
        } else {
            "Running"
        }
    }

    fn report_changes(&mut self, status: &mut PodStatus) {
        for container in &mut self.containers {
            let Some(entry) = container.status_in(status) else {
                continue;
            };
            let now = (entry.started == Some(true), entry.ready);
            let instance = Some(container.instance);
            if now.0 != container.shown.0 {
                let event = Event::Started { value: now.0 };
                self.log.record(Some(&container.name), instance, event);
            }
            if now.1 != container.shown.1 {
                let event = Event::Ready { value: now.1 };
                self.log.record(Some(&container.name), instance, event);
            }
            container.shown = now;
        }
    }

    /// Gate mode: podprobe's `podprobe.io/ready` from its own verdicts.
    fn report_condition(
        &mut self,
        pod: &Pod,
        annotated: &AnnotatedProbes,
        views: &[ContainerProbeView],
    ) {
        let condition = gate_condition(pod, annotated, views, None);
        if self.condition.as_deref() == Some(condition.status.as_str()) {
            return;
        }
        self.condition = Some(condition.status.clone());
        let event = Event::Condition {
            type_: READY_CONDITION.to_string(),
            status: condition.status,
            reason: condition.reason,
            message: condition.message,
        };
        self.log.record(None, None, event);
    }

    /// Stops the container at once and schedules its next instance if its
    /// restart policy restarts it.
    fn kill(&mut self, kill: ProbeKill) {
        let Some(index) = self
            .containers
            .iter()
            .position(|c| c.name == kill.container)
        else {
            return;
        };
        let pod_policy = self
            .simulation
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone());
        let container = &mut self.containers[index];
        container.running = false;
        self.log.record(
            Some(&container.name),
            Some(container.instance),
            Event::Killed {
                kind: kill.kind,
                // No preStop hook runs here: all of it goes to the stop.
                grace_seconds: crate::actuator::lifecycle::grace_left(kill.grace_period_seconds, 0),
                message: kill.message,
            },
        );
        let mut status = self.statuses.get();
        if let Some(entry) = container.status_in(&mut status) {
            let started_at = entry
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.clone());
            entry.state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: KILLED_EXIT_CODE,
                    reason: Some("Error".to_string()),
                    container_id: Some(kill.container_id),
                    started_at,
                    finished_at: Some(Time(self.clock.now())),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            });
            entry.started = Some(false);
            entry.ready = false;
        }
        self.statuses.set(status);
        if container_should_restart(&container.spec, pod_policy.as_deref(), KILLED_EXIT_CODE) {
            container.next_start = Some(Instant::now() + container.script.restart_delay);
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cli::simulate::build;
    use crate::cli::simulate::script::{self, Script};
    use crate::daemon::flags::ModeArg;

    /// The scripts both [`run_and_simulate_take_the_same_steps`] runs: a
    /// slow app without a startup probe killed in a loop (K2, K3), the same
    /// app saved by one (D10, W8), a readiness flap across its thresholds
    /// (D14), a liveness pause over failures (LP1-LP3) and a gated pod
    /// (`podprobe.io/ready`).
    fn scripts() -> Vec<(&'static str, serde_json::Value, serde_json::Value, ModeArg)> {
        let tcp = |extra: serde_json::Value| {
            let mut probe = json!({"tcpSocket": {"port": 80}, "periodSeconds": 2});
            probe
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            probe
        };
        let pod = |annotations: serde_json::Value, container: serde_json::Value| {
            let mut app = json!({"name": "app", "image": "app"});
            app.as_object_mut()
                .unwrap()
                .extend(container.as_object().unwrap().clone());
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
                   "spec": {"containers": [app]}})
        };
        let slow = json!({"duration": 90, "containers": {"app": {
            "restartDelay": 3,
            "startup": [{"from": 0, "to": 20, "result": "failure"}],
            "readiness": [{"from": 0, "to": 20, "result": "failure"}],
            "liveness": [{"from": 0, "to": 20, "result": "failure"}],
        }}});
        let liveness = json!({"livenessProbe": tcp(json!({"failureThreshold": 3})),
                              "readinessProbe": tcp(json!({}))});
        let mut saved = liveness.clone();
        saved
            .as_object_mut()
            .unwrap()
            .insert("startupProbe".into(), tcp(json!({"failureThreshold": 30})));
        let flap = json!({"duration": 60, "containers": {"app": {"readiness": [
            {"from": 0, "to": 9, "result": "success"},
            {"from": 9, "to": 13, "result": "failure"},
            {"from": 13, "to": 30, "result": "success"},
            {"from": 30, "to": 40, "result": "failure"},
        ]}}});
        let thresholds =
            json!({"readinessProbe": tcp(json!({"failureThreshold": 3, "successThreshold": 2}))});
        // The simulated wall clock starts at WALL_ORIGIN_SECONDS.
        let pause = json!({"podprobe.io/pause-liveness-until": "2026-01-01T00:01:00Z"});
        let failing = json!({"duration": 120, "containers": {"app": {
            "restartDelay": 3,
            "liveness": [{"from": 0, "to": 200, "result": "failure"}],
        }}});
        let gated = json!({"podprobe.io/probes": json!({"app": {"readinessProbe": tcp(json!({}))}}).to_string()});
        let gate_script = json!({"duration": 40, "containers": {"app": {"readiness": [
            {"from": 10, "to": 20, "result": "failure"},
        ]}}});
        vec![
            (
                "K2 loop",
                pod(json!({}), liveness),
                slow.clone(),
                ModeArg::Authority,
            ),
            ("D10 saved", pod(json!({}), saved), slow, ModeArg::Authority),
            (
                "D14 flap",
                pod(json!({}), thresholds),
                flap,
                ModeArg::Authority,
            ),
            (
                "LP pause",
                pod(pause, json!({"livenessProbe": tcp(json!({}))})),
                failing,
                ModeArg::Authority,
            ),
            ("gate", pod(gated, json!({})), gate_script, ModeArg::Gate),
        ]
    }

    /// `podprobe simulate` and `podprobe run` take the same steps: the same
    /// script, simulated once with the simulator's tracker and once with a
    /// tracker configured as `podprobe run` configures it from its flags
    /// (`daemon::tracker_config`), gives the same records, event for event.
    /// Only the node's rules for annotated hosts and pod networks are left
    /// out of the second, as the simulator leaves them out (it connects
    /// nowhere). Both executors carry the tracker's worker effects out
    /// through one `WorkerCommand::apply` and read annotations through one
    /// `Reading::read`.
    #[test]
    fn run_and_simulate_take_the_same_steps() {
        for (name, pod, script, mode) in scripts() {
            let script = script::parse(&script).unwrap_or_else(|e| panic!("{name}: {e}"));
            let simulation =
                build(&pod, script, Some(mode), None).unwrap_or_else(|e| panic!("{name}: {e}"));
            let simulated = run(&simulation).unwrap();
            let mode_flag = match mode {
                ModeArg::Gate => "gate",
                ModeArg::Authority => "authority",
            };
            let flags = crate::daemon::flags::parse(&["--node-name", "n", "--mode", mode_flag]);
            let config = flags.validate().expect("the default flags are valid");
            let as_run = TrackerConfig {
                annotation_rules: None,
                ..crate::daemon::tracker_config(&config)
            };
            let run_report = run_with(&simulation, as_run).unwrap();
            assert!(
                simulated.records.len() > 5,
                "{name}: too little happened to compare: {:?}",
                simulated.records
            );
            assert_eq!(simulated.records, run_report.records, "{name}");
            assert_eq!(simulated.summary, run_report.summary, "{name}");
        }
    }

    /// What the fuzz suite found (tests/fuzz.rs, simulate_script_never_panics,
    /// out of memory): a probe period past 30 years, which tokio's `sleep`
    /// cuts to 30 years, started the run early, and a 10 s readiness probe
    /// then ran for the difference before the simulated time began (for a
    /// 68-year period, 38 years of records).
    #[test]
    fn a_period_past_thirty_years_starts_the_run_on_time() {
        const THIRTY_YEARS: i64 = 86_400 * 365 * 30;
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{
                "name": "app",
                "readinessProbe": {"tcpSocket": {"port": 80}},
                "livenessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": THIRTY_YEARS + 1000},
            }]},
        });
        let duration = Some(Duration::from_secs(30));
        let simulation =
            build(&pod, Script::default(), Some(ModeArg::Authority), duration).unwrap();
        let report = run(&simulation).unwrap();
        let probes: Vec<(ProbeKind, f64)> = report
            .records
            .iter()
            .filter_map(|r| match r.event {
                Event::Probe { kind, .. } => Some((kind, r.t.as_secs_f64())),
                _ => None,
            })
            .collect();
        let at = |kind| {
            let times = probes.iter().filter(|(k, _)| *k == kind).map(|(_, t)| *t);
            times.collect::<Vec<_>>()
        };
        // The liveness worker's first tick is 30 years away (its first run
        // at admission found no container yet), so it never probes; the
        // readiness worker probes on time from the start.
        assert_eq!(at(ProbeKind::Liveness), Vec::<f64>::new());
        assert_eq!(at(ProbeKind::Readiness), [0.0, 10.0, 20.0, 30.0]);
    }
}
