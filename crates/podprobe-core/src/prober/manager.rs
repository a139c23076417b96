//! The prober manager (the kubelet's `prober.Manager`): keeps one worker per
//! (pod UID, container name, probe kind) as pods come and go (W1-W3,
//! W11-W13), and answers for them what the status derivation and the kill
//! decisions read.
//!
//! Probes come from a per-pod [`PodProbes`], so the same manager serves
//! authority mode (probes from the pod spec) and gate mode (probes from the
//! `podprobe.io/probes` annotation). Either way, only containers of the pod
//! spec get workers: regular containers and restartable init containers.
//!
//! - `pod_probes`: the probes of one pod, and what changed between two;
//! - `view`: what the decisions read from the prober ([`ProbeStateView`]);
//! - `readiness`: container `started`/`ready` (S1-S5, `UpdatePodStatus`);
//! - `kill`: which containers a probe failure kills, and how (K2, K3);
//! - this module: the worker registry.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::prober::probe_rates::ProbeRates;
use crate::prober::results::{CachedResult, ProbeCaches};
use crate::prober::worker::{
    self, Clock, ProbeObserver, ProbeRunner, StatusSource, WorkerConfig, WorkerContext,
    WorkerHandle,
};
use crate::spec::{ProbeKind, ProbeSpec};

mod kill;
mod pod_probes;
mod readiness;
mod view;

pub use kill::{
    Killer, MINIMUM_GRACE_PERIOD_SECONDS, ProbeKill, kill_grace_period, kill_reason, probe_kills,
};
use pod_probes::probed_containers;
pub use pod_probes::{PodProbes, ProbeChanges};
pub use readiness::{StatusInputs, pod_ready_condition, set_started_and_ready};
pub use view::ProbeStateView;

/// Identifies a worker (W2).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerKey {
    pub pod_uid: String,
    pub container: String,
    pub kind: ProbeKind,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::prober::worker::TokioClock;
    use crate::spec::ProbeResult;
    use crate::testing::*;

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

    fn all_probes(containers: &[&str]) -> PodProbes {
        let entries: Vec<_> = containers
            .iter()
            .flat_map(|&c| ProbeKind::ALL.map(|kind| (c, kind)))
            .collect();
        pod_probes(&entries)
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
            &pod_probes(&[("a", ProbeKind::Readiness)]),
        );
        let first_id = rig.manager.lock()[&key("uid-1", "a", ProbeKind::Readiness)].id;
        let mut more = pod_probes(&[("a", ProbeKind::Liveness), ("b", ProbeKind::Readiness)]);
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

    #[tokio::test(start_paused = true)]
    async fn stop_probes_frees_the_keys_for_new_workers_at_once() {
        let rig = rig(ScriptedRunner::always(ProbeResult::Success));
        let pod = pod("uid-1", vec![container("a")], vec![]);
        let old = pod_probes(&[("a", ProbeKind::Readiness), ("a", ProbeKind::Liveness)]);
        rig.manager.add_pod(&Arc::new(pod.clone()), &old);
        let ids = |kind| rig.manager.lock()[&key("uid-1", "a", kind)].id;
        let (readiness, liveness) = (ids(ProbeKind::Readiness), ids(ProbeKind::Liveness));
        rig.manager
            .stop_probes(&pod, &[("a".to_string(), ProbeKind::Readiness)]);
        assert!(!rig.manager.has_worker("uid-1", "a", ProbeKind::Readiness));
        let mut new = pod_probes(&[("a", ProbeKind::Liveness)]);
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
            &pod_probes(&[("app", ProbeKind::Readiness)]),
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
            &pod_probes(&[("app", ProbeKind::Liveness)]),
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
        let probes = pod_probes(&[("app", ProbeKind::Readiness)]);
        let status = pod_status(
            vec![running("app", "containerd://c1", epoch(), Some(true))],
            vec![],
        );
        rig.statuses.set("uid-1", status.clone());
        rig.manager.add_pod(&Arc::new(pod.clone()), &probes);
        settle().await;
        let calls = rig.runner.calls().len();
        let mut generated = status;
        let inputs = StatusInputs {
            pod: &pod,
            probes: &probes,
            prober_start: rig.manager.context().started_wall,
            pod_ready: pod_ready_condition(&pod),
        };
        let nudges = set_started_and_ready(&inputs, &rig.manager.view("uid-1"), &mut generated);
        rig.manager.nudge_readiness(&pod, nudges);
        assert!(!generated.container_statuses.as_ref().unwrap()[0].ready);
        let now = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let new_calls = rig.runner.calls();
        assert_eq!(new_calls.len(), calls + 1, "a manual run happened");
        assert_eq!(new_calls.last().unwrap().at, now);
    }
}
