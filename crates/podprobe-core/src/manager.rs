//! The prober manager (the kubelet's `prober.Manager`): keeps one worker per
//! (pod UID, container name, probe kind) as pods come and go (W1-W3,
//! W11-W13), derives container `started`/`ready` from the results caches
//! (S1-S5, `UpdatePodStatus`), and decides which containers a liveness or
//! startup failure kills, with which grace period (K2, K3).
//!
//! Probes come from a per-pod [`PodProbes`], so the same manager serves
//! authority mode (probes from the pod spec) and gate mode (probes from the
//! `podprobe.io/probes` annotation). Either way, only containers of the pod
//! spec get workers: regular containers and restartable init containers.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;

use crate::probe::spec::budget::{OverBudget, PodBudget};
use crate::probe::spec::{UnknownProbeField, container_probe, normalize_accepted};
use crate::probe::{Handler, ProbeKind, ProbeSpec, SpecError};
use crate::probe_rates::ProbeRates;
use crate::restart_policy::RestartPolicy;
use crate::results::{CachedResult, ProbeCaches};
use crate::status::ContainerProbeView;
use crate::util::pod::{self, is_restartable_init_container};
use crate::worker::{
    self, Clock, ProbeObserver, ProbeRunner, StatusSource, Takeover, WorkerConfig, WorkerContext,
    WorkerHandle, predates_prober,
};

/// The probes of one pod, already defaulted and validated, by container
/// name and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodProbes {
    containers: HashMap<String, HashMap<ProbeKind, ProbeSpec>>,
    /// Which container instances count as predating the prober (D5, S4,
    /// S6; see [`predates_prober`]), shared with the pod's workers.
    takeover: Arc<Takeover>,
}

impl PodProbes {
    pub fn new() -> Self {
        PodProbes::default()
    }

    /// Sets `container`'s `kind` probe, replacing any previous one.
    pub fn insert(&mut self, container: impl Into<String>, kind: ProbeKind, spec: ProbeSpec) {
        self.containers
            .entry(container.into())
            .or_default()
            .insert(kind, spec);
    }

    /// `container`'s `kind` probe, if it has one.
    pub fn get(&self, container: &str, kind: ProbeKind) -> Option<&ProbeSpec> {
        self.containers.get(container)?.get(&kind)
    }

    /// The probes of `pod`'s own spec (authority mode): every probe of its
    /// regular and restartable init containers, defaulted and resolved as
    /// the kubelet takes them ([`normalize_accepted`]), and the errors of
    /// those podprobe cannot take (none, for a pod the API server admitted).
    /// A probe with a field podprobe does not implement, a value
    /// (`httpGet.protocol: HTTP2`) or one of `unknown` (V10), keeps its
    /// timing and gets a [`Handler::Unsupported`] that errors every run;
    /// it is also returned as an error, to be reported.
    ///
    /// The probes are charged to the pod's `budget` in the
    /// kubelet's order; one over it (#25) also errors every run, and is
    /// returned in the third list.
    pub fn from_spec(
        pod: &Pod,
        unknown: &[UnknownProbeField],
        budget: &mut PodBudget,
    ) -> (PodProbes, Vec<SpecError>, Vec<OverBudget>) {
        let mut probes = PodProbes::new();
        let mut errors = Vec::new();
        let mut over_budget = Vec::new();
        for container in probed_containers(pod) {
            for kind in ProbeKind::ALL {
                let Some(probe) = container_probe(container, kind) else {
                    continue;
                };
                let mut spec = match normalize_accepted(kind, probe, container) {
                    Ok(spec) => spec,
                    Err(error) => {
                        errors.push(error);
                        continue;
                    }
                };
                if let Some(field) = unknown
                    .iter()
                    .find(|u| u.container == container.name && u.kind == kind)
                {
                    spec.handler = Handler::unsupported(
                        field.field.clone(),
                        format!(
                            "unknown field: not in the Kubernetes {} API that podprobe implements",
                            crate::KUBE_PROBE_VERSION
                        ),
                    );
                }
                if let Handler::Unsupported(unsupported) = &spec.handler {
                    errors.push(unsupported.spec_error(&container.name, kind));
                } else if let Err(over) = budget.charge(&container.name, kind, &spec) {
                    spec.handler = Handler::unsupported(over.budget.field(kind), over.reason());
                    over_budget.push(over);
                }
                probes.insert(container.name.clone(), kind, spec);
            }
        }
        (probes, errors, over_budget)
    }

    pub fn is_empty(&self) -> bool {
        self.containers.values().all(HashMap::is_empty)
    }

    /// How many probes there are.
    pub fn len(&self) -> usize {
        self.containers.values().map(HashMap::len).sum()
    }

    /// Vouches for exactly the container instances (status `containerID`s)
    /// a previous podprobe reported ready: only they are treated as
    /// predating the prober, so a restart of the prober resets neither their
    /// `started` nor their `ready`, and resets every other instance (D5, S4,
    /// S6).
    pub fn vouch(&mut self, ids: impl IntoIterator<Item = String>) {
        self.takeover = Arc::new(Takeover::Vouched(ids.into_iter().collect()));
    }

    pub fn takeover(&self) -> &Arc<Takeover> {
        &self.takeover
    }

    /// What turns these probes into `new`, by (container, kind), each list
    /// sorted.
    pub fn changes_to(&self, new: &PodProbes) -> ProbeChanges {
        let mut changes = ProbeChanges::default();
        for (container, kind, spec) in self.entries() {
            match new.get(container, kind) {
                None => changes.removed.push((container.to_string(), kind)),
                Some(next) if next != spec => changes.changed.push((container.to_string(), kind)),
                Some(_) => {}
            }
        }
        for (container, kind, _) in new.entries() {
            if self.get(container, kind).is_none() {
                changes.added.push((container.to_string(), kind));
            }
        }
        for list in [
            &mut changes.added,
            &mut changes.changed,
            &mut changes.removed,
        ] {
            list.sort();
        }
        changes
    }

    fn entries(&self) -> impl Iterator<Item = (&str, ProbeKind, &ProbeSpec)> {
        self.containers.iter().flat_map(|(container, probes)| {
            probes
                .iter()
                .map(move |(kind, spec)| (container.as_str(), *kind, spec))
        })
    }
}

/// How a pod's probes changed (gate mode: an edited annotation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeChanges {
    pub added: Vec<(String, ProbeKind)>,
    pub changed: Vec<(String, ProbeKind)>,
    pub removed: Vec<(String, ProbeKind)>,
}

impl ProbeChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

/// Probes a [`ProbeChanges`] names per list; the rest are counted. A pod
/// may change hundreds of probes at once, and this text goes into a log
/// line and an Event note: 8 names of at most 253 bytes each, three lists,
/// keep it under 7 KiB (SECURITY.md promises 16 KiB per log line).
const MAX_NAMED_CHANGES: usize = 8;

/// `changed: Readiness probe of app; added: Liveness probe of app`, the
/// empty lists left out, each cut after [`MAX_NAMED_CHANGES`] probes
/// (`..., and 12 more`).
impl std::fmt::Display for ProbeChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lists = [
            ("changed", &self.changed),
            ("added", &self.added),
            ("removed", &self.removed),
        ];
        let mut first = true;
        for (what, list) in lists.into_iter().filter(|(_, list)| !list.is_empty()) {
            let mut probes: Vec<String> = list
                .iter()
                .take(MAX_NAMED_CHANGES)
                .map(|(container, kind)| format!("{kind} probe of {container}"))
                .collect();
            if list.len() > MAX_NAMED_CHANGES {
                probes.push(format!("and {} more", list.len() - MAX_NAMED_CHANGES));
            }
            let separator = if first { "" } else { "; " };
            write!(f, "{separator}{what}: {}", probes.join(", "))?;
            first = false;
        }
        Ok(())
    }
}

/// Identifies a worker (W2).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerKey {
    pub pod_uid: String,
    pub container: String,
    pub kind: ProbeKind,
}

/// What status derivation and kill decisions read from the prober.
pub trait ProbeStateView {
    /// The cached `kind` result of a container.
    fn cached(&self, kind: ProbeKind, container_id: &str) -> Option<CachedResult>;
    /// Whether the pod has a `kind` worker for `container`.
    fn has_worker(&self, container: &str, kind: ProbeKind) -> bool;
}

struct Registered {
    /// Tells this worker apart from a later one under the same key.
    id: u64,
    handle: WorkerHandle,
}

type Workers = Mutex<HashMap<WorkerKey, Registered>>;

/// Starts and stops probe workers and answers questions about them.
pub struct ProberManager<R, S> {
    context: Arc<WorkerContext<R, S>>,
    workers: Arc<Workers>,
    next_id: AtomicU64,
}

impl<R: ProbeRunner, S: StatusSource> ProberManager<R, S> {
    /// A manager whose prober starts now (the start time drives W5, D5 and S4).
    pub fn new(
        runner: R,
        statuses: S,
        caches: ProbeCaches,
        clock: Arc<dyn Clock>,
        observer: Arc<dyn ProbeObserver>,
    ) -> Self {
        let context = WorkerContext::new(runner, statuses, caches, clock, observer);
        ProberManager {
            context: Arc::new(context),
            workers: Arc::new(Mutex::new(HashMap::new())),
            next_id: AtomicU64::new(0),
        }
    }

    /// Every run waits for `rates` (the pod's and node's probe-run
    /// budgets); without, runs never wait. Before any worker starts.
    pub fn with_probe_rates(mut self, rates: Arc<ProbeRates>) -> Self {
        Arc::get_mut(&mut self.context)
            .expect("no worker shares the context before the first add_pod")
            .rates = rates;
        self
    }

    /// What the workers share: caches, runner, status source, start time.
    pub fn context(&self) -> &WorkerContext<R, S> {
        &self.context
    }

    pub fn caches(&self) -> &ProbeCaches {
        &self.context.caches
    }

    /// Creates and starts a worker for every probe in `probes` of a container
    /// of `pod` that has none yet (W1-W3). Workers keep the pod snapshot and
    /// probe they were created with; existing keys are skipped, not updated.
    /// The snapshot is `pod` itself, shared rather than copied (the
    /// kubelet's workers keep a pointer to the pod object too). Must be
    /// called within a tokio runtime.
    pub fn add_pod(&self, pod: &Arc<Pod>, probes: &PodProbes) {
        let pod_uid = pod_uid(pod);
        let mut workers = self.lock();
        for (container, kind, spec) in planned_workers(pod, probes) {
            let key = WorkerKey {
                pod_uid: pod_uid.to_string(),
                container: container.name.clone(),
                kind,
            };
            if workers.contains_key(&key) {
                tracing::trace!(
                    pod_uid,
                    container = %container.name,
                    probe = %kind,
                    "probe worker already exists"
                );
                continue;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let config = WorkerConfig::new(kind, spec.clone(), pod.clone(), container)
                .with_takeover(probes.takeover().clone());
            let on_exit = forget_worker(Arc::downgrade(&self.workers), key.clone(), id);
            let handle = worker::spawn(self.context.clone(), config, on_exit);
            workers.insert(key, Registered { id, handle });
        }
    }

    /// Stops the workers of `pod` for `probes` (container, kind) and forgets
    /// them at once, so that [`add_pod`](Self::add_pod) starts new ones under
    /// the same keys while the old ones wind down. An old worker removes its
    /// cached result as it ends (W10), possibly after its successor wrote its
    /// initial value (W4); a missing result reads as that initial value would
    /// (not ready, not started, no kill) until the successor's next write.
    pub fn stop_probes(&self, pod: &Pod, probes: &[(String, ProbeKind)]) {
        let pod_uid = pod_uid(pod);
        let mut workers = self.lock();
        for (container, kind) in probes {
            let key = WorkerKey {
                pod_uid: pod_uid.to_string(),
                container: container.clone(),
                kind: *kind,
            };
            if let Some(registered) = workers.remove(&key) {
                registered.handle.stop();
            }
        }
    }

    /// Stops the liveness and startup workers of `pod`'s containers and
    /// restartable init containers; readiness keeps running so that a
    /// terminating pod can still turn NotReady (W11).
    pub fn stop_liveness_and_startup(&self, pod: &Pod) {
        self.stop_kinds(pod, &[ProbeKind::Liveness, ProbeKind::Startup]);
    }

    /// Stops every worker of `pod`'s containers and restartable init
    /// containers (W12). Each worker removes its cached result as it ends.
    pub fn remove_pod(&self, pod: &Pod) {
        self.stop_kinds(pod, &ProbeKind::ALL);
    }

    /// Stops every worker whose pod UID is not in `desired` (W13).
    pub fn cleanup_pods(&self, desired: &HashSet<String>) {
        let workers = self.lock();
        for (key, registered) in workers.iter() {
            if !desired.contains(&key.pod_uid) {
                registered.handle.stop();
            }
        }
    }

    /// Whether a worker exists for this key. A stopped worker exists until
    /// its loop has ended.
    pub fn has_worker(&self, pod_uid: &str, container: &str, kind: ProbeKind) -> bool {
        let key = WorkerKey {
            pod_uid: pod_uid.to_string(),
            container: container.to_string(),
            kind,
        };
        self.lock().contains_key(&key)
    }

    /// Number of workers.
    pub fn worker_count(&self) -> usize {
        self.lock().len()
    }

    /// The prober's state as seen from one pod.
    pub fn view<'a>(&'a self, pod_uid: &'a str) -> impl ProbeStateView + 'a {
        ManagerView {
            manager: self,
            pod_uid,
        }
    }

    /// `UpdatePodStatus`: sets `started` and `ready` of every container
    /// status in `status` (S1-S5) and nudges the readiness workers of
    /// started containers that are not ready yet (W8). `pod` supplies the
    /// spec and its current `Ready` condition (S4).
    pub fn update_pod_status(&self, pod: &Pod, probes: &PodProbes, status: &mut PodStatus) {
        let nudges = self.update_pod_status_with(pod, probes, pod_ready_condition(pod), status);
        self.nudge_readiness(pod, nudges);
    }

    /// [`update_pod_status`](Self::update_pod_status) with S4's "pod was
    /// Ready" given by the caller (gate mode passes its own condition, which
    /// is what its readiness verdicts fed), without the nudges: it returns
    /// the containers whose readiness workers the kubelet would nudge, for
    /// [`nudge_readiness`](Self::nudge_readiness) once the caller has made
    /// the derived `started` visible to the workers (a nudged worker that
    /// still sees its container not started skips its run and waits a whole
    /// period), and only when the derivation stands for one of the kubelet's
    /// pod syncs (K6): every extra nudge is an extra probe.
    pub fn update_pod_status_with(
        &self,
        pod: &Pod,
        probes: &PodProbes,
        pod_ready: bool,
        status: &mut PodStatus,
    ) -> Vec<String> {
        let inputs = StatusInputs {
            pod,
            probes,
            prober_start: self.context.started_wall,
            pod_ready,
        };
        set_started_and_ready(&inputs, &self.view(pod_uid(pod)), status)
    }

    /// Gives every view that is not ready the last failure note of the probe
    /// holding it back: its startup probe while not started, else its
    /// readiness probe.
    pub fn add_notes(&self, views: &mut [ContainerProbeView]) {
        for view in views.iter_mut().filter(|v| !v.ready) {
            let kind = if view.started {
                ProbeKind::Readiness
            } else {
                ProbeKind::Startup
            };
            view.note = view
                .container_id
                .as_deref()
                .and_then(|id| self.caches().get(kind).note(id));
        }
    }

    /// W8: triggers a run of the readiness workers of `containers` of `pod`.
    pub fn nudge_readiness(&self, pod: &Pod, containers: Vec<String>) {
        let pod_uid = pod_uid(pod);
        let workers = self.lock();
        for container in containers {
            let key = WorkerKey {
                pod_uid: pod_uid.to_string(),
                container,
                kind: ProbeKind::Readiness,
            };
            let triggered = workers.get(&key).is_some_and(|r| r.handle.trigger());
            if !triggered {
                // The kubelet logs this at info; a not-ready container can hit
                // it on every status update, so steady state stays quiet.
                tracing::debug!(
                    pod_uid,
                    container = %key.container,
                    probe = %key.kind,
                    "failed to trigger a manual run"
                );
            }
        }
    }

    fn stop_kinds(&self, pod: &Pod, kinds: &[ProbeKind]) {
        let pod_uid = pod_uid(pod);
        let workers = self.lock();
        for container in probed_containers(pod) {
            for &kind in kinds {
                let key = WorkerKey {
                    pod_uid: pod_uid.to_string(),
                    container: container.name.clone(),
                    kind,
                };
                if let Some(registered) = workers.get(&key) {
                    registered.handle.stop();
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<WorkerKey, Registered>> {
        self.workers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a status derivation nudges the readiness workers of started,
/// not-ready containers (W8), as the kubelet's `UpdatePodStatus` does on
/// every pod sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nudge {
    /// The derivation stands for a kubelet pod sync (K6).
    Yes,
    /// A derivation the kubelet would not make (podprobe's status resync,
    /// a status-only watch event): no nudge, so no extra probe.
    No,
}

/// The worker's exit hook: drop its entry unless a newer worker took the key.
/// Holds the map weakly, so that dropping the manager drops every handle and
/// thereby stops every worker.
fn forget_worker(
    workers: Weak<Workers>,
    key: WorkerKey,
    id: u64,
) -> impl FnOnce() + Send + 'static {
    move || {
        let Some(workers) = workers.upgrade() else {
            return;
        };
        let mut workers = workers.lock().unwrap_or_else(PoisonError::into_inner);
        if workers.get(&key).is_some_and(|r| r.id == id) {
            workers.remove(&key);
        }
    }
}

struct ManagerView<'a, R, S> {
    manager: &'a ProberManager<R, S>,
    pod_uid: &'a str,
}

impl<R: ProbeRunner, S: StatusSource> ProbeStateView for ManagerView<'_, R, S> {
    fn cached(&self, kind: ProbeKind, container_id: &str) -> Option<CachedResult> {
        self.manager.caches().get(kind).get(container_id)
    }

    fn has_worker(&self, container: &str, kind: ProbeKind) -> bool {
        self.manager.has_worker(self.pod_uid, container, kind)
    }
}

fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// Containers that may have workers, in the kubelet's order (W1).
fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec
        .iter()
        .flat_map(pod::probed_containers)
        .map(|c| c.container)
}

/// The workers `add_pod` wants, in creation order: per container, startup,
/// readiness, then liveness (W1).
fn planned_workers<'a>(
    pod: &'a Pod,
    probes: &'a PodProbes,
) -> impl Iterator<Item = (&'a Container, ProbeKind, &'a ProbeSpec)> {
    probed_containers(pod).flat_map(move |container| {
        ProbeKind::ALL
            .into_iter()
            .filter_map(move |kind| Some((container, kind, probes.get(&container.name, kind)?)))
    })
}

/// Whether the pod's `Ready` condition is `True`.
pub fn pod_ready_condition(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Inputs of [`set_started_and_ready`] besides the prober's state.
#[derive(Debug, Clone, Copy)]
pub struct StatusInputs<'a> {
    /// The pod: its spec matches init container statuses (S5).
    pub pod: &'a Pod,
    /// Which containers have a readiness probe (S4).
    pub probes: &'a PodProbes,
    /// Wall-clock time the prober started (S4).
    pub prober_start: Timestamp,
    /// Whether the pod was Ready before this update (S4): the kubelet reads
    /// the pod's current `Ready` condition; see [`pod_ready_condition`].
    pub pod_ready: bool,
}

/// The pure part of `UpdatePodStatus` (S1-S5): sets `started` of every
/// container and init container status and `ready` where the kubelet does.
/// Returns the names of the containers whose readiness worker should be
/// triggered to probe now (S3).
pub fn set_started_and_ready(
    inputs: &StatusInputs<'_>,
    view: &impl ProbeStateView,
    status: &mut PodStatus,
) -> Vec<String> {
    let mut nudges = Vec::new();
    let spec = inputs.pod.spec.as_ref();
    let regular: HashSet<&str> = spec
        .into_iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.as_str()))
        .collect();
    for container in status.container_statuses.iter_mut().flatten() {
        let started = is_started(view, container);
        container.started = Some(started);
        // S2: the field keeps what the status was built with.
        if started {
            let has_spec = regular.contains(container.name.as_str());
            container.ready = readiness(inputs, view, container, has_spec, &mut nudges);
        }
    }
    let init_specs = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    for (index, container) in status
        .init_container_statuses
        .iter_mut()
        .flatten()
        .enumerate()
    {
        let started = is_started(view, container);
        container.started = Some(started);
        // Init statuses are kept in spec order; a mismatch is skipped.
        let Some(init_spec) = init_specs.get(index).filter(|c| c.name == container.name) else {
            continue;
        };
        if !is_restartable_init_container(init_spec) {
            // S5: a regular init container is ready once it exited 0.
            if exited_successfully(container) {
                container.ready = true;
            }
            continue;
        }
        if started {
            container.ready = readiness(inputs, view, container, true, &mut nudges);
        }
    }
    nudges
}

/// S1.
fn is_started(view: &impl ProbeStateView, container: &ContainerStatus) -> bool {
    if !is_running(container) {
        return false;
    }
    let id = container.container_id.as_deref().unwrap_or_default();
    if let Some(result) = view.cached(ProbeKind::Startup, id) {
        return result == CachedResult::Success;
    }
    // ChangeContainerStatusOnKubeletRestart (deprecated, off by default since
    // 1.35): a container already reported started stays started.
    if container.started == Some(true) {
        return true;
    }
    // A startup probe that has not run yet.
    !view.has_worker(&container.name, ProbeKind::Startup)
}

/// S3 and S4, for a started container.
fn readiness(
    inputs: &StatusInputs<'_>,
    view: &impl ProbeStateView,
    container: &ContainerStatus,
    has_spec: bool,
    nudges: &mut Vec<String>,
) -> bool {
    if !is_running(container) {
        return false;
    }
    let id = container.container_id.as_deref().unwrap_or_default();
    let cached = view.cached(ProbeKind::Readiness, id);
    if cached == Some(CachedResult::Success) {
        return true;
    }
    let has_worker = view.has_worker(&container.name, ProbeKind::Readiness);
    if has_worker {
        nudges.push(container.name.clone());
    }
    let mut ready = !has_worker;
    // ChangeContainerStatusOnKubeletRestart (deprecated, off by default since
    // 1.35): S4, keep a container that predates the prober ready across a
    // restart of the prober unless the pod was not Ready (or, beyond the
    // kubelet, the instance itself was vouched for as ready).
    let takeover = inputs.probes.takeover();
    if has_spec && predates_prober(container, inputs.prober_start, takeover) {
        if !ready && cached.is_none() {
            ready = true;
        }
        let has_readiness_probe = inputs
            .probes
            .get(&container.name, ProbeKind::Readiness)
            .is_some();
        let vouched_ready = matches!(**takeover, Takeover::Vouched(_));
        if has_readiness_probe && !inputs.pod_ready && !vouched_ready {
            ready = false;
        }
    }
    ready
}

fn is_running(container: &ContainerStatus) -> bool {
    container
        .state
        .as_ref()
        .is_some_and(|s| s.running.is_some())
}

fn exited_successfully(container: &ContainerStatus) -> bool {
    let terminated = container.state.as_ref().and_then(|s| s.terminated.as_ref());
    terminated.is_some_and(|t| t.exit_code == 0)
}

/// The kubelet's minimum grace period for stopping a container
/// (`minimumGracePeriodInSeconds`).
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;

/// A running container that a probe failure kills (K2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeKill {
    pub container: String,
    /// Container ID as in the pod status (`containerd://abc`).
    pub container_id: String,
    /// `Liveness` or `Startup`.
    pub kind: ProbeKind,
    /// Message of the Normal `Killing` event.
    pub message: String,
    /// The kubelet's grace period for the kill (K3), before a preStop hook
    /// takes its time out of it; `StopContainer` gets
    /// [`grace_left`](crate::lifecycle::grace_left) of it (K7).
    pub grace_period_seconds: i64,
}

/// Carries out the kills [`probe_kills`] decides (K2). The daemon's sync
/// loop asks again on every pod sync while the container runs with the
/// failure cached, so an implementation returns at once and stops each
/// container instance once. `kill_container::ContainerKiller` stops it
/// through the runtime; the loop's unit tests record what it is asked.
pub trait Killer {
    /// Starts stopping `kill`'s container of `pod` unless it is already
    /// being stopped; never waits.
    fn kill(&self, pod: &Pod, kill: ProbeKill);

    /// Forgets every stopped container ID but those in `listed` (the IDs
    /// pod statuses still name).
    fn retain(&self, listed: &HashSet<String>);
}

/// Which running containers of `pod` the kubelet's pod sync would kill
/// because of a cached liveness or startup `Failure` (K2), in spec order.
///
/// Regular containers: liveness first, then startup; the message gets
/// `, will be restarted` when the container would be restarted. Restartable
/// init containers (the init-container path): startup first, and liveness
/// only once startup succeeded (or there is no startup probe); messages say
/// `Init container` and never carry the suffix.
pub fn probe_kills(
    pod: &Pod,
    probes: &PodProbes,
    status: &PodStatus,
    view: &impl ProbeStateView,
) -> Vec<ProbeKill> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let find = |statuses: Option<&Vec<ContainerStatus>>, name: &str| {
        let status = statuses?.iter().find(|c| c.name == name)?;
        let id = status.container_id.as_deref().filter(|id| !id.is_empty())?;
        is_running(status).then(|| id.to_string())
    };
    let mut kills = Vec::new();
    for container in &spec.containers {
        let Some(id) = find(status.container_statuses.as_ref(), &container.name) else {
            continue;
        };
        let failed = |kind| view.cached(kind, &id) == Some(CachedResult::Failure);
        let Some(kind) = [ProbeKind::Liveness, ProbeKind::Startup]
            .into_iter()
            .find(|&k| failed(k))
        else {
            continue;
        };
        let mut message = format!(
            "Container {} failed {} probe",
            container.name,
            kill_reason(kind)
        );
        // The kubelet restarts a container it kills unless its policy is
        // `Never`, whatever the exit code.
        if RestartPolicy::of(container, spec.restart_policy.as_deref()) != RestartPolicy::Never {
            message.push_str(", will be restarted");
        }
        kills.push(probe_kill(pod, probes, container, id, kind, message));
    }
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_restartable_init_container(c));
    for container in sidecars {
        let Some(id) = find(status.init_container_statuses.as_ref(), &container.name) else {
            continue;
        };
        let Some(kind) = sidecar_kill_kind(probes, view, &container.name, &id) else {
            continue;
        };
        let message = format!(
            "Init container {} failed {} probe",
            container.name,
            kill_reason(kind)
        );
        kills.push(probe_kill(pod, probes, container, id, kind, message));
    }
    kills
}

/// The init-container path's order: a startup probe must have succeeded
/// before liveness is looked at.
fn sidecar_kill_kind(
    probes: &PodProbes,
    view: &impl ProbeStateView,
    name: &str,
    id: &str,
) -> Option<ProbeKind> {
    if probes.get(name, ProbeKind::Startup).is_some() {
        match view.cached(ProbeKind::Startup, id)? {
            CachedResult::Success => {}
            CachedResult::Failure => return Some(ProbeKind::Startup),
            CachedResult::Unknown => return None,
        }
    }
    let has_liveness = probes.get(name, ProbeKind::Liveness).is_some();
    let failed = view.cached(ProbeKind::Liveness, id) == Some(CachedResult::Failure);
    (has_liveness && failed).then_some(ProbeKind::Liveness)
}

fn probe_kill(
    pod: &Pod,
    probes: &PodProbes,
    container: &Container,
    container_id: String,
    kind: ProbeKind,
    message: String,
) -> ProbeKill {
    let probe_grace = probes
        .get(&container.name, kind)
        .and_then(|spec| spec.termination_grace_period_seconds);
    ProbeKill {
        container: container.name.clone(),
        container_id,
        kind,
        message,
        grace_period_seconds: kill_grace_period(pod, probe_grace),
    }
}

pub fn kill_reason(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Liveness => "liveness",
        ProbeKind::Readiness => "readiness",
        ProbeKind::Startup => "startup",
    }
}

/// K3: the grace period for killing a container after a probe failure, as
/// the kubelet's `setTerminationGracePeriod` computes it: the pod's
/// `deletionGracePeriodSeconds` if set; else, when the pod spec has
/// `terminationGracePeriodSeconds`, the failing probe's own
/// `terminationGracePeriodSeconds` (`probe_grace`) or failing that the
/// pod's; else [`MINIMUM_GRACE_PERIOD_SECONDS`]. A preStop hook runs only if
/// this is positive and takes its time out of it; `StopContainer` never gets
/// less than the minimum (K7, [`crate::lifecycle::grace_left`]).
pub fn kill_grace_period(pod: &Pod, probe_grace: Option<i64>) -> i64 {
    let pod_grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds);
    match (pod.metadata.deletion_grace_period_seconds, pod_grace) {
        (Some(deletion), _) => deletion,
        (None, Some(pod_grace)) => probe_grace.unwrap_or(pod_grace),
        (None, None) => MINIMUM_GRACE_PERIOD_SECONDS,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::PodCondition;
    use tokio::time::Instant;

    use super::*;
    use crate::probe::ProbeResult;
    use crate::testing::*;
    use crate::worker::TokioClock;

    type Manager = ProberManager<Arc<ScriptedRunner>, Arc<FakeStatuses>>;

    impl<R: ProbeRunner, S: StatusSource> ProberManager<R, S> {
        /// Keys of all workers, sorted.
        fn worker_keys(&self) -> Vec<WorkerKey> {
            let mut keys: Vec<_> = self.lock().keys().cloned().collect();
            keys.sort();
            keys
        }
    }

    struct Rig {
        manager: Manager,
        runner: Arc<ScriptedRunner>,
        statuses: Arc<FakeStatuses>,
    }

    fn rig(runner: Arc<ScriptedRunner>) -> Rig {
        let statuses = FakeStatuses::new();
        let (caches, _receivers) = ProbeCaches::new();
        let manager = ProberManager::new(
            runner.clone(),
            statuses.clone(),
            caches,
            Arc::new(TokioClock::new(epoch())),
            Arc::new(worker::NoopObserver),
        );
        Rig {
            manager,
            runner,
            statuses,
        }
    }

    fn key(uid: &str, container: &str, kind: ProbeKind) -> WorkerKey {
        WorkerKey {
            pod_uid: uid.to_string(),
            container: container.to_string(),
            kind,
        }
    }

    fn probes(entries: &[(&str, ProbeKind)]) -> PodProbes {
        let mut probes = PodProbes::new();
        for &(container, kind) in entries {
            probes.insert(container, kind, probe_spec(10, 0, 1, 3));
        }
        probes
    }

    fn all_probes(containers: &[&str]) -> PodProbes {
        let entries: Vec<_> = containers
            .iter()
            .flat_map(|&c| ProbeKind::ALL.map(|kind| (c, kind)))
            .collect();
        probes(&entries)
    }

    /// Long enough for any worker to get past its start jitter and notice a
    /// stop signal.
    async fn settle() {
        tokio::time::sleep(Duration::from_secs(11)).await;
    }

    #[test]
    fn w1_workers_for_containers_then_restartable_init_containers() {
        let pod = pod(
            "uid-1",
            vec![container("a"), container("b"), container("quiet")],
            vec![container("setup"), sidecar("side")],
        );
        let mut probes = all_probes(&["a", "side", "setup", "ghost"]);
        probes.insert("b", ProbeKind::Liveness, probe_spec(10, 0, 1, 3));
        let planned: Vec<_> = planned_workers(&pod, &probes)
            .map(|(c, kind, _)| (c.name.as_str(), kind))
            .collect();
        use ProbeKind::{Liveness, Readiness, Startup};
        assert_eq!(
            planned,
            vec![
                ("a", Startup),
                ("a", Readiness),
                ("a", Liveness),
                ("b", Liveness),
                ("side", Startup),
                ("side", Readiness),
                ("side", Liveness),
            ],
            "regular init containers and unknown names get no workers"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn w2_w3_add_pod_is_idempotent() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        let pod = pod("uid-1", vec![container("a"), container("b")], vec![]);
        let probes = all_probes(&["a", "b"]);
        rig.manager.add_pod(&Arc::new(pod.clone()), &probes);
        assert_eq!(rig.manager.worker_count(), 6);
        rig.manager.add_pod(&Arc::new(pod.clone()), &probes);
        rig.manager.add_pod(&Arc::new(pod.clone()), &probes);
        assert_eq!(rig.manager.worker_count(), 6);
        assert!(rig.manager.has_worker("uid-1", "b", ProbeKind::Startup));
        assert!(!rig.manager.has_worker("uid-2", "b", ProbeKind::Startup));
    }

    #[tokio::test(start_paused = true)]
    async fn w3_add_pod_skips_only_existing_keys_and_keeps_old_specs() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        let pod = pod("uid-1", vec![container("a"), container("b")], vec![]);
        rig.manager.add_pod(
            &Arc::new(pod.clone()),
            &probes(&[("a", ProbeKind::Readiness)]),
        );
        let first_id = rig.manager.lock()[&key("uid-1", "a", ProbeKind::Readiness)].id;
        let mut more = probes(&[("a", ProbeKind::Liveness), ("b", ProbeKind::Readiness)]);
        more.insert("a", ProbeKind::Readiness, probe_spec(1, 0, 1, 1));
        rig.manager.add_pod(&Arc::new(pod.clone()), &more);
        assert_eq!(
            rig.manager.worker_keys(),
            vec![
                key("uid-1", "a", ProbeKind::Liveness),
                key("uid-1", "a", ProbeKind::Readiness),
                key("uid-1", "b", ProbeKind::Readiness),
            ]
        );
        let id = rig.manager.lock()[&key("uid-1", "a", ProbeKind::Readiness)].id;
        assert_eq!(id, first_id, "the existing worker is not replaced");
    }

    #[test]
    fn changes_to_sorts_probes_into_added_changed_and_removed() {
        use ProbeKind::{Liveness, Readiness, Startup};
        let old = probes(&[("a", Readiness), ("a", Liveness), ("b", Startup)]);
        let mut new = probes(&[("a", Readiness), ("b", Readiness), ("a", Startup)]);
        new.insert("a", Liveness, probe_spec(1, 0, 1, 3));
        let changes = old.changes_to(&new);
        assert_eq!(
            changes,
            ProbeChanges {
                added: vec![("a".into(), Startup), ("b".into(), Readiness)],
                changed: vec![("a".into(), Liveness)],
                removed: vec![("b".into(), Startup)],
            }
        );
        assert_eq!(
            changes.to_string(),
            "changed: Liveness probe of a; added: Startup probe of a, Readiness probe of b; \
             removed: Startup probe of b"
        );
        assert!(old.changes_to(&old.clone()).is_empty());
        assert_eq!(
            old.changes_to(&PodProbes::new()).to_string(),
            "removed: Liveness probe of a, Readiness probe of a, Startup probe of b"
        );
    }

    #[test]
    fn changes_name_at_most_eight_probes_per_list() {
        let name = "c".repeat(253);
        let many = |n: usize| -> Vec<(String, ProbeKind)> {
            (0..n)
                .map(|i| (format!("{name}{i}"), ProbeKind::Readiness))
                .collect()
        };
        let changes = ProbeChanges {
            added: many(1000),
            changed: many(9),
            removed: many(8),
        };
        let text = changes.to_string();
        assert!(text.len() < 7 * 1024, "{} bytes", text.len());
        assert!(text.contains(", and 992 more; "), "{text}");
        assert!(text.contains(", and 1 more; "), "{text}");
        assert!(
            !text.ends_with("more"),
            "the last list has exactly 8: {text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stop_probes_frees_the_keys_for_new_workers_at_once() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        let pod = pod("uid-1", vec![container("a")], vec![]);
        let old = probes(&[("a", ProbeKind::Readiness), ("a", ProbeKind::Liveness)]);
        rig.manager.add_pod(&Arc::new(pod.clone()), &old);
        let ids = |kind| rig.manager.lock()[&key("uid-1", "a", kind)].id;
        let (readiness, liveness) = (ids(ProbeKind::Readiness), ids(ProbeKind::Liveness));
        rig.manager
            .stop_probes(&pod, &[("a".to_string(), ProbeKind::Readiness)]);
        assert!(!rig.manager.has_worker("uid-1", "a", ProbeKind::Readiness));
        let mut new = probes(&[("a", ProbeKind::Liveness)]);
        new.insert("a", ProbeKind::Readiness, probe_spec(1, 0, 1, 1));
        rig.manager.add_pod(&Arc::new(pod.clone()), &new);
        assert_ne!(ids(ProbeKind::Readiness), readiness, "a new worker");
        assert_eq!(ids(ProbeKind::Liveness), liveness, "the kept worker");
        // The stopped worker's exit leaves its successor registered.
        settle().await;
        assert_eq!(rig.manager.worker_count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn w11_stop_liveness_and_startup_keeps_readiness() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        let pod = pod("uid-1", vec![container("app")], vec![sidecar("side")]);
        rig.manager
            .add_pod(&Arc::new(pod.clone()), &all_probes(&["app", "side"]));
        assert_eq!(rig.manager.worker_count(), 6);
        rig.manager.stop_liveness_and_startup(&pod);
        settle().await;
        assert_eq!(
            rig.manager.worker_keys(),
            vec![
                key("uid-1", "app", ProbeKind::Readiness),
                key("uid-1", "side", ProbeKind::Readiness),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn w12_remove_pod_stops_all_its_workers() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        let one = pod("uid-1", vec![container("app")], vec![sidecar("side")]);
        let two = pod("uid-2", vec![container("app")], vec![]);
        rig.manager
            .add_pod(&Arc::new(one.clone()), &all_probes(&["app", "side"]));
        rig.manager
            .add_pod(&Arc::new(two.clone()), &all_probes(&["app"]));
        rig.manager.remove_pod(&one);
        rig.manager
            .remove_pod(&pod("uid-3", vec![container("app")], vec![]));
        settle().await;
        assert_eq!(rig.manager.worker_count(), 3);
        assert!(
            rig.manager
                .worker_keys()
                .iter()
                .all(|k| k.pod_uid == "uid-2")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn w12_remove_pod_clears_cached_results() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        let pod = pod("uid-1", vec![container("app")], vec![]);
        rig.statuses.set(
            "uid-1",
            pod_status(
                vec![running("app", "containerd://c1", epoch(), Some(true))],
                vec![],
            ),
        );
        rig.manager.add_pod(
            &Arc::new(pod.clone()),
            &probes(&[("app", ProbeKind::Readiness)]),
        );
        settle().await;
        assert_eq!(
            rig.manager.caches().readiness.get("containerd://c1"),
            Some(CachedResult::Success)
        );
        rig.manager.remove_pod(&pod);
        settle().await;
        assert_eq!(rig.manager.caches().readiness.get("containerd://c1"), None);
        assert_eq!(rig.manager.worker_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn w13_cleanup_pods_keeps_desired_pods() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        for uid in ["uid-1", "uid-2", "uid-3"] {
            rig.manager.add_pod(
                &Arc::new(pod(uid, vec![container("app")], vec![])),
                &all_probes(&["app"]),
            );
        }
        let desired = HashSet::from(["uid-2".to_string()]);
        for _ in 0..10 {
            rig.manager.cleanup_pods(&desired);
        }
        settle().await;
        assert_eq!(rig.manager.worker_count(), 3);
        assert!(
            rig.manager
                .worker_keys()
                .iter()
                .all(|k| k.pod_uid == "uid-2")
        );
        rig.manager.cleanup_pods(&HashSet::new());
        settle().await;
        assert_eq!(rig.manager.worker_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn w10_worker_that_ends_by_itself_leaves_the_map() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        let mut status = pod_status(vec![], vec![]);
        status.phase = Some("Failed".to_string());
        rig.statuses.set("uid-1", status);
        rig.manager.add_pod(
            &Arc::new(pod("uid-1", vec![container("app")], vec![])),
            &all_probes(&["app"]),
        );
        settle().await;
        assert_eq!(rig.manager.worker_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn w9_dropping_the_manager_stops_its_workers() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        rig.statuses.set(
            "uid-1",
            pod_status(
                vec![running("app", "containerd://c1", epoch(), Some(true))],
                vec![],
            ),
        );
        rig.manager.add_pod(
            &Arc::new(pod("uid-1", vec![container("app")], vec![])),
            &probes(&[("app", ProbeKind::Liveness)]),
        );
        settle().await;
        let before = rig.runner.calls().len();
        let runner = rig.runner.clone();
        drop(rig);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(runner.calls().len(), before);
    }

    #[tokio::test(start_paused = true)]
    async fn s3_update_pod_status_triggers_unready_readiness_worker() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Failure));
        let pod = pod("uid-1", vec![container("app")], vec![]);
        let probes = probes(&[("app", ProbeKind::Readiness)]);
        let status = pod_status(
            vec![running("app", "containerd://c1", epoch(), Some(true))],
            vec![],
        );
        rig.statuses.set("uid-1", status.clone());
        rig.manager.add_pod(&Arc::new(pod.clone()), &probes);
        settle().await;
        let calls = rig.runner.calls().len();
        let mut generated = status;
        rig.manager.update_pod_status(&pod, &probes, &mut generated);
        assert!(!generated.container_statuses.as_ref().unwrap()[0].ready);
        let now = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let new_calls = rig.runner.calls();
        assert_eq!(new_calls.len(), calls + 1, "a manual run happened");
        assert_eq!(new_calls.last().unwrap().at, now);
    }

    // --- S1-S5 on the pure function ---

    #[derive(Default)]
    struct FakeView {
        cached: HashMap<(ProbeKind, String), CachedResult>,
        workers: HashSet<(String, ProbeKind)>,
    }

    impl FakeView {
        fn with_worker(mut self, container: &str, kind: ProbeKind) -> Self {
            self.workers.insert((container.to_string(), kind));
            self
        }

        fn with_result(mut self, kind: ProbeKind, id: &str, result: CachedResult) -> Self {
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

    const C1: &str = "containerd://c1";

    /// Runs the derivation for one regular container "app" whose status is
    /// `container`; the prober started at `epoch()`.
    fn derive(
        view: &FakeView,
        container: ContainerStatus,
        probes: &PodProbes,
        pod_ready: bool,
    ) -> (ContainerStatus, Vec<String>) {
        let pod = pod("uid-1", vec![self::container("app")], vec![]);
        let inputs = StatusInputs {
            pod: &pod,
            probes,
            prober_start: epoch(),
            pod_ready,
        };
        let mut status = pod_status(vec![container], vec![]);
        let nudges = set_started_and_ready(&inputs, view, &mut status);
        (status.container_statuses.unwrap().remove(0), nudges)
    }

    fn fresh(started: Option<bool>) -> ContainerStatus {
        running("app", C1, at(100), started)
    }

    #[test]
    fn s1_started_derivation() {
        use CachedResult::{Failure, Success, Unknown};
        let none = PodProbes::new();
        let cases = [
            (
                "not running",
                FakeView::default(),
                waiting("app", C1),
                false,
            ),
            (
                "startup success",
                FakeView::default().with_result(ProbeKind::Startup, C1, Success),
                fresh(None),
                true,
            ),
            (
                "startup unknown beats started flag",
                FakeView::default().with_result(ProbeKind::Startup, C1, Unknown),
                fresh(Some(true)),
                false,
            ),
            (
                "startup failure",
                FakeView::default().with_result(ProbeKind::Startup, C1, Failure),
                fresh(None),
                false,
            ),
            (
                "already started, no result",
                FakeView::default().with_worker("app", ProbeKind::Startup),
                fresh(Some(true)),
                true,
            ),
            (
                "startup worker pending",
                FakeView::default().with_worker("app", ProbeKind::Startup),
                fresh(Some(false)),
                false,
            ),
            ("no startup probe", FakeView::default(), fresh(None), true),
        ];
        for (name, view, container, want) in cases {
            let (status, _) = derive(&view, container, &none, true);
            assert_eq!(status.started, Some(want), "{name}");
        }
    }

    #[test]
    fn s2_ready_untouched_until_started() {
        let view = FakeView::default()
            .with_worker("app", ProbeKind::Startup)
            .with_worker("app", ProbeKind::Readiness)
            .with_result(ProbeKind::Readiness, C1, CachedResult::Success);
        let (status, nudges) = derive(&view, fresh(None), &PodProbes::new(), true);
        assert_eq!(status.started, Some(false));
        assert!(!status.ready);
        assert!(nudges.is_empty(), "no nudge before the container started");
    }

    #[test]
    fn s3_ready_derivation_and_nudges() {
        let probes = probes(&[("app", ProbeKind::Readiness)]);
        let success = FakeView::default()
            .with_worker("app", ProbeKind::Readiness)
            .with_result(ProbeKind::Readiness, C1, CachedResult::Success);
        assert_eq!(
            derive(&success, fresh(None), &probes, true),
            (
                ContainerStatus {
                    started: Some(true),
                    ready: true,
                    ..fresh(None)
                },
                vec![]
            )
        );

        let failing = FakeView::default()
            .with_worker("app", ProbeKind::Readiness)
            .with_result(ProbeKind::Readiness, C1, CachedResult::Failure);
        let (status, nudges) = derive(&failing, fresh(None), &probes, true);
        assert!(!status.ready);
        assert_eq!(nudges, vec!["app".to_string()]);

        let pending = FakeView::default().with_worker("app", ProbeKind::Readiness);
        let (status, nudges) = derive(&pending, fresh(None), &probes, true);
        assert!(!status.ready);
        assert_eq!(nudges, vec!["app".to_string()]);

        let (status, nudges) = derive(&FakeView::default(), fresh(None), &PodProbes::new(), false);
        assert!(status.ready, "no readiness probe: ready when started");
        assert!(nudges.is_empty());
    }

    #[test]
    fn s4_container_older_than_prober_keeps_ready() {
        let probes = probes(&[("app", ProbeKind::Readiness)]);
        let old = || running("app", C1, at(-11), Some(true));
        let pending = FakeView::default().with_worker("app", ProbeKind::Readiness);
        let (status, nudges) = derive(&pending, old(), &probes, true);
        assert!(
            status.ready,
            "pod was Ready: stays ready until a result is cached"
        );
        assert_eq!(
            nudges,
            vec!["app".to_string()],
            "the worker is still nudged"
        );

        let (status, _) = derive(&pending, old(), &probes, false);
        assert!(
            !status.ready,
            "pod was not Ready: a readiness probe decides"
        );

        let failed = pending.with_result(ProbeKind::Readiness, C1, CachedResult::Failure);
        let (status, _) = derive(&failed, old(), &probes, true);
        assert!(!status.ready, "a cached result wins");

        let recent = FakeView::default().with_worker("app", ProbeKind::Readiness);
        let (status, _) = derive(
            &recent,
            running("app", C1, at(-9), Some(true)),
            &probes,
            true,
        );
        assert!(
            !status.ready,
            "started within the grace period: no adjustment"
        );
    }

    #[test]
    fn s5_init_containers() {
        let pod = pod(
            "uid-1",
            vec![container("app")],
            vec![container("setup"), sidecar("side"), container("late")],
        );
        let probes = probes(&[("side", ProbeKind::Readiness), ("side", ProbeKind::Startup)]);
        let inputs = StatusInputs {
            pod: &pod,
            probes: &probes,
            prober_start: epoch(),
            pod_ready: true,
        };
        let view = FakeView::default()
            .with_worker("side", ProbeKind::Readiness)
            .with_worker("side", ProbeKind::Startup)
            .with_result(
                ProbeKind::Startup,
                "containerd://side",
                CachedResult::Success,
            );
        let mut status = pod_status(
            vec![],
            vec![
                terminated("setup", "containerd://setup", 0),
                running("side", "containerd://side", at(100), None),
                // Out of spec order: skipped after `started`.
                terminated("other", "containerd://other", 0),
            ],
        );
        let nudges = set_started_and_ready(&inputs, &view, &mut status);
        let init = status.init_container_statuses.unwrap();
        assert_eq!(
            (init[0].started, init[0].ready),
            (Some(false), true),
            "exited 0"
        );
        assert_eq!(
            (init[1].started, init[1].ready),
            (Some(true), false),
            "sidecar: readiness pending"
        );
        assert_eq!(
            (init[2].started, init[2].ready),
            (Some(false), false),
            "mismatched entry"
        );
        assert_eq!(nudges, vec!["side".to_string()]);

        let mut failed = pod_status(vec![], vec![terminated("setup", "containerd://setup", 1)]);
        set_started_and_ready(&inputs, &view, &mut failed);
        assert!(!failed.init_container_statuses.unwrap()[0].ready);
    }

    #[test]
    fn pod_ready_condition_reads_ready_true() {
        let mut pod = pod("uid-1", vec![], vec![]);
        assert!(!pod_ready_condition(&pod));
        let condition = |type_: &str, status: &str| PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            ..PodCondition::default()
        };
        pod.status = Some(PodStatus {
            conditions: Some(vec![
                condition("ContainersReady", "True"),
                condition("Ready", "False"),
            ]),
            ..PodStatus::default()
        });
        assert!(!pod_ready_condition(&pod));
        pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].status = "True".to_string();
        assert!(pod_ready_condition(&pod));
    }

    // --- K2, K3 ---

    fn kill_pod(restart_policy: Option<&str>) -> Pod {
        let mut pod = pod(
            "uid-1",
            vec![container("app"), container("other")],
            vec![sidecar("side")],
        );
        let spec = pod.spec.as_mut().unwrap();
        spec.restart_policy = restart_policy.map(str::to_string);
        spec.termination_grace_period_seconds = Some(30);
        pod
    }

    fn kill_status() -> PodStatus {
        pod_status(
            vec![
                running("app", C1, at(100), Some(true)),
                running("other", "containerd://c2", at(100), Some(true)),
            ],
            vec![running("side", "containerd://s", at(100), Some(true))],
        )
    }

    #[test]
    fn k2_liveness_failure_kills_with_restart_message() {
        let view = FakeView::default()
            .with_result(ProbeKind::Liveness, C1, CachedResult::Failure)
            .with_result(ProbeKind::Startup, C1, CachedResult::Failure)
            .with_result(
                ProbeKind::Liveness,
                "containerd://c2",
                CachedResult::Success,
            );
        let kills = probe_kills(&kill_pod(None), &PodProbes::new(), &kill_status(), &view);
        assert_eq!(
            kills,
            vec![ProbeKill {
                container: "app".to_string(),
                container_id: C1.to_string(),
                kind: ProbeKind::Liveness,
                message: "Container app failed liveness probe, will be restarted".to_string(),
                grace_period_seconds: 30,
            }]
        );
    }

    #[test]
    fn k2_startup_failure_and_never_policy() {
        let view = FakeView::default().with_result(ProbeKind::Startup, C1, CachedResult::Failure);
        let kills = probe_kills(
            &kill_pod(Some("Never")),
            &PodProbes::new(),
            &kill_status(),
            &view,
        );
        assert_eq!(kills.len(), 1);
        assert_eq!(kills[0].kind, ProbeKind::Startup);
        assert_eq!(kills[0].message, "Container app failed startup probe");
    }

    #[test]
    fn k2_stopped_container_is_not_killed() {
        let view = FakeView::default().with_result(ProbeKind::Liveness, C1, CachedResult::Failure);
        let status = pod_status(vec![terminated("app", C1, 1)], vec![]);
        assert!(probe_kills(&kill_pod(None), &PodProbes::new(), &status, &view).is_empty());
    }

    #[test]
    fn k2_restartable_init_container_checks_startup_first() {
        let sidecar_probes = probes(&[("side", ProbeKind::Startup), ("side", ProbeKind::Liveness)]);
        let side = "containerd://s";
        let liveness_failed =
            FakeView::default().with_result(ProbeKind::Liveness, side, CachedResult::Failure);
        assert!(
            probe_kills(
                &kill_pod(None),
                &sidecar_probes,
                &kill_status(),
                &liveness_failed
            )
            .is_empty(),
            "no startup result yet: liveness is not looked at"
        );
        let started = liveness_failed.with_result(ProbeKind::Startup, side, CachedResult::Success);
        let kills = probe_kills(&kill_pod(None), &sidecar_probes, &kill_status(), &started);
        assert_eq!(kills.len(), 1);
        assert_eq!(
            kills[0].message,
            "Init container side failed liveness probe"
        );
        let startup_failed =
            FakeView::default().with_result(ProbeKind::Startup, side, CachedResult::Failure);
        let kills = probe_kills(
            &kill_pod(None),
            &sidecar_probes,
            &kill_status(),
            &startup_failed,
        );
        assert_eq!(kills[0].message, "Init container side failed startup probe");
        assert_eq!(kills[0].kind, ProbeKind::Startup);
    }

    #[test]
    fn k3_grace_period_rules() {
        let mut pod = kill_pod(None);
        assert_eq!(
            kill_grace_period(&pod, None),
            30,
            "pod terminationGracePeriodSeconds"
        );
        assert_eq!(
            kill_grace_period(&pod, Some(5)),
            5,
            "probe-level value wins"
        );
        assert_eq!(
            kill_grace_period(&pod, Some(60)),
            60,
            "even when larger than the pod's"
        );
        assert_eq!(
            kill_grace_period(&pod, Some(1)),
            1,
            "not floored before the preStop hook (K7 floors what is left)"
        );
        pod.metadata.deletion_grace_period_seconds = Some(7);
        assert_eq!(
            kill_grace_period(&pod, Some(5)),
            7,
            "deletion grace period first"
        );
        pod.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(
            kill_grace_period(&pod, None),
            0,
            "no time for a preStop hook"
        );
        pod.metadata.deletion_grace_period_seconds = None;
        pod.spec.as_mut().unwrap().termination_grace_period_seconds = None;
        assert_eq!(
            kill_grace_period(&pod, Some(20)),
            2,
            "probe value needs a pod value"
        );
    }

    #[test]
    fn k3_probe_kill_uses_the_failing_probes_grace_period() {
        let mut probes = PodProbes::new();
        let mut liveness = probe_spec(10, 0, 1, 3);
        liveness.termination_grace_period_seconds = Some(9);
        probes.insert("app", ProbeKind::Liveness, liveness);
        let view = FakeView::default().with_result(ProbeKind::Liveness, C1, CachedResult::Failure);
        let kills = probe_kills(&kill_pod(None), &probes, &kill_status(), &view);
        assert_eq!(kills[0].grace_period_seconds, 9);
    }
}
