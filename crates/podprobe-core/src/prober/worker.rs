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
//!
//! - `clock`: wall-clock time, the system's or one on tokio's clock;
//! - `config`: what a worker probes ([`WorkerConfig`]);
//! - `state`: the pure state machine ([`WorkerState`]);
//! - this module: the traits a worker runs on and its async loop.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::PodStatus;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::Notify;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::Instrument;

use crate::prober::probe_rates::ProbeRates;
use crate::prober::results::{CachedResult, ProbeCaches};
use crate::spec::probe_spec::extension::MIN_PERIOD_MILLISECONDS;
use crate::spec::verdict::reasons;
use crate::spec::{ProbeKind, ProbeSpec, ProbeTarget, ProbeVerdict};
use crate::util::pod::{ContainerIdentity, pod_name, pod_namespace, runtime_container_id};

mod clock;
mod config;
mod state;

pub use clock::{Clock, SystemClock, TokioClock};
pub use config::WorkerConfig;
pub use state::{Action, CacheWrite, Observation, Step, WorkerState, verdict_result};

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
    fn pod_status(&self, pod_uid: &str) -> Option<Arc<PodStatus>>;
}

impl<T: StatusSource> StatusSource for Arc<T> {
    fn pod_status(&self, pod_uid: &str) -> Option<Arc<PodStatus>> {
        T::pod_status(self, pod_uid)
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
    /// How many runs in a row had `result` (D13), counting this one; for an
    /// errored run, the count of the runs before it.
    pub consecutive: i64,
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
            status: status.as_deref(),
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
        let consecutive = result.map_or(self.state.result_run, |r| self.state.run_after(r));
        self.context.observer.probe_ran(&ProbeRun {
            config: &self.config,
            container_id: &container_id,
            verdict: &verdict,
            result,
            consecutive,
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

    use super::*;
    use crate::prober::results::ResultReceivers;
    use crate::spec::ProbeResult;
    use crate::testing::*;

    const ID: &str = "containerd://c1";

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
        let mut worker = rig.worker(worker_config(ProbeKind::Readiness, probe_spec(10, 0, 1, 2)));
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
        let mut worker = rig.worker(worker_config(ProbeKind::Readiness, probe_spec(10, 0, 1, 3)));
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
        let mut worker = rig.worker(worker_config(ProbeKind::Liveness, default_spec()));
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
        let mut worker = rig.worker(worker_config(ProbeKind::Liveness, probe_spec(10, 0, 1, 1)));
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
                let config = worker_config_in(ProbeKind::Liveness, spec.clone(), pod.clone(), name);
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
        let (_handle, _) = spawn_on(&rig, worker_config(ProbeKind::Liveness, default_spec()));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(rig.runner.call_times(origin), vec![0.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn w6_first_probe_immediately_then_every_period() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        rig.statuses.set("uid-1", fresh_status(ProbeKind::Liveness));
        past_start_window().await;
        let origin = Instant::now();
        let (_handle, _) = spawn_on(
            &rig,
            worker_config(ProbeKind::Liveness, probe_spec(7, 0, 1, 3)),
        );
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
        let (_handle, _) = spawn_on(&rig, worker_config(ProbeKind::Liveness, default_spec()));
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
        let (_handle, _) = spawn_on(&rig, worker_config(ProbeKind::Liveness, spec));
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
        let (_handle, _) = spawn_on(&rig, worker_config(ProbeKind::Readiness, spec));
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
        let (handle, _) = spawn_on(&rig, worker_config(ProbeKind::Readiness, default_spec()));
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
        let (handle, _) = spawn_on(&rig, worker_config(ProbeKind::Readiness, default_spec()));
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
        let (handle, _) = spawn_on(&rig, worker_config(ProbeKind::Readiness, default_spec()));
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
        let (handle, exited) = spawn_on(&rig, worker_config(ProbeKind::Liveness, default_spec()));
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
            let (handle, exited) = spawn_on(&rig, worker_config(kind, default_spec()));
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
        let (_handle, exited) = spawn_on(&rig, worker_config(ProbeKind::Readiness, default_spec()));
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
        let (_handle, exited) = spawn_on(&rig, worker_config(ProbeKind::Readiness, default_spec()));
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
        let side = worker_config_in(ProbeKind::Liveness, default_spec(), pod.clone(), "side");
        assert!(side.is_restartable_init_container());
        assert_eq!(side.field_path(), "spec.initContainers{side}");
        let main = worker_config_in(ProbeKind::Liveness, default_spec(), pod, "main");
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
