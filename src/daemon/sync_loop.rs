//! The daemon's sync loop (K1): the kubelet's reaction to a probe result,
//! a pod update or its resync, for every pod of the node. A readiness or
//! startup result change recomputes podprobe's `started`/`ready` (S1-S5, as
//! the kubelet's `UpdatePodStatus`), which gives the desired status of the
//! fields podprobe owns in its mode that the [`Patcher`] sends; a liveness or
//! startup failure asks the [`Killer`] to stop the container (K2, K3).
//!
//! [`SyncLoop`] is generic over its probe runner, status API and killer, so
//! that the unit tests below drive it on a paused clock with scripted
//! probes, a fake API server and a killer that records what it is asked;
//! [`super::run`] wires the real ones.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use crate::events::record::{PodEvent, reasons};
use crate::events::recorder::EventRecorder;
use crate::kube::patcher::{Intent, Owned, Patcher, StatusApi};
use crate::kube::pods::PodUpdate;
use crate::liveness_pause::{self, LivenessPause, PauseChange};
use crate::manager::{Killer, Nudge, PodProbes, ProberManager, probe_kills};
use crate::markers::{MarkerKeys, PodMarkers};
use crate::pod_store::{PodStore, with_started};
use crate::pod_sync::{self, SyncSchedule};
use crate::probe::destinations::Destinations;
use crate::probe::spec::UnknownProbeField;
use crate::probe::spec::budget::{Budget, BudgetLimits, NodeBudget, OverBudget, PodBudget};
use crate::probe::spec::timeout_caps::TimeoutCaps;
use crate::probe::verdict::EventType;
use crate::probe::{ProbeKind, SpecError};
use crate::probe_ledger::ProbeLedger;
use crate::results::{ResultReceivers, ResultUpdate};
use crate::server::health::Health;
use crate::server::metrics::Metrics;
use crate::status::gate_setup;
use crate::status::{
    AnnotatedProbes, AnnotationError, ContainerProbeView, Mode, PROBES_ANNOTATION, check_hosts,
    check_network, pod_probes,
};
use crate::takeover;
use crate::util::pod::{all_container_statuses, pod_name, pod_namespace};
use crate::worker::ProbeRunner;

use super::markers::MarkerWriter;

/// How often every pod's desired status and kills are checked again, besides
/// reacting to changes (the kubelet's status manager re-checks every 10 s).
pub const STATUS_RESYNC_PERIOD: Duration = Duration::from_secs(10);

/// Gate mode: an annotation edit this soon after the pod's annotation was
/// last read waits for the next resync (#25). A pod that rewrites its
/// annotation in a loop then costs one read, worker restart, Event and
/// patch per resync, not per write; an edit after a quiet spell applies at
/// once, one in a burst within two resync periods.
const EDIT_DEBOUNCE: Duration = Duration::from_secs(2);

/// How long shutdown waits for in-flight status patches.
pub(super) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Annotations parsed at a time, each on a blocking thread: at a restart
/// every pod of the node is read at once, and each reading may hold up to
/// its pod's budgets while it runs.
pub(super) const READING_THREADS: usize = 2;

/// What the daemon knows about one pod, by UID.
pub(super) struct Tracked {
    /// The annotation value this state was derived from (gate mode).
    annotation: Option<String>,
    probes: Option<Probes>,
    /// When the kubelet would sync the pod (K6), which is when readiness
    /// workers are nudged.
    sync: SyncSchedule,
    /// When the annotation was last read (gate mode, [`EDIT_DEBOUNCE`]).
    read_at: Instant,
    /// `podprobe.io/pause-liveness-until` (LP1-LP4), observed once the pod
    /// is probed.
    pause: LivenessPause,
    /// What the probes' results write on the pod (MK1-MK4).
    markers: PodMarkers,
}

/// A pod podprobe probes and writes status for.
pub(super) struct Probes {
    /// What podprobe owns for the pod.
    owned: Owned,
    manager: PodProbes,
    /// What the probes hold, given back to the node's budget with them.
    _budget: PodBudget,
}

/// The sync loop's state: generic over the probe runner, the status API and
/// the container killer, so that unit tests drive it with scripted probes, a
/// fake API server and a killer that records what it is asked.
pub(super) struct SyncLoop<R: ProbeRunner, A: StatusApi, K: Killer> {
    pub(super) mode: Mode,
    /// Gate mode checks annotated probe hosts against it.
    pub(super) destinations: Destinations,
    /// Whether `podprobe.network: pod` probes may run (`--pod-network`).
    pub(super) pod_network: bool,
    /// What one pod's probes, and every pod's together, may hold (#25).
    pub(super) budget: BudgetLimits,
    /// What every pod's probes hold together.
    pub(super) node_budget: NodeBudget,
    /// Annotations read at a time ([`READING_THREADS`]).
    pub(super) reading_slots: Arc<Semaphore>,
    pub(super) manager: ProberManager<R, Arc<PodStore>>,
    pub(super) patcher: Patcher<A>,
    pub(super) cache: Arc<PodStore>,
    /// Where its Events go (the Event queue's sink; a recorder in tests).
    pub(super) events: Arc<dyn EventRecorder>,
    pub(super) metrics: Metrics,
    pub(super) health: Health,
    pub(super) pods: HashMap<String, Tracked>,
    /// Stops containers for failed probes (K2, K3, K7).
    pub(super) killer: K,
    /// Where annotations read off the main loop come back ([`Reading`]).
    pub(super) readings: mpsc::UnboundedSender<Reading>,
    /// The longest liveness pause accepted (`--max-liveness-pause-seconds`;
    /// zero: none, LP4).
    pub(super) max_liveness_pause: Duration,
    /// No pause ends before this (LP3): when the loop next looks for pauses
    /// whose time came.
    pub(super) next_pause_end: Option<Timestamp>,
    /// The marker keys this node writes (`--marker-keys`, MK2).
    pub(super) marker_keys: MarkerKeys,
    /// Writes the pods' markers (MK3, MK4).
    pub(super) markers: MarkerWriter,
    /// The longest timeouts probes run with (#37).
    pub(super) timeout_caps: TimeoutCaps,
    /// The last runs the workers report (PS1), counted in
    /// [`SyncLoop::per_pod_entries`].
    pub(super) ledger: Arc<ProbeLedger>,
}

/// Gate mode: a pod's `podprobe.io/probes` annotation, parsed and compiled
/// on a blocking thread (#25): within the pod's budgets that takes up to
/// tens of milliseconds, which the main loop, serving every pod of the
/// node, does not wait for.
pub(super) struct Reading {
    uid: String,
    pod: Arc<Pod>,
    annotation: String,
    probes: Result<AnnotatedProbes, AnnotationError>,
    /// What `probes` hold, charged to the node's budget.
    budget: PodBudget,
}

impl<R: ProbeRunner, A: StatusApi, K: Killer> SyncLoop<R, A, K> {
    pub(super) async fn run(
        mut self,
        events: impl Stream<Item = PodUpdate>,
        mut results: ResultReceivers,
        mut readings: mpsc::UnboundedReceiver<Reading>,
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
        match event {
            PodUpdate::Applied(pod, unknown) => self.on_pod_applied(&pod, &unknown),
            PodUpdate::Deleted(pod) => self.on_pod_deleted(&pod),
            PodUpdate::Synced => {
                self.health.set_pods_synced(true);
                // W13: workers of pods the relist no longer has.
                self.manager.cleanup_pods(&self.cache.uids());
            }
        }
    }

    fn on_pod_applied(&mut self, pod: &Arc<Pod>, unknown: &[UnknownProbeField]) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.track(&uid, pod, unknown);
        if self.pods.get(&uid).is_none_or(|t| t.probes.is_none()) {
            return;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            // W11: a terminating pod keeps only its readiness workers.
            self.manager.stop_liveness_and_startup(pod);
        }
        self.observe_pause(&uid, pod);
        let changed = self
            .pods
            .get_mut(&uid)
            .is_some_and(|tracked| tracked.sync.on_update(pod));
        let nudge = if changed { Nudge::Yes } else { Nudge::No };
        self.sync_pod(pod, nudge, None);
    }

    /// First sight of a pod, or a change of its annotation (gate mode):
    /// reads its probes and starts workers; see [`Self::update_probes`] for
    /// an annotation edited while its probes run (in authority mode the API
    /// server keeps a pod's probes immutable).
    fn track(&mut self, uid: &str, pod: &Arc<Pod>, unknown: &[UnknownProbeField]) {
        let annotation = match self.mode {
            Mode::Gate => pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(PROBES_ANNOTATION))
                .cloned(),
            Mode::Authority => None,
        };
        match self.pods.get(uid) {
            Some(tracked) if tracked.annotation == annotation => return,
            // Left for the next resync, which sees the annotation differ.
            Some(tracked)
                if tracked.probes.is_some() && tracked.read_at.elapsed() < EDIT_DEBOUNCE =>
            {
                return;
            }
            Some(tracked) if tracked.probes.is_some() => {
                self.update_probes(uid, pod, annotation);
                return;
            }
            _ => {}
        }
        if self.mode == Mode::Gate
            && !self.pods.contains_key(uid)
            && let Some(finding) = gate_setup::gate_mismatch(pod)
        {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                "{finding}"
            );
            self.events
                .record_opt(PodEvent::gate_mismatch(pod, &finding));
        }
        let probes = match (self.mode, &annotation) {
            // Probed once read ([`Self::on_reading`]).
            (Mode::Gate, Some(value)) => {
                self.read_annotation(uid, pod, value.clone());
                None
            }
            (Mode::Gate, None) => None,
            // podprobe owns the readiness of every pod on the node, with
            // probes or without.
            (Mode::Authority, _) => Some(self.spec_probes(pod, unknown)),
        };
        let sync = SyncSchedule::new(Instant::now());
        self.pods.insert(
            uid.to_string(),
            Tracked {
                annotation,
                probes: None,
                sync,
                read_at: Instant::now(),
                pause: LivenessPause::default(),
                markers: PodMarkers::default(),
            },
        );
        if let Some(probes) = probes {
            self.start_probing(uid, pod, probes);
        }
    }

    /// Starts the workers of a pod seen for the first time.
    fn start_probing(&mut self, uid: &str, pod: &Arc<Pod>, probes: Probes) {
        tracing::info!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            probes = probes.manager.len(),
            "probing pod"
        );
        self.cache
            .set_started(uid, takeover::seed_started(pod, self.mode));
        if let Some(tracked) = self.pods.get_mut(uid) {
            tracked.probes = Some(probes);
        }
        self.report_capped_timeouts(uid, pod);
        self.read_markers(uid, pod);
        // A pod paused before podprobe saw it never starts its liveness
        // workers (LP1).
        self.observe_pause(uid, pod);
        if let Some(running) = self.running_probes(uid) {
            self.manager.add_pod(pod, &running);
        }
    }

    /// Parses `annotation` of `pod` on a blocking thread; the result comes
    /// back to [`Self::on_reading`].
    fn read_annotation(&self, uid: &str, pod: &Arc<Pod>, annotation: String) {
        let (uid, pod) = (uid.to_string(), pod.clone());
        let mut budget = PodBudget::on_node(self.budget, &self.node_budget);
        let (readings, slots) = (self.readings.clone(), self.reading_slots.clone());
        tokio::spawn(async move {
            // Never closed.
            let Ok(slot) = slots.acquire_owned().await else {
                return;
            };
            tokio::task::spawn_blocking(move || {
                let probes = pod_probes(&pod, &mut budget);
                drop(slot);
                // The loop is gone only at shutdown.
                let _ = readings.send(Reading {
                    uid,
                    pod,
                    annotation,
                    probes,
                    budget,
                });
            });
        });
    }

    /// An annotation read: ignored if the pod is gone or its annotation has
    /// changed since (a newer reading is under way); otherwise the pod's
    /// first probes start, or its running ones are updated.
    fn on_reading(&mut self, reading: Reading) {
        let Reading {
            uid,
            pod,
            annotation,
            probes,
            budget,
        } = reading;
        let Some(tracked) = self.pods.get(&uid) else {
            return;
        };
        if tracked.annotation.as_deref() != Some(annotation.as_str()) {
            return;
        }
        let running = tracked.probes.is_some();
        let next = self.checked(&pod, probes, budget);
        if running {
            self.apply_probes(&uid, &pod, next);
            return;
        }
        if let Some(probes) = next {
            self.start_probing(&uid, &pod, probes);
            let current = self.cache.get(&uid).unwrap_or(pod);
            if current.metadata.deletion_timestamp.is_some() {
                // W11, as in `on_pod_applied`.
                self.manager.stop_liveness_and_startup(&current);
            }
            self.sync_pod(&current, Nudge::Yes, None);
        }
    }

    /// Gate mode, an edited annotation of a pod whose probes run (the
    /// kubelet's probes are immutable; podprobe's are not): unchanged probes
    /// keep their workers and results, changed ones get new workers that
    /// start over from their initial result, removed ones stop, added ones
    /// start; a Normal Event says which. An annotation removed altogether
    /// removes every probe. An invalid edit changes nothing but is reported.
    fn update_probes(&mut self, uid: &str, pod: &Arc<Pod>, annotation: Option<String>) {
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        tracked.annotation = annotation.clone();
        tracked.read_at = Instant::now();
        match annotation {
            Some(value) => self.read_annotation(uid, pod, value),
            None => {
                let none = gate_probes(pod, AnnotatedProbes::default(), PodBudget::default());
                self.apply_probes(uid, pod, Some(none));
            }
        }
    }

    /// Replaces a pod's running probes with `next` (see
    /// [`Self::update_probes`]); `None`, an invalid annotation, keeps them.
    fn apply_probes(&mut self, uid: &str, pod: &Arc<Pod>, next: Option<Probes>) {
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        let (Some(mut next), Some(current)) = (next, tracked.probes.as_mut()) else {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                "podprobe.io/probes changed to something invalid; the probes it had keep running"
            );
            return;
        };
        let changes = current.manager.changes_to(&next.manager);
        // New workers are about new probes: no instance keeps what a
        // previous probe reported about it.
        next.manager.vouch([]);
        *current = next;
        self.read_markers(uid, pod);
        if changes.is_empty() {
            // Same probes written differently: only `owned` may differ.
            return;
        }
        self.report_capped_timeouts(uid, pod);
        tracing::info!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            %changes,
            "podprobe.io/probes changed; updating the pod's probes"
        );
        self.events
            .record_opt(PodEvent::probes_changed(pod, &changes));
        let mut stopped = changes.changed.clone();
        stopped.extend(changes.removed.iter().cloned());
        self.manager.stop_probes(pod, &stopped);
        if let Some(running) = self.running_probes(uid) {
            self.manager.add_pod(pod, &running);
        }
    }

    /// Each probe whose timeout is cut to the node's cap: a Warning Event
    /// and a log line, once per reading of the pod's probes.
    fn report_capped_timeouts(&self, uid: &str, pod: &Pod) {
        let Some(probes) = self.pods.get(uid).and_then(|t| t.probes.as_ref()) else {
            return;
        };
        for capped in self.timeout_caps.capped(probes.manager.entries()) {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                container = capped.container,
                probe = %capped.kind,
                "{capped}"
            );
            self.events
                .record_opt(PodEvent::timeout_capped(pod, &capped));
        }
    }

    /// MK2: the markers of a tracked pod's probes that this node writes;
    /// each refused one is a Warning Event and a log line.
    fn read_markers(&mut self, uid: &str, pod: &Pod) {
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        let Some(probes) = &tracked.probes else {
            return;
        };
        let (markers, refusals) = PodMarkers::of(&probes.manager, &self.marker_keys);
        tracked.markers = markers;
        for refusal in refusals {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                container = refusal.container,
                probe = %refusal.kind,
                "{}",
                refusal.message
            );
            self.events
                .record_opt(PodEvent::marker_refused(pod, &refusal));
        }
    }

    /// The probes of a tracked pod that run: all of them, but liveness while
    /// it is paused (LP1).
    fn running_probes(&self, uid: &str) -> Option<PodProbes> {
        let tracked = self.pods.get(uid)?;
        let probes = &tracked.probes.as_ref()?.manager;
        Some(if tracked.pause.paused() {
            probes.without(ProbeKind::Liveness)
        } else {
            probes.clone()
        })
    }

    /// Observes a probed pod's pause annotation (LP1-LP4): a pause that
    /// starts stops the pod's liveness workers, one that ends starts them
    /// again (from their initial result, as new workers), and each change
    /// and refusal is logged and recorded as an Event.
    fn observe_pause(&mut self, uid: &str, pod: &Arc<Pod>) {
        let now = self.manager.context().clock.now();
        let max = self.max_liveness_pause;
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        let Some(probes) = tracked.probes.as_ref() else {
            return;
        };
        let observed = tracked
            .pause
            .observe(liveness_pause::annotation(pod), now, max);
        let (name, namespace) = (pod_name(pod), pod_namespace(pod));
        if let Some(refused) = &observed.refused {
            tracing::warn!(
                pod = name,
                namespace,
                %refused,
                "ignoring the pod's liveness pause"
            );
            self.events.record_opt(PodEvent::liveness_pause(
                pod,
                EventType::Warning,
                reasons::LIVENESS_PAUSE_INVALID,
                format!("{refused}; liveness probes run"),
            ));
        }
        let Some(change) = observed.change else {
            return;
        };
        match change {
            PauseChange::Started(until) | PauseChange::Moved(until) => {
                let liveness: Vec<String> = (probes.manager.containers_with(ProbeKind::Liveness))
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                let note = pause_note(self.mode, pod, &liveness, until);
                tracing::info!(pod = name, namespace, %until, "{note}");
                self.events.record_opt(PodEvent::liveness_pause(
                    pod,
                    EventType::Normal,
                    reasons::LIVENESS_PAUSED,
                    note,
                ));
                let stopped: Vec<_> = (liveness.iter())
                    .map(|container| (container.clone(), ProbeKind::Liveness))
                    .collect();
                self.manager.stop_probes(pod, &stopped);
                self.next_pause_end = Some(self.next_pause_end.map_or(until, |end| end.min(until)));
            }
            PauseChange::Ended => {
                let note = "Liveness probes resumed".to_string();
                tracing::info!(pod = name, namespace, "{note}");
                self.events.record_opt(PodEvent::liveness_pause(
                    pod,
                    EventType::Normal,
                    reasons::LIVENESS_RESUMED,
                    note,
                ));
                // W11: a terminating pod runs no liveness probe anyway.
                if pod.metadata.deletion_timestamp.is_none()
                    && let Some(running) = self.running_probes(uid)
                {
                    self.manager.add_pod(pod, &running);
                }
            }
        }
        self.metrics.set_liveness_paused(self.paused_pods());
    }

    /// How many tracked pods have their liveness paused.
    fn paused_pods(&self) -> usize {
        self.pods.values().filter(|t| t.pause.paused()).count()
    }

    /// When the loop next wakes to end pauses whose time came (LP3).
    fn pause_wakeup(&self) -> Option<Instant> {
        let end = self.next_pause_end?;
        let now = self.manager.context().clock.now();
        let left = now.duration_until(end);
        let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
        Some(Instant::now() + left)
    }

    /// Ends the pauses whose time came, and finds when the next one ends.
    fn end_pauses(&mut self) {
        self.next_pause_end = None;
        let paused: Vec<String> = (self.pods.iter())
            .filter(|(_, tracked)| tracked.pause.paused())
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in paused {
            if let Some(pod) = self.cache.get(&uid) {
                self.observe_pause(&uid, &pod);
            }
        }
        self.next_pause_end = (self.pods.values())
            .filter_map(|tracked| tracked.pause.until())
            .min();
    }

    /// A reading's probes once the node's rules for annotated probes pass
    /// (hosts, `network: pod`); what is wrong is reported, and is `None`.
    fn checked(
        &self,
        pod: &Pod,
        read: Result<AnnotatedProbes, AnnotationError>,
        budget: PodBudget,
    ) -> Option<Probes> {
        let no_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&no_spec);
        let checked = read.and_then(|annotated| {
            check_hosts(&annotated, &self.destinations)?;
            check_network(spec, &annotated, self.pod_network)?;
            Ok(annotated)
        });
        match checked {
            Ok(annotated) => Some(gate_probes(pod, annotated, budget)),
            Err(AnnotationError::OverBudget(over)) => {
                self.report_over_budget(pod, &over);
                None
            }
            Err(error) => {
                tracing::warn!(
                    pod = pod_name(pod),
                    namespace = pod_namespace(pod),
                    container = error.container(),
                    %error,
                    "ignoring the pod's probes: invalid annotation"
                );
                if let AnnotationError::TooLong { .. } = error {
                    self.metrics.budget_refused(Budget::AnnotationBytes);
                }
                self.events
                    .record_opt(PodEvent::invalid_annotation(pod, &error));
                None
            }
        }
    }

    /// Authority mode: the probes of the pod's spec. A probe that cannot run
    /// as written is reported (log and Warning event) and left out; one
    /// with a field podprobe does not implement (V10) is reported and run
    /// so that every run errors.
    fn spec_probes(&self, pod: &Pod, unknown: &[UnknownProbeField]) -> Probes {
        let budget = PodBudget::on_node(self.budget, &self.node_budget);
        let (probes, errors, over_budget) = authority_probes(pod, unknown, budget);
        for over in &over_budget {
            self.report_over_budget(pod, over);
        }
        for error in errors {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                container = error.container,
                probe = %error.kind,
                %error,
                "cannot run the probe as written"
            );
            self.events
                .record_opt(PodEvent::invalid_spec_probe(pod, &error));
        }
        probes
    }

    /// A probe over the pod's or the node's budget: logged, counted and a
    /// Warning event.
    fn report_over_budget(&self, pod: &Pod, over: &OverBudget) {
        tracing::warn!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            container = over.container,
            probe = %over.kind,
            error = %over,
            "refusing the probe: over a budget"
        );
        self.metrics.budget_refused(over.budget);
        self.events.record_opt(PodEvent::over_budget(pod, over));
    }

    fn on_pod_deleted(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        if self.pods.remove(uid).is_some_and(|t| t.probes.is_some()) {
            tracing::info!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                "pod deleted; stopping its probes"
            );
        }
        self.manager.remove_pod(pod);
        self.patcher.forget(uid);
        self.markers.forget(uid);
    }

    /// K1: a cached result changed.
    fn on_result(&mut self, update: &ResultUpdate) {
        let Some(pod) = self.cache.get(&update.pod_uid) else {
            return;
        };
        tracing::debug!(
            pod = pod_name(&pod),
            namespace = pod_namespace(&pod),
            probe = %update.kind,
            result = ?update.result,
            "probe result changed"
        );
        let nudge = if pod_sync::result_syncs(update) {
            Nudge::Yes
        } else {
            Nudge::No
        };
        self.sync_pod(&pod, nudge, Some(update.at));
    }

    fn resync(&mut self) {
        let pods = self.cache.pods();
        self.forget_replaced_kills(&pods);
        self.manager.context().rates.forget_idle();
        self.metrics.set_workers(self.manager.worker_count());
        self.metrics.set_pods_watched(pods.len());
        self.metrics.set_pods_tracked(self.pods.len());
        // Deleted pods leave the count here; starts and ends update it at once.
        self.metrics.set_liveness_paused(self.paused_pods());
        self.metrics.set_patch_tasks(self.patcher.tasks());
        for (structure, entries) in self.per_pod_entries() {
            self.metrics.set_per_pod_entries(structure, entries);
        }
        let now = Instant::now();
        for pod in pods {
            self.apply_deferred_edit(&pod);
            let Some(tracked) = pod
                .metadata
                .uid
                .as_deref()
                .and_then(|uid| self.pods.get(uid))
            else {
                continue;
            };
            if tracked.probes.is_some() {
                // K6: the pod worker's own resync is a sync; podprobe's
                // more frequent one only repairs status.
                let nudge = if tracked.sync.resync_due(now) {
                    Nudge::Yes
                } else {
                    Nudge::No
                };
                self.sync_pod(&pod, nudge, None);
            }
        }
    }

    /// Gate mode: an annotation edit [`EDIT_DEBOUNCE`] held back, applied
    /// now.
    fn apply_deferred_edit(&mut self, pod: &Arc<Pod>) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        let annotation = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROBES_ANNOTATION));
        let deferred = self.mode == Mode::Gate
            && self
                .pods
                .get(uid)
                .is_some_and(|t| t.probes.is_some() && t.annotation.as_ref() != annotation);
        if deferred {
            self.update_probes(uid, pod, annotation.cloned());
        }
    }

    /// Forgets the IDs of stopped containers no pod status lists any more
    /// (the node agent replaced them): a long-lived pod whose container is
    /// killed again and again must not grow the set.
    /// Entries of every structure kept per pod or container besides those
    /// `podprobe_workers`, `podprobe_pods_tracked` and
    /// `podprobe_patch_tasks` count (#39), by name: each follows the pods on
    /// the node and is empty once they are gone (the probe-run budgets a
    /// minute after a pod's last run, container facts at the next resync).
    pub(super) fn per_pod_entries(&self) -> [(&'static str, usize); 7] {
        [
            ("pod_store", self.cache.entries()),
            ("results", self.manager.caches().entries()),
            ("probe_rates", self.manager.context().rates.entries()),
            ("status_intents", self.patcher.pods()),
            ("markers", self.markers.pods()),
            ("ledger", self.ledger.pods()),
            ("containers", self.killer.containers()),
        ]
    }

    fn forget_replaced_kills(&self, pods: &[Arc<Pod>]) {
        let listed: HashSet<String> = pods.iter().flat_map(|pod| container_ids(pod)).collect();
        self.killer.retain(&listed);
    }

    /// Recomputes podprobe's verdicts for `pod`, submits the desired status
    /// of the fields podprobe owns and stops containers whose liveness or
    /// startup probe failed. `nudge`: whether this stands for a kubelet pod
    /// sync (K6), which nudges not-ready readiness workers. `result_at`:
    /// the end of the probe run whose changed result this sync is for.
    fn sync_pod(&mut self, pod: &Pod, nudge: Nudge, result_at: Option<Instant>) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        if nudge == Nudge::Yes
            && let Some(tracked) = self.pods.get_mut(uid)
        {
            tracked.sync.synced(Instant::now(), rand::random::<f64>());
        }
        let Some(probes) = self.pods.get(uid).and_then(|t| t.probes.as_ref()) else {
            return;
        };
        let mut status = pod.status.clone().unwrap_or_default();
        rebuild(&mut status, &self.cache.started(uid));
        let pod_ready = takeover::own_condition_is_true(pod, self.mode);
        let nudges =
            self.manager
                .update_pod_status_with(pod, &probes.manager, pod_ready, &mut status);
        let mut views = ContainerProbeView::from_status(&status);
        if self.mode == Mode::Gate {
            self.manager.add_notes(&mut views);
        }
        // Workers read `started` from this cache: a readiness worker nudged
        // before it shows the container started would skip its run.
        self.cache.set_started(uid, started_by_id(&views));
        if nudge == Nudge::Yes {
            self.manager.nudge_readiness(pod, nudges);
        }
        self.patcher.submit(Intent {
            namespace: pod_namespace(pod).to_string(),
            name: pod_name(pod).to_string(),
            uid: uid.to_string(),
            owned: probes.owned.clone(),
            views,
            result_at,
        });
        if pod.metadata.deletion_timestamp.is_none() {
            if let Some(tracked) = self.pods.get(uid)
                && !tracked.markers.is_empty()
            {
                self.markers
                    .write(pod, &tracked.markers, &self.manager.view(uid));
            }
            let no_status = PodStatus::default();
            let api_status = pod.status.as_ref().unwrap_or(&no_status);
            let kills = probe_kills(pod, &probes.manager, api_status, &self.manager.view(uid));
            let paused = self.pods.get(uid).is_some_and(|t| t.pause.paused());
            // LP1: a liveness failure cached before the pause began, by a
            // worker still winding down, kills nothing either.
            for kill in kills {
                if !(paused && kill.kind == ProbeKind::Liveness) {
                    self.killer.kill(pod, kill);
                }
            }
        }
    }
}

/// The note of a pause that starts or moves (LP3): until when, which of
/// podprobe's liveness probes it stops and, in gate mode, which of the
/// kubelet's own it cannot stop.
fn pause_note(mode: Mode, pod: &Pod, liveness: &[String], until: Timestamp) -> String {
    let mut note = format!("Liveness probes paused until {until}: ");
    if liveness.is_empty() {
        note.push_str("podprobe runs no liveness probe of this pod");
    } else {
        note.push_str(&format!(
            "podprobe stops no container for them (containers {})",
            liveness.join(", ")
        ));
    }
    let kubelet: Vec<&str> = match (mode, pod.spec.as_ref()) {
        (Mode::Gate, Some(spec)) => (spec.containers.iter())
            .filter(|c| c.liveness_probe.is_some())
            .map(|c| c.name.as_str())
            .collect(),
        _ => Vec::new(),
    };
    if !kubelet.is_empty() {
        note.push_str(&format!(
            "; the kubelet's own livenessProbe of {} is not paused",
            kubelet.join(", ")
        ));
    }
    note
}

/// The status as the kubelet's pod sync rebuilds it before
/// `UpdatePodStatus`: `ready` false, and `started` as podprobe last derived
/// it for the same container instance (S1's "already started").
fn rebuild(status: &mut PodStatus, started: &HashMap<String, bool>) {
    with_started(status, started);
    let init = status.init_container_statuses.iter_mut().flatten();
    for container in init.chain(status.container_statuses.iter_mut().flatten()) {
        container.ready = false;
    }
}

fn started_by_id(views: &[ContainerProbeView]) -> HashMap<String, bool> {
    views
        .iter()
        .filter_map(|v| Some((v.container_id.clone()?, v.started)))
        .collect()
}

/// Gate mode's [`Probes`]: the pod's annotated probes.
fn gate_probes(pod: &Pod, annotated: AnnotatedProbes, budget: PodBudget) -> Probes {
    let mut probes = PodProbes::new();
    for probe in annotated.iter() {
        probes.insert(probe.container.clone(), probe.kind, probe.spec.clone());
    }
    probes.vouch(takeover::vouched_instances(pod, Mode::Gate));
    Probes {
        owned: Owned::Gate(Arc::new(annotated)),
        manager: probes,
        _budget: budget,
    }
}

/// Authority mode's [`Probes`]: the pod spec's, and the errors of those that
/// cannot run as written or have fields podprobe does not implement.
fn authority_probes(
    pod: &Pod,
    unknown: &[UnknownProbeField],
    mut budget: PodBudget,
) -> (Probes, Vec<SpecError>, Vec<OverBudget>) {
    let (mut probes, errors, over_budget) = PodProbes::from_spec(pod, unknown, &mut budget);
    probes.vouch(takeover::vouched_instances(pod, Mode::Authority));
    let probes = Probes {
        owned: Owned::Authority,
        manager: probes,
        _budget: budget,
    };
    (probes, errors, over_budget)
}

fn container_ids(pod: &Pod) -> HashSet<String> {
    all_container_statuses(pod)
        .filter_map(|c| c.container_id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStatus, PodCondition,
        PodReadinessGate, PodSpec, Probe,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::daemon::telemetry::Telemetry;
    use crate::events::record::reasons;
    use crate::kube::patcher::NoopPatchObserver;
    use crate::kube::patcher::RetryPolicy;
    use crate::manager::{ProbeStateView, StatusInputs, set_started_and_ready};
    use crate::probe::ProbeResult;
    use crate::probe::spec::{AtoiFailure, HttpProtocol, PortError};
    use crate::probe::{Handler, ProbeKind};
    use crate::probe_rates::ProbeRates;
    use crate::results::CachedResult;
    use crate::results::ProbeCaches;
    use crate::status::conditions::{CONTAINERS_READY, POD_READY};
    use crate::testing::{
        FakeApi, RecordingEvents, RecordingKiller, RecordingMarkers, Scripted, ScriptedRunner,
        first_container_status,
    };
    use crate::util::watch_activity::WatchActivity;
    use crate::worker::ProbeObserver;
    use crate::worker::{Clock, NoopObserver, TokioClock};

    const ID: &str = "containerd://app-1";
    const ANNOTATION: &str = r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}}}}"#;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    /// A pod whose `app` container runs since `started_at`, with a readiness
    /// probe in its annotation and in its spec, and podprobe's own condition
    /// in `mode` as `(status, since)`.
    fn pod(mode: Mode, started_at: i64, own: Option<(&str, i64)>) -> Pod {
        let conditions = own.map(|(status, since)| PodCondition {
            type_: takeover::own_condition_type(mode).into(),
            status: status.into(),
            last_transition_time: Some(at(since)),
            ..PodCondition::default()
        });
        let readiness: Probe = serde_json::from_value(serde_json::json!(
            {"exec": {"command": ["true"]}}
        ))
        .unwrap();
        Pod {
            metadata: ObjectMeta {
                uid: Some("uid".into()),
                annotations: Some([(PROBES_ANNOTATION.to_string(), ANNOTATION.to_string())].into()),
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
                    container_id: Some(ID.into()),
                    // Gate mode: the kubelet's own verdict (it knows no
                    // annotated probe); authority mode: podprobe's last one.
                    ready: own.is_some_and(|(status, _)| status == "True"),
                    started: Some(own.is_some()),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some(at(started_at)),
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    /// A prober just restarted: a readiness worker, nothing cached yet (D5).
    struct JustRestarted;

    impl ProbeStateView for JustRestarted {
        fn cached(&self, _: ProbeKind, _: &str) -> Option<CachedResult> {
            None
        }
        fn has_worker(&self, _: &str, kind: ProbeKind) -> bool {
            kind == ProbeKind::Readiness
        }
    }

    /// podprobe's verdict about `app` right after a restart at `prober_start`.
    fn verdict_after_restart(mode: Mode, pod: &Pod, prober_start: i64) -> ContainerProbeView {
        let probes = match mode {
            Mode::Gate => {
                let mut budget = PodBudget::default();
                let annotated = pod_probes(pod, &mut budget).unwrap();
                gate_probes(pod, annotated, budget)
            }
            Mode::Authority => authority_probes(pod, &[], PodBudget::default()).0,
        };
        assert_eq!(probes.manager.len(), 1);
        let mut status = pod.status.clone().unwrap();
        rebuild(&mut status, &takeover::seed_started(pod, mode));
        let inputs = StatusInputs {
            pod,
            probes: &probes.manager,
            prober_start: at(prober_start).0,
            pod_ready: takeover::own_condition_is_true(pod, mode),
        };
        set_started_and_ready(&inputs, &JustRestarted, &mut status);
        ContainerProbeView::from_status(&status).remove(0)
    }

    const MODES: [Mode; 2] = [Mode::Gate, Mode::Authority];

    #[test]
    fn s4_restart_keeps_a_ready_container_ready() {
        for mode in MODES {
            let view = verdict_after_restart(mode, &pod(mode, 100, Some(("True", 105))), 200);
            assert!(view.started && view.ready, "{mode:?}: {view:?}");
        }
    }

    #[test]
    fn s4_restart_keeps_a_not_ready_container_not_ready() {
        for mode in MODES {
            let view = verdict_after_restart(mode, &pod(mode, 100, Some(("False", 105))), 200);
            assert!(!view.ready, "{mode:?}: {view:?}");
        }
    }

    #[test]
    fn restart_keeps_ready_a_container_started_just_before_podprobe() {
        // Within RESTART_GRACE_PERIOD of the prober's start, so the kubelet's
        // rule alone would reset it; podprobe's True condition vouches for it.
        for mode in MODES {
            let view = verdict_after_restart(mode, &pod(mode, 195, Some(("True", 196))), 200);
            assert!(view.started && view.ready, "{mode:?}: {view:?}");
        }
    }

    #[test]
    fn restart_resets_a_container_restarted_after_the_condition_turned_true() {
        // Started after the condition's last transition and within the grace
        // period: no podprobe saw it start, so it starts over.
        for mode in MODES {
            let mut pod = pod(mode, 197, Some(("True", 196)));
            // A new instance the node agent reported: podprobe never wrote it.
            let app = first_container_status(&mut pod);
            app.ready = false;
            app.started = Some(false);
            let view = verdict_after_restart(mode, &pod, 200);
            assert!(!view.ready, "{mode:?}: {view:?}");
        }
    }

    #[test]
    fn s6_restart_does_not_pass_readiness_to_a_replacement_container() {
        // kubernetes #141473/#141487: the condition turned True at 105 about
        // the instance then running; a replacement started at 150 while no
        // podprobe watched (so, by start time, it predates podprobe's start
        // at 200) and the condition was never written since. It must not
        // inherit the old instance's readiness (nor `started`, #141342).
        for mode in MODES {
            let mut pod = pod(mode, 150, Some(("True", 105)));
            let app = first_container_status(&mut pod);
            app.container_id = Some("containerd://replacement".into());
            app.ready = false;
            app.started = Some(false);
            let view = verdict_after_restart(mode, &pod, 200);
            assert!(!view.ready, "{mode:?}: {view:?}");
        }
    }

    #[test]
    fn authority_restart_keeps_a_ready_container_of_a_not_ready_pod_ready() {
        // Another container keeps ContainersReady False; `app` was reported
        // ready and started just before podprobe restarted: the kubelet's S4
        // would reset it, podprobe's own verdict about the instance keeps it.
        let mut pod = pod(Mode::Authority, 195, Some(("False", 190)));
        let app = first_container_status(&mut pod);
        app.ready = true;
        app.started = Some(true);
        let view = verdict_after_restart(Mode::Authority, &pod, 200);
        assert!(view.started && view.ready, "{view:?}");
    }

    #[test]
    fn rebuild_drops_the_previous_ready_and_started() {
        let mut status = pod(Mode::Gate, 100, Some(("True", 105))).status.unwrap();
        rebuild(&mut status, &HashMap::new());
        let app = &status.container_statuses.unwrap()[0];
        assert_eq!((app.ready, app.started), (false, None));
    }

    #[test]
    fn authority_probes_come_from_the_spec() {
        let mut pod = pod(Mode::Authority, 100, None);
        pod.metadata.annotations = None;
        let (probes, errors, _) = authority_probes(&pod, &[], PodBudget::default());
        assert!(errors.is_empty(), "{errors:?}");
        assert!(probes.manager.get("app", ProbeKind::Readiness).is_some());
        assert_eq!(probes.owned, Owned::Authority);
    }

    #[test]
    fn v10_authority_probe_with_a_field_podprobe_lacks_is_reported_and_errors_every_run() {
        let mut pod = pod(Mode::Authority, 100, None);
        let app = &mut pod.spec.as_mut().unwrap().containers[0];
        // H23: an h2c probe of a 1.37 spec runs as such.
        app.liveness_probe = Some(
            serde_json::from_value(
                serde_json::json!({"httpGet": {"port": 80, "protocol": "HTTP2"}}),
            )
            .unwrap(),
        );
        let unknown = [UnknownProbeField {
            container: "app".into(),
            kind: ProbeKind::Readiness,
            field: "readinessProbe.exec.fromTheFuture".into(),
        }];
        let (probes, errors, _) = authority_probes(&pod, &unknown, PodBudget::default());
        let reported: Vec<String> = errors
            .iter()
            .map(|e| format!("{} {e}", e.container))
            .collect();
        assert_eq!(
            reported,
            [
                "app readinessProbe.exec.fromTheFuture: unknown field: not in the Kubernetes 1.37 API that podprobe implements"
            ]
        );
        let spec = probes.manager.get("app", ProbeKind::Readiness).unwrap();
        assert!(
            matches!(spec.handler, Handler::Unsupported(_)),
            "{:?}",
            spec.handler
        );
        let spec = probes.manager.get("app", ProbeKind::Liveness).unwrap();
        assert!(
            matches!(&spec.handler, Handler::HttpGet(a) if a.protocol == HttpProtocol::Http2),
            "{:?}",
            spec.handler
        );
        let (probes, errors, _) = authority_probes(&pod, &[], PodBudget::default());
        assert!(errors.is_empty(), "{errors:?}");
        assert!(matches!(
            probes
                .manager
                .get("app", ProbeKind::Readiness)
                .unwrap()
                .handler,
            Handler::Exec(_)
        ));
    }

    #[test]
    fn authority_probe_over_the_pods_budget_is_reported_and_errors_every_run() {
        let mut pod = pod(Mode::Authority, 100, None);
        let app = &mut pod.spec.as_mut().unwrap().containers[0];
        app.liveness_probe = Some(
            serde_json::from_value(serde_json::json!({"exec": {"command": ["x".repeat(600)]}}))
                .unwrap(),
        );
        let limits = BudgetLimits {
            command_bytes: 1000,
            ..BudgetLimits::default()
        };
        let (probes, errors, over) = authority_probes(&pod, &[], PodBudget::new(limits));
        assert!(errors.is_empty(), "{errors:?}");
        // Readiness (an exec of a few bytes) comes after liveness in the
        // kubelet's order and still fits; nothing else is charged.
        let refused: Vec<_> = over
            .iter()
            .map(|o| (o.container.as_str(), o.kind))
            .collect();
        assert_eq!(refused, [], "600 + the readiness command fit 1000 bytes");
        let limits = BudgetLimits {
            command_bytes: 500,
            ..BudgetLimits::default()
        };
        let (probes_over, _, over) = authority_probes(&pod, &[], PodBudget::new(limits));
        let refused: Vec<_> = over
            .iter()
            .map(|o| (o.container.as_str(), o.kind))
            .collect();
        assert_eq!(refused, [("app", ProbeKind::Liveness)]);
        assert!(matches!(
            probes_over
                .manager
                .get("app", ProbeKind::Liveness)
                .unwrap()
                .handler,
            Handler::Unsupported(_)
        ));
        assert!(matches!(
            probes
                .manager
                .get("app", ProbeKind::Liveness)
                .unwrap()
                .handler,
            Handler::Exec(_)
        ));
    }

    #[test]
    fn authority_probe_with_an_undeclared_port_name_runs_and_errors() {
        let mut pod = pod(Mode::Authority, 100, None);
        let app = &mut pod.spec.as_mut().unwrap().containers[0];
        app.liveness_probe =
            Some(serde_json::from_value(serde_json::json!({"httpGet": {"port": "web"}})).unwrap());
        let (probes, errors, _) = authority_probes(&pod, &[], PodBudget::default());
        assert!(errors.is_empty(), "{errors:?}");
        let liveness = probes.manager.get("app", ProbeKind::Liveness).unwrap();
        assert_eq!(
            liveness.handler,
            Handler::Unresolvable(PortError::NotANumber {
                port: "web".into(),
                reason: AtoiFailure::InvalidSyntax
            })
        );
        assert_eq!(
            (liveness.period_seconds, liveness.failure_threshold),
            (10, 3)
        );
    }

    /// The sync loop as `run` wires it, over a scripted prober, a fake API
    /// server holding the pod and a killer that records; the tests play the
    /// watch, the annotation readings and the workers' results into it (its
    /// `select!`) by hand.
    struct Harness {
        daemon: SyncLoop<Arc<ScriptedRunner>, Arc<FakeApi>, RecordingKiller>,
        runner: Arc<ScriptedRunner>,
        api: Arc<FakeApi>,
        killer: RecordingKiller,
        cache: Arc<PodStore>,
        results: ResultReceivers,
        readings: mpsc::UnboundedReceiver<Reading>,
        events: Arc<RecordingEvents>,
        markers: RecordingMarkers,
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
        let cache = PodStore::new();
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(crate::testing::epoch()));
        let (caches, results) = ProbeCaches::new();
        let events = Arc::new(RecordingEvents::default());
        let ledger = Arc::new(ProbeLedger::default());
        let (observer, rates): (Arc<dyn ProbeObserver>, _) = match observed {
            Observer::None => (Arc::new(NoopObserver), ProbeRates::unlimited()),
            Observer::Telemetry { pod, node } => (
                Arc::new(Telemetry::new(
                    Metrics::new(),
                    events.clone(),
                    ledger.clone(),
                    clock.clone(),
                )),
                ProbeRates::new(pod, node),
            ),
        };
        let manager = ProberManager::new(
            runner.clone(),
            cache.clone(),
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
        let metrics = Metrics::new();
        let killer = RecordingKiller::default();
        let markers_api = RecordingMarkers::default();
        let (readings_sender, readings) = mpsc::unbounded_channel();
        let daemon = SyncLoop {
            mode,
            destinations: Destinations::default(),
            pod_network: false,
            budget: BudgetLimits::default(),
            node_budget: NodeBudget::new(),
            reading_slots: Arc::new(Semaphore::new(READING_THREADS)),
            manager,
            patcher,
            cache: cache.clone(),
            events: events.clone(),
            metrics,
            health: Health::new(crate::daemon::HEALTH_STALE_AFTER, WatchActivity::new()),
            pods: HashMap::new(),
            killer: killer.clone(),
            readings: readings_sender,
            max_liveness_pause: crate::liveness_pause::DEFAULT_MAX_PAUSE,
            next_pause_end: None,
            marker_keys: MarkerKeys::new(["role".to_string()]),
            timeout_caps: TimeoutCaps {
                exec: Duration::from_secs(60),
                network: Duration::from_secs(60),
            },
            markers: MarkerWriter::new(markers_api.clone(), Metrics::new()),
            ledger,
        };
        Harness {
            daemon,
            runner,
            api,
            killer,
            cache,
            results,
            readings,
            events,
            markers: markers_api,
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

        /// The annotation reading the loop asked for comes back to it.
        async fn read(&mut self) {
            let reading = self.readings.recv().await.expect("a reading");
            self.daemon.on_reading(reading);
        }

        /// The watch delivers a new pod, and in gate mode the reading of its
        /// annotation comes back.
        async fn start(&mut self, pod: &Pod) {
            self.applied(pod);
            if self.daemon.mode == Mode::Gate {
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
            self.daemon.pods.get(uid)?.annotation.clone()
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
                condition_type: crate::status::READY_CONDITION.into(),
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
        assert!(sync.daemon.pods.is_empty());
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
                    .find(|c| c.type_ == crate::status::READY_CONDITION)
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
        let key = crate::liveness_pause::PAUSE_LIVENESS_ANNOTATION;
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
            .remove(crate::liveness_pause::PAUSE_LIVENESS_ANNOTATION);
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
            takeover::own_condition_is_true(&reported, mode),
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
        tokio::time::advance(super::super::markers::SENT_HOLD).await;
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
        let readiness = if i.is_multiple_of(4) {
            serde_json::json!({"httpGet": {"port": 8080}, "periodSeconds": period,
                "podprobe": {"markers": markers, "http": {"headers": [{"name": "Authorization",
                    "valueFrom": {"secretKeyRef": {"name": "probe-auth", "key": "token"}}}]}}})
        } else {
            serde_json::json!({"exec": {"command": ["true"]}, "periodSeconds": period,
                "podprobe": {"markers": markers}})
        };
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
            entries.push(("tracked", self.daemon.pods.len()));
            entries.push(("workers", self.daemon.manager.worker_count()));
            entries.push(("patch_tasks", self.daemon.patcher.tasks()));
            let (regex, command) = self.daemon.node_budget.held();
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
        let exposition = sync.daemon.metrics.encode();
        for (structure, _) in sync.daemon.per_pod_entries() {
            let line = format!("podprobe_per_pod_entries{{structure=\"{structure}\"}} 0\n");
            assert!(exposition.contains(&line), "no {line} in {exposition}");
        }
    }
}
