//! Sends desired status to the API server: strategic-merge patches of
//! `pods/<name>/status`, one pod at a time.
//!
//! The daemon [`submit`](Patcher::submit)s an [`Intent`] (the pod's identity
//! and podprobe's verdicts) whenever something may have changed. Per pod UID
//! there is one task with one in-flight patch; intents that arrive meanwhile
//! coalesce and only the latest is sent. What to send is decided by the
//! core's pure [`decide`] against the freshest pod object podprobe knows
//! ([`diff_base`]): the watch's cache, unless the API server's answer to
//! podprobe's last write is newer (by `resourceVersion`: the watch lags
//! behind podprobe's own write). Then
//!
//! - gate mode: the cache with podprobe's own condition as that answer has it;
//! - authority mode: that answer. The patch replaces whole container status
//!   lists under a `resourceVersion` precondition, so a stale base costs one
//!   conflict and a fresh read, never a lost write of the node agent's.
//!
//! Once the watch has caught up, its view wins: anything else that changed
//! podprobe's fields (a person, a controller, an older podprobe) is undone
//! by the next intent, at the latest by the daemon's periodic resync, as the
//! kubelet's status manager repairs drift (`needsReconcile`).
//!
//! Finished tasks of forgotten pods are reaped as new ones start, so the
//! task set follows the pods on the node, not every pod it ever ran.
//!
//! Errors (a request gets [`REQUEST_TIMEOUT`](crate::api::apiclient::REQUEST_TIMEOUT))
//! are retried with bounded exponential backoff plus jitter; on a conflict (a UID
//! or resourceVersion precondition failed) or a 404 the pod is read again and
//! the patch rebuilt, and a pod whose UID changed is never patched: every
//! patch carries the UID precondition.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use podprobe_core::util::backoff::RetryPolicy;

use crate::api::apiclient::{RequestError, bounded};
use crate::api::turns::{TurnGauges, Turns};
use kube::api::{Patch, PatchParams};
use podprobe_core::prober::pod_store::PodStore;
use podprobe_core::prober::worker::Clock;
use podprobe_core::status::patch::owned_conditions;
use podprobe_core::status::patch_decision::{PatchDecision, decide, diff_base, kept};
use podprobe_core::status::{Intent, Mode};

/// A failed API request, classified by what the patcher does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 409: a UID or resourceVersion precondition failed: re-read.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 404: the pod is gone, or was just recreated: re-read.
    #[error("not found: {0}")]
    NotFound(String),
    /// Anything else (network, 5xx, throttling, ...): retry as is.
    #[error("{0}")]
    Other(String),
}

impl From<kube::Error> for ApiError {
    fn from(error: kube::Error) -> Self {
        match &error {
            kube::Error::Api(status) if status.is_conflict() => {
                ApiError::Conflict(error.to_string())
            }
            kube::Error::Api(status) if status.is_not_found() => {
                ApiError::NotFound(error.to_string())
            }
            _ => ApiError::Other(error.to_string()),
        }
    }
}

impl From<RequestError> for ApiError {
    fn from(error: RequestError) -> Self {
        match error {
            RequestError::Kube(error) => error.into(),
            timeout @ RequestError::Timeout(_) => ApiError::Other(timeout.to_string()),
        }
    }
}

/// The patcher's I/O: the cached pod, a fresh read and the patch itself.
pub trait StatusApi: Send + Sync + 'static {
    /// The pod with `uid` as the watch last saw it.
    fn cached(&self, uid: &str) -> Option<Arc<Pod>>;
    /// Reads the pod from the API server; `None` when it does not exist.
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Pod>, ApiError>> + Send;
    /// Sends a strategic-merge patch to `pods/<name>/status`; returns the
    /// pod as the API server now has it.
    fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> impl Future<Output = Result<Pod, ApiError>> + Send;
}

/// [`StatusApi`] over a kube client and the watch's [`PodStore`].
#[derive(Clone)]
pub struct KubeStatusApi {
    client: kube::Client,
    cache: Arc<PodStore>,
}

impl KubeStatusApi {
    pub fn new(client: kube::Client, cache: Arc<PodStore>) -> Self {
        KubeStatusApi { client, cache }
    }

    fn api(&self, namespace: &str) -> kube::Api<Pod> {
        kube::Api::namespaced(self.client.clone(), namespace)
    }
}

/// Field manager of podprobe's writes (shown in `managedFields`).
pub const FIELD_MANAGER: &str = "podprobe";

impl StatusApi for KubeStatusApi {
    fn cached(&self, uid: &str) -> Option<Arc<Pod>> {
        self.cache.get(uid)
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ApiError> {
        let pod = bounded(self.api(namespace).get_opt(name)).await?;
        Ok(pod.map(without_managed_fields))
    }

    async fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Pod, ApiError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let patch = Patch::Strategic(patch);
        let api = self.api(namespace);
        let pod = bounded(api.patch_status(name, &params, &patch)).await?;
        Ok(without_managed_fields(pod))
    }
}

/// `pod` without `metadata.managedFields`, which podprobe never reads: the
/// patcher keeps the pod each patch returned for as long as the pod lives,
/// and the managed fields were most of it (bench/RESULTS.md, churn soak).
fn without_managed_fields(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    pod
}

/// Counts what the patcher does (metrics).
pub trait PatchObserver: Send + Sync + 'static {
    /// A patch was accepted by the API server, `since_result` after the end
    /// of the probe run whose result brought it about (if one did).
    fn patch_sent(&self, since_result: Option<Duration>) {
        let _ = since_result;
    }
    /// A patch request failed (it may be retried).
    fn patch_failed(&self) {}
    /// A patch was rejected because another writer changed the pod first
    /// (a precondition failed); it is rebuilt from a fresh read.
    fn patch_conflict(&self) {}
    /// Where the patcher's [`Turns`] count the pods waiting for a turn and
    /// the requests in flight.
    fn turn_gauges(&self) -> TurnGauges {
        TurnGauges::default()
    }
}

/// A [`PatchObserver`] that counts nothing (tests).
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopPatchObserver;

#[cfg(test)]
impl PatchObserver for NoopPatchObserver {}

/// How many status requests (a patch, or the fresh read before it) are in
/// flight at most, node-wide (Rule 6.3). The kubelet sends one at a time; a
/// few more let podprobe's patches, whose answers come over one HTTP/2
/// connection, keep up with the client's rate limit (50 a second) while the
/// API server answers within 160 ms.
pub const PATCHES_IN_FLIGHT: usize = 8;

/// Coalescing, retrying status patcher.
pub struct Patcher<A> {
    shared: Arc<Shared<A>>,
    pods: Mutex<HashMap<String, watch::Sender<Option<Intent>>>>,
    tasks: Mutex<JoinSet<()>>,
}

struct Shared<A> {
    api: A,
    clock: Arc<dyn Clock>,
    observer: Arc<dyn PatchObserver>,
    policy: RetryPolicy,
    /// [`PATCHES_IN_FLIGHT`] turns, handed out first come, first served.
    turns: Turns,
}

impl<A: StatusApi> Patcher<A> {
    pub fn new(
        api: A,
        clock: Arc<dyn Clock>,
        observer: Arc<dyn PatchObserver>,
        policy: RetryPolicy,
    ) -> Self {
        let turns = Turns::new(PATCHES_IN_FLIGHT, observer.turn_gauges());
        let shared = Shared {
            api,
            clock,
            observer,
            policy,
            turns,
        };
        Patcher {
            shared: Arc::new(shared),
            pods: Mutex::new(HashMap::new()),
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    /// Makes `intent` the pod's desired state, replacing any intent not sent
    /// yet. Never blocks. Must be called within a tokio runtime.
    pub fn submit(&self, intent: Intent) {
        let mut pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = pods.get(&intent.uid) {
            sender.send_replace(Some(intent));
            return;
        }
        let uid = intent.uid.clone();
        let (sender, receiver) = watch::channel(None);
        sender.send_replace(Some(intent));
        let shared = self.shared.clone();
        let mut tasks = self.lock_tasks();
        reap(&mut tasks);
        tasks.spawn(run_pod(shared, receiver));
        pods.insert(uid, sender);
    }

    /// Per-pod tasks alive: those of pods not forgotten, and of forgotten
    /// pods still sending their last intent.
    pub fn tasks(&self) -> usize {
        let mut tasks = self.lock_tasks();
        reap(&mut tasks);
        tasks.len()
    }

    /// Pods with an intent kept (#39).
    pub fn pods(&self) -> usize {
        self.pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Forgets a deleted pod: its task sends what is pending, then ends.
    pub fn forget(&self, uid: &str) {
        let mut pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        pods.remove(uid);
    }

    /// Stops accepting intents and waits up to `timeout` for pending and
    /// in-flight patches; returns whether all finished in time.
    pub async fn shutdown(&self, timeout: Duration) -> bool {
        self.pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let mut tasks = std::mem::take(&mut *self.lock_tasks());
        let drained = tokio::time::timeout(timeout, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        drained.is_ok()
    }

    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, JoinSet<()>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Drops the finished tasks of forgotten pods (a `JoinSet` keeps each
/// finished task until it is joined: without this, memory would grow with
/// every pod the node ever ran).
fn reap(tasks: &mut JoinSet<()>) {
    while let Some(finished) = tasks.try_join_next() {
        if let Err(error) = finished
            && error.is_panic()
        {
            tracing::error!(%error, "a pod status patch task panicked");
        }
    }
}

/// One pod's task: sends the latest intent until the pod is forgotten.
async fn run_pod<A: StatusApi>(
    shared: Arc<Shared<A>>,
    mut intents: watch::Receiver<Option<Intent>>,
) {
    let mut pod = PodPatcher {
        shared: &shared,
        returned: None,
    };
    while intents.changed().await.is_ok() {
        let Some(intent) = intents.borrow_and_update().clone() else {
            continue;
        };
        pod.sync(intent, &mut intents).await;
    }
}

struct PodPatcher<'a, A> {
    shared: &'a Shared<A>,
    /// The pod as the API server last returned it to podprobe (a patch's
    /// answer or a fresh read), as much of it as [`kept`] keeps.
    returned: Option<Pod>,
}

/// How one attempt ended.
enum Attempt {
    Done,
    Retry { reread: bool },
}

impl<A: StatusApi> PodPatcher<'_, A> {
    /// Brings the pod to `intent`, retrying; a newer intent replaces it
    /// while waiting to retry.
    async fn sync(&mut self, mut intent: Intent, intents: &mut watch::Receiver<Option<Intent>>) {
        let policy = self.shared.policy;
        let mut attempt = 0;
        let mut reread = false;
        loop {
            let outcome = {
                // Held for the attempt only, not while waiting to retry.
                let Some(_turn) = self.shared.turns.take().await else {
                    return;
                };
                // What the pod asked for while it waited for its turn
                // replaces what it asked for before: never a stale patch,
                // also once the pod is forgotten (the channel closed).
                let newer = {
                    let newest = intents.borrow_and_update();
                    newest.has_changed().then(|| newest.clone()).flatten()
                };
                if let Some(newer) = newer {
                    intent = newer;
                    attempt = 0;
                }
                // Boxed: the request's future (about 6 KiB with kube's
                // client, two thirds of the task it sat in) is then held
                // only while it is sent, not by every pod's task for the
                // pod's whole life (#39).
                Box::pin(self.attempt(&intent, reread)).await
            };
            match outcome {
                Attempt::Done => return,
                Attempt::Retry { reread: again } => reread = again,
            }
            attempt += 1;
            if attempt >= policy.attempts {
                tracing::error!(
                    pod = intent.name,
                    namespace = intent.namespace,
                    attempts = attempt,
                    "giving up on the pod status patch for now; the next resync tries again"
                );
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(policy.jittered(attempt)) => {}
                Ok(()) = intents.changed() => {
                    if let Some(newer) = intents.borrow_and_update().clone() {
                        intent = newer;
                        attempt = 0;
                    }
                }
            }
        }
    }

    async fn attempt(&mut self, intent: &Intent, reread: bool) -> Attempt {
        let pod = match self.base_pod(intent, reread).await {
            Ok(pod) => pod,
            Err(error) => {
                tracing::warn!(pod = intent.name, namespace = intent.namespace, %error, "cannot read pod");
                return Attempt::Retry { reread };
            }
        };
        let now = Time(self.shared.clock.now());
        let patch = match decide(pod.as_ref(), intent, &now) {
            Ok(PatchDecision::Send(patch)) => patch,
            Ok(PatchDecision::Unchanged) => return Attempt::Done,
            Ok(decision @ (PatchDecision::PodGone | PatchDecision::UidChanged)) => {
                tracing::debug!(
                    pod = intent.name,
                    namespace = intent.namespace,
                    ?decision,
                    "not patching"
                );
                return Attempt::Done;
            }
            Err(error) => {
                tracing::error!(pod = intent.name, namespace = intent.namespace, %error, "cannot build status patch");
                return Attempt::Done;
            }
        };
        let api = &self.shared.api;
        match api
            .patch_status(&intent.namespace, &intent.name, &patch)
            .await
        {
            Ok(updated) => {
                let since_result = intent.result_at.map(|at| at.elapsed());
                self.shared.observer.patch_sent(since_result);
                tracing::info!(
                    pod = intent.name,
                    namespace = intent.namespace,
                    conditions = owned_summary(intent.owned.mode(), &updated),
                    "patched pod status"
                );
                self.returned = Some(kept(intent.owned.mode(), updated));
                Attempt::Done
            }
            Err(ApiError::Conflict(error)) => {
                // Expected next to a node agent that writes the same lists.
                self.shared.observer.patch_conflict();
                tracing::debug!(pod = intent.name, namespace = intent.namespace, %error, "pod status patch conflicted; re-reading");
                Attempt::Retry { reread: true }
            }
            Err(error) => {
                self.shared.observer.patch_failed();
                tracing::warn!(pod = intent.name, namespace = intent.namespace, %error, "pod status patch failed");
                let reread = matches!(error, ApiError::NotFound(_));
                Attempt::Retry { reread }
            }
        }
    }

    /// The pod to diff against: a fresh read after a conflict, else the
    /// cached object brought up to date with what the API server last
    /// returned ([`diff_base`]).
    async fn base_pod(&mut self, intent: &Intent, reread: bool) -> Result<Option<Pod>, ApiError> {
        if reread {
            let pod = self.shared.api.get(&intent.namespace, &intent.name).await?;
            self.returned = pod
                .clone()
                .filter(|p| p.metadata.uid.as_deref() == Some(&intent.uid))
                .map(|p| kept(intent.owned.mode(), p));
            return Ok(pod);
        }
        let Some(cached) = self.shared.api.cached(&intent.uid) else {
            return Ok(None);
        };
        let returned = self.returned.as_ref();
        Ok(Some(diff_base(intent.owned.mode(), &cached, returned)))
    }
}

/// `Type=Status` of the conditions podprobe owns in `mode`, for the log.
fn owned_summary(mode: Mode, pod: &Pod) -> String {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref());
    owned_conditions(mode)
        .iter()
        .map(|type_| {
            let status = conditions
                .unwrap_or_default()
                .iter()
                .find(|c| c.type_ == *type_)
                .map_or("", |c| c.status.as_str());
            format!("{type_}={status}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {

    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ContainerStatus;
    use k8s_openapi::jiff::Timestamp;
    use tokio::time::Instant;

    use super::*;
    use crate::api::patch_metrics::PatchMetrics;
    use crate::testing::{
        FakeApi, UID, agent_pod, authority_intent, gate_intent as intent, gate_pod as gated_pod,
        registered,
    };
    use podprobe_core::prober::worker::TokioClock;
    use podprobe_core::status::conditions::{FALSE, TRUE};
    use podprobe_core::status::patch_decision::own_condition;

    fn patcher(api: &Arc<FakeApi>) -> Patcher<Arc<FakeApi>> {
        Patcher::new(
            api.clone(),
            Arc::new(TokioClock::new(Timestamp::UNIX_EPOCH)),
            Arc::new(NoopPatchObserver),
            RetryPolicy::default(),
        )
    }

    /// Lets spawned tasks run without advancing the paused clock.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn coalesces_to_one_in_flight_patch_and_the_latest_intent_wins() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), true);
        let patcher = patcher(&api);
        patcher.submit(intent(true));
        settle().await;
        // The first patch is in flight; these two coalesce into the last.
        patcher.submit(intent(false));
        patcher.submit(intent(true));
        api.hold.add_permits(1000);
        assert!(patcher.shutdown(Duration::from_secs(1)).await);
        // The second intent equals what the first patch wrote: nothing more is sent.
        assert_eq!(api.requests(), ["patch True"]);
    }

    #[tokio::test(start_paused = true)]
    async fn uses_its_own_last_write_when_the_watch_lags() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        let patcher = patcher(&api);
        patcher.submit(intent(true));
        settle().await;
        // The cache still says False; a repeat of True must not be resent,
        // and going back to False must be, though the cache already says False.
        patcher.submit(intent(true));
        settle().await;
        patcher.submit(intent(false));
        assert!(patcher.shutdown(Duration::from_secs(1)).await);
        assert_eq!(api.requests(), ["patch True", "patch False"]);
    }

    #[tokio::test(start_paused = true)]
    async fn gate_repairs_an_outside_write_of_its_condition() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        let patcher = patcher(&api);
        patcher.submit(intent(true));
        settle().await;
        // Someone else sets podprobe's condition to False; the watch shows it.
        {
            let mut state = api.state();
            let mut drifted = gated_pod(Some(FALSE));
            drifted.metadata.resource_version = Some("3".into());
            state.server = Some(drifted.clone());
            state.cached = Some(drifted);
        }
        // The verdict is still True: the next intent (a resync) repairs it.
        patcher.submit(intent(true));
        assert!(patcher.shutdown(Duration::from_secs(1)).await);
        assert_eq!(api.requests(), ["patch True", "patch True"]);
        let server = api.state().server.clone().unwrap();
        assert_eq!(own_condition(&server).unwrap().status, TRUE);
    }

    /// `n` more gated pods on `api` (`many-<i>`, not ready yet), and an
    /// intent for each that makes it ready.
    fn many(api: &FakeApi, n: usize) -> Vec<Intent> {
        (0..n)
            .map(|i| {
                let (name, uid) = (format!("many-{i}"), format!("uid-{i}"));
                let mut pod = gated_pod(Some(FALSE));
                pod.metadata.name = Some(name.clone());
                pod.metadata.uid = Some(uid.clone());
                api.state().others.insert(name.clone(), pod);
                Intent {
                    name,
                    uid,
                    ..intent(true)
                }
            })
            .collect()
    }

    /// A [`FakeApi`] that counts the requests in flight through it.
    struct Counting {
        api: Arc<FakeApi>,
        now: AtomicUsize,
        most: AtomicUsize,
    }

    impl Counting {
        async fn counted<T>(&self, request: impl Future<Output = T>) -> T {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let answer = request.await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            answer
        }
    }

    impl StatusApi for Arc<Counting> {
        fn cached(&self, uid: &str) -> Option<Arc<Pod>> {
            self.api.cached(uid)
        }

        async fn get(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ApiError> {
            self.counted(self.api.get(namespace, name)).await
        }

        async fn patch_status(
            &self,
            namespace: &str,
            name: &str,
            patch: &Value,
        ) -> Result<Pod, ApiError> {
            self.counted(self.api.patch_status(namespace, name, patch))
                .await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rule6_3_status_requests_in_flight_are_bounded_node_wide() {
        let fake = FakeApi::new(gated_pod(Some(FALSE)), true);
        let api = Arc::new(Counting {
            api: fake.clone(),
            now: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
        });
        let (metrics, exposition) = registered(PatchMetrics::register);
        let patcher = Patcher::new(
            api.clone(),
            Arc::new(TokioClock::new(Timestamp::UNIX_EPOCH)),
            Arc::new(metrics),
            RetryPolicy::default(),
        );
        let pods = 5 * PATCHES_IN_FLIGHT;
        for intent in many(&fake, pods) {
            patcher.submit(intent);
        }
        settle().await;
        // The API server holds every answer: the bound is full, the rest
        // wait for their turns, and the gauges say so.
        assert_eq!(api.now.load(Ordering::SeqCst), PATCHES_IN_FLIGHT);
        let gauges = || {
            [
                "podprobe_status_patches_in_flight",
                "podprobe_status_patches_waiting",
            ]
            .map(|series| exposition.sample(series))
        };
        let (in_flight, waiting) = (PATCHES_IN_FLIGHT, pods - PATCHES_IN_FLIGHT);
        assert_eq!(
            gauges(),
            [Some(in_flight.to_string()), Some(waiting.to_string())]
        );
        fake.hold.add_permits(1000);
        assert!(patcher.shutdown(Duration::from_secs(1)).await);
        assert_eq!(fake.requests(), vec!["patch True"; pods]);
        assert_eq!(api.most.load(Ordering::SeqCst), PATCHES_IN_FLIGHT);
        assert_eq!(gauges(), [Some("0".to_string()), Some("0".to_string())]);
    }

    #[tokio::test(start_paused = true)]
    async fn rule6_3_a_pod_waiting_for_its_turn_sends_only_its_newest_intent() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), true);
        let patcher = patcher(&api);
        for intent in many(&api, PATCHES_IN_FLIGHT) {
            patcher.submit(intent);
        }
        settle().await;
        // Every turn is taken; this pod's verdict is written as not ready
        // (a reason and a message), then it turns ready while it waits.
        patcher.submit(intent(false));
        settle().await;
        patcher.submit(intent(true));
        api.hold.add_permits(1000);
        assert!(patcher.shutdown(Duration::from_secs(1)).await);
        // One patch for it, with the newest verdict.
        assert_eq!(api.requests(), vec!["patch True"; PATCHES_IN_FLIGHT + 1]);
    }

    /// What a pod's task may weigh besides the pod it keeps (the one the
    /// API server last returned, [`PodPatcher::returned`]) while it waits
    /// for the pod's next verdict, as it does for most of the pod's life.
    const IDLE_TASK_BYTES: usize = 1024;

    /// The per-pod task with kube's client, unpolled: as big as it ever
    /// gets but for what it boxes. Holding a request's future inline, it
    /// weighed 9 KiB, 2.7 MiB of the soak's 300 pods at its peak (#39).
    #[tokio::test]
    async fn a_pods_task_holds_a_request_only_while_it_is_sent() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URI"));
        let client = kube::Client::try_from(config).expect("a client");
        let cache = podprobe_core::prober::pod_store::PodStoreWriter::new().as_reader();
        let patcher = Patcher::new(
            KubeStatusApi::new(client, cache),
            Arc::new(TokioClock::new(Timestamp::UNIX_EPOCH)),
            Arc::new(NoopPatchObserver),
            RetryPolicy::default(),
        );
        let (_intents, receiver) = watch::channel(None);
        let task = run_pod(patcher.shared.clone(), receiver);
        let bytes = std::mem::size_of_val(&task);
        let bound = std::mem::size_of::<Pod>() + IDLE_TASK_BYTES;
        assert!(bytes <= bound, "{bytes} > {bound}");
    }

    #[tokio::test(start_paused = true)]
    async fn tasks_of_forgotten_pods_are_reaped() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        let patcher = patcher(&api);
        patcher.submit(intent(true));
        settle().await;
        assert_eq!(patcher.tasks(), 1);
        patcher.forget(UID);
        settle().await;
        assert_eq!(patcher.tasks(), 0);
    }

    /// Records what [`PatchObserver::patch_sent`] is told.
    #[derive(Default)]
    struct SentLatencies(Mutex<Vec<Option<Duration>>>);

    impl PatchObserver for SentLatencies {
        fn patch_sent(&self, since_result: Option<Duration>) {
            self.0.lock().unwrap().push(since_result);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_patch_counts_from_its_result_through_retries() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        api.state()
            .failures
            .push_back(ApiError::Other("boom".into()));
        let sent = Arc::new(SentLatencies::default());
        let patcher = Patcher::new(
            api.clone(),
            Arc::new(TokioClock::new(Timestamp::UNIX_EPOCH)),
            sent.clone(),
            RetryPolicy::default(),
        );
        let result_at = Instant::now();
        tokio::time::sleep(Duration::from_millis(7)).await;
        patcher.submit(Intent {
            result_at: Some(result_at),
            ..intent(true)
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        patcher.submit(intent(false));
        assert!(patcher.shutdown(Duration::from_secs(10)).await);
        assert_eq!(api.requests(), ["patch True", "patch True", "patch False"]);
        let sent = sent.0.lock().unwrap();
        // The first intent's patch, retried after 200-300 ms, counts from
        // its result; a patch of no result's counts nothing.
        let [Some(latency), None] = sent[..] else {
            panic!("observed {sent:?}");
        };
        let (min, max) = (Duration::from_millis(207), Duration::from_millis(307));
        assert!((min..=max).contains(&latency), "{latency:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_errors_with_backoff() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        api.state().failures.extend([
            ApiError::Other("boom".into()),
            ApiError::Other("boom".into()),
        ]);
        let patcher = patcher(&api);
        let start = tokio::time::Instant::now();
        patcher.submit(intent(true));
        assert!(patcher.shutdown(Duration::from_secs(10)).await);
        assert_eq!(api.requests(), ["patch True", "patch True", "patch True"]);
        let waited = start.elapsed();
        let (min, max) = (
            Duration::from_millis(200 + 400),
            Duration::from_millis(300 + 600),
        );
        assert!(waited >= min && waited <= max, "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_the_bounded_attempts() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        api.state()
            .failures
            .extend((0..10).map(|_| ApiError::Other("boom".into())));
        let patcher = patcher(&api);
        patcher.submit(intent(true));
        assert!(patcher.shutdown(Duration::from_secs(60)).await);
        assert_eq!(
            api.requests().len(),
            RetryPolicy::default().attempts as usize
        );
    }

    #[tokio::test(start_paused = true)]
    async fn conflict_rereads_and_never_patches_a_recreated_pod() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        // The pod was deleted and recreated under the same name; the watch
        // has not seen it yet.
        let mut recreated = gated_pod(Some(FALSE));
        recreated.metadata.uid = Some("new-uid".into());
        api.state().server = Some(recreated);
        let patcher = patcher(&api);
        patcher.submit(intent(true));
        assert!(patcher.shutdown(Duration::from_secs(10)).await);
        assert_eq!(api.requests(), ["patch True", "get"]);
        let server = api.state().server.clone().unwrap();
        assert_eq!(own_condition(&server).unwrap().status, FALSE);
    }

    #[tokio::test(start_paused = true)]
    async fn conflict_on_the_same_pod_rebuilds_from_a_fresh_read() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        api.state()
            .failures
            .push_back(ApiError::Conflict("try again".into()));
        let patcher = patcher(&api);
        patcher.submit(intent(true));
        assert!(patcher.shutdown(Duration::from_secs(10)).await);
        assert_eq!(api.requests(), ["patch True", "get", "patch True"]);
    }

    #[tokio::test(start_paused = true)]
    async fn forgotten_pod_still_sends_its_pending_intent() {
        let api = FakeApi::new(gated_pod(Some(FALSE)), false);
        let patcher = patcher(&api);
        patcher.submit(intent(true));
        patcher.forget(UID);
        assert!(patcher.shutdown(Duration::from_secs(1)).await);
        assert_eq!(api.requests(), ["patch True"]);
    }

    fn app_status(pod: &Pod) -> &ContainerStatus {
        &pod.status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0]
    }

    #[tokio::test(start_paused = true)]
    async fn authority_never_loses_a_concurrent_write_of_the_node_agent() {
        let api = FakeApi::new(agent_pod(), false);
        // The agent restarted the container meanwhile; the watch lags.
        {
            let mut state = api.state();
            let server = state.server.as_mut().unwrap();
            server.metadata.resource_version = Some("2".into());
            let statuses = server.status.as_mut().unwrap().container_statuses.as_mut();
            statuses.unwrap()[0].restart_count = 1;
        }
        let patcher = patcher(&api);
        patcher.submit(authority_intent(true));
        assert!(patcher.shutdown(Duration::from_secs(10)).await);
        assert_eq!(api.requests(), ["patch True", "get", "patch True"]);
        let server = api.state().server.clone().unwrap();
        assert_eq!(app_status(&server).restart_count, 1);
        assert!(app_status(&server).ready);
    }

    #[tokio::test(start_paused = true)]
    async fn authority_diffs_against_its_own_newer_write_when_the_watch_lags() {
        let api = FakeApi::new(agent_pod(), false);
        let patcher = patcher(&api);
        patcher.submit(authority_intent(true));
        settle().await;
        // The cache still has resourceVersion 1: going back to not ready is
        // built on podprobe's own write, without a conflict.
        patcher.submit(authority_intent(false));
        assert!(patcher.shutdown(Duration::from_secs(1)).await);
        assert_eq!(api.requests(), ["patch True", "patch False"]);
        let server = api.state().server.clone().unwrap();
        assert!(!app_status(&server).ready);
        assert_eq!(server.metadata.resource_version.as_deref(), Some("3"));
    }
}
