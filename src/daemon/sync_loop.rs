//! The daemon's sync loop: it feeds the [`PodTracker`] what happens on the
//! node (the watch's pods, probe results, annotation readings, the status
//! resync, pause ends) and carries out the [`Effect`]s it asks for, against
//! the prober's workers, the status [`Patcher`], the Event queue, the
//! marker writer and the container [`Killer`]. What to do lives in the
//! tracker; this file only does it.
//!
//! [`SyncLoop`] is generic over its probe runner, status API and killer, so
//! that the unit tests below drive it on a paused clock with scripted
//! probes, a fake API server and a killer that records what it is asked;
//! [`super::run`] wires the real ones.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use podprobe_core::prober::events::recorder::EventRecorder;
use podprobe_core::prober::manager::{Killer, ProberManager};
use podprobe_core::prober::pod_store::{PodStore, StartedWriter};
use podprobe_core::prober::pod_tracker::{Effect, Input, Now, PodTracker, Reading, WorkerCommand};
use podprobe_core::prober::probe_ledger::ProbeLedger;
use podprobe_core::prober::results::{ResultReceivers, ResultUpdate};
use podprobe_core::prober::worker::ProbeRunner;
use podprobe_core::spec::probe_spec::budget::PodBudget;
use podprobe_core::util::pod::all_container_statuses;

use super::marker_sync::MarkerWriter;
use super::metric_set::MetricSet;
use super::readiness_floor::{FloorDecided, FloorGate};
use crate::api::patcher::{Patcher, StatusApi};
use crate::api::pods::PodUpdate;
use crate::server::health::Health;

/// How often every pod's desired status and kills are checked again, besides
/// reacting to changes (the kubelet's status manager re-checks every 10 s).
pub const STATUS_RESYNC_PERIOD: Duration = Duration::from_secs(10);

/// How long shutdown waits for in-flight status patches.
pub(super) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Annotations parsed at a time, each on a blocking thread: at a restart
/// every pod of the node is read at once, and each reading may hold up to
/// its pod's budgets while it runs.
pub(super) const READING_THREADS: usize = 2;

/// The sync loop: the tracker and what carries out its effects; generic
/// over the probe runner, the status API and the container killer, so that
/// unit tests drive it with scripted probes, a fake API server and a killer
/// that records what it is asked.
pub(super) struct SyncLoop<R: ProbeRunner, A: StatusApi, K: Killer> {
    pub(super) tracker: PodTracker,
    /// Annotations read at a time ([`READING_THREADS`]).
    pub(super) reading_slots: Arc<Semaphore>,
    pub(super) manager: ProberManager<R, Arc<PodStore>>,
    pub(super) patcher: Patcher<A>,
    pub(super) cache: Arc<PodStore>,
    /// Records podprobe's `started` verdicts in `cache` for the workers.
    pub(super) started: StartedWriter,
    /// Where its Events go (the Event queue's sink; a recorder in tests).
    pub(super) events: Arc<dyn EventRecorder>,
    pub(super) metrics: MetricSet,
    pub(super) health: Health,
    /// Stops containers for failed probes (K2, K3, K7).
    pub(super) killer: K,
    /// Where annotations read off the main loop come back ([`Reading`]).
    pub(super) readings: mpsc::UnboundedSender<Reading>,
    /// Writes the pods' markers (MK3, MK4).
    pub(super) markers: MarkerWriter,
    /// The last runs the workers report (PS1), counted in
    /// [`SyncLoop::per_pod_entries`].
    pub(super) ledger: Arc<ProbeLedger>,
    /// Holds gates for readiness floors (WG3) between the tracker's
    /// intents and the patcher.
    pub(super) floor: FloorGate,
}

impl<R: ProbeRunner, A: StatusApi, K: Killer> SyncLoop<R, A, K> {
    pub(super) async fn run(
        mut self,
        events: impl Stream<Item = PodUpdate>,
        mut results: ResultReceivers,
        mut readings: mpsc::UnboundedReceiver<Reading>,
        mut floor_decided: mpsc::UnboundedReceiver<FloorDecided>,
        shutdown: impl Future<Output = ()>,
    ) {
        let mut events = std::pin::pin!(events);
        let mut shutdown = std::pin::pin!(shutdown);
        let mut resync = tokio::time::interval(STATUS_RESYNC_PERIOD);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.health.beat();
            let pause_end = self.pause_wakeup();
            tokio::select! {
                () = &mut shutdown => break,
                Some(event) = events.next() => self.on_pod_event(event),
                Some(reading) = readings.recv() => self.on_reading(reading),
                Some(decided) = floor_decided.recv() => self.on_floor_decided(decided),
                Some(update) = results.readiness.recv() => self.on_result(&update),
                Some(update) = results.startup.recv() => self.on_result(&update),
                Some(update) = results.liveness.recv() => self.on_result(&update),
                _ = resync.tick() => self.resync(),
                () = tokio::time::sleep_until(pause_end.unwrap_or_else(Instant::now)),
                    if pause_end.is_some() => self.end_pauses(),
            }
        }
        self.shutdown(results).await;
    }

    async fn shutdown(self, results: ResultReceivers) {
        tracing::info!(
            workers = self.manager.worker_count(),
            "stopping probe workers"
        );
        self.manager.cleanup_pods(&HashSet::new());
        // Workers waiting to report a result must not wait for us any more.
        drop(results);
        if !self.patcher.shutdown(SHUTDOWN_TIMEOUT).await {
            tracing::warn!("some pod status patches were still in flight at shutdown");
        }
        tracing::info!("podprobe stopped");
    }

    fn on_pod_event(&mut self, event: PodUpdate) {
        let input = match event {
            PodUpdate::Applied(pod, unknown) => Input::PodApplied { pod, unknown },
            PodUpdate::Deleted(pod) => Input::PodDeleted(pod),
            PodUpdate::Synced => {
                self.health.set_pods_synced(true);
                Input::Relisted(self.cache.uids())
            }
        };
        self.step(input);
    }

    fn on_reading(&mut self, reading: Reading) {
        let current = self.cache.get(&reading.uid);
        self.step(Input::AnnotationRead { reading, current });
    }

    /// WG3: a readiness floor's decision came back.
    fn on_floor_decided(&mut self, decided: FloorDecided) {
        let pod = self.cache.get(&decided.uid);
        if let Some(intent) = self.floor.decided(decided, pod) {
            self.patcher.submit(intent);
        }
    }

    /// K1: a cached result changed.
    fn on_result(&mut self, update: &ResultUpdate) {
        let pod = self.cache.get(&update.pod_uid);
        self.step(Input::Result {
            pod,
            update: update.clone(),
        });
    }

    fn resync(&mut self) {
        let pods = self.cache.pods();
        self.forget_replaced_kills(&pods);
        self.manager.context().rates.forget_idle();
        let metrics = &self.metrics;
        metrics.probes.set_workers(self.manager.worker_count());
        metrics.watch.set_pods_watched(pods.len());
        metrics
            .tracker
            .set_pods_tracked(self.tracker.tracked_pods());
        metrics.patches.set_patch_tasks(self.patcher.tasks());
        for (structure, entries) in self.per_pod_entries() {
            metrics.tracker.set_per_pod_entries(structure, entries);
        }
        self.step(Input::Resync(pods));
    }

    /// When the loop next wakes to end pauses whose time came (LP3).
    fn pause_wakeup(&self) -> Option<Instant> {
        self.tracker.pause_timer(self.now())
    }

    /// The time of a step now.
    fn now(&self) -> Now {
        Now {
            at: Instant::now(),
            wall: self.manager.context().clock.now(),
        }
    }

    fn end_pauses(&mut self) {
        self.step(Input::PauseTimer(self.cache.pods()));
    }

    /// Entries of every structure kept per pod or container besides those
    /// `podprobe_workers`, `podprobe_pods_tracked` and
    /// `podprobe_patch_tasks` count (#39), by name: each follows the pods on
    /// the node and is empty once they are gone (the probe-run budgets a
    /// minute after a pod's last run, container facts at the next resync).
    pub(super) fn per_pod_entries(&self) -> [(&'static str, usize); 8] {
        [
            ("pod_store", self.cache.entries()),
            ("results", self.manager.caches().entries()),
            ("probe_rates", self.manager.context().rates.entries()),
            ("status_intents", self.patcher.pods()),
            ("markers", self.markers.pods()),
            ("ledger", self.ledger.pods()),
            ("containers", self.killer.containers()),
            ("readiness_floor", self.floor.pods()),
        ]
    }

    /// Forgets the IDs of stopped containers no pod status lists any more
    /// (the node agent replaced them): a long-lived pod whose container is
    /// killed again and again must not grow the set.
    fn forget_replaced_kills(&self, pods: &[Arc<Pod>]) {
        let listed: HashSet<String> = pods.iter().flat_map(|pod| container_ids(pod)).collect();
        self.killer.retain(&listed);
    }

    /// Feeds `input` to the tracker now and carries out what it asks for.
    fn step(&mut self, input: Input) {
        for effect in self.tracker.step(input, self.now(), &self.manager) {
            self.carry_out(effect);
        }
    }

    fn carry_out(&mut self, effect: Effect) {
        match effect {
            Effect::ReadAnnotation {
                uid,
                pod,
                annotation,
                budget,
            } => self.read_annotation(uid, pod, annotation, budget),
            Effect::Workers(command) => {
                if let WorkerCommand::Forget(pod) = &command
                    && let Some(uid) = pod.metadata.uid.as_deref()
                {
                    self.patcher.forget(uid);
                    self.markers.forget(uid);
                    self.floor.forget(uid);
                    self.events.forget_pod(uid);
                }
                command.apply(&self.manager);
            }
            Effect::ShowStarted { uid, started } => self.started.set_started(&uid, started),
            Effect::Patch(intent) => {
                let pod = self.cache.get(&intent.uid);
                if let Some(intent) = self.floor.admit(intent, pod) {
                    self.patcher.submit(intent);
                }
            }
            Effect::WriteMarkers { pod, desired } => self.markers.write(&pod, &desired),
            Effect::Kill { pod, kill } => self.killer.kill(&pod, kill),
            Effect::Record(event) => self.events.record(event),
            Effect::BudgetRefused(budget) => self.metrics.budgets.budget_refused(budget),
            Effect::PausedPods(count) => self.metrics.tracker.set_liveness_paused(count),
        }
    }

    /// Parses `annotation` of `pod` on a blocking thread, at most
    /// [`READING_THREADS`] at a time; the result comes back to
    /// [`Self::on_reading`].
    fn read_annotation(&self, uid: String, pod: Arc<Pod>, annotation: String, budget: PodBudget) {
        let (readings, slots) = (self.readings.clone(), self.reading_slots.clone());
        tokio::spawn(async move {
            // Never closed.
            let Ok(slot) = slots.acquire_owned().await else {
                return;
            };
            tokio::task::spawn_blocking(move || {
                let reading = Reading::read(uid, pod, annotation, budget);
                drop(slot);
                // The loop is gone only at shutdown.
                let _ = readings.send(reading);
            });
        });
    }
}

fn container_ids(pod: &Pod) -> HashSet<String> {
    all_container_statuses(pod)
        .filter_map(|c| c.container_id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodReadinessGate;

    use super::*;
    use crate::api::patcher::NoopPatchObserver;
    use crate::api::patcher::RetryPolicy;
    use crate::api::pdb_guards::PdbGuards;
    use crate::daemon::telemetry::Telemetry;
    use crate::testing::{
        FakeApi, RecordingEvents, RecordingKiller, RecordingMarkers, Scripted, ScriptedRunner,
        first_container_status,
    };
    use futures::future::BoxFuture;
    use k8s_openapi::api::core::v1::PodCondition;
    use podprobe_core::prober::events::record::reasons;
    use podprobe_core::prober::floor_keeper::{FloorAsk, FloorVerdict};
    use podprobe_core::prober::markers::MarkerKeys;
    use podprobe_core::prober::pod_store::PodStoreWriter;
    use podprobe_core::prober::pod_tracker::{AnnotationRules, EDIT_DEBOUNCE, TrackerConfig};
    use podprobe_core::prober::probe_rates::ProbeRates;
    use podprobe_core::prober::results::ProbeCaches;
    use podprobe_core::prober::worker::ProbeObserver;
    use podprobe_core::prober::worker::{Clock, NoopObserver, TokioClock};
    use podprobe_core::spec::ProbeKind;
    use podprobe_core::spec::ProbeResult;
    use podprobe_core::spec::destinations::Destinations;
    use podprobe_core::spec::probe_spec::budget::{BudgetLimits, NodeBudget};
    use podprobe_core::spec::probe_spec::timeout_caps::TimeoutCaps;
    use podprobe_core::status::conditions::{CONTAINERS_READY, POD_READY};
    use podprobe_core::status::gate::FloorHold;
    use podprobe_core::status::patch_decision::own_condition;

    use crate::daemon::readiness_floor::FloorDecider;
    use podprobe_core::status::{Mode, PROBES_ANNOTATION};
    use podprobe_core::testing::{
        TRACKED_ANNOTATION as ANNOTATION, TRACKED_ID as ID, tracked_pod as pod,
    };
    use podprobe_core::util::pod::pod_name;
    use podprobe_core::util::watch_activity::WatchActivity;

    const MODES: [Mode; 2] = [Mode::Gate, Mode::Authority];

    /// The sync loop as `run` wires it, over a scripted prober, a fake API
    /// server holding the pod and a killer that records; the tests play the
    /// watch, the annotation readings and the workers' results into it (its
    /// `select!`) by hand.
    struct Harness {
        daemon: SyncLoop<Arc<ScriptedRunner>, Arc<FakeApi>, RecordingKiller>,
        /// What every pod's probes hold together.
        node_budget: NodeBudget,
        runner: Arc<ScriptedRunner>,
        api: Arc<FakeApi>,
        killer: RecordingKiller,
        /// Plays the watch.
        cache: PodStoreWriter,
        results: ResultReceivers,
        readings: mpsc::UnboundedReceiver<Reading>,
        events: Arc<RecordingEvents>,
        markers: RecordingMarkers,
        /// The readiness floor's decisions, as scripted.
        floor: Arc<ScriptedFloor>,
        floor_decided: mpsc::UnboundedReceiver<FloorDecided>,
    }

    /// Answers the readiness floor's decisions with the verdicts it is
    /// given, in turn, then lets go; counts the units given back.
    #[derive(Default)]
    struct ScriptedFloor {
        verdicts: std::sync::Mutex<std::collections::VecDeque<FloorVerdict>>,
        given_back: std::sync::atomic::AtomicUsize,
    }

    impl FloorDecider for ScriptedFloor {
        fn decide(
            &self,
            _pod: Arc<Pod>,
            _ask: FloorAsk,
            _failures: u32,
        ) -> BoxFuture<'static, FloorVerdict> {
            let next = self.verdicts.lock().unwrap().pop_front();
            Box::pin(std::future::ready(next.unwrap_or(FloorVerdict::Release)))
        }

        fn give_back(&self, _pod: Arc<Pod>) -> BoxFuture<'static, ()> {
            self.given_back
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(std::future::ready(()))
        }
    }

    fn sync_loop(mode: Mode, pod: &Pod, runner: Arc<ScriptedRunner>) -> Harness {
        build_sync_loop(mode, pod, runner, Observer::None)
    }

    /// What the harness's workers report their runs to.
    enum Observer {
        None,
        /// `podprobe run`'s: the ledger and the runs' Events, with probe-run
        /// budgets of `pod` and `node` runs a second.
        Telemetry {
            pod: u32,
            node: u32,
        },
    }

    fn build_sync_loop(
        mode: Mode,
        pod: &Pod,
        runner: Arc<ScriptedRunner>,
        observed: Observer,
    ) -> Harness {
        let cache = PodStoreWriter::new();
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(crate::testing::epoch()));
        let (caches, results) = ProbeCaches::new();
        let events = Arc::new(RecordingEvents::default());
        let ledger = Arc::new(ProbeLedger::default());
        let metrics = MetricSet::new(WatchActivity::new());
        let (observer, rates): (Arc<dyn ProbeObserver>, _) = match observed {
            Observer::None => (Arc::new(NoopObserver), ProbeRates::unlimited()),
            Observer::Telemetry { pod, node } => (
                Arc::new(Telemetry::new(
                    metrics.probes.clone(),
                    metrics.budgets.clone(),
                    events.clone(),
                    ledger.clone(),
                    clock.clone(),
                )),
                ProbeRates::new(pod, node),
            ),
        };
        let manager = ProberManager::new(
            runner.clone(),
            cache.as_reader(),
            caches,
            clock.clone(),
            observer,
        )
        .with_probe_rates(rates);
        let api = FakeApi::new(pod.clone(), false);
        let patcher = Patcher::new(
            api.clone(),
            clock,
            Arc::new(NoopPatchObserver),
            RetryPolicy::default(),
        );
        let killer = RecordingKiller::default();
        let markers_api = RecordingMarkers::default();
        let (readings_sender, readings) = mpsc::unbounded_channel();
        let node_budget = NodeBudget::new();
        let tracker = PodTracker::new(
            TrackerConfig {
                mode,
                annotation_rules: Some(AnnotationRules {
                    destinations: Destinations::default(),
                    pod_network: false,
                }),
                budget: BudgetLimits::default(),
                node_budget: node_budget.clone(),
                max_liveness_pause: podprobe_core::prober::liveness_pause::DEFAULT_MAX_PAUSE,
                marker_keys: MarkerKeys::new(["role".to_string()]),
                timeout_caps: TimeoutCaps {
                    exec: Duration::from_secs(60),
                    network: Duration::from_secs(60),
                },
            },
            Box::new(rand::random::<f64>),
        );
        let markers = MarkerWriter::new(markers_api.clone(), metrics.markers.clone());
        let floor = Arc::new(ScriptedFloor::default());
        let (decided, floor_decided) = mpsc::unbounded_channel();
        let floor_gate = FloorGate::new(
            floor.clone(),
            decided,
            ledger.clone(),
            PdbGuards::default(),
            events.clone(),
            metrics.workload_guard.clone(),
        );
        let daemon = SyncLoop {
            tracker,
            reading_slots: Arc::new(Semaphore::new(READING_THREADS)),
            manager,
            patcher,
            cache: cache.as_reader(),
            started: cache.started_writer(),
            events: events.clone(),
            metrics,
            health: Health::new(crate::daemon::HEALTH_STALE_AFTER, WatchActivity::new()),
            killer: killer.clone(),
            readings: readings_sender,
            markers,
            ledger,
            floor: floor_gate,
        };
        Harness {
            daemon,
            node_budget,
            runner,
            api,
            killer,
            cache,
            results,
            readings,
            events,
            markers: markers_api,
            floor,
            floor_decided,
        }
    }

    impl Harness {
        /// The watch delivers `pod`.
        fn applied(&mut self, pod: &Pod) {
            let pod = Arc::new(pod.clone());
            self.cache.insert(pod.clone());
            self.daemon
                .on_pod_event(PodUpdate::Applied(pod, Vec::new()));
        }

        /// The watch says `pod` is gone.
        fn deleted(&mut self, pod: &Pod) {
            self.cache.remove(pod);
            self.daemon
                .on_pod_event(PodUpdate::Deleted(Arc::new(pod.clone())));
        }

        /// The readiness floor's next decision comes back to the loop.
        async fn floor_decision(&mut self) {
            let decided = self.floor_decided.recv().await.expect("a decision");
            self.daemon.on_floor_decided(decided);
        }

        /// The annotation reading the loop asked for comes back to it.
        async fn read(&mut self) {
            let reading = self.readings.recv().await.expect("a reading");
            self.daemon.on_reading(reading);
        }

        /// The watch delivers a new pod, and in gate mode the reading of its
        /// annotation comes back.
        async fn start(&mut self, pod: &Pod) {
            self.applied(pod);
            if self.daemon.tracker.mode() == Mode::Gate {
                self.read().await;
            }
        }

        /// Every result the workers reported so far goes to the loop.
        fn feed_results(&mut self) {
            let results = &mut self.results;
            for updates in [
                &mut results.readiness,
                &mut results.startup,
                &mut results.liveness,
            ] {
                while let Ok(update) = updates.try_recv() {
                    self.daemon.on_result(&update);
                }
            }
        }

        /// W5: workers of a prober that has run for a period start without
        /// jitter, so that their runs fall on known instants, the first at
        /// once.
        async fn past_start_jitter(&self) {
            tokio::time::advance(PERIOD).await;
        }

        /// Seconds since `origin` of every probe run.
        fn probe_times(&self, origin: Instant) -> Vec<f64> {
            self.runner.call_times(origin)
        }

        /// The pod as the fake API server has it.
        fn server_pod(&self) -> Pod {
            self.api.state().server.clone().expect("the pod")
        }

        /// Authority mode's fields as the API server has them: `app`'s
        /// `ready` and `started`, `Ready` and `ContainersReady`.
        fn authority_fields(&self) -> (bool, Option<bool>, String, String) {
            let mut pod = self.server_pod();
            let conditions = pod.status.as_ref().and_then(|s| s.conditions.clone());
            let condition = |type_: &str| {
                let found = conditions.iter().flatten().find(|c| c.type_ == type_);
                found.map_or("-".into(), |c| c.status.clone())
            };
            let app = first_container_status(&mut pod);
            (
                app.ready,
                app.started,
                condition(POD_READY),
                condition(CONTAINERS_READY),
            )
        }

        /// (container, container ID, probe) of every kill asked for.
        fn kills(&self) -> Vec<(String, String, ProbeKind)> {
            let kills = self.killer.kills().into_iter();
            kills
                .map(|k| (k.container, k.container_id, k.kind))
                .collect()
        }

        fn annotation(&self, uid: &str) -> Option<String> {
            self.daemon.tracker.annotation(uid).map(str::to_string)
        }
    }

    /// `pod` as the API has it: named, in a namespace, at a resourceVersion
    /// (authority mode patches container status lists only under that
    /// precondition, and builds no patch for a pod without one).
    fn named(mode: Mode) -> Pod {
        let mut pod = pod(mode, 100, None);
        pod.metadata.name = Some("web-0".into());
        pod.metadata.namespace = Some("shop".into());
        pod.metadata.resource_version = Some("1".into());
        if mode == Mode::Gate {
            // As the gate's set-up asks (else a ReadinessGateMissing Event).
            pod.spec.as_mut().unwrap().readiness_gates = Some(vec![PodReadinessGate {
                condition_type: podprobe_core::status::READY_CONDITION.into(),
            }]);
        }
        pod
    }

    /// [`Harness::authority_fields`] of a started `app` whose readiness is
    /// `ready`, as is every container of the pod.
    fn started_and_ready(ready: bool) -> (bool, Option<bool>, String, String) {
        let condition = if ready { "True" } else { "False" };
        (ready, Some(true), condition.into(), condition.into())
    }

    /// The fixture's probes leave `periodSeconds`, `timeoutSeconds` and
    /// `failureThreshold` at the API's defaults.
    const PERIOD: Duration = Duration::from_secs(10);
    const TIMEOUT: Duration = Duration::from_secs(1);
    const FAILURE_THRESHOLD: u32 = 3;

    /// `pod` with `app`'s probe of `kind` in its spec (authority mode) as
    /// `probe` says.
    fn with_spec_probe(mut pod: Pod, kind: ProbeKind, probe: serde_json::Value) -> Pod {
        let app = &mut pod.spec.as_mut().unwrap().containers[0];
        let probe = Some(serde_json::from_value(probe).unwrap());
        match kind {
            ProbeKind::Readiness => app.readiness_probe = probe,
            ProbeKind::Liveness => app.liveness_probe = probe,
            ProbeKind::Startup => app.startup_probe = probe,
        }
        pod
    }

    /// Lets spawned tasks (workers, patches) run without advancing the clock.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn gate_a_new_pod_is_read_then_probed_and_its_gate_patched() {
        let pod = named(Mode::Gate);
        let mut sync = sync_loop(
            Mode::Gate,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        sync.applied(&pod);
        assert_eq!(
            sync.daemon.manager.worker_count(),
            0,
            "no worker before the annotation is read"
        );
        sync.read().await;
        assert_eq!(sync.daemon.manager.worker_count(), 1);
        // The readiness worker's first run, within its first period (W5),
        // then its result reaches the loop.
        tokio::time::sleep(PERIOD + TIMEOUT).await;
        sync.feed_results();
        settle().await;
        assert!(
            sync.api.requests().contains(&"patch True".to_string()),
            "{:?}",
            sync.api.requests()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn w13_a_deleted_pod_stops_its_workers_and_is_forgotten() {
        let pod = named(Mode::Authority);
        let mut sync = sync_loop(
            Mode::Authority,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        sync.applied(&pod);
        assert_eq!(
            sync.daemon.manager.worker_count(),
            1,
            "authority reads the spec"
        );
        sync.deleted(&pod);
        // A stopped worker is registered until its loop has ended: after
        // its start-up jitter at the latest, within one period (W5).
        tokio::time::sleep(PERIOD + TIMEOUT).await;
        assert_eq!(sync.daemon.manager.worker_count(), 0);
        assert_eq!(sync.daemon.tracker.tracked_pods(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_edit_within_the_debounce_waits_for_the_resync() {
        let pod = named(Mode::Gate);
        let mut sync = sync_loop(
            Mode::Gate,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        sync.applied(&pod);
        sync.read().await;
        let edited_value =
            r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5}}}"#;
        let mut edited = pod.clone();
        edited.metadata.annotations =
            Some([(PROBES_ANNOTATION.to_string(), edited_value.to_string())].into());
        sync.applied(&edited);
        settle().await;
        assert!(
            sync.readings.try_recv().is_err(),
            "read within the debounce"
        );
        assert_eq!(sync.annotation("uid").as_deref(), Some(ANNOTATION));
        assert_eq!(sync.events.reasons(), Vec::<&str>::new());
        tokio::time::advance(EDIT_DEBOUNCE).await;
        sync.daemon.resync();
        sync.read().await;
        assert_eq!(sync.annotation("uid").as_deref(), Some(edited_value));
        assert_eq!(sync.events.reasons(), [reasons::PROBES_CHANGED]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_annotation_is_a_warning_event_and_probes_nothing() {
        let mut pod = named(Mode::Gate);
        pod.metadata.annotations = Some(
            [(
                PROBES_ANNOTATION.to_string(),
                r#"{"app": {"readinessProbe": {"periodSeconds": -1}}}"#.to_string(),
            )]
            .into(),
        );
        let mut sync = sync_loop(
            Mode::Gate,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        sync.start(&pod).await;
        assert_eq!(sync.events.reasons(), [reasons::PROBE_ANNOTATION_INVALID]);
        assert_eq!(sync.daemon.manager.worker_count(), 0);
        tokio::time::sleep(PERIOD + TIMEOUT).await;
        assert!(sync.runner.calls().is_empty(), "{:?}", sync.runner.calls());
    }

    #[tokio::test(start_paused = true)]
    async fn the_resync_repairs_a_gate_someone_else_reset() {
        let pod = named(Mode::Gate);
        let mut sync = sync_loop(
            Mode::Gate,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        sync.applied(&pod);
        sync.read().await;
        tokio::time::sleep(PERIOD + TIMEOUT).await;
        sync.feed_results();
        settle().await;
        let patched = sync.api.requests().len();
        // Another writer puts the gate back to False, and the watch says so.
        {
            let mut state = sync.api.state();
            let state = &mut *state;
            state.cached = state.server.clone();
            for copy in [state.server.as_mut(), state.cached.as_mut()]
                .into_iter()
                .flatten()
            {
                let conditions = copy.status.as_mut().unwrap().conditions.as_mut().unwrap();
                let gate = conditions
                    .iter_mut()
                    .find(|c| c.type_ == podprobe_core::status::READY_CONDITION)
                    .unwrap();
                gate.status = "False".into();
            }
        }
        sync.daemon.resync();
        settle().await;
        assert_eq!(
            sync.api.requests()[patched..],
            ["patch True".to_string()],
            "{:?}",
            sync.api.requests()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn authority_a_new_pod_gets_started_then_ready_and_both_conditions_patched() {
        let pod = named(Mode::Authority);
        let mut sync = sync_loop(
            Mode::Authority,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        sync.applied(&pod);
        settle().await;
        // S1: no startup probe, so started at once; S3: not ready before a
        // readiness Success.
        assert_eq!(sync.authority_fields(), started_and_ready(false));
        // The first run within a period of the prober's start (W5), the
        // first sync's trigger right after it (W8), each within its timeout.
        tokio::time::sleep(PERIOD + TIMEOUT).await;
        sync.feed_results();
        settle().await;
        let requests = sync.api.requests();
        assert_eq!(
            sync.authority_fields(),
            started_and_ready(true),
            "{requests:?}"
        );
    }

    /// A loop whose not-ready `app` fails every readiness run, with its
    /// first sight of `pod` `PERIOD / 2` behind it; returns when that was.
    async fn probing_a_not_ready_pod(pod: &Pod) -> (Harness, Instant) {
        let mut sync = sync_loop(
            Mode::Authority,
            pod,
            ScriptedRunner::always(ProbeResult::Failure),
        );
        sync.past_start_jitter().await;
        sync.applied(pod);
        settle().await;
        let start = Instant::now();
        // The first run, then the first sync's trigger (W8).
        assert_eq!(sync.probe_times(start), [0.0, 0.0]);
        tokio::time::advance(PERIOD / 2).await;
        settle().await;
        (sync, start)
    }

    #[tokio::test(start_paused = true)]
    async fn k6_w8_a_changed_pod_nudges_its_not_ready_readiness_worker() {
        let pod = named(Mode::Authority);
        let (mut sync, start) = probing_a_not_ready_pod(&pod).await;
        let mut labelled = pod.clone();
        labelled.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
        sync.applied(&labelled);
        settle().await;
        let half = PERIOD.as_secs_f64() / 2.0;
        assert_eq!(
            sync.probe_times(start),
            [0.0, 0.0, half],
            "probed at once, not at its next period"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn k6_a_status_write_does_not_nudge() {
        let pod = named(Mode::Authority);
        let (mut sync, start) = probing_a_not_ready_pod(&pod).await;
        // podprobe's own write (started, the conditions) comes back through
        // the watch at a new resourceVersion.
        let written = sync.server_pod();
        assert_ne!(written.status, pod.status, "{:?}", sync.api.requests());
        sync.applied(&written);
        settle().await;
        tokio::time::advance(PERIOD / 2).await;
        settle().await;
        assert_eq!(
            sync.probe_times(start),
            [0.0, 0.0, PERIOD.as_secs_f64()],
            "probed on its period only"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn k1_a_readiness_change_is_patched_as_it_reaches_the_loop() {
        // One failure turns the result: the third run (the first periodic
        // one) flips it.
        let probe = serde_json::json!({"exec": {"command": ["true"]}, "failureThreshold": 1});
        let pod = with_spec_probe(named(Mode::Authority), ProbeKind::Readiness, probe);
        let runner = ScriptedRunner::new(
            [
                Scripted::Return(ProbeResult::Success),
                Scripted::Return(ProbeResult::Success),
            ],
            ProbeResult::Failure,
        );
        let mut sync = sync_loop(Mode::Authority, &pod, runner);
        sync.past_start_jitter().await;
        sync.applied(&pod);
        settle().await;
        let before = "not before the result reaches the loop";
        assert_eq!(
            sync.authority_fields(),
            started_and_ready(false),
            "{before}"
        );
        sync.feed_results();
        settle().await;
        assert_eq!(sync.authority_fields(), started_and_ready(true));
        tokio::time::advance(PERIOD).await;
        settle().await;
        assert_eq!(sync.authority_fields(), started_and_ready(true), "{before}");
        sync.feed_results();
        settle().await;
        assert_eq!(sync.authority_fields(), started_and_ready(false));
    }

    #[tokio::test(start_paused = true)]
    async fn k2_a_liveness_failure_kills_the_container() {
        let (pod, mut sync) = with_liveness(ProbeResult::Failure).await;
        sync.applied(&pod);
        sync.killed_after_failure_threshold().await;
    }

    /// An authority-mode pod with a liveness probe (besides its readiness
    /// probe) whose every run gives `result`, on a loop past the start
    /// jitter.
    async fn with_liveness(result: ProbeResult) -> (Pod, Harness) {
        let probe = serde_json::json!({"exec": {"command": ["true"]}});
        let pod = with_spec_probe(named(Mode::Authority), ProbeKind::Liveness, probe);
        let sync = sync_loop(Mode::Authority, &pod, ScriptedRunner::always(result));
        sync.past_start_jitter().await;
        (pod, sync)
    }

    impl Harness {
        /// K2: a liveness worker that started just now runs at once, then
        /// once a period; its result turns Failure at the last of
        /// FAILURE_THRESHOLD runs, which kills `app`, and a failing
        /// readiness probe kills nothing (K5).
        async fn killed_after_failure_threshold(&mut self) {
            for _ in 1..FAILURE_THRESHOLD {
                settle().await;
                self.feed_results();
                assert_eq!(self.kills(), []);
                tokio::time::advance(PERIOD).await;
            }
            settle().await;
            self.feed_results();
            let kill = ("app".to_string(), ID.to_string(), ProbeKind::Liveness);
            assert_eq!(self.kills(), [kill]);
        }
    }

    /// `pod` with `podprobe.io/pause-liveness-until: value`.
    fn paused(mut pod: Pod, value: &str) -> Pod {
        let annotations = pod.metadata.annotations.get_or_insert_default();
        let key = podprobe_core::prober::liveness_pause::PAUSE_LIVENESS_ANNOTATION;
        annotations.insert(key.into(), value.into());
        pod
    }

    impl Harness {
        /// The loop's wall clock `seconds` from now, as RFC 3339.
        fn wall_in(&self, seconds: i64) -> String {
            let now = self.daemon.manager.context().clock.now();
            let span = k8s_openapi::jiff::SignedDuration::from_secs(seconds);
            now.checked_add(span).unwrap().to_string()
        }

        fn has_liveness_worker(&self, pod: &Pod) -> bool {
            let uid = pod.metadata.uid.as_deref().unwrap();
            (self.daemon.manager).has_worker(uid, "app", ProbeKind::Liveness)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn lp1_lp3_a_paused_liveness_probe_kills_nothing_until_the_pause_ends() {
        let (pod, mut sync) = with_liveness(ProbeResult::Failure).await;
        let pause_s = 2 * i64::from(FAILURE_THRESHOLD) * PERIOD.as_secs() as i64;
        let pod = paused(pod, &sync.wall_in(pause_s));
        let start = Instant::now();
        sync.applied(&pod);
        assert!(!sync.has_liveness_worker(&pod));
        assert_eq!(sync.events.reasons(), [reasons::LIVENESS_PAUSED]);
        // The loop wakes when the pause ends, not at a resync.
        let end = start + Duration::from_secs(pause_s as u64);
        assert_eq!(sync.daemon.pause_wakeup(), Some(end));
        tokio::time::advance(end - start - Duration::from_millis(1)).await;
        sync.daemon.end_pauses();
        settle().await;
        assert!(!sync.has_liveness_worker(&pod));
        sync.feed_results();
        assert_eq!(sync.kills(), []);
        tokio::time::advance(Duration::from_millis(1)).await;
        sync.daemon.end_pauses();
        assert_eq!(
            sync.events.reasons(),
            [reasons::LIVENESS_PAUSED, reasons::LIVENESS_RESUMED]
        );
        assert!(sync.has_liveness_worker(&pod));
        assert_eq!(sync.daemon.pause_wakeup(), None);
        // A new worker: FAILURE_THRESHOLD failures from now, as any.
        sync.killed_after_failure_threshold().await;
    }

    #[tokio::test(start_paused = true)]
    async fn lp1_a_liveness_failure_cached_when_the_pause_starts_kills_nothing() {
        let (pod, mut sync) = with_liveness(ProbeResult::Failure).await;
        sync.applied(&pod);
        for _ in 1..FAILURE_THRESHOLD {
            settle().await;
            tokio::time::advance(PERIOD).await;
        }
        settle().await;
        // The Failure is cached but has not reached the loop; the pause
        // does first, while the stopped worker still holds it.
        let pod = paused(pod, &sync.wall_in(600));
        sync.applied(&pod);
        sync.feed_results();
        assert_eq!(sync.kills(), []);
        assert!(!sync.has_liveness_worker(&pod));
    }

    #[tokio::test(start_paused = true)]
    async fn lp4_a_refused_pause_is_a_warning_and_liveness_runs() {
        let (pod, mut sync) = with_liveness(ProbeResult::Success).await;
        // Beyond the default bound of a day.
        let far = sync.wall_in(2 * 24 * 3600);
        let pod = paused(pod, &far);
        sync.applied(&pod);
        assert_eq!(sync.events.reasons(), [reasons::LIVENESS_PAUSE_INVALID]);
        assert!(sync.has_liveness_worker(&pod));
        // Reported once, not at every update.
        sync.applied(&pod);
        assert_eq!(sync.events.reasons(), [reasons::LIVENESS_PAUSE_INVALID]);
    }

    #[tokio::test(start_paused = true)]
    async fn lp1_gate_a_pod_paused_before_its_reading_starts_no_liveness_worker() {
        let exec = serde_json::json!({"exec": {"command": ["true"]}});
        let mut pod = named(Mode::Gate);
        let probes = serde_json::json!({"app": {"livenessProbe": exec, "readinessProbe": exec}});
        pod.metadata
            .annotations
            .get_or_insert_default()
            .insert(PROBES_ANNOTATION.into(), probes.to_string());
        let mut sync = sync_loop(
            Mode::Gate,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        let pod = paused(pod, &sync.wall_in(60));
        sync.start(&pod).await;
        assert!(!sync.has_liveness_worker(&pod));
        let uid = pod.metadata.uid.as_deref().unwrap();
        assert!(
            sync.daemon
                .manager
                .has_worker(uid, "app", ProbeKind::Readiness)
        );
        assert_eq!(sync.events.reasons(), [reasons::LIVENESS_PAUSED]);
        // The annotation goes: the pause ends at once.
        let mut resumed = pod.clone();
        resumed
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(podprobe_core::prober::liveness_pause::PAUSE_LIVENESS_ANNOTATION);
        sync.applied(&resumed);
        assert!(sync.has_liveness_worker(&pod));
        assert_eq!(
            sync.events.reasons(),
            [reasons::LIVENESS_PAUSED, reasons::LIVENESS_RESUMED]
        );
    }

    /// [`named`] with a startup probe besides the readiness probe, in its
    /// spec and in its annotation.
    fn with_startup_probe(mode: Mode) -> Pod {
        let exec = serde_json::json!({"exec": {"command": ["true"]}});
        let mut pod = with_spec_probe(named(mode), ProbeKind::Startup, exec.clone());
        let both = serde_json::json!({"app": {"startupProbe": exec, "readinessProbe": exec}});
        pod.metadata.annotations = Some([(PROBES_ANNOTATION.to_string(), both.to_string())].into());
        pod
    }

    /// `pod` as a podprobe that probed it until it was ready left it.
    async fn reported_ready(mode: Mode, pod: &Pod) -> Pod {
        let mut first = sync_loop(mode, pod, ScriptedRunner::always(ProbeResult::Success));
        first.start(pod).await;
        // Every first run within a period of the start (W5). A startup
        // Success reaches the loop, which nudges readiness (K1, W8), whose
        // Success then reaches it in turn.
        tokio::time::sleep(PERIOD + TIMEOUT).await;
        for _ in 0..2 {
            first.feed_results();
            settle().await;
        }
        let reported = first.server_pod();
        let requests = first.api.requests();
        assert!(
            podprobe_core::prober::takeover::own_condition_is_true(&reported, mode),
            "{mode:?}: {requests:?}"
        );
        reported
    }

    #[tokio::test(start_paused = true)]
    async fn d5_s6_a_restarted_podprobe_patches_nothing_on_a_pod_it_reported_ready() {
        for mode in MODES {
            let reported = reported_ready(mode, &with_startup_probe(mode)).await;
            // The first run takes its whole timeout: what the loop hears
            // before its result is what the workers seeded.
            let slow = Scripted::Slow(TIMEOUT, ProbeResult::Success);
            let runner = ScriptedRunner::new([slow], ProbeResult::Success);
            let mut restarted = sync_loop(mode, &reported, runner);
            restarted.past_start_jitter().await;
            restarted.start(&reported).await;
            settle().await;
            // `started` is taken over, so the startup probe is done (D10).
            let kinds: Vec<_> = restarted.runner.calls().iter().map(|c| c.kind).collect();
            assert_eq!(kinds, [ProbeKind::Readiness], "{mode:?}");
            restarted.feed_results();
            settle().await;
            tokio::time::sleep(TIMEOUT).await;
            settle().await;
            restarted.feed_results();
            settle().await;
            let requests = restarted.api.requests();
            assert!(requests.is_empty(), "{mode:?}: {requests:?}");
        }
    }

    /// A gate-mode pod whose readiness probe has a readiness floor, Ready
    /// as the kubelet and podprobe last reported it.
    async fn floored_and_ready() -> Pod {
        let mut pod = named(Mode::Gate);
        pod.metadata.annotations = Some(
            [(
                PROBES_ANNOTATION.to_string(),
                r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}, "podprobe": {"readinessFloor": {"minReady": 2}}}}}"#.to_string(),
            )]
            .into(),
        );
        let mut reported = reported_ready(Mode::Gate, &pod).await;
        let conditions = reported.status.as_mut().and_then(|s| s.conditions.as_mut());
        conditions.expect("conditions").push(PodCondition {
            type_: POD_READY.to_string(),
            status: "True".to_string(),
            ..PodCondition::default()
        });
        reported
    }

    /// The gate as the API server has it: status and reason.
    fn gate(sync: &Harness) -> (String, Option<String>) {
        let pod = sync.server_pod();
        let own = own_condition(&pod).expect("podprobe.io/ready");
        (own.status.clone(), own.reason.clone())
    }

    #[tokio::test(start_paused = true)]
    async fn wg3_a_failing_gate_is_held_by_the_floor_then_let_go() {
        let pod = floored_and_ready().await;
        let mut sync = sync_loop(
            Mode::Gate,
            &pod,
            ScriptedRunner::always(ProbeResult::Failure),
        );
        sync.floor.verdicts.lock().unwrap().extend([
            FloorVerdict::Hold(FloorHold { ready: 2, floor: 2 }),
            FloorVerdict::Release,
        ]);
        sync.start(&pod).await;
        // Taken over Ready (S6); three failures (failureThreshold) later
        // readiness fails, and the floor decides before anything is sent.
        tokio::time::sleep(PERIOD * 3 + TIMEOUT).await;
        sync.feed_results();
        settle().await;
        assert_eq!(gate(&sync).0, "True", "{:?}", sync.api.requests());
        sync.floor_decision().await;
        settle().await;
        assert_eq!(
            gate(&sync),
            (
                "True".to_string(),
                Some(reasons::READINESS_FLOOR.to_string())
            ),
            "{:?}",
            sync.api.requests()
        );
        let warnings: Vec<_> = sync.events.reasons();
        assert!(warnings.contains(&reasons::READINESS_FLOOR), "{warnings:?}");
        // The next resync decides again (after RETRY); still held until
        // the decision says otherwise, then let go.
        tokio::time::sleep(STATUS_RESYNC_PERIOD).await;
        sync.daemon.resync();
        settle().await;
        assert_eq!(gate(&sync).0, "True");
        sync.floor_decision().await;
        settle().await;
        assert_eq!(gate(&sync).0, "False", "{:?}", sync.api.requests());
        assert!(
            !sync
                .api
                .requests()
                .iter()
                .rev()
                .skip(1)
                .any(|r| r == "patch False"),
            "the gate went False only once let go: {:?}",
            sync.api.requests()
        );
        assert_eq!(sync.daemon.floor.pods(), 1);
        // Passing again: the release is given back and the pod forgotten.
        sync.deleted(&pod);
        assert_eq!(sync.daemon.floor.pods(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn s6_a_restarted_podprobe_starts_a_replacement_container_over() {
        let mut replaced = reported_ready(Mode::Authority, &named(Mode::Authority)).await;
        // The node agent replaced `app` while no podprobe watched.
        let app = first_container_status(&mut replaced);
        app.container_id = Some("containerd://app-2".into());
        app.ready = false;
        app.started = Some(false);
        let runner = ScriptedRunner::always(ProbeResult::Success);
        let mut restarted = sync_loop(Mode::Authority, &replaced, runner);
        restarted.applied(&replaced);
        settle().await;
        assert_eq!(restarted.authority_fields(), started_and_ready(false));
    }

    /// A gated pod whose readiness probe marks `role` (allowed here) and
    /// `zone` (not allowed).
    fn marked(mode: Mode) -> Pod {
        let mut pod = named(mode);
        let probes = r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}, "podprobe": {"markers": [
            {"label": "role", "onSuccess": "primary", "onFailure": "replica"},
            {"label": "zone", "onSuccess": "a"}]}}}}"#;
        pod.metadata.annotations =
            Some([(PROBES_ANNOTATION.to_string(), probes.to_string())].into());
        pod
    }

    #[tokio::test(start_paused = true)]
    async fn mk2_mk3_mk4_a_marker_is_written_on_its_result_once_and_repaired_after_drift() {
        let pod = marked(Mode::Gate);
        let mut sync = sync_loop(
            Mode::Gate,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        sync.start(&pod).await;
        // MK2: the key the node does not allow is refused, once.
        assert_eq!(sync.events.reasons(), [reasons::MARKER_NOT_ALLOWED]);
        // MK3: no result yet, nothing written.
        settle().await;
        assert_eq!(sync.markers.patches(), Vec::<serde_json::Value>::new());
        tokio::time::sleep(PERIOD + TIMEOUT).await;
        sync.feed_results();
        settle().await;
        let patches = sync.markers.patches();
        let primary =
            serde_json::json!({"metadata": {"uid": "uid", "labels": {"role": "primary"}}});
        assert_eq!(patches.last(), Some(&primary), "{patches:?}");
        let sent = patches.len();
        // MK4: the same patch is not sent again while the watch has not
        // shown it ...
        sync.daemon.resync();
        settle().await;
        assert_eq!(sync.markers.patches().len(), sent);
        // ... nor once it has.
        let mut labelled = pod.clone();
        labelled.metadata.labels = Some([("role".to_string(), "primary".to_string())].into());
        sync.applied(&labelled);
        tokio::time::advance(super::super::marker_sync::SENT_HOLD).await;
        sync.daemon.resync();
        settle().await;
        assert_eq!(sync.markers.patches().len(), sent);
        // Someone else removes it: the next resync puts it back.
        sync.applied(&pod);
        sync.daemon.resync();
        settle().await;
        assert_eq!(sync.markers.patches()[sent..], [primary]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_longer_than_the_nodes_cap_is_a_warning_once_per_reading() {
        let mut pod = named(Mode::Gate);
        let probes = r#"{"app": {
            "readinessProbe": {"httpGet": {"port": 8080}, "timeoutSeconds": 3600},
            "livenessProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 60}}}"#;
        pod.metadata.annotations =
            Some([(PROBES_ANNOTATION.to_string(), probes.to_string())].into());
        let mut sync = sync_loop(
            Mode::Gate,
            &pod,
            ScriptedRunner::always(ProbeResult::Success),
        );
        sync.start(&pod).await;
        // Only the network probe is over its cap (60 s); the exec one is at it.
        assert_eq!(sync.events.reasons(), [reasons::PROBE_TIMEOUT_CAPPED]);
        // A resync and an unchanged pod read nothing again.
        sync.daemon.resync();
        sync.applied(&pod);
        settle().await;
        assert_eq!(sync.events.reasons(), [reasons::PROBE_TIMEOUT_CAPPED]);
    }

    /// Pod `i` of [`every_per_pod_structure_empties_after_thousands_of_pods`]:
    /// readiness (every fourth an HTTP probe with a Secret-backed header,
    /// the others exec, each with a marker) and a liveness probe that
    /// kills at its first failure, paused for the pod's first 20 s in every
    /// third pod; its own UID, name and container ID.
    fn churned(sync: &Harness, i: usize, period: u32) -> Pod {
        let mut pod = named(Mode::Gate);
        pod.metadata.name = Some(format!("churn-{i}"));
        pod.metadata.uid = Some(format!("uid-{i}"));
        let status = pod.status.as_mut().unwrap();
        status.pod_ip = Some("10.0.0.1".into());
        status.container_statuses.as_mut().unwrap()[0].container_id =
            Some(format!("containerd://churn-{i}"));
        let markers =
            serde_json::json!([{"label": "role", "onSuccess": "primary", "onFailure": "replica"}]);
        let mut readiness = if i.is_multiple_of(4) {
            serde_json::json!({"httpGet": {"port": 8080}, "periodSeconds": period,
                "podprobe": {"markers": markers, "http": {"headers": [{"name": "Authorization",
                    "valueFrom": {"secretKeyRef": {"name": "probe-auth", "key": "token"}}}]}}})
        } else {
            serde_json::json!({"exec": {"command": ["true"]}, "periodSeconds": period,
                "podprobe": {"markers": markers}})
        };
        if i % 5 == 1 {
            // A readiness floor, on a pod the kubelet calls Ready: its
            // failures are decided (as scripted) and held or let go.
            readiness["failureThreshold"] = 1.into();
            readiness["podprobe"]["readinessFloor"] = serde_json::json!({"minReady": 1});
            let conditions = pod
                .status
                .as_mut()
                .unwrap()
                .conditions
                .get_or_insert_default();
            conditions.push(PodCondition {
                type_: POD_READY.to_string(),
                status: "True".to_string(),
                ..PodCondition::default()
            });
        }
        let probes = serde_json::json!({"app": {"readinessProbe": readiness,
            "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1,
                              "failureThreshold": 1}}});
        pod.metadata.annotations =
            Some([(PROBES_ANNOTATION.to_string(), probes.to_string())].into());
        if i.is_multiple_of(3) {
            pod = paused(pod, &sync.wall_in(20));
        }
        pod
    }

    impl Harness {
        /// One second of the node's life: the runs due, their results to the
        /// loop, and every tenth second the resync.
        async fn second(&mut self, clock: &mut u64) {
            tokio::time::advance(Duration::from_secs(1)).await;
            settle().await;
            self.feed_results();
            while let Ok(decided) = self.floor_decided.try_recv() {
                self.daemon.on_floor_decided(decided);
            }
            self.daemon.end_pauses();
            settle().await;
            *clock += 1;
            if clock.is_multiple_of(STATUS_RESYNC_PERIOD.as_secs()) {
                self.daemon.resync();
                settle().await;
            }
        }

        /// [`SyncLoop::per_pod_entries`] and the structures other metrics
        /// count: the loop's pods, the workers, the patcher's tasks.
        fn entries(&self) -> Vec<(&'static str, usize)> {
            let mut entries = self.daemon.per_pod_entries().to_vec();
            entries.push(("tracked", self.daemon.tracker.tracked_pods()));
            entries.push(("workers", self.daemon.manager.worker_count()));
            entries.push(("patch_tasks", self.daemon.patcher.tasks()));
            let (regex, command) = self.node_budget.held();
            entries.push(("node_budget_bytes", regex + command));
            entries
        }
    }

    /// #39: 3,000 pods created in waves of 100 and deleted 25 s later, with
    /// failing probes and their Events, markers, paused liveness, kills,
    /// annotation edits, ledger entries, probe-run budgets and Secret-backed
    /// headers: every structure kept per pod holds entries while they run
    /// and none a minute after the last is gone, and the metric says so.
    #[tokio::test(start_paused = true)]
    async fn every_per_pod_structure_empties_after_thousands_of_pods() {
        const WAVES: usize = 30;
        const WAVE: usize = 100;
        const LIFE_S: u64 = 25;
        // Two successes then a failure, over and over: readiness flips,
        // liveness kills, Unhealthy Events flow.
        let script = [
            Scripted::Return(ProbeResult::Success),
            Scripted::Return(ProbeResult::Success),
            Scripted::Return(ProbeResult::Failure),
        ];
        let runner = ScriptedRunner::new(
            script.iter().cycle().take(400_000).cloned(),
            ProbeResult::Success,
        );
        let first = named(Mode::Gate);
        let telemetry = Observer::Telemetry {
            pod: 50,
            node: 1000,
        };
        let mut sync = build_sync_loop(Mode::Gate, &first, runner, telemetry);
        let mut clock = 0;
        for wave in 0..WAVES {
            let mut pods = Vec::new();
            for i in wave * WAVE..(wave + 1) * WAVE {
                let pod = churned(&sync, i, 1);
                sync.api
                    .state()
                    .others
                    .insert(pod_name(&pod).to_string(), pod.clone());
                sync.start(&pod).await;
                pods.push(pod);
            }
            for second in 1..=LIFE_S {
                sync.second(&mut clock).await;
                if second == 12 {
                    // A third edit their annotations: new workers, a
                    // ProbesChanged Event.
                    for pod in pods.iter_mut().step_by(3) {
                        let i: usize = pod_name(pod)["churn-".len()..].parse().unwrap();
                        let edited = churned(&sync, i, 2);
                        sync.applied(&edited);
                        sync.read().await;
                        *pod = edited;
                    }
                }
            }
            if wave == 0 {
                let entries = sync.entries();
                assert!(
                    entries.iter().all(|&(_, n)| n > 0),
                    "a structure is empty while 100 pods run, so the test shows nothing: {entries:?}"
                );
                assert!(sync.events.remembered_pods() > 0);
            }
            for pod in &pods {
                sync.api.state().others.remove(pod_name(pod));
                sync.deleted(pod);
            }
        }
        let events = sync.events.reasons();
        for reason in [
            reasons::UNHEALTHY,
            reasons::LIVENESS_PAUSED,
            reasons::PROBES_CHANGED,
        ] {
            assert!(events.contains(&reason), "no {reason} Event in the churn");
        }
        assert!(!sync.kills().is_empty() && !sync.markers.patches().is_empty());
        // A minute after the last pod's last run (the probe-run budgets'
        // idle time), and a resync.
        for _ in 0..70 {
            sync.second(&mut clock).await;
        }
        sync.daemon.resync();
        let entries = sync.entries();
        assert!(
            entries.iter().all(|&(_, n)| n == 0),
            "entries left after every pod went: {entries:?}"
        );
        // The Event correlator was told of every pod gone (its spam budgets
        // would otherwise outlive them by up to two hours).
        assert_eq!(sync.events.remembered_pods(), 0);
        let exposition = sync.daemon.metrics.served.encode();
        for (structure, _) in sync.daemon.per_pod_entries() {
            let line = format!("podprobe_per_pod_entries{{structure=\"{structure}\"}} 0\n");
            assert!(exposition.contains(&line), "no {line} in {exposition}");
        }
    }
}
