//! The pod tracker: the kubelet's reaction to a probe result, a pod update
//! or a resync (K1), for every pod of the node, as state and a step
//! function. [`PodTracker::step`] takes an [`Input`] and returns the
//! [`Effect`]s it calls for (start or stop workers, a status intent, a kill,
//! an Event, an annotation to read, markers to write), doing none of them:
//! the daemon's sync loop carries them out against the API server and the
//! runtime, `podprobe simulate` against its simulated kubelet, so both
//! react by the same rules.
//!
//! A readiness or startup result change recomputes podprobe's
//! `started`/`ready` (S1-S5, as the kubelet's `UpdatePodStatus`), which
//! gives the desired status of the fields podprobe owns in its mode; a
//! liveness or startup failure asks for the container to be stopped (K2,
//! K3). The features around that reaction are modules of their own: how a
//! pod's probes are read and edited ([`probe_reading`]) and liveness pauses
//! ([`pause`]).

mod effect;
mod pause;
mod probe_reading;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

pub use effect::{Effect, Input, Now, ProbeStates, Reading, WorkerCommand};
pub use probe_reading::EDIT_DEBOUNCE;

use crate::prober::liveness_pause::LivenessPause;
use crate::prober::manager::{
    Nudge, PodProbes, ProbeStateView, StatusInputs, probe_kills, set_started_and_ready,
};
use crate::prober::markers::{MarkerKeys, PodMarkers};
use crate::prober::pod_store::with_started;
use crate::prober::pod_sync::{self, SyncSchedule};
use crate::prober::takeover;
use crate::spec::ProbeKind;
use crate::spec::destinations::Destinations;
use crate::spec::probe_spec::budget::{BudgetLimits, NodeBudget, PodBudget};
use crate::spec::probe_spec::timeout_caps::TimeoutCaps;
use crate::status::{ContainerProbeView, Intent, Mode, Owned};
use crate::util::pod::{pod_name, pod_namespace};

/// The node's settings the tracker decides by.
#[derive(Debug, Clone)]
pub struct TrackerConfig {
    pub mode: Mode,
    /// Gate mode's rules for annotated probes; `None`: none are checked
    /// (`podprobe simulate`, which connects nowhere and has no node).
    pub annotation_rules: Option<AnnotationRules>,
    /// What one pod's probes, and every pod's together, may hold (#25).
    pub budget: BudgetLimits,
    /// What every pod's probes hold together.
    pub node_budget: NodeBudget,
    /// The longest liveness pause accepted (`--max-liveness-pause-seconds`;
    /// zero: none, LP4).
    pub max_liveness_pause: Duration,
    /// The marker keys this node writes (`--marker-keys`, MK2).
    pub marker_keys: MarkerKeys,
    /// The longest timeouts probes run with (#37).
    pub timeout_caps: TimeoutCaps,
}

/// Gate mode's rules for annotated probes on a node.
#[derive(Debug, Clone)]
pub struct AnnotationRules {
    /// Annotated probe hosts are checked against it.
    pub destinations: Destinations,
    /// Whether `podprobe.network: pod` probes may run (`--pod-network`).
    pub pod_network: bool,
}

/// What the tracker knows about one pod, by UID.
struct Tracked {
    /// The annotation value this state was derived from (gate mode).
    annotation: Option<String>,
    probes: Option<Probes>,
    /// When the kubelet would sync the pod (K6), which is when readiness
    /// workers are nudged.
    sync: SyncSchedule,
    /// When the annotation was last read (gate mode,
    /// [`probe_reading::EDIT_DEBOUNCE`]).
    read_at: Instant,
    /// `podprobe.io/pause-liveness-until` (LP1-LP4), observed once the pod
    /// is probed.
    pause: LivenessPause,
    /// What the probes' results write on the pod (MK1-MK4).
    markers: PodMarkers,
    /// podprobe's `started` verdicts by container ID, as the last sync
    /// derived them (S1's "already started").
    started: HashMap<String, bool>,
}

/// A pod podprobe probes and writes status for.
struct Probes {
    /// What podprobe owns for the pod.
    owned: Owned,
    manager: PodProbes,
    /// What the probes hold, given back to the node's budget with them.
    _budget: PodBudget,
}

/// The tracker's state: every pod of the node it has seen.
pub struct PodTracker {
    config: TrackerConfig,
    pods: HashMap<String, Tracked>,
    /// No pause ends before this (LP3): when the caller next sends
    /// [`Input::PauseTimer`].
    next_pause_end: Option<Timestamp>,
    /// Where in `[0, 1)` each pod's next periodic resync falls (K6's
    /// jitter): random in the daemon, fixed where runs must repeat.
    jitter: Box<dyn FnMut() -> f64 + Send>,
}

/// The effects of one step, with the time it happens at.
struct Step<'a, P> {
    now: Now,
    probes: &'a P,
    effects: Vec<Effect>,
    /// The workers this step asked to start or stop, in order: the caller
    /// carries effects out only after the step, and a sync later in the
    /// same step must see the workers as they will be (S2, S3: a container
    /// with a readiness worker is not ready until it succeeds).
    workers: Vec<WorkerChange>,
}

/// A worker asked to start (`running`) or stop.
struct WorkerChange {
    uid: String,
    container: String,
    kind: ProbeKind,
    running: bool,
}

impl<P> Step<'_, P> {
    fn start_workers(&mut self, pod: &Arc<Pod>, probes: PodProbes) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        for (container, kind, _) in probes.entries() {
            self.workers.push(WorkerChange {
                uid: uid.clone(),
                container: container.to_string(),
                kind,
                running: true,
            });
        }
        self.effects.push(Effect::Workers(WorkerCommand::Start {
            pod: pod.clone(),
            probes,
        }));
    }

    fn stop_workers(&mut self, pod: &Arc<Pod>, probes: Vec<(String, ProbeKind)>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        for (container, kind) in &probes {
            self.workers.push(WorkerChange {
                uid: uid.clone(),
                container: container.clone(),
                kind: *kind,
                running: false,
            });
        }
        self.effects.push(Effect::Workers(WorkerCommand::Stop {
            pod: pod.clone(),
            probes,
        }));
    }
}

/// The prober as a step sees it for one pod: the caller's view, with the
/// step's own worker changes applied (the last one of a worker wins).
struct StepView<'a, V> {
    inner: V,
    uid: &'a str,
    changes: &'a [WorkerChange],
}

impl<V: ProbeStateView> ProbeStateView for StepView<'_, V> {
    fn cached(
        &self,
        kind: ProbeKind,
        container_id: &str,
    ) -> Option<crate::prober::results::CachedResult> {
        self.inner.cached(kind, container_id)
    }

    fn has_worker(&self, container: &str, kind: ProbeKind) -> bool {
        let changed = (self.changes.iter().rev())
            .find(|c| c.uid == self.uid && c.container == container && c.kind == kind);
        match changed {
            Some(change) => change.running,
            None => self.inner.has_worker(container, kind),
        }
    }
}

impl PodTracker {
    pub fn new(config: TrackerConfig, jitter: Box<dyn FnMut() -> f64 + Send>) -> Self {
        PodTracker {
            config,
            pods: HashMap::new(),
            next_pause_end: None,
            jitter,
        }
    }

    pub fn mode(&self) -> Mode {
        self.config.mode
    }

    /// Reacts to `input` at `now`, reading the prober through `probes`.
    pub fn step(&mut self, input: Input, now: Now, probes: &impl ProbeStates) -> Vec<Effect> {
        let mut step = Step {
            now,
            probes,
            effects: Vec::new(),
            workers: Vec::new(),
        };
        match input {
            Input::PodApplied { pod, unknown } => self.on_pod_applied(&mut step, &pod, &unknown),
            Input::PodDeleted(pod) => self.on_pod_deleted(&mut step, &pod),
            Input::Relisted(uids) => step
                .effects
                .push(Effect::Workers(WorkerCommand::StopExcept(uids))),
            Input::Result { pod, update } => {
                if let Some(pod) = pod {
                    tracing::debug!(
                        pod = pod_name(&pod),
                        namespace = pod_namespace(&pod),
                        probe = %update.kind,
                        result = ?update.result,
                        "probe result changed"
                    );
                    let nudge = if pod_sync::result_syncs(&update) {
                        Nudge::Yes
                    } else {
                        Nudge::No
                    };
                    self.sync_pod(&mut step, &pod, nudge, Some(update.at));
                }
            }
            Input::Resync(pods) => self.resync(&mut step, &pods),
            Input::PauseTimer(pods) => self.end_pauses(&mut step, &pods),
            Input::AnnotationRead { reading, current } => {
                self.on_reading(&mut step, reading, current);
            }
        }
        step.effects
    }

    /// When the earliest pause ends: the caller sends
    /// [`Input::PauseTimer`] then.
    pub fn next_pause_end(&self) -> Option<Timestamp> {
        self.next_pause_end
    }

    /// When, on the monotonic clock of `now`, [`Input::PauseTimer`] is due
    /// (the earliest pause ends); at once if its time has passed.
    pub fn pause_timer(&self, now: Now) -> Option<Instant> {
        let end = self.next_pause_end?;
        let left = Duration::try_from(now.wall.duration_until(end)).unwrap_or(Duration::ZERO);
        Some(now.at + left)
    }

    /// How many pods are tracked.
    pub fn tracked_pods(&self) -> usize {
        self.pods.len()
    }

    /// The annotation value a pod's probes were last read from (gate mode).
    #[cfg(any(test, feature = "testing"))]
    pub fn annotation(&self, uid: &str) -> Option<&str> {
        self.pods.get(uid)?.annotation.as_deref()
    }

    fn on_pod_applied<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        pod: &Arc<Pod>,
        unknown: &[crate::spec::probe_spec::UnknownProbeField],
    ) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.track(step, &uid, pod, unknown);
        if self.pods.get(&uid).is_none_or(|t| t.probes.is_none()) {
            return;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            // W11: a terminating pod keeps only its readiness workers.
            step.effects
                .push(Effect::Workers(WorkerCommand::StopLivenessAndStartup(
                    pod.clone(),
                )));
        }
        self.observe_pause(step, &uid, pod);
        let changed = self
            .pods
            .get_mut(&uid)
            .is_some_and(|tracked| tracked.sync.on_update(pod));
        let nudge = if changed { Nudge::Yes } else { Nudge::No };
        self.sync_pod(step, pod, nudge, None);
    }

    /// Starts the workers of a pod seen for the first time.
    fn start_probing<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        uid: &str,
        pod: &Arc<Pod>,
        probes: Probes,
    ) {
        tracing::info!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            probes = probes.manager.len(),
            "probing pod"
        );
        let started = takeover::seed_started(pod, self.config.mode);
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        tracked.started = started.clone();
        tracked.probes = Some(probes);
        step.effects.push(Effect::ShowStarted {
            uid: uid.to_string(),
            started,
        });
        self.report_capped_timeouts(step, uid, pod);
        self.read_markers(step, uid, pod);
        // A pod paused before podprobe saw it never starts its liveness
        // workers (LP1).
        self.observe_pause(step, uid, pod);
        if let Some(running) = self.running_probes(uid) {
            step.start_workers(pod, running);
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

    fn on_pod_deleted<P: ProbeStates>(&mut self, step: &mut Step<'_, P>, pod: &Arc<Pod>) {
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
        step.effects
            .push(Effect::Workers(WorkerCommand::Forget(pod.clone())));
    }

    fn resync<P: ProbeStates>(&mut self, step: &mut Step<'_, P>, pods: &[Arc<Pod>]) {
        // Deleted pods leave the count here; starts and ends update it at once.
        step.effects.push(Effect::PausedPods(self.paused_pods()));
        for pod in pods {
            self.apply_deferred_edit(step, pod);
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
                let nudge = if tracked.sync.resync_due(step.now.at) {
                    Nudge::Yes
                } else {
                    Nudge::No
                };
                self.sync_pod(step, pod, nudge, None);
            }
        }
    }

    /// Recomputes podprobe's verdicts for `pod`, asks for the desired
    /// status of the fields podprobe owns and for the containers whose
    /// liveness or startup probe failed to be stopped. `nudge`: whether
    /// this stands for a kubelet pod sync (K6), which nudges not-ready
    /// readiness workers. `result_at`: the end of the probe run whose
    /// changed result this sync is for.
    fn sync_pod<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        pod: &Arc<Pod>,
        nudge: Nudge,
        result_at: Option<Instant>,
    ) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        let unit = (nudge == Nudge::Yes).then(|| (self.jitter)());
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        if let Some(unit) = unit {
            tracked.sync.synced(step.now.at, unit);
        }
        let Some(probes) = tracked.probes.as_ref() else {
            return;
        };
        let mode = self.config.mode;
        let view = StepView {
            inner: step.probes.view(uid),
            uid,
            changes: &step.workers,
        };
        let mut status = pod.status.clone().unwrap_or_default();
        rebuild(&mut status, &tracked.started);
        let inputs = StatusInputs {
            pod,
            probes: &probes.manager,
            prober_start: step.probes.started_wall(),
            pod_ready: takeover::own_condition_is_true(pod, mode),
        };
        let nudges = set_started_and_ready(&inputs, &view, &mut status);
        let mut views = ContainerProbeView::from_status(&status);
        if mode == Mode::Gate {
            add_notes(&mut views, step.probes);
        }
        // Workers read `started` as shown: a readiness worker nudged before
        // it shows the container started would skip its run.
        let started = started_by_id(&views);
        if started != tracked.started {
            tracked.started = started.clone();
            step.effects.push(Effect::ShowStarted {
                uid: uid.to_string(),
                started,
            });
        }
        if nudge == Nudge::Yes {
            step.effects
                .push(Effect::Workers(WorkerCommand::NudgeReadiness {
                    pod: pod.clone(),
                    containers: nudges,
                }));
        }
        step.effects.push(Effect::Patch(Intent {
            namespace: pod_namespace(pod).to_string(),
            name: pod_name(pod).to_string(),
            uid: uid.to_string(),
            owned: probes.owned.clone(),
            views,
            result_at,
            floor: None,
        }));
        if pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        if !tracked.markers.is_empty() {
            step.effects.push(Effect::WriteMarkers {
                pod: pod.clone(),
                desired: tracked.markers.desired(pod, &view),
            });
        }
        let no_status = PodStatus::default();
        let api_status = pod.status.as_ref().unwrap_or(&no_status);
        let kills = probe_kills(pod, &probes.manager, api_status, &view);
        // LP1: a liveness failure cached before the pause began, by a
        // worker still winding down, kills nothing either.
        let paused = tracked.pause.paused();
        for kill in kills {
            if !(paused && kill.kind == ProbeKind::Liveness) {
                step.effects.push(Effect::Kill {
                    pod: pod.clone(),
                    kill,
                });
            }
        }
    }
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

/// Gives every view that is not ready the last failure note of the probe
/// holding it back: its startup probe while not started, else its
/// readiness probe.
fn add_notes(views: &mut [ContainerProbeView], probes: &impl ProbeStates) {
    for view in views.iter_mut().filter(|v| !v.ready) {
        let kind = if view.started {
            ProbeKind::Readiness
        } else {
            ProbeKind::Startup
        };
        view.note = (view.container_id.as_deref()).and_then(|id| probes.note(kind, id));
    }
}
