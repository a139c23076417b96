//! One pod's life on the agent's node, in one task per pod UID: runs its
//! sandbox and containers as [`plan`](crate::plan) decides, reports its
//! status, and when it is deleted stops everything and removes it from the
//! API, as the kubelet finishes a pod.
//!
//! The task wakes on every change of the pod in the API and at least every
//! [`RESYNC_PERIOD`], and reads the runtime's state afresh each time, so that
//! exits (also containers podprobe stops after a failed liveness or startup
//! probe) are seen within a second.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, Event, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use podprobe::runtime::cri::CriError;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::node::FIELD_MANAGER;
use crate::observed;
use crate::plan::plan;
use crate::policy;
use crate::runtime::Runtime;
use crate::status::{self, Inputs, Waiting};

/// How often the runtime's state is read while nothing else happens.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(1);
/// Conflicting status writes tried again before waiting for the next sync.
const CONFLICT_RETRIES: usize = 5;
/// How long after an exit the agent waits for podprobe's `Killing` event
/// before it takes the exit for a crash (podprobe records the event just
/// before it stops the container; the event reaches the API asynchronously).
const KILLING_EVENT_GRACE: Duration = Duration::from_secs(2);

/// The pod as the API has it; `None` once it is gone from the API.
pub type PodUpdates = watch::Receiver<Option<Arc<Pod>>>;

/// Status writes under the agent's field manager, so that `managedFields`
/// tell the agent's fields from podprobe's.
fn status_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

/// What woke a worker up.
enum Next {
    /// A tick or a new version of the pod.
    Pod,
    /// The pod is gone from the API.
    Gone,
    /// The agent stopped watching (it is shutting down): leave everything
    /// running, as a stopped kubelet does.
    Closed,
}

#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("container runtime: {0}")]
    Runtime(#[from] CriError),
    #[error("API: {0}")]
    Api(#[from] kube::Error),
}

/// Runs one pod until it is gone; spawn it per pod UID.
pub struct PodWorker {
    pods: Api<Pod>,
    events: Api<Event>,
    runtime: Runtime,
    node_ip: String,
    updates: PodUpdates,
    /// The newest pod object seen (from the watch or a status write).
    pod: Arc<Pod>,
    /// Containers held in `waiting` by the last sync.
    waiting: BTreeMap<String, Waiting>,
    /// What the last sync logged as the pod's phase, to log changes only.
    logged_phase: Option<String>,
    /// The last exited instance logged per container, to log each exit once.
    logged_exits: BTreeMap<String, String>,
    /// The containers' CrashLoopBackOff.
    backoff: Backoff,
    /// Whether podprobe killed an exited instance, by CRI ID, once known.
    probe_kills: BTreeMap<String, bool>,
}

impl PodWorker {
    pub fn new(
        client: kube::Client,
        runtime: Runtime,
        node_ip: String,
        updates: PodUpdates,
    ) -> Option<PodWorker> {
        let pod = updates.borrow().clone()?;
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        Some(PodWorker {
            pods: Api::namespaced(client.clone(), &namespace),
            events: Api::namespaced(client, &namespace),
            runtime,
            node_ip,
            updates,
            pod,
            waiting: BTreeMap::new(),
            logged_phase: None,
            logged_exits: BTreeMap::new(),
            backoff: Backoff::default(),
            probe_kills: BTreeMap::new(),
        })
    }

    /// Runs the pod to its end, logging with its name, namespace and UID.
    pub async fn run(self) {
        let meta = &self.pod.metadata;
        let span = tracing::info_span!(
            "pod",
            pod = meta.name.as_deref().unwrap_or_default(),
            namespace = meta.namespace.as_deref().unwrap_or_default(),
            uid = meta.uid.as_deref().unwrap_or_default(),
        );
        self.run_pod().instrument(span).await
    }

    async fn run_pod(mut self) {
        tracing::info!("pod bound to this node");
        let mut ticks = tokio::time::interval(RESYNC_PERIOD);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_error = None;
        loop {
            match self.next_update(&mut ticks).await {
                Next::Pod => {}
                Next::Gone => return self.forget().await,
                Next::Closed => return,
            }
            if self.pod.metadata.deletion_timestamp.is_some() {
                return self.terminate().await;
            }
            let result = self.sync().await.map_err(|e| e.to_string());
            // Loud on a new error, quiet while it repeats.
            match (&result, &last_error) {
                (Err(e), Some(last)) if e == last => {}
                (Err(e), _) => tracing::warn!(error = %e, "pod sync failed; retrying"),
                (Ok(()), Some(_)) => tracing::info!("pod sync works again"),
                (Ok(()), None) => {}
            }
            last_error = result.err();
        }
    }

    /// Waits for a tick or a change of the pod.
    async fn next_update(&mut self, ticks: &mut tokio::time::Interval) -> Next {
        tokio::select! {
            _ = ticks.tick() => {}
            changed = self.updates.changed() => if changed.is_err() { return Next::Closed },
        }
        match self.updates.borrow_and_update().clone() {
            Some(pod) => {
                self.pod = pod;
                Next::Pod
            }
            None => Next::Gone,
        }
    }

    fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    fn spec_container(&self, name: &str) -> Option<&Container> {
        let spec = self.pod.spec.as_ref()?;
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .find(|c| c.name == name)
    }

    /// One round: sandbox, containers, status.
    async fn sync(&mut self) -> Result<(), SyncError> {
        let mut observed = self.runtime.observe(self.uid()).await?;
        let phase = self.pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            // A finished pod keeps nothing running, as with the kubelet.
            if let Some(sandbox) = observed.sandbox.as_ref().filter(|s| s.ready) {
                tracing::info!(phase, "pod finished: stopping its sandbox");
                self.runtime.cri().stop_pod_sandbox(&sandbox.id).await?;
                observed = self.runtime.observe(self.uid()).await?;
            }
            self.waiting.clear();
            return self.report(&observed, false).await;
        }
        if !observed.sandbox.as_ref().is_some_and(|s| s.ready) {
            if observed.sandbox.is_none() {
                // As the kubelet: a new pod's first status (its containers
                // waiting in ContainerCreating) goes out before its sandbox
                // is made, which takes seconds.
                self.report(&observed, false).await?;
            }
            self.replace_sandbox(&observed).await?;
            observed = self.runtime.observe(self.uid()).await?;
        }
        let Some(sandbox) = observed.sandbox.clone().filter(|s| s.ready) else {
            return self.report(&observed, false).await;
        };
        self.log_exits(&observed);
        self.find_probe_kills(&mut observed).await?;
        let next = plan(&self.pod, &observed, &observed::now(), &mut self.backoff);
        for (name, reason) in &next.waiting {
            if !self.waiting.contains_key(name) {
                tracing::info!(container = %name, message = %reason.message, "{}", reason.reason);
            }
        }
        self.waiting = next.waiting;
        let acted = !next.start.is_empty() || !next.stop.is_empty();
        for (name, attempt) in next.start {
            let Some(container) = self.spec_container(&name).cloned() else {
                continue;
            };
            match self
                .runtime
                .start_container(&self.pod, &sandbox, &container, attempt)
                .await
            {
                Ok(id) => tracing::info!(container = %name, attempt, id, "started container"),
                Err(e) => {
                    tracing::warn!(container = %name, attempt, error = %e, "cannot start container");
                    self.waiting.insert(
                        name,
                        Waiting {
                            reason: e.reason().to_string(),
                            message: e.to_string(),
                        },
                    );
                }
            }
        }
        let grace = self.grace_seconds();
        for id in next.stop {
            tracing::info!(id, "stopping sidecar: the regular containers are done");
            self.runtime.cri().stop_container(&id, grace).await?;
        }
        if acted {
            observed = self.runtime.observe(self.uid()).await?;
        }
        self.report(&observed, false).await
    }

    /// Fills in whether podprobe killed each newest exited instance: it did
    /// if it recorded a `Killing` event for the container after the instance
    /// started. Without such an event [`KILLING_EVENT_GRACE`] after the
    /// exit, the exit was a crash.
    async fn find_probe_kills(&mut self, observed: &mut observed::Pod) -> Result<(), SyncError> {
        let mut killings: Option<Vec<Event>> = None;
        let now = Timestamp::now();
        for (name, container) in &mut observed.containers {
            let Some(instance) = container.latest.as_mut() else {
                continue;
            };
            let id = instance.id.clone();
            let observed::State::Exited(exit) = &mut instance.state else {
                continue;
            };
            if let Some(known) = self.probe_kills.get(&id) {
                exit.probe_kill = Some(*known);
                continue;
            }
            if killings.is_none() {
                let fields = format!("involvedObject.uid={},reason=Killing", self.uid());
                let list = self
                    .events
                    .list(&ListParams::default().fields(&fields))
                    .await?;
                killings = Some(list.items);
            }
            let started = exit.started_at.as_ref().map(|t| t.0);
            let killed = killings
                .iter()
                .flatten()
                .any(|event| is_killing_of(event, name, started));
            let waited = now.duration_since(exit.finished_at.0)
                >= KILLING_EVENT_GRACE.try_into().unwrap_or_default();
            if killed || waited {
                if killed {
                    tracing::info!(container = %name, id = %id, "container was stopped by a probe");
                }
                self.probe_kills.insert(id, killed);
                exit.probe_kill = Some(killed);
            }
        }
        Ok(())
    }

    /// Logs each container exit once.
    fn log_exits(&mut self, observed: &observed::Pod) {
        for (name, container) in &observed.containers {
            let Some(instance) = &container.latest else {
                continue;
            };
            let Some(exit) = instance.exit() else {
                continue;
            };
            if self.logged_exits.get(name) != Some(&instance.id) {
                tracing::info!(
                    container = %name,
                    id = %instance.id,
                    exit_code = exit.exit_code,
                    reason = %exit.reason,
                    "container exited"
                );
                self.logged_exits.insert(name.clone(), instance.id.clone());
            }
        }
    }

    /// Replaces a missing or dead sandbox by a new one.
    async fn replace_sandbox(&mut self, observed: &observed::Pod) -> Result<(), SyncError> {
        let attempt = match &observed.sandbox {
            Some(old) => {
                tracing::info!(sandbox = %old.id, "sandbox is not ready: replacing it");
                self.runtime.remove_pod(self.uid()).await?;
                old.attempt + 1
            }
            None => 0,
        };
        let id = self.runtime.run_sandbox(&self.pod, attempt).await?;
        tracing::info!(sandbox = %id, attempt, "started sandbox");
        Ok(())
    }

    /// The grace period of stops: the deletion's, else the pod's
    /// `terminationGracePeriodSeconds` (30 s when unset).
    fn grace_seconds(&self) -> i64 {
        self.pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| self.pod.spec.as_ref()?.termination_grace_period_seconds)
            .unwrap_or(30)
    }

    /// Patches the pod's status if anything the agent owns changed; on a
    /// conflict re-reads the pod and builds the status again.
    async fn report(&mut self, observed: &observed::Pod, terminal: bool) -> Result<(), SyncError> {
        for _ in 0..CONFLICT_RETRIES {
            let now = observed::now();
            let desired = status::desired(&Inputs {
                pod: &self.pod,
                observed,
                waiting: &self.waiting,
                node_ip: &self.node_ip,
                terminal,
                now: &now,
            });
            if !status::differs(self.pod.status.as_ref(), &desired) {
                return Ok(());
            }
            if desired.phase != self.logged_phase {
                tracing::info!(
                    phase = desired.phase.as_deref(),
                    pod_ip = desired.pod_ip.as_deref(),
                    "pod phase"
                );
                self.logged_phase = desired.phase.clone();
            }
            let body = status::patch(&self.pod, &desired);
            match self
                .pods
                .patch_status(self.name(), &status_params(), &Patch::Strategic(body))
                .await
            {
                Ok(pod) => {
                    self.pod = Arc::new(pod);
                    return Ok(());
                }
                Err(kube::Error::Api(e)) if e.is_conflict() => {
                    tracing::debug!("status write conflicted; re-reading the pod");
                    let fresh = self.pods.get(self.name()).await?;
                    if fresh.metadata.uid.as_deref() != Some(self.uid()) {
                        // Recreated under the same name: not this worker's pod.
                        return Ok(());
                    }
                    self.pod = Arc::new(fresh);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The pod is being deleted: stops its regular containers, then its
    /// sidecars (last first), reporting their states meanwhile; then removes
    /// the sandbox and deletes the pod for good.
    async fn terminate(mut self) {
        let grace = self.grace_seconds();
        tracing::info!(
            grace_seconds = grace,
            "pod is being deleted: stopping its containers"
        );
        self.waiting.clear();
        let (regular, sidecars) = match self.runtime.observe(self.uid()).await {
            Ok(observed) => self.running_instances(&observed),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the pod's containers; removing its sandbox");
                (Vec::new(), Vec::new())
            }
        };
        let runtime = self.runtime.clone();
        let mut stopping = tokio::spawn(
            async move {
                let stops = regular
                    .iter()
                    .map(|id| runtime.cri().stop_container(id, grace));
                for result in join_all(stops).await {
                    if let Err(e) = result {
                        tracing::warn!(error = %e, "cannot stop a container");
                    }
                }
                for id in &sidecars {
                    if let Err(e) = runtime.cri().stop_container(id, grace).await {
                        tracing::warn!(id, error = %e, "cannot stop a sidecar");
                    }
                }
            }
            .in_current_span(),
        );
        let mut ticks = tokio::time::interval(RESYNC_PERIOD);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stopping => break,
                next = self.next_update(&mut ticks) => {
                    match next {
                        Next::Pod => {}
                        Next::Gone => {
                            stopping.abort();
                            return self.forget().await;
                        }
                        Next::Closed => return stopping.abort(),
                    }
                    if let Ok(observed) = self.runtime.observe(self.uid()).await {
                        self.report_quietly(&observed, false).await;
                    }
                }
            }
        }
        if let Ok(observed) = self.runtime.observe(self.uid()).await {
            self.report_quietly(&observed, true).await;
        }
        if let Err(e) = self.runtime.remove_pod(self.uid()).await {
            tracing::warn!(error = %e, "cannot remove the pod's sandbox");
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid().to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.pods.delete(self.name(), &params).await {
            Ok(_) => tracing::info!("pod terminated and deleted"),
            Err(kube::Error::Api(e)) if e.is_not_found() || e.is_conflict() => {
                tracing::info!("pod terminated (already gone from the API)");
            }
            Err(e) => tracing::warn!(error = %e, "cannot delete the terminated pod"),
        }
    }

    async fn report_quietly(&mut self, observed: &observed::Pod, terminal: bool) {
        if let Err(e) = self.report(observed, terminal).await {
            tracing::warn!(error = %e, "cannot report the pod's status");
        }
    }

    /// The IDs of running instances: regular containers and classic init
    /// containers first, then sidecars in reverse spec order.
    fn running_instances(&self, observed: &observed::Pod) -> (Vec<String>, Vec<String>) {
        let running = |c: &Container| {
            observed
                .latest(&c.name)
                .filter(|i| i.exit().is_none())
                .map(|i| i.id.clone())
        };
        let Some(spec) = self.pod.spec.as_ref() else {
            return (Vec::new(), Vec::new());
        };
        let init = spec.init_containers.as_deref().unwrap_or_default();
        let regular = init
            .iter()
            .filter(|c| !policy::is_sidecar(c))
            .chain(&spec.containers)
            .filter_map(running)
            .collect();
        let sidecars = init
            .iter()
            .rev()
            .filter(|c| policy::is_sidecar(c))
            .filter_map(running)
            .collect();
        (regular, sidecars)
    }

    /// The pod is gone from the API (force-deleted): its sandbox goes too.
    async fn forget(self) {
        match self.runtime.remove_pod(self.uid()).await {
            Ok(()) => tracing::info!("pod is gone from the API: removed its sandbox"),
            Err(e) => {
                tracing::warn!(error = %e, "pod is gone from the API; cannot remove its sandbox")
            }
        }
    }
}

/// Whether `event` is a `Killing` of container `name` at or after `started`.
fn is_killing_of(event: &Event, name: &str, started: Option<Timestamp>) -> bool {
    let path = event
        .involved_object
        .field_path
        .as_deref()
        .unwrap_or_default();
    let about = path == format!("spec.containers{{{name}}}")
        || path == format!("spec.initContainers{{{name}}}");
    let series = event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref());
    let times = [
        event.event_time.as_ref().map(|t| t.0),
        series.map(|t| t.0),
        event.last_timestamp.as_ref().map(|t| t.0),
    ];
    let latest = times.into_iter().flatten().max();
    about && latest.is_some_and(|at| started.is_none_or(|started| at >= started))
}
