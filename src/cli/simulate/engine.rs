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
//! Workload mode (`replicas` in the script) runs one such kubelet, prober
//! and tracker per replica, all in the same virtual time: each replica's
//! pod gets its name as name and UID and a `Ready` condition (every
//! container running, by the kubelet's own probes in gate mode, or ready
//! in authority mode, and the `podprobe.io/ready` gate True if the pod has
//! it); its kills and status intents go through the workload's guards
//! ([`super::workload`]); podprobe's status resync runs every
//! [`STATUS_RESYNC_PERIOD`], at which deferred restarts and held gates are
//! decided again. One pod has neither the condition nor the resync, so its
//! output is as it was.
//!
//! Everything runs on one thread in virtual time, and nothing depends on
//! randomness or hash order, so the same input gives the same events.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use tokio::time::Instant;

use super::script::{ContainerScript, Outage, ScriptedResult};
use super::simulation::Simulation;
use super::workload::{KillStep, Replica, Workload};
use crate::daemon::STATUS_RESYNC_PERIOD;
use podprobe_core::prober::floor_keeper::FloorVerdict;
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
use podprobe_core::status::conditions::{FALSE, POD_READY, TRUE};
use podprobe_core::status::gate::{FloorHold, READY_CONDITION, gate_condition};
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
    /// Workload mode: the replica (`replica-0`); `None` for a single pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// `None` for pod-level events (conditions, the floor's decisions).
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
    /// Workload mode: the replica's `Ready` condition changed (its
    /// containers run, and in gate mode the gate, if it has one, is True).
    PodReady { value: bool },
    /// WG2: a liveness restart waits for a unit of the workload's budget:
    /// `unavailable` replicas are unavailable or restarting, and
    /// `maxUnavailable` allows `allowed`. One per decision.
    RestartDeferred { unavailable: usize, allowed: usize },
    /// WG3: the readiness floor keeps the gate True: `ready` replicas are
    /// Ready without this one, and `minReady` is `floor`. One per decision.
    FloorHeld { ready: usize, floor: usize },
    /// WG3: the readiness floor let the gate go False.
    FloorReleased,
}

/// The last line: where things stand at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Always `summary`.
    pub event: &'static str,
    #[serde(serialize_with = "as_seconds")]
    pub duration: Duration,
    /// One pod: its containers (empty in workload mode, never otherwise).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub containers: BTreeMap<String, ContainerSummary>,
    /// Gate mode: the final status of the `podprobe.io/ready` condition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Workload mode: each replica's end state, by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub replicas: BTreeMap<String, ReplicaSummary>,
    /// Workload mode: what the workload went through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadSummary>,
}

/// One replica at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicaSummary {
    /// Its containers' restarts, summed.
    pub restarts: u32,
    /// Its `Ready` condition.
    pub ready: bool,
    pub containers: BTreeMap<String, ContainerSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// A workload's run, in the numbers a disruption budget cares about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WorkloadSummary {
    /// The most replicas not Ready at one time, each counted from its
    /// first Ready on (a replica still starting up is not counted).
    pub most_not_ready: usize,
    /// Replicas restarted at least once.
    pub restarted: usize,
    /// WG2: restart decisions that deferred a restart.
    pub deferred: usize,
    /// WG3: floor decisions that held a gate True.
    pub held: usize,
    /// WG3: floor decisions that let a gate go.
    pub released: usize,
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
    let pods: Vec<(Option<String>, Pod)> = replica_names(simulation.script.replicas)
        .into_iter()
        .map(|name| {
            let pod = replica_pod(&simulation.pod, name.as_deref());
            (name, pod)
        })
        .collect();
    let workload = Rc::new(RefCell::new(Workload::new(
        pods.iter().map(|(_, pod)| pod_uid(pod).to_string()),
    )));
    let (mut kubelets, receivers): (Vec<Kubelet>, Vec<ResultReceivers>) = pods
        .into_iter()
        .map(|(name, pod)| {
            let replica = name.is_some().then(|| {
                Replica::new(
                    pod_uid(&pod).to_string(),
                    workload.clone(),
                    simulation.guards,
                )
            });
            // Each replica runs on a node of its own.
            let config = TrackerConfig {
                node_budget: NodeBudget::new(),
                ..config.clone()
            };
            let log = Arc::new(EventLog::new(origin, name));
            Kubelet::new(simulation, pod, config, clock, log, replica)
        })
        .unzip();
    // W5: a worker created within one period of the prober's start sleeps a
    // random part of its period first; this prober started long before.
    // `sleep_until`: tokio cuts a `sleep` to 30 years, and a period may be
    // up to 68; the run would then start decades before `origin`.
    tokio::time::sleep_until(prober_start + lead).await;
    for kubelet in &mut kubelets {
        kubelet.add_pod().await;
    }
    // Events at exactly `duration` still happen; the millisecond after is cut.
    let end = origin + simulation.duration + Duration::from_millis(1);
    let runs = kubelets
        .iter_mut()
        .zip(receivers)
        .map(|(kubelet, receivers)| kubelet.run(receivers, end));
    futures::future::join_all(runs).await;
    let mut records: Vec<Record> = kubelets
        .iter()
        .flat_map(|kubelet| kubelet.log.take(simulation.duration))
        .collect();
    sort_records(&mut records);
    let summary = summarize(simulation, &kubelets, &records);
    SimulationReport { records, summary }
}

/// The replicas' names, zero-padded to sort in order (`replica-0`, or
/// `replica-00` from ten on); a single `None` for one pod.
fn replica_names(replicas: Option<u32>) -> Vec<Option<String>> {
    let Some(replicas) = replicas else {
        return vec![None];
    };
    let width = replicas.saturating_sub(1).to_string().len();
    (0..replicas)
        .map(|i| Some(format!("replica-{i:0width$}")))
        .collect()
}

/// A replica's pod: the manifest named for it, with its name as its UID.
fn replica_pod(manifest: &Pod, name: Option<&str>) -> Pod {
    let mut pod = manifest.clone();
    if let Some(name) = name {
        pod.metadata.name = Some(name.to_string());
        pod.metadata.uid = Some(name.to_string());
    }
    pod
}

fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
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
fn summarize(simulation: &Simulation, kubelets: &[Kubelet], records: &[Record]) -> Summary {
    let mut summary = Summary {
        event: "summary",
        duration: simulation.duration,
        containers: BTreeMap::new(),
        condition: None,
        replicas: BTreeMap::new(),
        workload: None,
    };
    for kubelet in kubelets {
        let Some(name) = kubelet.log.pod.as_deref() else {
            // One pod, one kubelet.
            let pod = pod_summary(&kubelet.containers, records.iter());
            summary.containers = pod.containers;
            summary.condition = pod.condition;
            continue;
        };
        let own = records.iter().filter(|r| r.pod.as_deref() == Some(name));
        summary
            .replicas
            .insert(name.to_string(), pod_summary(&kubelet.containers, own));
    }
    if simulation.script.replicas.is_some() {
        summary.workload = Some(workload_summary(records, &summary.replicas));
    }
    summary
}

/// One pod's end state from its `records`.
fn pod_summary<'r>(
    containers: &[SimContainer],
    records: impl Iterator<Item = &'r Record>,
) -> ReplicaSummary {
    let mut summaries: BTreeMap<String, ContainerSummary> = containers
        .iter()
        .map(|c| (c.name.clone(), ContainerSummary::default()))
        .collect();
    let (mut condition, mut ready) = (None, false);
    for record in records {
        match &record.event {
            Event::Condition { status, .. } => condition = Some(status.clone()),
            Event::PodReady { value } => ready = *value,
            _ => {}
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
    ReplicaSummary {
        restarts: summaries.values().map(|c| c.restarts).sum(),
        ready,
        containers: summaries,
        condition,
    }
}

/// The workload's numbers from the `records` of all replicas, in time
/// order, and their end states.
fn workload_summary(
    records: &[Record],
    replicas: &BTreeMap<String, ReplicaSummary>,
) -> WorkloadSummary {
    let mut summary = WorkloadSummary {
        restarted: replicas.values().filter(|r| r.restarts > 0).count(),
        ..WorkloadSummary::default()
    };
    // Replicas that have been Ready: whether they are now.
    let mut ready: BTreeMap<&str, bool> = BTreeMap::new();
    for (index, record) in records.iter().enumerate() {
        match record.event {
            Event::PodReady { value } => {
                if let Some(pod) = record.pod.as_deref()
                    && (value || ready.contains_key(pod))
                {
                    ready.insert(pod, value);
                }
            }
            Event::RestartDeferred { .. } => summary.deferred += 1,
            Event::FloorHeld { .. } => summary.held += 1,
            Event::FloorReleased => summary.released += 1,
            _ => {}
        }
        // Counted once every change of this time is in: one replica going
        // and another coming back at once are not two down.
        if records.get(index + 1).is_none_or(|next| next.t != record.t) {
            let not_ready = ready.values().filter(|ready| !**ready).count();
            summary.most_not_ready = summary.most_not_ready.max(not_ready);
        }
    }
    summary
}

/// Sorts `records` by time, then pod, with a pod's pod-level records after
/// its containers' and those by container; records of one container at
/// one time keep the order they happened in.
fn sort_records(records: &mut [Record]) {
    fn key(r: &Record) -> (Duration, Option<&str>, bool) {
        (r.t, r.pod.as_deref(), r.container.is_none())
    }
    records.sort_by(|a, b| {
        key(a)
            .cmp(&key(b))
            .then_with(|| a.container.cmp(&b.container))
    });
}

/// Collects events with their virtual time.
#[derive(Debug)]
struct EventLog {
    origin: Instant,
    /// Workload mode: the replica whose events these are.
    pod: Option<String>,
    records: Mutex<Vec<Record>>,
}

impl EventLog {
    fn new(origin: Instant, pod: Option<String>) -> Self {
        EventLog {
            origin,
            pod,
            records: Mutex::new(Vec::new()),
        }
    }

    /// Virtual time since the simulation's start.
    fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.origin)
    }

    fn record(&self, container: Option<&str>, instance: Option<u32>, event: Event) {
        let record = Record {
            t: self.elapsed(),
            pod: self.pod.clone(),
            container: container.map(str::to_string),
            instance,
            event,
        };
        self.lock().push(record);
    }

    /// The records up to `until`, in the order they happened.
    fn take(&self, until: Duration) -> Vec<Record> {
        let mut records = std::mem::take(&mut *self.lock());
        records.retain(|r| r.t <= until);
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
    /// When every probe fails, whatever the scripts say.
    outage: Option<Outage>,
    /// By runtime container ID (`app-1`).
    instances: Mutex<HashMap<String, Instance>>,
    /// By container: its readiness probe's failures in a row.
    readiness_failures: Mutex<HashMap<String, u32>>,
    log: Arc<EventLog>,
}

impl ScriptedProbes {
    fn new(simulation: &Simulation, log: Arc<EventLog>) -> Self {
        ScriptedProbes {
            scripts: simulation.script.containers.clone(),
            outage: simulation.script.outage,
            instances: Mutex::new(HashMap::new()),
            readiness_failures: Mutex::new(HashMap::new()),
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
        let down = self.outage.is_some_and(|o| o.contains(self.log.elapsed()));
        let result = if down {
            ScriptedResult::Failure
        } else {
            self.scripts
                .get(&instance.container)
                .map_or(ScriptedResult::Success, |script| {
                    script.result_at(kind, age)
                })
        };
        if kind == ProbeKind::Readiness {
            let mut failures = self
                .readiness_failures
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let run = failures.entry(instance.container.clone()).or_default();
            *run = if result == ScriptedResult::Failure {
                run.saturating_add(1)
            } else {
                0
            };
        }
        self.log.record(
            Some(&instance.container),
            Some(instance.number),
            Event::Probe { kind, result },
        );
        scripted_attempt(result)
    }

    /// The most failures in a row of any container's readiness probe so
    /// far, as the daemon's ledger counts them for a floor decision.
    fn readiness_failures(&self) -> u32 {
        let failures = self
            .readiness_failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        failures.values().copied().max().unwrap_or(0)
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
    /// The pod it runs: the manifest, or in workload mode its replica's.
    pod: Pod,
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
    /// Workload mode: its replica's share of the workload.
    replica: Option<Replica>,
    /// Workload mode: podprobe's next status resync.
    next_resync: Option<Instant>,
}

impl<'a> Kubelet<'a> {
    /// A kubelet for `pod` with its own prober, whose results come out of
    /// the receivers returned with it.
    fn new(
        simulation: &'a Simulation,
        pod: Pod,
        config: TrackerConfig,
        clock: TokioClock,
        log: Arc<EventLog>,
        replica: Option<Replica>,
    ) -> (Self, ResultReceivers) {
        let runner = Arc::new(ScriptedProbes::new(simulation, log.clone()));
        let statuses = Arc::new(SimStatuses::new(&pod));
        let (caches, receivers) = ProbeCaches::new();
        let manager = ProberManager::new(
            runner.clone(),
            statuses.clone(),
            caches,
            Arc::new(clock),
            Arc::new(NoopObserver),
        );
        let kubelet = Kubelet {
            simulation,
            pod,
            // Its pod resync falls at a fixed point of its jitter, so that
            // runs repeat.
            tracker: PodTracker::new(config, Box::new(|| 0.0)),
            manager,
            runner,
            statuses,
            clock,
            containers: SimContainer::all(simulation),
            log,
            condition: None,
            replica,
            next_resync: None,
        };
        (kubelet, receivers)
    }

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
        // Deferred restarts and held gates are decided again at the pod
        // syncs that follow, the daemon's resync among them; one pod's
        // output stays as it was without it.
        if self.replica.is_some() {
            self.next_resync = Some(now + STATUS_RESYNC_PERIOD);
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
                () = sleep_until(self.next_resync) => self.resync(),
                () = tokio::time::sleep_until(end) => return,
            }
        }
    }

    /// Workload mode: podprobe's status resync, every
    /// [`STATUS_RESYNC_PERIOD`] as in the daemon.
    fn resync(&mut self) {
        self.next_resync = self.next_resync.map(|at| at + STATUS_RESYNC_PERIOD);
        self.feed(Input::Resync(vec![self.pod()]));
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
        if let Some(replica) = &self.replica {
            // The kubelet's verdict, which the workload's guards count by.
            status.conditions = Some(vec![PodCondition {
                type_: POD_READY.to_string(),
                status: if replica.ready() { TRUE } else { FALSE }.to_string(),
                ..PodCondition::default()
            }]);
        }
        Arc::new(Pod {
            status: Some(status),
            ..self.pod.clone()
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
                    Effect::Patch(intent) => self.patch(intent),
                    Effect::Kill { kill, .. } => killed |= self.ask_kill(kill),
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
        self.report_ready();
    }

    /// The tracker's status intent, through the workload's readiness floor
    /// in workload mode (WG3).
    fn patch(&mut self, intent: Intent) {
        if self.replica.is_none() {
            return self.write_status(&intent);
        }
        let (pod, now, failures) = (self.pod(), self.now(), self.runner.readiness_failures());
        let Some(replica) = self.replica.as_mut() else {
            return;
        };
        let admitted = replica.admit(intent, &pod, failures, now);
        match admitted.verdict {
            Some(FloorVerdict::Hold(hold)) => self.log.record(
                None,
                None,
                Event::FloorHeld {
                    ready: hold.ready,
                    floor: hold.floor,
                },
            ),
            Some(FloorVerdict::Release) => self.log.record(None, None, Event::FloorReleased),
            None => {}
        }
        if let Some(intent) = admitted.submit {
            self.write_status(&intent);
        }
    }

    /// A kill the tracker asks for, through the workload's restart budget
    /// in workload mode (WG2): whether the container was killed.
    fn ask_kill(&mut self, kill: ProbeKill) -> bool {
        let now = self.now();
        let step = match self.replica.as_mut() {
            Some(replica) => replica.kill(&kill, now),
            None => KillStep::Kill,
        };
        match step {
            KillStep::Kill => {
                self.kill(kill);
                return true;
            }
            KillStep::Deferred {
                unavailable,
                allowed,
            } => {
                let instance = self
                    .containers
                    .iter()
                    .find(|c| c.name == kill.container)
                    .map(|c| c.instance);
                let event = Event::RestartDeferred {
                    unavailable,
                    allowed,
                };
                self.log.record(Some(&kill.container), instance, event);
            }
            KillStep::Waiting => {}
        }
        false
    }

    /// Workload mode: records a change of the replica's `Ready`.
    fn report_ready(&mut self) {
        let ready = self.pod_ready();
        if self.replica.as_mut().is_some_and(|r| r.set_ready(ready)) {
            self.log
                .record(None, None, Event::PodReady { value: ready });
        }
    }

    /// The kubelet's `Ready`: every container ready and every readiness
    /// gate True. In gate mode a running container is ready by the
    /// kubelet's own probes (not simulated), and `podprobe.io/ready` is
    /// podprobe's verdict.
    fn pod_ready(&self) -> bool {
        let gated = self.simulation.gate.is_some();
        let containers =
            (self.containers.iter()).all(|c| if gated { c.running } else { c.shown.1 });
        let has_gate = (self.pod.spec.iter())
            .flat_map(|spec| spec.readiness_gates.iter().flatten())
            .any(|gate| gate.condition_type == READY_CONDITION);
        containers && (!has_gate || self.condition.as_deref() == Some(TRUE))
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
            self.report_condition(&pod, annotated, &intent.views, intent.floor.as_ref());
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
        floor: Option<&FloorHold>,
    ) {
        let condition = gate_condition(pod, annotated, views, floor);
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

    /// A gated workload whose one container's probes (exec, period 1 s;
    /// readiness failing at 2, liveness at 3) carry `floor` and `budget`.
    fn guarded_pod(floor: serde_json::Value, budget: serde_json::Value) -> serde_json::Value {
        let check = |threshold: u32| json!({"exec": {"command": ["check"]}, "periodSeconds": 1, "failureThreshold": threshold});
        let (mut readiness, mut liveness) = (check(2), check(3));
        readiness["podprobe"] = json!({"readinessFloor": floor});
        liveness["podprobe"] = json!({"restartBudget": budget});
        let probes = json!({"app": {"readinessProbe": readiness, "livenessProbe": liveness}});
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "w", "annotations": {"podprobe.io/probes": probes.to_string()}},
               "spec": {"readinessGates": [{"conditionType": READY_CONDITION}],
                        "containers": [{"name": "app", "image": "app"}]}})
    }

    fn run_workload(
        pod: &serde_json::Value,
        script: serde_json::Value,
        guards: bool,
    ) -> SimulationReport {
        let script = script::parse(&script).unwrap();
        let simulation = build(pod, script, None, None).unwrap();
        run(&Simulation {
            guards,
            ..simulation
        })
        .unwrap()
    }

    /// The replicas that had an event `is`, by name.
    fn pods_with(report: &SimulationReport, is: impl Fn(&Event) -> bool) -> Vec<&str> {
        let mut pods: Vec<&str> = (report.records.iter())
            .filter(|r| is(&r.event))
            .filter_map(|r| r.pod.as_deref())
            .collect();
        pods.sort_unstable();
        pods.dedup();
        pods
    }

    /// WG2 and WG3 on the paused clock, through the real prober: four
    /// replicas whose dependency is down from 10 s to 40 s. The floor
    /// (`minReady: 2`) lets two gates go and holds the other two; the two
    /// let go are not Ready, so their restarts are free, and they leave no
    /// unit of the budget (`maxUnavailable: 1`) for the held ones, whose
    /// restarts wait. Never more than two replicas are not Ready.
    #[test]
    fn wg2_wg3_the_floor_holds_two_of_four_and_their_restarts_wait() {
        let pod = guarded_pod(
            json!({"minReady": 2}),
            json!({"maxUnavailable": 1, "maxDeferralSeconds": 600}),
        );
        let script = json!({"duration": 40, "replicas": 4, "outage": {"from": 10, "to": 40}});
        let report = run_workload(&pod, script, true);
        let held = pods_with(&report, |e| matches!(e, Event::FloorHeld { .. }));
        let released = pods_with(&report, |e| matches!(e, Event::FloorReleased));
        let killed = pods_with(&report, |e| matches!(e, Event::Killed { .. }));
        assert_eq!(held.len(), 2, "{held:?}");
        assert_eq!(released.len(), 2, "{released:?}");
        assert!(held.iter().all(|pod| !released.contains(pod)));
        assert_eq!(killed, released, "only the replicas let go restart");
        let deferred: Vec<(usize, usize)> = (report.records.iter())
            .filter_map(|r| match r.event {
                Event::RestartDeferred {
                    unavailable,
                    allowed,
                } => Some((unavailable, allowed)),
                _ => None,
            })
            .collect();
        assert!(!deferred.is_empty());
        assert!(
            deferred
                .iter()
                .all(|&(unavailable, allowed)| allowed == 1 && unavailable >= 2)
        );
        let workload = report.summary.workload.expect("workload mode");
        assert_eq!(workload.most_not_ready, 2);
        assert_eq!(workload.restarted, 2);
        assert_eq!(workload.deferred, deferred.len());
    }

    /// The same workload without its guards goes down together: every
    /// replica not Ready at once and every one restarted.
    #[test]
    fn without_guards_the_workload_goes_down_together() {
        let pod = guarded_pod(
            json!({"minReady": 2}),
            json!({"maxUnavailable": 1, "maxDeferralSeconds": 600}),
        );
        let script = json!({"duration": 40, "replicas": 4, "outage": {"from": 10, "to": 40}});
        let report = run_workload(&pod, script, false);
        let workload = report.summary.workload.expect("workload mode");
        assert_eq!(
            workload,
            WorkloadSummary {
                most_not_ready: 4,
                restarted: 4,
                ..WorkloadSummary::default()
            }
        );
    }

    /// WG2: a deferred restart goes ahead `maxDeferralSeconds` after its
    /// first deferral, decided again at a resync (every 10 s) after that.
    #[test]
    fn wg2_a_held_replica_restarts_once_its_deferral_is_over() {
        let pod = guarded_pod(
            json!({"minReady": 1}),
            json!({"maxUnavailable": 1, "maxDeferralSeconds": 15}),
        );
        let script = json!({"duration": 60, "replicas": 2, "outage": {"from": 10, "to": 60}});
        let report = run_workload(&pod, script, true);
        let held = pods_with(&report, |e| matches!(e, Event::FloorHeld { .. }));
        let [held] = held.as_slice() else {
            panic!("one replica held: {held:?}");
        };
        let of_held = |is: fn(&Event) -> bool| {
            (report.records.iter())
                .filter(|r| r.pod.as_deref() == Some(*held) && is(&r.event))
                .map(|r| r.t)
                .next()
        };
        let deferred = of_held(|e| matches!(e, Event::RestartDeferred { .. })).expect("deferred");
        let killed = of_held(|e| matches!(e, Event::Killed { .. })).expect("killed in the end");
        assert!(
            killed >= deferred + Duration::from_secs(15)
                && killed <= deferred + Duration::from_secs(15) + STATUS_RESYNC_PERIOD,
            "deferred at {deferred:?}, killed at {killed:?}"
        );
    }

    #[test]
    fn replica_names_sort_in_their_order() {
        assert_eq!(replica_names(None), [None]);
        let names: Vec<String> = replica_names(Some(3)).into_iter().flatten().collect();
        assert_eq!(names, ["replica-0", "replica-1", "replica-2"]);
        let names: Vec<String> = replica_names(Some(11)).into_iter().flatten().collect();
        assert_eq!(
            (names[0].as_str(), names[10].as_str()),
            ("replica-00", "replica-10")
        );
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names);
    }

    /// Replicas going and coming back at one time are counted once all
    /// of that time's changes are in; a replica never Ready yet is not
    /// counted.
    #[test]
    fn most_not_ready_counts_a_time_s_changes_together() {
        let at = |t: u64, pod: &str, value: bool| Record {
            t: Duration::from_secs(t),
            pod: Some(pod.to_string()),
            container: None,
            instance: None,
            event: Event::PodReady { value },
        };
        let records = [
            at(0, "a", true),
            at(0, "b", true),
            at(5, "a", false),
            at(7, "a", true),
            at(7, "b", false),
            at(9, "c", false),
        ];
        let summary = workload_summary(&records, &BTreeMap::new());
        assert_eq!(summary.most_not_ready, 1);
    }
}
