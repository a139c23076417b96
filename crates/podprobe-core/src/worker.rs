//! The per-probe worker: one periodic loop for one (pod UID, container name,
//! probe kind), with the kubelet's state machine (`doProbe`, rules D1-D19 of
//! `spec/prober.md`) and its scheduling (W5-W10, W14).
//!
//! The decision logic is pure: [`WorkerState::before_probe`] turns the pod
//! status into cache writes and an [`Action`], and
//! [`WorkerState::after_probe`] applies thresholds to a probe's result. The
//! async loop around them ([`spawn`]) only reads the status source, runs the
//! probe, applies cache writes and waits for the ticker, a manual trigger or
//! stop. Time comes from tokio (scheduling) and from an injectable [`Clock`]
//! (wall-clock comparisons with `startedAt`), so both can be controlled in
//! tests with a paused runtime.
//!
//! Every worker is one tokio task; nothing per worker costs a thread.

use std::collections::HashSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::Notify;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::Instrument;

use crate::probe::spec::extension::MIN_PERIOD_MILLISECONDS;
use crate::probe::verdict::reasons;
use crate::probe::{ProbeKind, ProbeSpec, ProbeTarget, ProbeVerdict};
use crate::probe_rates::ProbeRates;
use crate::restart_policy::container_should_restart;
use crate::results::{CachedResult, ProbeCaches};
use crate::util::pod::{
    ContainerIdentity, ContainerList, is_restartable_init_container, pod_name, pod_namespace,
    runtime_container_id,
};

/// A container that started this long before the prober is taken to have
/// been running before a restart of the prober (`kubeletRestartGracePeriod`).
pub const RESTART_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// The shortest period a worker runs on, whatever its spec says:
/// `podprobe.periodMilliseconds`' minimum.
const MIN_PERIOD: Duration = Duration::from_millis(MIN_PERIOD_MILLISECONDS as u64);

/// Runs one probe: the kubelet's `prober.probe`, with its retries and event.
/// Implemented by [`Prober`]; tests use scripted fakes.
pub trait ProbeRunner: Send + Sync + 'static {
    /// Runs `spec` (of kind `kind`) against `target` and returns its verdict.
    fn probe(
        &self,
        kind: ProbeKind,
        spec: &ProbeSpec,
        target: ProbeTarget<'_>,
    ) -> impl Future<Output = ProbeVerdict> + Send;
}

impl<T: ProbeRunner> ProbeRunner for Arc<T> {
    fn probe(
        &self,
        kind: ProbeKind,
        spec: &ProbeSpec,
        target: ProbeTarget<'_>,
    ) -> impl Future<Output = ProbeVerdict> + Send {
        T::probe(self, kind, spec, target)
    }
}

/// The current status of a pod by UID: the kubelet's status manager cache
/// (`GetPodStatus`). It provides container IDs, states, `started` and the pod IP.
pub trait StatusSource: Send + Sync + 'static {
    /// The pod's current status, or `None` if it is not known (yet or any more).
    fn pod_status(&self, pod_uid: &str) -> Option<PodStatus>;
}

impl<T: StatusSource> StatusSource for Arc<T> {
    fn pod_status(&self, pod_uid: &str) -> Option<PodStatus> {
        T::pod_status(self, pod_uid)
    }
}

/// Wall-clock time, compared with the runtime's `startedAt` timestamps.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let nanos = i128::try_from(since_epoch.as_nanos()).unwrap_or(i128::MAX);
        Timestamp::from_nanosecond(nanos).unwrap_or(Timestamp::MAX)
    }
}

/// Wall-clock time that advances with tokio's clock from a fixed origin, so
/// that a paused test runtime controls both scheduling and `startedAt` ages.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin_wall: Timestamp,
    origin: Instant,
}

impl TokioClock {
    /// A clock reading `origin_wall` now.
    pub fn new(origin_wall: Timestamp) -> Self {
        TokioClock {
            origin_wall,
            origin: Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = i128::try_from(self.origin.elapsed().as_nanos()).unwrap_or(i128::MAX);
        let nanos = self.origin_wall.as_nanosecond().saturating_add(elapsed);
        Timestamp::from_nanosecond(nanos).unwrap_or(Timestamp::MAX)
    }
}

/// One completed probe run, reported to the [`ProbeObserver`]: the hook for
/// the probe metrics (M2, M3) and for recording the verdict's event.
#[derive(Debug, Clone, Copy)]
pub struct ProbeRun<'a> {
    pub config: &'a WorkerConfig,
    /// Container ID as in the pod status (`containerd://abc`).
    pub container_id: &'a str,
    pub verdict: &'a ProbeVerdict,
    /// The cached result the run maps to, or `None` when every attempt
    /// errored: such a run is thrown away (D11) and not counted (M2).
    pub result: Option<CachedResult>,
    /// From the start of the iteration (status lookup included) to the end of
    /// the probe, as the kubelet measures `prober_probe_duration_seconds` (M3,
    /// which the kubelet observes for successful runs only).
    pub duration: Duration,
}

/// Receives what workers do, for metrics and events.
pub trait ProbeObserver: Send + Sync + 'static {
    /// A probe ran (errored runs included; see [`ProbeRun::result`]).
    fn probe_ran(&self, run: &ProbeRun<'_>) {
        let _ = run;
    }

    /// A worker ended and removed its cached result; its metric series go
    /// away with it (M5).
    fn worker_stopped(&self, config: &WorkerConfig) {
        let _ = config;
    }

    /// A run waited `delay` for its pod's or the node's probe-run budget.
    fn probe_delayed(&self, config: &WorkerConfig, delay: Duration) {
        let _ = (config, delay);
    }
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl ProbeObserver for NoopObserver {}

/// What a worker probes. Fixed when the worker is created: like the kubelet,
/// a worker keeps the pod snapshot, container and probe it started with (W3).
///
/// Lean on purpose (#15): one worker per probe, thousands per node. The pod
/// snapshot is shared by the pod's workers, the container is found in it by
/// position rather than copied (a `Container` is over 2 KB inline), and the
/// takeover set is shared.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    kind: ProbeKind,
    spec: ProbeSpec,
    pod: Arc<Pod>,
    container: ContainerSlot,
    /// See [`predates_prober`].
    takeover: Arc<Takeover>,
}

/// Where a worker's container is.
#[derive(Debug, Clone)]
enum ContainerSlot {
    /// `spec.containers[i]` of the pod snapshot.
    Regular(usize),
    /// `spec.initContainers[i]`.
    Init(usize),
    /// Not in the snapshot (a caller's own container): a copy.
    Own(Box<Container>),
}

impl WorkerConfig {
    /// The `kind` probe `spec` of `container`, a container of `pod`.
    pub fn new(kind: ProbeKind, spec: ProbeSpec, pod: Arc<Pod>, container: &Container) -> Self {
        let position = |list: Option<&Vec<Container>>| {
            list.and_then(|list| list.iter().position(|c| c.name == container.name))
        };
        let pod_spec = pod.spec.as_ref();
        // A name is unique across both lists.
        let slot = if let Some(i) = position(pod_spec.and_then(|s| s.init_containers.as_ref())) {
            ContainerSlot::Init(i)
        } else if let Some(i) = position(pod_spec.map(|s| &s.containers)) {
            ContainerSlot::Regular(i)
        } else {
            ContainerSlot::Own(Box::new(container.clone()))
        };
        WorkerConfig {
            kind,
            spec,
            pod,
            container: slot,
            takeover: Arc::default(),
        }
    }

    /// Which container instances count as predating the prober (see
    /// [`predates_prober`]); shared by the workers of one pod.
    pub fn with_takeover(mut self, takeover: impl Into<Arc<Takeover>>) -> Self {
        self.takeover = takeover.into();
        self
    }

    pub fn kind(&self) -> ProbeKind {
        self.kind
    }

    pub fn spec(&self) -> &ProbeSpec {
        &self.spec
    }

    /// The pod as it was when the worker was created.
    pub fn pod(&self) -> &Pod {
        &self.pod
    }

    pub fn pod_uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    pub fn container(&self) -> &Container {
        let spec = self.pod.spec.as_ref();
        let found = match &self.container {
            ContainerSlot::Regular(i) => spec.and_then(|s| s.containers.get(*i)),
            ContainerSlot::Init(i) => spec
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|list| list.get(*i)),
            ContainerSlot::Own(container) => Some(&**container),
        };
        // The snapshot is immutable, so the slot found at creation is there.
        found.expect("a worker's container is in its pod snapshot")
    }

    pub fn container_name(&self) -> &str {
        &self.container().name
    }

    /// Whether the container is listed in `spec.initContainers` (the
    /// kubelet's events then point at `spec.initContainers{name}`).
    pub fn is_init_container(&self) -> bool {
        matches!(self.container, ContainerSlot::Init(_))
    }

    /// Whether the container is a restartable init container (sidecar).
    pub fn is_restartable_init_container(&self) -> bool {
        self.is_init_container() && is_restartable_init_container(self.container())
    }

    /// The value cached when the worker first sees a container (W4).
    pub fn initial_value(&self) -> CachedResult {
        match self.kind {
            ProbeKind::Startup => CachedResult::Unknown,
            ProbeKind::Readiness => CachedResult::Failure,
            ProbeKind::Liveness => CachedResult::Success,
        }
    }

    /// `fieldPath` of the container, for events (P5).
    pub fn field_path(&self) -> String {
        let list = if self.is_init_container() {
            ContainerList::InitContainers
        } else {
            ContainerList::Containers
        };
        list.field_path(self.container_name())
    }
}

/// Which running container instances survived a restart of the prober and
/// keep what was reported about them (D5, S4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Takeover {
    /// The kubelet's start-time rule alone: running since before the
    /// prober's start minus [`RESTART_GRACE_PERIOD`] (the prober's own
    /// simulations, which know no previous verdicts).
    #[default]
    ByStartTime,
    /// S6: exactly the instances (status `containerID`s) a previous podprobe
    /// reported ready (see [`crate::takeover`]). As the kubelet checks since
    /// its fixes for replaced containers (kubernetes #141342, #141487),
    /// what was reported about a container is kept only for that very
    /// instance: a replacement that started while no prober watched starts
    /// over, whenever it started.
    Vouched(HashSet<String>),
}

/// Whether the container predates a restart of the prober, per `takeover`
/// (D5, S4, S6).
pub fn predates_prober(
    status: &ContainerStatus,
    prober_start: Timestamp,
    takeover: &Takeover,
) -> bool {
    let Some(started_at) = status
        .state
        .as_ref()
        .and_then(|state| state.running.as_ref())
        .and_then(|running| running.started_at.as_ref())
    else {
        return false;
    };
    match takeover {
        Takeover::ByStartTime => {
            let grace = i128::try_from(RESTART_GRACE_PERIOD.as_nanos()).unwrap_or(i128::MAX);
            started_at.0.as_nanosecond() < prober_start.as_nanosecond() - grace
        }
        Takeover::Vouched(ids) => status
            .container_id
            .as_ref()
            .is_some_and(|id| ids.contains(id)),
    }
}

/// One change to the worker's results cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheWrite {
    Remove(String),
    Set(String, CachedResult),
}

/// What the worker does after [`WorkerState::before_probe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Wait for the next tick without probing.
    Continue,
    /// End the worker.
    Stop,
    /// Run the probe now.
    Probe,
}

/// Outcome of the pre-probe part of one iteration: cache writes to apply in
/// order, then the action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub writes: Vec<CacheWrite>,
    pub action: Action,
}

/// What one iteration observes besides the worker's own state.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// The status source's current status for the pod, if any.
    pub status: Option<&'a PodStatus>,
    /// Wall-clock now.
    pub now: Timestamp,
    /// Wall-clock time the prober (manager) started.
    pub prober_start: Timestamp,
}

/// The mutable state of one worker (the kubelet's `worker` fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerState {
    /// The last container ID seen in the pod status.
    pub container_id: Option<String>,
    /// The last probe result; starts as `Success`, the zero value (D19).
    pub last_result: CachedResult,
    /// How many times in a row the probe returned `last_result`.
    pub result_run: i64,
    /// Skip probing until the container ID changes (D6, D16).
    pub on_hold: bool,
}

impl WorkerState {
    /// Everything one iteration decides before probing (D1-D10).
    pub fn before_probe(&mut self, config: &WorkerConfig, observed: &Observation<'_>) -> Step {
        let mut writes = Vec::new();
        let action = self.decide(config, observed, &mut writes);
        Step { writes, action }
    }

    fn decide(
        &mut self,
        config: &WorkerConfig,
        observed: &Observation<'_>,
        writes: &mut Vec<CacheWrite>,
    ) -> Action {
        // D1: the pod is not known yet, or no longer.
        let Some(status) = observed.status else {
            return Action::Continue;
        };
        // D2: a terminal pod never runs its containers again.
        if matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")) {
            return Action::Stop;
        }
        // D3: the container has not been created yet, or was deleted.
        let Some((container, id)) = find_container_status(status, config.container_name()) else {
            return Action::Continue;
        };
        if self.container_id.as_deref() != Some(id) {
            self.adopt_container(config, observed, container, id, writes);
        }
        // D6
        if self.on_hold {
            return Action::Continue;
        }
        let running = container
            .state
            .as_ref()
            .and_then(|state| state.running.as_ref());
        let Some(running) = running else {
            // D7
            writes.push(CacheWrite::Set(id.to_string(), CachedResult::Failure));
            return if keeps_probing_stopped_container(config, container) {
                Action::Continue
            } else {
                Action::Stop
            };
        };
        // D8: quiet shutdown of a pod that was already being deleted.
        let deleting = config.pod.metadata.deletion_timestamp.is_some();
        if deleting && matches!(config.kind, ProbeKind::Liveness | ProbeKind::Startup) {
            writes.push(CacheWrite::Set(id.to_string(), CachedResult::Success));
            return Action::Stop;
        }
        // D9
        let started_at = running.started_at.as_ref().map(|t| t.0);
        if within_initial_delay(started_at, observed.now, config.spec.initial_delay_seconds) {
            return Action::Continue;
        }
        // D10: startup probes run until the container is started, the
        // others only after.
        let started = container.started == Some(true);
        let is_startup = config.kind == ProbeKind::Startup;
        if started == is_startup {
            return Action::Continue;
        }
        Action::Probe
    }

    /// D4/D5: a new container ID replaces the old one.
    fn adopt_container(
        &mut self,
        config: &WorkerConfig,
        observed: &Observation<'_>,
        container: &ContainerStatus,
        id: &str,
        writes: &mut Vec<CacheWrite>,
    ) {
        if let Some(previous) = self.container_id.take() {
            writes.push(CacheWrite::Remove(previous));
        }
        self.container_id = Some(id.to_string());
        // ChangeContainerStatusOnKubeletRestart (deprecated, off by default
        // since 1.35): a container that predates the prober keeps whatever
        // was reported before, so no initial value is written for it.
        let started_sidecar = config.is_restartable_init_container()
            && config.kind == ProbeKind::Startup
            && container.started == Some(true);
        if started_sidecar {
            writes.push(CacheWrite::Set(id.to_string(), CachedResult::Success));
        }
        if !predates_prober(container, observed.prober_start, &config.takeover) {
            writes.push(CacheWrite::Set(id.to_string(), config.initial_value()));
        }
        self.on_hold = false;
    }

    /// Thresholds and holding after a probe returned `result` without error
    /// (D13-D17): the write to make, if the result crossed its threshold.
    pub fn after_probe(
        &mut self,
        config: &WorkerConfig,
        result: CachedResult,
    ) -> Option<CacheWrite> {
        // D13
        if result == self.last_result {
            self.result_run = self.result_run.saturating_add(1);
        } else {
            self.last_result = result;
            self.result_run = 1;
        }
        // D14
        let below_threshold = match result {
            CachedResult::Failure => self.result_run < i64::from(config.spec.failure_threshold),
            CachedResult::Success => self.result_run < i64::from(config.spec.success_threshold),
            CachedResult::Unknown => false,
        };
        if below_threshold {
            return None;
        }
        // D16: the container will be restarted (liveness failure) or has
        // reached its startup verdict; wait for a new container.
        let holds = match config.kind {
            ProbeKind::Liveness => result == CachedResult::Failure,
            ProbeKind::Startup => true,
            ProbeKind::Readiness => false,
        };
        if holds {
            self.on_hold = true;
            self.result_run = 0;
        }
        // D15
        let id = self.container_id.clone()?;
        Some(CacheWrite::Set(id, result))
    }
}

/// D3: the container's status with a non-empty ID, from `containerStatuses`
/// and failing that `initContainerStatuses`; first entry by name in each.
fn find_container_status<'a>(
    status: &'a PodStatus,
    name: &str,
) -> Option<(&'a ContainerStatus, &'a str)> {
    let with_id = |statuses: Option<&'a Vec<ContainerStatus>>| {
        let container = statuses?.iter().find(|c| c.name == name)?;
        let id = container
            .container_id
            .as_deref()
            .filter(|id| !id.is_empty())?;
        Some((container, id))
    };
    with_id(status.container_statuses.as_ref())
        .or_else(|| with_id(status.init_container_statuses.as_ref()))
}

/// D7: whether a worker keeps going when its container is not running.
fn keeps_probing_stopped_container(config: &WorkerConfig, container: &ContainerStatus) -> bool {
    // ContainerRestartRules (beta, on by default since 1.35): keep probing
    // while the container would be restarted. A waiting container may still
    // start.
    let terminated = container
        .state
        .as_ref()
        .and_then(|state| state.terminated.as_ref());
    let Some(terminated) = terminated else {
        return true;
    };
    let pod_policy = config
        .pod
        .spec
        .as_ref()
        .and_then(|spec| spec.restart_policy.as_deref());
    container_should_restart(config.container(), pod_policy, terminated.exit_code)
}

/// D9: whether the container is younger than `initialDelaySeconds`, in whole
/// seconds truncated toward zero as Go's `int32(time.Since(t).Seconds())`.
/// A running container always has `startedAt`; without one there is no delay.
fn within_initial_delay(started_at: Option<Timestamp>, now: Timestamp, initial_delay: i32) -> bool {
    let Some(started_at) = started_at else {
        return false;
    };
    let age_seconds = (now.as_nanosecond() - started_at.as_nanosecond()) / 1_000_000_000;
    age_seconds < i128::from(initial_delay)
}

/// The cached result of a verdict, or `None` if it errored (D11).
pub fn verdict_result(verdict: &ProbeVerdict) -> Option<CachedResult> {
    if verdict.error.is_some() {
        return None;
    }
    Some(if verdict.is_success() {
        CachedResult::Success
    } else {
        CachedResult::Failure
    })
}

/// What every worker of one prober shares.
pub struct WorkerContext<R, S> {
    pub runner: R,
    pub statuses: S,
    pub caches: ProbeCaches,
    pub clock: Arc<dyn Clock>,
    pub observer: Arc<dyn ProbeObserver>,
    /// When the prober started, for the start jitter (W5).
    pub started: Instant,
    /// The same instant on the wall clock (D5, S4).
    pub started_wall: Timestamp,
    /// The probe-run budgets every run waits for (#25).
    pub rates: Arc<ProbeRates>,
}

impl<R: ProbeRunner, S: StatusSource> WorkerContext<R, S> {
    /// A context whose prober starts now.
    pub fn new(
        runner: R,
        statuses: S,
        caches: ProbeCaches,
        clock: Arc<dyn Clock>,
        observer: Arc<dyn ProbeObserver>,
    ) -> Self {
        let started_wall = clock.now();
        WorkerContext {
            runner,
            statuses,
            caches,
            clock,
            observer,
            started: Instant::now(),
            started_wall,
            rates: ProbeRates::unlimited(),
        }
    }
}

/// Controls a running worker. Dropping the handle stops the worker too.
#[derive(Debug)]
pub struct WorkerHandle {
    signals: Arc<Signals>,
}

/// Stop and manual-trigger requests to one worker: two flags and one wakeup,
/// where two channels would cost a worker about 1 KB (#15).
#[derive(Debug, Default)]
struct Signals {
    stop: AtomicBool,
    trigger: AtomicBool,
    wake: Notify,
}

impl Signals {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Takes a pending trigger.
    fn take_trigger(&self) -> bool {
        self.trigger.swap(false, Ordering::AcqRel)
    }

    /// Resolves once a stop was asked for.
    async fn until_stopped(&self) {
        while !self.stopped() {
            // A trigger wakes this too; its flag stays set for the loop.
            self.wake.notified().await;
        }
    }
}

impl WorkerHandle {
    /// Asks the worker to stop; never blocks and may be called any number of
    /// times (W9). A probe in flight is cancelled rather than waited for
    /// (the kubelet waits): its pod is gone or its container no longer
    /// probed, and a pod-chosen `timeoutSeconds` may be an hour long.
    pub fn stop(&self) {
        self.signals.stop.store(true, Ordering::Release);
        self.signals.wake.notify_one();
    }

    /// Asks for a probe now, without blocking; returns `false` when a
    /// trigger is already pending (or the worker was stopped), in which case
    /// this one is dropped (W8).
    pub fn trigger(&self) -> bool {
        if self.signals.stopped() || self.signals.trigger.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.signals.wake.notify_one();
        true
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a worker for `config` on the current tokio runtime. `on_exit` runs
/// when the worker ends, after its cached result was removed (W10): the
/// manager forgets the worker there.
pub fn spawn<R: ProbeRunner, S: StatusSource>(
    context: Arc<WorkerContext<R, S>>,
    config: WorkerConfig,
    on_exit: impl FnOnce() + Send + 'static,
) -> WorkerHandle {
    let signals = Arc::new(Signals::default());
    let worker = Worker {
        context,
        config,
        state: WorkerState::default(),
        signals: signals.clone(),
    };
    // Every line the worker and its probe handlers log carries the pod and
    // container, so an operator can grep for the pod they are looking at.
    let span = tracing::info_span!(
        "worker",
        namespace = %pod_namespace(&worker.config.pod),
        pod = %pod_name(&worker.config.pod),
        pod_uid = %worker.config.pod_uid(),
        container = %worker.config.container_name(),
        probe = %worker.config.kind,
    );
    tokio::spawn(worker.run(on_exit).instrument(span));
    WorkerHandle { signals }
}

struct Worker<R, S> {
    context: Arc<WorkerContext<R, S>>,
    config: WorkerConfig,
    state: WorkerState,
    signals: Arc<Signals>,
}

impl<R: ProbeRunner, S: StatusSource> Worker<R, S> {
    async fn run(mut self, on_exit: impl FnOnce()) {
        // Validation makes the period at least 1 s (periodSeconds) or
        // 100 ms (podprobe.periodMilliseconds); a zero period would make the
        // ticker spin.
        let period = self.config.spec.period().max(MIN_PERIOD);
        self.start_jitter(period).await;
        // W7: fixed rate; a late tick fires once, then the schedule resumes
        // on its original grid, as Go's ticker drops missed ticks.
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        while self.iterate().await && self.next_run(&mut ticker).await {}
        self.cleanup(on_exit);
    }

    /// Waits for the next run: `false` when the worker is to stop. A fixed
    /// order (stop, trigger, tick) keeps runs on a paused clock reproducible
    /// (the simulator depends on it); Go's select picks at random among
    /// ready cases, so this is one of the kubelet's possible orders. A
    /// trigger that arrives as a tick falls due wins: the reset then drops
    /// that tick, and the worker probes once rather than twice.
    async fn next_run(&self, ticker: &mut Interval) -> bool {
        loop {
            if self.signals.stopped() {
                return false;
            }
            if self.signals.take_trigger() {
                // W8: the next periodic probe is one period after this one.
                ticker.reset();
                tracing::debug!("triggered probe by manual run");
                return true;
            }
            tokio::select! {
                biased;
                () = self.signals.wake.notified() => {}
                _ = ticker.tick() => return true,
            }
        }
    }

    /// W5: right after the prober starts, spread the first probes of all
    /// workers over one period instead of running them all at once.
    async fn start_jitter(&self, period: Duration) {
        if period > self.context.started.elapsed() {
            let fraction: f64 = rand::random();
            // Boxed: a timer entry is large, and this one is needed once.
            Box::pin(tokio::time::sleep(period.mul_f64(fraction))).await;
        }
    }

    /// One iteration; a panic inside it is logged and swallowed (W14).
    async fn iterate(&mut self) -> bool {
        // Boxed, as the probe is: an iteration's state (a status copy, cache
        // writes) exists only while it runs, not in every idle worker (#15).
        match AssertUnwindSafe(Box::pin(self.do_probe()))
            .catch_unwind()
            .await
        {
            Ok(keep_going) => keep_going,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("(not a string)");
                tracing::error!(
                    panic = message,
                    "probe iteration panicked; the worker continues"
                );
                true
            }
        }
    }

    /// The kubelet's `doProbe`: returns whether the worker continues.
    async fn do_probe(&mut self) -> bool {
        let began = Instant::now();
        let status = self.context.statuses.pod_status(self.config.pod_uid());
        let observed = Observation {
            status: status.as_ref(),
            now: self.context.clock.now(),
            prober_start: self.context.started_wall,
        };
        let step = self.state.before_probe(&self.config, &observed);
        self.apply(&step.writes).await;
        match step.action {
            Action::Continue => true,
            Action::Stop => {
                tracing::debug!("probe worker exiting");
                false
            }
            Action::Probe => {
                let pod_ip = status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_deref())
                    .unwrap_or_default();
                // Late rather than failed when the pod or node is over its
                // probe-run budget; the run's own time starts after.
                let delay = self.context.rates.admit(self.config.pod_uid()).await;
                if !delay.is_zero() {
                    self.context.observer.probe_delayed(&self.config, delay);
                }
                self.run_probe(pod_ip, began + delay).await
            }
        }
    }

    /// D11-D17: runs the probe and records its result. Returns `false` when
    /// the worker was stopped while the probe ran (see [`WorkerHandle::stop`]).
    async fn run_probe(&mut self, pod_ip: &str, began: Instant) -> bool {
        let Some(container_id) = self.state.container_id.clone() else {
            return true;
        };
        let target = ProbeTarget {
            pod_ip,
            container_id: Some(runtime_container_id(&container_id)),
            identity: Some(ContainerIdentity {
                pod_uid: self.config.pod_uid(),
                container_name: self.config.container_name(),
            }),
            namespace: Some(pod_namespace(&self.config.pod)),
        };
        // Boxed: a probe's state (an HTTP exchange, a gRPC channel) lives
        // only while it runs, not in every idle worker's task (#15).
        let probe = Box::pin(self.context.runner.probe(
            self.config.kind,
            &self.config.spec,
            target,
        ));
        let verdict = tokio::select! {
            biased;
            () = self.signals.until_stopped() => {
                tracing::debug!("probe worker stopped; in-flight probe cancelled");
                return false;
            }
            verdict = probe => verdict,
        };
        let result = verdict_result(&verdict);
        self.context.observer.probe_ran(&ProbeRun {
            config: &self.config,
            container_id: &container_id,
            verdict: &verdict,
            result,
            duration: began.elapsed(),
        });
        if let Some(event) = verdict
            .event
            .as_ref()
            .filter(|e| e.reason == reasons::UNHEALTHY)
        {
            // For the gate condition's message (why it is not ready).
            self.context
                .caches
                .get(self.config.kind)
                .set_note(&container_id, &event.message);
        }
        if let Some(write) = result.and_then(|r| self.state.after_probe(&self.config, r)) {
            self.apply(&[write]).await;
        }
        true
    }

    async fn apply(&self, writes: &[CacheWrite]) {
        let cache = self.context.caches.get(self.config.kind);
        for write in writes {
            match write {
                CacheWrite::Remove(id) => cache.remove(id),
                CacheWrite::Set(id, result) => cache.set(id, *result, self.config.pod_uid()).await,
            }
        }
    }

    /// W10: forget the container's result, then the worker itself.
    fn cleanup(self, on_exit: impl FnOnce()) {
        if let Some(id) = &self.state.container_id {
            self.context.caches.get(self.config.kind).remove(id);
        }
        on_exit();
        self.context.observer.worker_stopped(&self.config);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use k8s_openapi::api::core::v1::{ContainerRestartRule, ContainerRestartRuleOnExitCodes};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::probe::ProbeResult;
    use crate::results::ResultReceivers;
    use crate::testing::*;

    const ID: &str = "containerd://c1";
    const ID2: &str = "containerd://c2";

    /// The prober started at `epoch()`; the container at +100 s, now is +200 s.
    fn observed(status: Option<&PodStatus>) -> Observation<'_> {
        Observation {
            status,
            now: at(200),
            prober_start: epoch(),
        }
    }

    fn config(kind: ProbeKind, spec: ProbeSpec) -> WorkerConfig {
        let pod = pod("uid-1", vec![container("app")], vec![]);
        config_in(kind, spec, pod, "app")
    }

    fn config_in(kind: ProbeKind, spec: ProbeSpec, pod: Pod, name: &str) -> WorkerConfig {
        let spec_of = pod.spec.as_ref().unwrap();
        let mut all = spec_of
            .containers
            .iter()
            .chain(spec_of.init_containers.iter().flatten());
        let container = all.find(|c| c.name == name).unwrap().clone();
        WorkerConfig::new(kind, spec, Arc::new(pod), &container)
    }

    fn running_app(started: Option<bool>) -> PodStatus {
        pod_status(vec![running("app", ID, at(100), started)], vec![])
    }

    /// A status in which `kind` gets to probe (D10).
    fn probing_status(kind: ProbeKind) -> PodStatus {
        running_app(Some(kind != ProbeKind::Startup))
    }

    fn set(id: &str, result: CachedResult) -> CacheWrite {
        CacheWrite::Set(id.to_string(), result)
    }

    fn default_spec() -> ProbeSpec {
        probe_spec(10, 0, 1, 3)
    }

    /// [`probe_spec`] with `podprobe.periodMilliseconds: millis`.
    fn millisecond_spec(millis: i32, success: i32, failure: i32) -> ProbeSpec {
        ProbeSpec {
            period_milliseconds: Some(millis),
            ..probe_spec(10, 0, success, failure)
        }
    }

    #[test]
    fn d1_no_pod_status_continues_without_writes() {
        for kind in ProbeKind::ALL {
            let mut state = WorkerState::default();
            let step = state.before_probe(&config(kind, default_spec()), &observed(None));
            assert_eq!(
                step,
                Step {
                    writes: vec![],
                    action: Action::Continue
                },
                "{kind}"
            );
        }
    }

    #[test]
    fn d2_terminal_pod_stops_without_writes() {
        for phase in ["Failed", "Succeeded"] {
            for kind in ProbeKind::ALL {
                let mut status = probing_status(kind);
                status.phase = Some(phase.to_string());
                let mut state = WorkerState::default();
                let step =
                    state.before_probe(&config(kind, default_spec()), &observed(Some(&status)));
                assert_eq!(
                    step,
                    Step {
                        writes: vec![],
                        action: Action::Stop
                    },
                    "{kind} {phase}"
                );
            }
        }
    }

    #[test]
    fn d3_missing_container_status_waits() {
        let other = pod_status(vec![running("other", ID, at(100), Some(true))], vec![]);
        let mut no_id = probing_status(ProbeKind::Liveness);
        no_id.container_statuses.as_mut().unwrap()[0].container_id = Some(String::new());
        for status in [other, no_id] {
            let mut state = WorkerState::default();
            let step = state.before_probe(
                &config(ProbeKind::Liveness, default_spec()),
                &observed(Some(&status)),
            );
            assert_eq!(
                step,
                Step {
                    writes: vec![],
                    action: Action::Continue
                }
            );
            assert_eq!(state.container_id, None);
        }
    }

    #[test]
    fn d3_empty_container_id_falls_back_to_init_statuses() {
        let pod = pod("uid-1", vec![], vec![sidecar("app")]);
        let config = config_in(ProbeKind::Readiness, default_spec(), pod, "app");
        let mut stale = running("app", "", at(100), Some(true));
        stale.container_id = None;
        let status = pod_status(vec![stale], vec![running("app", ID2, at(100), Some(true))]);
        let mut state = WorkerState::default();
        let step = state.before_probe(&config, &observed(Some(&status)));
        assert_eq!(step.action, Action::Probe);
        assert_eq!(state.container_id.as_deref(), Some(ID2));
    }

    #[test]
    fn w4_initial_value_per_kind() {
        let expected = [
            (ProbeKind::Startup, CachedResult::Unknown),
            (ProbeKind::Readiness, CachedResult::Failure),
            (ProbeKind::Liveness, CachedResult::Success),
        ];
        for (kind, initial) in expected {
            let spec = probe_spec(10, 60, 1, 3);
            let mut state = WorkerState::default();
            let step =
                state.before_probe(&config(kind, spec), &observed(Some(&probing_status(kind))));
            assert_eq!(step.writes, vec![set(ID, initial)], "{kind}");
        }
    }

    #[test]
    fn d4_new_container_id_replaces_result_and_lifts_hold() {
        let config = config(ProbeKind::Liveness, default_spec());
        let mut state = WorkerState {
            container_id: Some(ID.to_string()),
            last_result: CachedResult::Failure,
            result_run: 0,
            on_hold: true,
        };
        let status = pod_status(vec![running("app", ID2, at(150), Some(true))], vec![]);
        let step = state.before_probe(&config, &observed(Some(&status)));
        assert_eq!(
            step.writes,
            vec![
                CacheWrite::Remove(ID.to_string()),
                set(ID2, CachedResult::Success)
            ]
        );
        assert_eq!(step.action, Action::Probe);
        assert_eq!(state.container_id.as_deref(), Some(ID2));
        assert!(!state.on_hold);
        assert_eq!(
            state.last_result,
            CachedResult::Failure,
            "D19: counters carry over"
        );
    }

    #[test]
    fn k4_restarted_container_is_probed_after_its_own_initial_delay() {
        let config = config(ProbeKind::Liveness, probe_spec(10, 30, 1, 3));
        let restarted = pod_status(vec![running("app", ID2, at(150), Some(true))], vec![]);
        let on_hold = || WorkerState {
            container_id: Some(ID.to_string()),
            last_result: CachedResult::Failure,
            on_hold: true,
            ..WorkerState::default()
        };
        let at_time = |now| Observation {
            status: Some(&restarted),
            now,
            prober_start: epoch(),
        };
        let mut early = on_hold();
        let step = early.before_probe(&config, &at_time(at(179)));
        assert_eq!(
            step.action,
            Action::Continue,
            "29 s after the new startedAt"
        );
        assert_eq!(step.writes[1], set(ID2, CachedResult::Success));
        assert!(!early.on_hold);
        let mut late = on_hold();
        assert_eq!(
            late.before_probe(&config, &at_time(at(180))).action,
            Action::Probe
        );
    }

    #[test]
    fn d4_same_container_id_writes_nothing() {
        let config = config(ProbeKind::Readiness, probe_spec(10, 300, 1, 3));
        let mut state = WorkerState::default();
        let status = probing_status(ProbeKind::Readiness);
        state.before_probe(&config, &observed(Some(&status)));
        let step = state.before_probe(&config, &observed(Some(&status)));
        assert_eq!(
            step,
            Step {
                writes: vec![],
                action: Action::Continue
            }
        );
    }

    #[test]
    fn d5_container_running_before_prober_start_keeps_cache_empty() {
        // Started 10.001 s before the prober: pre-existing.
        let started = Timestamp::from_nanosecond(epoch().as_nanosecond() - 10_001_000_000).unwrap();
        for kind in ProbeKind::ALL {
            let status = pod_status(
                vec![running(
                    "app",
                    ID,
                    started,
                    Some(kind != ProbeKind::Startup),
                )],
                vec![],
            );
            let mut state = WorkerState::default();
            let step = state.before_probe(&config(kind, default_spec()), &observed(Some(&status)));
            assert_eq!(step.writes, vec![], "{kind}");
            assert_eq!(step.action, Action::Probe, "{kind}");
            assert_eq!(state.container_id.as_deref(), Some(ID));
        }
    }

    #[test]
    fn s6_a_replacement_that_predates_the_prober_is_seeded_unless_vouched() {
        // kubernetes #141487: the instance started long before the prober
        // (by start time it survived the restart), but the previous
        // prober's verdicts were about another instance it replaced.
        let started = Timestamp::from_nanosecond(epoch().as_nanosecond() - 60_000_000_000).unwrap();
        let status = pod_status(vec![running("app", ID, started, Some(false))], vec![]);
        for kind in ProbeKind::ALL {
            let replaced =
                config(kind, default_spec()).with_takeover(Takeover::Vouched(HashSet::from([
                    "containerd://replaced".to_string(),
                ])));
            let mut state = WorkerState::default();
            let step = state.before_probe(&replaced, &observed(Some(&status)));
            assert_eq!(
                step.writes,
                vec![CacheWrite::Set(ID.to_string(), replaced.initial_value())],
                "{kind}"
            );
        }
    }

    #[test]
    fn d5_vouched_container_keeps_cache_empty_within_grace() {
        // Started 5 s before the prober, but vouched for.
        let status = pod_status(vec![running("app", ID, at(-5), Some(true))], vec![]);
        let vouched = config(ProbeKind::Readiness, default_spec())
            .with_takeover(Takeover::Vouched(HashSet::from([ID.to_string()])));
        let mut state = WorkerState::default();
        let step = state.before_probe(&vouched, &observed(Some(&status)));
        assert_eq!(step.writes, vec![]);

        // Another instance was vouched for: this one starts over.
        let another = config(ProbeKind::Readiness, default_spec()).with_takeover(
            Takeover::Vouched(HashSet::from(["containerd://before".to_string()])),
        );
        let mut state = WorkerState::default();
        let step = state.before_probe(&another, &observed(Some(&status)));
        assert_eq!(
            step.writes,
            vec![CacheWrite::Set(ID.to_string(), CachedResult::Failure)]
        );
    }

    #[test]
    fn d5_container_started_within_grace_gets_initial_value() {
        let started = at(-10);
        let status = pod_status(vec![running("app", ID, started, Some(true))], vec![]);
        let mut state = WorkerState::default();
        let step = state.before_probe(
            &config(ProbeKind::Readiness, default_spec()),
            &observed(Some(&status)),
        );
        assert_eq!(step.writes, vec![set(ID, CachedResult::Failure)]);
    }

    #[test]
    fn d5_started_restartable_init_container_seeds_startup_success() {
        // kubernetes #137146: without the seed, a restarted prober would
        // leave the sidecar's startup result empty and hold every regular
        // container back. `started` here is podprobe's own verdict about
        // this very instance (the daemon's status source, S6).
        let pod = pod("uid-1", vec![container("main")], vec![sidecar("app")]);
        let config = config_in(ProbeKind::Startup, default_spec(), pod, "app");
        // Pre-existing sidecar: only the Success seed.
        let old = pod_status(vec![], vec![running("app", ID, at(-3600), Some(true))]);
        let mut state = WorkerState::default();
        let step = state.before_probe(&config, &observed(Some(&old)));
        assert_eq!(step.writes, vec![set(ID, CachedResult::Success)]);
        assert_eq!(
            step.action,
            Action::Continue,
            "started: startup is parked (D10)"
        );
        // Fresh sidecar: the seed, then the initial value, as upstream writes both.
        let fresh = pod_status(vec![], vec![running("app", ID2, at(100), Some(true))]);
        let step = state.before_probe(&config, &observed(Some(&fresh)));
        assert_eq!(
            step.writes,
            vec![
                CacheWrite::Remove(ID.to_string()),
                set(ID2, CachedResult::Success),
                set(ID2, CachedResult::Unknown),
            ]
        );
    }

    #[test]
    fn d6_on_hold_skips_probe() {
        let config = config(ProbeKind::Liveness, default_spec());
        let mut state = WorkerState {
            container_id: Some(ID.to_string()),
            on_hold: true,
            ..WorkerState::default()
        };
        // Even a stopped container is left alone while on hold.
        for status in [
            probing_status(ProbeKind::Liveness),
            pod_status(vec![waiting("app", ID)], vec![]),
        ] {
            let step = state.before_probe(&config, &observed(Some(&status)));
            assert_eq!(
                step,
                Step {
                    writes: vec![],
                    action: Action::Continue
                }
            );
        }
    }

    #[test]
    fn d7_not_running_writes_failure() {
        for kind in ProbeKind::ALL {
            let status = pod_status(vec![waiting("app", ID)], vec![]);
            let mut state = WorkerState {
                container_id: Some(ID.to_string()),
                ..WorkerState::default()
            };
            let step = state.before_probe(&config(kind, default_spec()), &observed(Some(&status)));
            assert_eq!(step.writes, vec![set(ID, CachedResult::Failure)], "{kind}");
            assert_eq!(
                step.action,
                Action::Continue,
                "{kind}: a waiting container may start"
            );
        }
    }

    fn d7_action(pod_policy: Option<&str>, container: Container, exit_code: i32) -> Action {
        let mut pod = pod("uid-1", vec![container], vec![]);
        pod.spec.as_mut().unwrap().restart_policy = pod_policy.map(str::to_string);
        let config = config_in(ProbeKind::Readiness, default_spec(), pod, "app");
        let status = pod_status(vec![terminated("app", ID, exit_code)], vec![]);
        let mut state = WorkerState::default();
        let step = state.before_probe(&config, &observed(Some(&status)));
        assert_eq!(step.writes.last(), Some(&set(ID, CachedResult::Failure)));
        step.action
    }

    #[test]
    fn d7_terminated_container_follows_pod_restart_policy() {
        use Action::{Continue, Stop};
        let cases = [
            (None, 0, Continue),
            (Some("Always"), 0, Continue),
            (Some("OnFailure"), 0, Stop),
            (Some("OnFailure"), 1, Continue),
            (Some("Never"), 1, Stop),
        ];
        for (policy, exit_code, want) in cases {
            assert_eq!(
                d7_action(policy, container("app"), exit_code),
                want,
                "{policy:?} {exit_code}"
            );
        }
    }

    #[test]
    fn d7_container_restart_policy_overrides_pod() {
        let with_policy = |policy: &str| Container {
            restart_policy: Some(policy.to_string()),
            ..container("app")
        };
        assert_eq!(
            d7_action(Some("Never"), with_policy("Always"), 0),
            Action::Continue
        );
        assert_eq!(
            d7_action(Some("Never"), with_policy("OnFailure"), 2),
            Action::Continue
        );
        assert_eq!(
            d7_action(Some("Always"), with_policy("OnFailure"), 0),
            Action::Stop
        );
        assert_eq!(
            d7_action(Some("Always"), with_policy("Never"), 1),
            Action::Stop
        );
    }

    #[test]
    fn d7_restart_rules_match_exit_codes() {
        let rule = |operator: &str, values: Vec<i32>| ContainerRestartRule {
            action: "Restart".to_string(),
            exit_codes: Some(ContainerRestartRuleOnExitCodes {
                operator: operator.to_string(),
                values: Some(values),
            }),
        };
        let with_rules = |policy: Option<&str>, rules| Container {
            restart_policy: policy.map(str::to_string),
            restart_policy_rules: Some(rules),
            ..container("app")
        };
        let never_but_42 = with_rules(Some("Never"), vec![rule("In", vec![42])]);
        assert_eq!(
            d7_action(Some("Never"), never_but_42.clone(), 42),
            Action::Continue
        );
        assert_eq!(d7_action(Some("Never"), never_but_42, 1), Action::Stop);
        let never_unless_0 = with_rules(Some("Never"), vec![rule("NotIn", vec![0])]);
        assert_eq!(
            d7_action(Some("Never"), never_unless_0.clone(), 3),
            Action::Continue
        );
        assert_eq!(d7_action(Some("Never"), never_unless_0, 0), Action::Stop);
        // Rules are ignored without a container-level restartPolicy.
        let rules_only = with_rules(None, vec![rule("In", vec![42])]);
        assert_eq!(d7_action(Some("Never"), rules_only, 42), Action::Stop);
    }

    #[test]
    fn d7_restartable_init_container_keeps_probing_after_exit() {
        let mut pod = pod("uid-1", vec![container("main")], vec![sidecar("app")]);
        pod.spec.as_mut().unwrap().restart_policy = Some("Never".to_string());
        let config = config_in(ProbeKind::Liveness, default_spec(), pod, "app");
        let status = pod_status(vec![], vec![terminated("app", ID, 0)]);
        let mut state = WorkerState::default();
        assert_eq!(
            state.before_probe(&config, &observed(Some(&status))).action,
            Action::Continue
        );
    }

    #[test]
    fn d8_deleting_pod_liveness_and_startup_write_success_and_stop() {
        for kind in ProbeKind::ALL {
            let mut pod = pod("uid-1", vec![container("app")], vec![]);
            pod.metadata.deletion_timestamp = Some(Time(at(150)));
            let config = config_in(kind, default_spec(), pod, "app");
            let mut state = WorkerState {
                container_id: Some(ID.to_string()),
                ..WorkerState::default()
            };
            let step = state.before_probe(&config, &observed(Some(&probing_status(kind))));
            if kind == ProbeKind::Readiness {
                assert_eq!(
                    step,
                    Step {
                        writes: vec![],
                        action: Action::Probe
                    }
                );
            } else {
                let want = Step {
                    writes: vec![set(ID, CachedResult::Success)],
                    action: Action::Stop,
                };
                assert_eq!(step, want, "{kind}");
            }
        }
    }

    #[test]
    fn d9_initial_delay_counts_whole_seconds_from_started_at() {
        let delayed = config(ProbeKind::Liveness, probe_spec(10, 100, 1, 3));
        let status = probing_status(ProbeKind::Liveness); // started at +100 s
        let mut state = WorkerState::default();
        let step_at = |state: &mut WorkerState, nanos_after_start: i128| {
            let now =
                Timestamp::from_nanosecond(at(100).as_nanosecond() + nanos_after_start).unwrap();
            let observed = Observation {
                status: Some(&status),
                now,
                prober_start: epoch(),
            };
            state.before_probe(&delayed, &observed).action
        };
        assert_eq!(
            step_at(&mut state, 99_999_999_999),
            Action::Continue,
            "99.99 s truncates to 99"
        );
        assert_eq!(step_at(&mut state, 100_000_000_000), Action::Probe);
        // A startedAt in the future (clock skew) truncates toward zero.
        let config = config(ProbeKind::Liveness, probe_spec(10, 0, 1, 3));
        let skewed = Observation {
            status: Some(&status),
            now: Timestamp::from_nanosecond(at(100).as_nanosecond() - 900_000_000).unwrap(),
            prober_start: epoch(),
        };
        assert_eq!(
            WorkerState::default().before_probe(&config, &skewed).action,
            Action::Probe
        );
    }

    #[test]
    fn d9_negative_initial_delay_means_none() {
        let config = config(ProbeKind::Readiness, probe_spec(10, -100, 1, 3));
        let status = pod_status(vec![running("app", ID, at(200), Some(true))], vec![]);
        let mut state = WorkerState::default();
        assert_eq!(
            state.before_probe(&config, &observed(Some(&status))).action,
            Action::Probe
        );
    }

    #[test]
    fn d10_started_flag_gates_probes() {
        let cases = [
            (ProbeKind::Startup, None, Action::Probe),
            (ProbeKind::Startup, Some(false), Action::Probe),
            (ProbeKind::Startup, Some(true), Action::Continue),
            (ProbeKind::Readiness, None, Action::Continue),
            (ProbeKind::Readiness, Some(false), Action::Continue),
            (ProbeKind::Readiness, Some(true), Action::Probe),
            (ProbeKind::Liveness, Some(false), Action::Continue),
            (ProbeKind::Liveness, Some(true), Action::Probe),
        ];
        for (kind, started, want) in cases {
            let mut state = WorkerState::default();
            let status = running_app(started);
            let step = state.before_probe(&config(kind, default_spec()), &observed(Some(&status)));
            assert_eq!(step.action, want, "{kind} started={started:?}");
        }
    }

    /// A state that has adopted `ID`, as after the first iteration.
    fn adopted() -> WorkerState {
        WorkerState {
            container_id: Some(ID.to_string()),
            ..WorkerState::default()
        }
    }

    #[test]
    fn d11_errored_verdict_maps_to_no_result() {
        assert_eq!(verdict_result(&errored(ProbeKind::Liveness)), None);
        let failed = verdict(ProbeKind::Liveness, ProbeResult::Failure);
        assert_eq!(verdict_result(&failed), Some(CachedResult::Failure));
        let warned = verdict(ProbeKind::Liveness, ProbeResult::Warning);
        assert_eq!(verdict_result(&warned), Some(CachedResult::Success));
        let unknown = verdict(ProbeKind::Liveness, ProbeResult::Unknown);
        assert_eq!(verdict_result(&unknown), Some(CachedResult::Failure));
    }

    #[test]
    fn d13_result_run_counts_consecutive_results() {
        let config = config(ProbeKind::Readiness, probe_spec(10, 0, 5, 5));
        let mut state = adopted();
        for (result, run) in [
            (CachedResult::Success, 1),
            (CachedResult::Success, 2),
            (CachedResult::Failure, 1),
            (CachedResult::Failure, 2),
            (CachedResult::Success, 1),
        ] {
            state.after_probe(&config, result);
            assert_eq!((state.last_result, state.result_run), (result, run));
        }
    }

    #[test]
    fn d14_d15_results_are_written_from_their_threshold_on() {
        let config = config(ProbeKind::Readiness, probe_spec(10, 0, 2, 3));
        let mut state = adopted();
        let writes: Vec<_> = [
            CachedResult::Failure,
            CachedResult::Failure,
            CachedResult::Failure,
            CachedResult::Failure,
            CachedResult::Success,
            CachedResult::Success,
            CachedResult::Success,
        ]
        .into_iter()
        .map(|result| state.after_probe(&config, result))
        .collect();
        let failure = Some(set(ID, CachedResult::Failure));
        let success = Some(set(ID, CachedResult::Success));
        assert_eq!(
            writes,
            vec![
                None,
                None,
                failure.clone(),
                failure,
                None,
                success.clone(),
                success
            ]
        );
    }

    #[test]
    fn d16_liveness_failure_puts_worker_on_hold() {
        let config = config(ProbeKind::Liveness, probe_spec(10, 0, 1, 2));
        let mut state = adopted();
        assert_eq!(
            state.after_probe(&config, CachedResult::Success),
            Some(set(ID, CachedResult::Success))
        );
        assert!(!state.on_hold, "liveness success does not hold");
        assert_eq!(state.after_probe(&config, CachedResult::Failure), None);
        assert_eq!(
            state.after_probe(&config, CachedResult::Failure),
            Some(set(ID, CachedResult::Failure))
        );
        assert!(state.on_hold);
        assert_eq!(state.result_run, 0);
    }

    #[test]
    fn d16_startup_holds_after_either_threshold() {
        for (result, threshold) in [(CachedResult::Success, 1), (CachedResult::Failure, 3)] {
            let config = config(ProbeKind::Startup, probe_spec(10, 0, 1, 3));
            let mut state = adopted();
            for _ in 1..threshold {
                assert_eq!(state.after_probe(&config, result), None);
                assert!(!state.on_hold);
            }
            assert_eq!(state.after_probe(&config, result), Some(set(ID, result)));
            assert!(state.on_hold, "{result:?}");
            assert_eq!(state.result_run, 0);
        }
    }

    #[test]
    fn d17_readiness_never_holds() {
        let config = config(ProbeKind::Readiness, probe_spec(10, 0, 1, 1));
        let mut state = adopted();
        assert_eq!(
            state.after_probe(&config, CachedResult::Failure),
            Some(set(ID, CachedResult::Failure))
        );
        assert!(!state.on_hold);
        assert_eq!(
            state.after_probe(&config, CachedResult::Success),
            Some(set(ID, CachedResult::Success))
        );
        assert!(!state.on_hold);
    }

    #[test]
    fn d19_first_success_counts_from_zero_value() {
        let config = config(ProbeKind::Readiness, probe_spec(10, 0, 1, 3));
        let mut state = adopted();
        assert_eq!(state.last_result, CachedResult::Success);
        state.after_probe(&config, CachedResult::Success);
        assert_eq!(state.result_run, 1);
    }

    #[test]
    fn d19_run_carries_over_container_change() {
        let config = config(ProbeKind::Readiness, probe_spec(10, 0, 3, 3));
        let mut state = WorkerState::default();
        state.before_probe(
            &config,
            &observed(Some(&probing_status(ProbeKind::Readiness))),
        );
        assert_eq!(state.after_probe(&config, CachedResult::Success), None);
        assert_eq!(state.after_probe(&config, CachedResult::Success), None);
        let restarted = pod_status(vec![running("app", ID2, at(150), Some(true))], vec![]);
        let step = state.before_probe(&config, &observed(Some(&restarted)));
        assert_eq!(step.writes[1], set(ID2, CachedResult::Failure));
        assert_eq!(
            state.after_probe(&config, CachedResult::Success),
            Some(set(ID2, CachedResult::Success))
        );
    }

    // --- one iteration with a fake runner (no task) ---

    struct Rig {
        context: Arc<WorkerContext<Arc<ScriptedRunner>, Arc<FakeStatuses>>>,
        runner: Arc<ScriptedRunner>,
        statuses: Arc<FakeStatuses>,
        observer: Arc<RecordingObserver>,
        receivers: ResultReceivers,
    }

    /// A prober context that started at `epoch()` on a paused clock.
    fn rig(runner: Arc<ScriptedRunner>) -> Rig {
        let statuses = FakeStatuses::new();
        let observer = Arc::new(RecordingObserver::default());
        let (caches, receivers) = ProbeCaches::new();
        let context = Arc::new(WorkerContext::new(
            runner.clone(),
            statuses.clone(),
            caches,
            Arc::new(TokioClock::new(epoch())),
            observer.clone(),
        ));
        Rig {
            context,
            runner,
            statuses,
            observer,
            receivers,
        }
    }

    impl Rig {
        fn worker(&self, config: WorkerConfig) -> Worker<Arc<ScriptedRunner>, Arc<FakeStatuses>> {
            Worker {
                context: self.context.clone(),
                config,
                state: WorkerState::default(),
                signals: Arc::default(),
            }
        }

        fn cached(&self, kind: ProbeKind, id: &str) -> Option<CachedResult> {
            self.context.caches.get(kind).get(id)
        }
    }

    /// The container started when the prober did, so D5 never applies.
    fn fresh_status(kind: ProbeKind) -> PodStatus {
        pod_status(
            vec![running(
                "app",
                ID,
                epoch(),
                Some(kind != ProbeKind::Startup),
            )],
            vec![],
        )
    }

    #[tokio::test(start_paused = true)]
    async fn d11_errored_verdict_is_discarded() {
        let rig = rig(ScriptedRunner::new(
            [
                Scripted::Return(ProbeResult::Failure),
                Scripted::Error,
                Scripted::Return(ProbeResult::Failure),
            ],
            ProbeResult::Success,
        ));
        rig.statuses
            .set("uid-1", fresh_status(ProbeKind::Readiness));
        let mut worker = rig.worker(config(ProbeKind::Readiness, probe_spec(10, 0, 1, 2)));
        assert!(worker.do_probe().await);
        assert_eq!(worker.state.result_run, 1);
        assert!(worker.do_probe().await, "an errored run continues");
        assert_eq!(worker.state.result_run, 1, "and changes nothing");
        assert_eq!(
            rig.cached(ProbeKind::Readiness, ID),
            Some(CachedResult::Failure),
            "initial value"
        );
        // D19: the error did not break the run of failures.
        assert!(worker.do_probe().await);
        assert_eq!(worker.state.result_run, 2);
        let runs = rig.observer.runs.lock().unwrap().clone();
        let results: Vec<_> = runs.iter().map(|r| r.result).collect();
        assert_eq!(
            results,
            vec![
                Some(CachedResult::Failure),
                None,
                Some(CachedResult::Failure)
            ]
        );
        assert_eq!(
            runs[1].event_reason,
            Some("Unhealthy"),
            "the errored event is still reported"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_unhealthy_run_leaves_its_event_text_as_the_note() {
        let rig = rig(ScriptedRunner::new(
            [
                Scripted::Return(ProbeResult::Failure),
                Scripted::Error,
                Scripted::Return(ProbeResult::Success),
            ],
            ProbeResult::Success,
        ));
        rig.statuses
            .set("uid-1", fresh_status(ProbeKind::Readiness));
        let mut worker = rig.worker(config(ProbeKind::Readiness, probe_spec(10, 0, 1, 3)));
        let note = || rig.context.caches.readiness.note(ID);
        assert!(worker.do_probe().await);
        // Below the failure threshold: the note is there before the verdict.
        assert_eq!(note().as_deref(), Some("Readiness probe failed: "));
        assert!(worker.do_probe().await);
        assert_eq!(
            note().as_deref(),
            Some("Readiness probe errored and resulted in unknown state: boom")
        );
        assert!(worker.do_probe().await);
        assert!(note().is_some(), "a success keeps the last failure");
        worker.cleanup(|| {});
        assert_eq!(note(), None, "W10: the note goes with the result");
    }

    #[tokio::test(start_paused = true)]
    async fn d12_probe_run_is_reported_with_duration() {
        let runner = ScriptedRunner::new(
            [Scripted::Slow(
                Duration::from_millis(1500),
                ProbeResult::Success,
            )],
            ProbeResult::Success,
        );
        let rig = rig(runner);
        rig.statuses.set("uid-1", fresh_status(ProbeKind::Liveness));
        let mut worker = rig.worker(config(ProbeKind::Liveness, default_spec()));
        assert!(worker.do_probe().await);
        let runs = rig.observer.runs.lock().unwrap().clone();
        assert_eq!(
            runs,
            vec![RecordedRun {
                container: "app".to_string(),
                kind: ProbeKind::Liveness,
                container_id: ID.to_string(),
                result: Some(CachedResult::Success),
                event_reason: None,
                duration: Duration::from_millis(1500),
            }]
        );
        let call = &rig.runner.calls()[0];
        assert_eq!(call.kind, ProbeKind::Liveness);
        assert_eq!(call.pod_ip, "10.0.0.7", "P9: the pod IP from the status");
        assert_eq!(
            call.container_id.as_deref(),
            Some("c1"),
            "the runtime's own ID"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn d18_iteration_writes_then_continues() {
        let mut rig = rig(ScriptedRunner::always(ProbeResult::Failure));
        rig.statuses.set("uid-1", fresh_status(ProbeKind::Liveness));
        let mut worker = rig.worker(config(ProbeKind::Liveness, probe_spec(10, 0, 1, 1)));
        assert!(worker.do_probe().await);
        assert_eq!(
            rig.cached(ProbeKind::Liveness, ID),
            Some(CachedResult::Failure)
        );
        let updates: Vec<_> = std::iter::from_fn(|| rig.receivers.liveness.try_recv().ok())
            .map(|u| u.result)
            .collect();
        assert_eq!(updates, vec![CachedResult::Success, CachedResult::Failure]);
        assert!(worker.do_probe().await, "on hold, still continuing");
        assert_eq!(rig.runner.calls().len(), 1);
    }

    // --- the loop, with a paused clock ---

    /// Spawns `config` on `rig`, recording exits.
    fn spawn_on(
        rig: &Rig,
        config: WorkerConfig,
    ) -> (WorkerHandle, Arc<std::sync::atomic::AtomicBool>) {
        let exited = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = exited.clone();
        let handle = spawn(rig.context.clone(), config, move || {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        (handle, exited)
    }

    /// Lets the prober run past its start window so W5 adds no jitter.
    async fn past_start_window() {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }

    /// W5 for workers of `spec` that start with the prober.
    async fn first_probes_spread_over_one_period(spec: ProbeSpec) {
        // 32 workers start with the prober. Each first probe waits a uniform
        // fraction of the period, so all 32 land in the same half of
        // it with probability 2 * 2^-32 (under 1e-9): a test that needs both
        // halves fails without jitter (all at 0) and almost never with it.
        const WORKERS: usize = 32;
        let period = spec.period().as_secs_f64();
        let names: Vec<String> = (0..WORKERS).map(|i| format!("app{i}")).collect();
        let mut rig = rig(ScriptedRunner::always(ProbeResult::Success));
        // More workers than the updates channel holds: drain it, or the
        // 21st worker's first write would wait forever (R6).
        let (_, closed) = tokio::sync::mpsc::channel(1);
        let mut updates = std::mem::replace(&mut rig.receivers.liveness, closed);
        tokio::spawn(async move { while updates.recv().await.is_some() {} });
        let statuses = names
            .iter()
            .enumerate()
            .map(|(i, name)| running(name, &format!("containerd://c{i}"), epoch(), Some(true)))
            .collect();
        rig.statuses.set("uid-1", pod_status(statuses, vec![]));
        let pod = pod(
            "uid-1",
            names.iter().map(|n| container(n)).collect(),
            vec![],
        );
        let handles: Vec<_> = names
            .iter()
            .map(|name| {
                let config = config_in(ProbeKind::Liveness, spec.clone(), pod.clone(), name);
                spawn_on(&rig, config).0
            })
            .collect();
        // Past the latest possible first probe (one period). Early workers
        // probe a second time by then, so only each one's first call counts.
        tokio::time::sleep(spec.period().mul_f64(1.1)).await;
        let mut first: HashMap<String, f64> = HashMap::new();
        for call in rig.runner.calls() {
            let since_start = (call.at - rig.context.started).as_secs_f64();
            first
                .entry(call.container_id.unwrap())
                .or_insert(since_start);
        }
        assert_eq!(first.len(), WORKERS, "every worker probed: {first:?}");
        // The timer rounds a deadline up to the next millisecond, so a
        // fraction just under 1 fires at exactly one period.
        assert!(
            first.values().all(|t| (0.0..=period).contains(t)),
            "every first probe within one period of the prober start: {first:?}"
        );
        let early = first.values().filter(|t| **t < period / 2.0).count();
        assert!(
            0 < early && early < WORKERS,
            "first probes spread over the period, not all in one half \
             ({early} of {WORKERS} in the first half): {first:?}"
        );
        for handle in handles {
            handle.stop();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn w5_first_probes_spread_over_one_period_of_prober_start() {
        first_probes_spread_over_one_period(default_spec()).await;
    }

    #[tokio::test(start_paused = true)]
    async fn w5_first_probes_spread_over_a_millisecond_period() {
        first_probes_spread_over_one_period(millisecond_spec(100, 1, 3)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn w5_no_jitter_once_the_prober_ran_one_period() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        rig.statuses.set("uid-1", fresh_status(ProbeKind::Liveness));
        // Exactly one period: Go's `period > time.Since(start)` is false.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let origin = Instant::now();
        let (_handle, _) = spawn_on(&rig, config(ProbeKind::Liveness, default_spec()));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(rig.runner.call_times(origin), vec![0.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn w6_first_probe_immediately_then_every_period() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        rig.statuses.set("uid-1", fresh_status(ProbeKind::Liveness));
        past_start_window().await;
        let origin = Instant::now();
        let (_handle, _) = spawn_on(&rig, config(ProbeKind::Liveness, probe_spec(7, 0, 1, 3)));
        tokio::time::sleep(Duration::from_millis(21_500)).await;
        assert_eq!(rig.runner.call_times(origin), vec![0.0, 7.0, 14.0, 21.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn w7_missed_ticks_are_dropped() {
        let slow = Scripted::Slow(Duration::from_secs(25), ProbeResult::Success);
        let rig = rig(ScriptedRunner::new([slow], ProbeResult::Success));
        rig.statuses.set("uid-1", fresh_status(ProbeKind::Liveness));
        past_start_window().await;
        let origin = Instant::now();
        let (_handle, _) = spawn_on(&rig, config(ProbeKind::Liveness, default_spec()));
        tokio::time::sleep(Duration::from_millis(40_500)).await;
        // One late tick fires at once; then the original 10 s grid resumes.
        assert_eq!(rig.runner.call_times(origin), vec![0.0, 25.0, 30.0, 40.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn w6_w7_millisecond_period_keeps_its_grid_and_runs_serially() {
        // The second run outlasts the 250 ms period (a timeout of at least a
        // second allows it): the next run waits for it, the late tick fires
        // once, then the grid resumes. Runs never overlap.
        let slow = Scripted::Slow(Duration::from_millis(600), ProbeResult::Success);
        let script = [Scripted::Return(ProbeResult::Success), slow];
        let rig = rig(ScriptedRunner::new(script, ProbeResult::Success));
        rig.statuses.set("uid-1", fresh_status(ProbeKind::Liveness));
        past_start_window().await;
        let origin = Instant::now();
        let spec = millisecond_spec(250, 1, 3);
        let (_handle, _) = spawn_on(&rig, config(ProbeKind::Liveness, spec));
        tokio::time::sleep(Duration::from_millis(1_900)).await;
        assert_eq!(
            rig.runner.call_times(origin),
            vec![0.0, 0.25, 0.85, 1.0, 1.25, 1.5, 1.75]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn d13_d14_thresholds_count_runs_on_a_millisecond_period() {
        // successThreshold 2, failureThreshold 3, every 100 ms: the cached
        // result changes on the 2nd success and the 3rd failure, and only
        // then; twenty runs write three updates (W4's initial one included),
        // so status writes follow transitions, not the probe rate.
        let script = [
            ProbeResult::Success,
            ProbeResult::Success,
            ProbeResult::Failure,
            ProbeResult::Failure,
            ProbeResult::Failure,
        ]
        .map(Scripted::Return);
        let mut rig = rig(ScriptedRunner::new(script, ProbeResult::Failure));
        rig.statuses
            .set("uid-1", fresh_status(ProbeKind::Readiness));
        past_start_window().await;
        let origin = Instant::now();
        let spec = millisecond_spec(100, 2, 3);
        let (_handle, _) = spawn_on(&rig, config(ProbeKind::Readiness, spec));
        let mut cached = Vec::new();
        for millis in [50, 150, 350, 450, 1_950] {
            tokio::time::sleep_until(origin + Duration::from_millis(millis)).await;
            cached.push(rig.cached(ProbeKind::Readiness, ID));
        }
        use CachedResult::{Failure, Success};
        assert_eq!(
            cached,
            [Failure, Success, Success, Failure, Failure].map(Some)
        );
        assert_eq!(rig.runner.calls().len(), 20);
        let updates: Vec<_> = std::iter::from_fn(|| rig.receivers.readiness.try_recv().ok())
            .map(|u| u.result)
            .collect();
        assert_eq!(updates, vec![Failure, Success, Failure]);
    }

    #[tokio::test(start_paused = true)]
    async fn w8_manual_trigger_resets_ticker() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        rig.statuses
            .set("uid-1", fresh_status(ProbeKind::Readiness));
        past_start_window().await;
        let origin = Instant::now();
        let (handle, _) = spawn_on(&rig, config(ProbeKind::Readiness, default_spec()));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(handle.trigger());
        tokio::time::sleep(Duration::from_millis(20_500)).await;
        assert_eq!(rig.runner.call_times(origin), vec![0.0, 3.0, 13.0, 23.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn w8_trigger_and_due_tick_together_probe_once() {
        // The first probe outlasts the tick at 10 s; a trigger arrives
        // meanwhile. Both are ready when it returns: one probe, not two.
        let slow = Scripted::Slow(Duration::from_millis(10_500), ProbeResult::Success);
        let rig = rig(ScriptedRunner::new([slow], ProbeResult::Success));
        rig.statuses
            .set("uid-1", fresh_status(ProbeKind::Readiness));
        past_start_window().await;
        let origin = Instant::now();
        let (handle, _) = spawn_on(&rig, config(ProbeKind::Readiness, default_spec()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(handle.trigger());
        tokio::time::sleep(Duration::from_secs(16)).await;
        assert_eq!(rig.runner.call_times(origin), vec![0.0, 10.5, 20.5]);
    }

    #[tokio::test(start_paused = true)]
    async fn w8_second_pending_trigger_is_dropped() {
        let slow = Scripted::Slow(Duration::from_secs(5), ProbeResult::Success);
        let rig = rig(ScriptedRunner::new([slow], ProbeResult::Success));
        rig.statuses
            .set("uid-1", fresh_status(ProbeKind::Readiness));
        past_start_window().await;
        let origin = Instant::now();
        let (handle, _) = spawn_on(&rig, config(ProbeKind::Readiness, default_spec()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(handle.trigger(), "the slot is free");
        assert!(!handle.trigger(), "the slot is taken while the probe runs");
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(rig.runner.call_times(origin), vec![0.0, 5.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn w9_stop_is_idempotent_and_cancels_the_running_probe() {
        // An hour-long probe, as a pod author may set: stopping the worker
        // must not wait it out.
        let slow = Scripted::Slow(Duration::from_secs(3600), ProbeResult::Success);
        let rig = rig(ScriptedRunner::new([slow], ProbeResult::Success));
        rig.statuses.set("uid-1", fresh_status(ProbeKind::Liveness));
        past_start_window().await;
        let (handle, exited) = spawn_on(&rig, config(ProbeKind::Liveness, default_spec()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(rig.runner.calls().len(), 1, "the probe is in flight");
        for _ in 0..10 {
            handle.stop();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            exited.load(std::sync::atomic::Ordering::SeqCst),
            "the worker waits for its in-flight probe"
        );
        assert_eq!(rig.runner.calls().len(), 1);
        assert_eq!(rig.cached(ProbeKind::Liveness, ID), None);
        handle.stop();
        assert!(!handle.trigger(), "a stopped worker takes no triggers");
    }

    #[tokio::test(start_paused = true)]
    async fn w10_cleanup_removes_result_and_reports_stop() {
        for kind in ProbeKind::ALL {
            let rig = rig(ScriptedRunner::always(ProbeResult::Success));
            rig.statuses.set("uid-1", fresh_status(kind));
            past_start_window().await;
            let (handle, exited) = spawn_on(&rig, config(kind, default_spec()));
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(rig.cached(kind, ID), Some(CachedResult::Success), "{kind}");
            handle.stop();
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(exited.load(std::sync::atomic::Ordering::SeqCst));
            assert_eq!(rig.cached(kind, ID), None, "{kind}");
            let stopped = rig.observer.stopped.lock().unwrap().clone();
            assert_eq!(
                stopped,
                vec![("uid-1".to_string(), "app".to_string(), kind)]
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn w10_terminal_pod_ends_worker_and_clears_result() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        rig.statuses
            .set("uid-1", fresh_status(ProbeKind::Readiness));
        past_start_window().await;
        let (_handle, exited) = spawn_on(&rig, config(ProbeKind::Readiness, default_spec()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            rig.cached(ProbeKind::Readiness, ID),
            Some(CachedResult::Success)
        );
        let mut done = fresh_status(ProbeKind::Readiness);
        done.phase = Some("Succeeded".to_string());
        rig.statuses.set("uid-1", done);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(exited.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(rig.cached(ProbeKind::Readiness, ID), None);
    }

    #[tokio::test(start_paused = true)]
    async fn w14_panic_in_probe_is_swallowed() {
        let logs = LogCapture::default();
        let _subscriber = tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(logs.clone())
                .with_ansi(false)
                .finish(),
        );
        let rig = rig(ScriptedRunner::new([Scripted::Panic], ProbeResult::Success));
        rig.statuses
            .set("uid-1", fresh_status(ProbeKind::Readiness));
        past_start_window().await;
        let origin = Instant::now();
        let (_handle, exited) = spawn_on(&rig, config(ProbeKind::Readiness, default_spec()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            rig.cached(ProbeKind::Readiness, ID),
            Some(CachedResult::Failure)
        );
        // The worker's log line names the pod and container it is about.
        let text = logs.text();
        let line = text
            .lines()
            .find(|l| l.contains("probe iteration panicked"))
            .unwrap_or_else(|| panic!("no panic line in {text:?}"));
        for field in [
            "namespace=default",
            "pod=pod-uid-1",
            "pod_uid=uid-1",
            "container=app",
            "probe=Readiness",
        ] {
            assert!(line.contains(field), "{field} missing from {line:?}");
        }
        tokio::time::sleep(Duration::from_millis(9_500)).await;
        assert!(!exited.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(rig.runner.call_times(origin), vec![0.0, 10.0]);
        assert_eq!(
            rig.cached(ProbeKind::Readiness, ID),
            Some(CachedResult::Success)
        );
    }

    /// What a `tracing` subscriber writes, for tests that read log lines.
    #[derive(Clone, Default)]
    struct LogCapture(Arc<std::sync::Mutex<Vec<u8>>>);

    impl LogCapture {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
        }
    }

    impl std::io::Write for LogCapture {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("log buffer").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
        type Writer = LogCapture;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn restartable_init_container_and_field_path() {
        let pod = pod(
            "uid-1",
            vec![container("main")],
            vec![sidecar("side"), container("init")],
        );
        let side = config_in(ProbeKind::Liveness, default_spec(), pod.clone(), "side");
        assert!(side.is_restartable_init_container());
        assert_eq!(side.field_path(), "spec.initContainers{side}");
        let main = config_in(ProbeKind::Liveness, default_spec(), pod, "main");
        assert!(!main.is_restartable_init_container());
        assert_eq!(main.field_path(), "spec.containers{main}");
        assert_eq!(runtime_container_id("containerd://abc"), "abc");
        assert_eq!(runtime_container_id("abc"), "abc");
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let clock = TokioClock::new(epoch());
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), at(90));
    }
}
