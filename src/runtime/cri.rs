//! CRI `RuntimeService` client over the runtime's unix socket.
//!
//! The kubelet talks to containerd or CRI-O through the CRI v1 gRPC API; so
//! does podprobe, with the subset in `proto/api.proto`: `ExecSync` for exec
//! probes, `StopContainer` to act on liveness and startup failures,
//! `ContainerStatus` to look a container up,
//! `ListPodSandbox`/`PodSandboxStatus` to find a pod's network namespace
//! (probes with `podprobe.network: pod`). The sandbox and container
//! lifecycle calls that the test node agent (`tests/node_agent`), the CRI
//! tests and `bench/exec` need are test support, not product: they are in
//! `node_agent.rs`, behind the `testing` feature.
//!
//! The connection is made on first use and re-made by itself after the
//! runtime restarts: once the client has seen the old connection close, the
//! next call dials again (a call in flight while the runtime goes away fails,
//! as it does for the kubelet). Every call has the kubelet's deadline (the
//! runtime request timeout, 2 min, plus what the call itself may take).

use crate::runtime::grpc_status::{GrpcStatus, WithoutStatusDetails, without_status_details};
use podprobe_core::util::fair_slots::{FairSlots, SlotsBusy};
use podprobe_core::util::pod::{self, ContainerIdentity};
use std::collections::{HashMap, HashSet};
use std::error::Error as _;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

#[cfg(feature = "testing")]
mod node_agent;

use crate::runtime::in_flight::InFlightGauge;

/// Code generated from `proto/api.proto` by `build.rs`.
mod v1 {
    tonic::include_proto!("runtime.v1");
}

/// The messages of the lifecycle calls in `node_agent.rs`.
#[cfg(feature = "testing")]
pub use v1::{
    Container, ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState,
    ContainerStateValue, ImageSpec, KeyValue, PodSandboxConfig, PodSandboxMetadata,
    PodSandboxStatus,
};
pub use v1::{
    ContainerStatus, ExecSyncResponse, PodSandbox, PodSandboxFilter, PodSandboxState,
    VersionResponse,
};

use v1::runtime_service_client::RuntimeServiceClient;

/// containerd's CRI socket, the default endpoint.
pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// The kubelet's `--runtime-request-timeout` default: the deadline of plain
/// CRI calls, and the slack added to calls that wait on purpose (exec, stop).
pub const RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Largest response accepted, as the kubelet's CRI client (16 MiB).
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Largest `ExecSync` response accepted. The kubelet takes up to 16 MiB and
/// keeps 10 KiB; podprobe stops at 1 MiB, so that concurrent exec probes of
/// pods that print without end cannot hold 16 MiB each. Beyond it the call
/// errors (the run is retried, then thrown away), whatever the exit code.
pub const MAX_EXEC_RESPONSE_BYTES: usize = 1024 * 1024;

/// How many containers a client remembers facts of (see
/// [`ContainerFacts`]); past it, it starts over. A node runs a few hundred
/// containers at most.
const CONTAINER_FACTS_CAPACITY: usize = 4096;

/// The labels the kubelet puts on every container it creates: which pod
/// (by UID) and which container of its spec the runtime container is.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// The CRI API version the kubelet announces in `VersionRequest`.
const KUBE_RUNTIME_API_VERSION: &str = "0.1.0";

/// Errors talking to the container runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error(
        "invalid CRI endpoint {0:?}: expected unix:///path/to/socket or an absolute socket path"
    )]
    InvalidEndpoint(String),
    #[error(
        "invalid container ID {0:?}: expected <runtime>://<id> (e.g. containerd://4f1c...) or a bare ID"
    )]
    InvalidContainerId(String),
    /// The socket could not be dialled (missing, refused, no permission).
    #[error(
        "cannot reach the container runtime at {endpoint}: {reason} (is the container runtime running?)"
    )]
    Unreachable { endpoint: String, reason: String },
    /// Something answers on the socket, but not the CRI v1 `RuntimeService`.
    #[error("{endpoint} is not a CRI v1 runtime: {status}")]
    NotCriRuntime {
        endpoint: String,
        status: GrpcStatus,
    },
    /// The runtime (or the call's deadline) failed the call.
    #[error("{0}")]
    Status(GrpcStatus),
    #[error("CRI {method} response from {endpoint} has no {field}")]
    IncompleteResponse {
        endpoint: String,
        method: &'static str,
        field: &'static str,
    },
    /// No exec slot became free for the probe's pod for as long as the
    /// probe could wait.
    #[error(
        "exec not started: no exec slot became free for this pod within {waited:?} ({limit} on \
         this node, --max-concurrent-execs; at most {per_pod} per pod, \
         --max-concurrent-execs-per-pod)"
    )]
    ExecSlotsBusy {
        limit: usize,
        per_pod: usize,
        waited: Duration,
    },
    /// The runtime's labels say the container is not the one the pod's
    /// status names it to be: its status was tampered with, or is stale.
    #[error(
        "container {container_id} is not container {expected_container:?} of pod {expected_pod_uid}: \
         the runtime labels it {found_container:?} of pod {found_pod_uid:?}; refusing to act on it"
    )]
    ForeignContainer {
        container_id: String,
        expected_pod_uid: String,
        expected_container: String,
        found_pod_uid: String,
        found_container: String,
    },
    /// `network: pod`: the runtime has no ready sandbox for the pod (not
    /// started yet, or being torn down).
    #[error("no ready pod sandbox for pod {pod_uid} in the container runtime")]
    NoReadySandbox { pod_uid: String },
    /// `network: pod`: the sandbox's verbose status names no network
    /// namespace of its own (a host-network sandbox, or a runtime that does
    /// not say).
    #[error("pod sandbox {sandbox_id} has no network namespace of its own in the runtime's status")]
    NoNetworkNamespace { sandbox_id: String },
}

impl CriError {
    /// The gRPC code of a failed call, if the call reached the runtime or its
    /// deadline.
    pub fn code(&self) -> Option<Code> {
        match self {
            CriError::Status(status) | CriError::NotCriRuntime { status, .. } => Some(status.code),
            _ => None,
        }
    }
}

/// A CRI runtime client that reconnects by itself. Cheap to clone; clones
/// share one connection.
///
/// The connection is set up on the tokio runtime of the first call and lives
/// as long as that runtime.
#[derive(Clone, Debug)]
pub struct CriClient {
    /// The endpoint as `unix:///path`, for messages.
    endpoint: Arc<str>,
    socket: PathBuf,
    channel: Arc<OnceLock<Channel>>,
    /// Counts `ExecSync` calls in flight (`podprobe_exec_in_flight`).
    exec_in_flight: InFlightGauge,
    /// Bounds the `ExecSync` calls in flight, node-wide and per pod, and
    /// how long one may hold a slot; `None`: no bound.
    exec_slots: Option<(Arc<FairSlots>, Duration)>,
    /// What the runtime said about containers that holds for their life.
    facts: Arc<Mutex<ContainerFacts>>,
}

/// What the runtime said about containers that holds for as long as each
/// exists, by runtime container ID, so that it is asked once per container
/// and not once per probe run (#15, #27). Runtimes do not reuse container
/// IDs.
///
/// - The pod and container its labels name (`verify_identity`): labels are
///   set when a container is created and no CRI call changes them. Only
///   matches are remembered; an ID that was not the expected container is
///   asked about again every time.
/// - The network namespace of its pod's sandbox (`pod_network_namespace`):
///   a container lives in one sandbox, whose namespace lasts as long as the
///   sandbox. Remembered with the pod UID it was found for, so an ID
///   claimed for another pod is looked up afresh.
#[derive(Debug, Default)]
struct ContainerFacts {
    by_id: HashMap<String, Facts>,
}

#[derive(Debug, Default)]
struct Facts {
    /// (pod UID, container name).
    identity: Option<(String, String)>,
    /// (pod UID, namespace path).
    network_namespace: Option<(String, PathBuf)>,
}

impl ContainerFacts {
    fn is_verified(&self, container_id: &str, identity: ContainerIdentity<'_>) -> bool {
        self.by_id
            .get(container_id)
            .and_then(|facts| facts.identity.as_ref())
            .is_some_and(|(pod_uid, name)| {
                pod_uid == identity.pod_uid && name == identity.container_name
            })
    }

    fn verified(&mut self, container_id: &str, identity: ContainerIdentity<'_>) {
        self.entry(container_id).identity = Some((
            identity.pod_uid.to_string(),
            identity.container_name.to_string(),
        ));
    }

    fn network_namespace(&self, container_id: &str, pod_uid: &str) -> Option<&PathBuf> {
        match &self.by_id.get(container_id)?.network_namespace {
            Some((found_for, path)) if found_for == pod_uid => Some(path),
            _ => None,
        }
    }

    fn set_network_namespace(&mut self, container_id: &str, pod_uid: &str, path: PathBuf) {
        self.entry(container_id).network_namespace = Some((pod_uid.to_string(), path));
    }

    fn forget_network_namespace(&mut self, container_id: &str) {
        if let Some(facts) = self.by_id.get_mut(container_id) {
            facts.network_namespace = None;
        }
    }

    /// The facts of `container_id`. Entries of removed containers are never
    /// asked for again: [`CriClient::retain_containers`] drops them, and a
    /// full memory starts over.
    fn entry(&mut self, container_id: &str) -> &mut Facts {
        if self.by_id.len() >= CONTAINER_FACTS_CAPACITY && !self.by_id.contains_key(container_id) {
            self.by_id.clear();
        }
        self.by_id.entry(container_id.to_string()).or_default()
    }
}

impl CriClient {
    /// A client for `endpoint` (`unix:///path` or `/path`); connects lazily,
    /// so this succeeds whether or not the runtime is up.
    pub fn new(endpoint: &str) -> Result<CriClient, CriError> {
        let socket = parse_endpoint(endpoint)?;
        Ok(CriClient {
            endpoint: format!("unix://{}", socket.display()).into(),
            socket,
            channel: Arc::new(OnceLock::new()),
            exec_in_flight: InFlightGauge::default(),
            exec_slots: None,
            facts: Arc::default(),
        })
    }

    /// At most `limit` (at least 1) `ExecSync` calls of this client and its
    /// clones run at once, at most `per_pod` of one pod's, each for at most
    /// `max_timeout`; the others wait, fairly between pods
    /// ([`FairSlots`]), up to their timeout. A pod running none gets a slot
    /// even when all are taken: pods that fill the node cannot keep
    /// another's exec probes waiting at all.
    pub fn limit_concurrent_execs(
        mut self,
        limit: usize,
        per_pod: usize,
        max_timeout: Duration,
    ) -> Self {
        self.exec_slots = Some((FairSlots::with_guaranteed(limit, per_pod, 1), max_timeout));
        self
    }

    /// The runtime timeout an exec probe with `timeout` gets: its own, cut to
    /// the longest a probe may hold an exec slot.
    pub fn exec_timeout(&self, timeout: Duration) -> Duration {
        match &self.exec_slots {
            Some((_, max_timeout)) => timeout.min(*max_timeout),
            None => timeout,
        }
    }

    /// Counts this client's `ExecSync` calls in flight on `gauge`.
    pub fn count_exec_in_flight(mut self, gauge: InFlightGauge) -> Self {
        self.exec_in_flight = gauge;
        self
    }

    /// The endpoint as `unix:///path`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `Version`: the runtime's name and versions.
    pub async fn version(&self) -> Result<VersionResponse, CriError> {
        let request = v1::VersionRequest {
            version: KUBE_RUNTIME_API_VERSION.to_string(),
        };
        self.call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
            c.version(request).await
        })
        .await
    }

    /// `ExecSync` of an exec probe of `pod` (its UID: the key of its fair
    /// share of the exec slots): runs `cmd` in the container and waits for
    /// it. The runtime stops the command after `timeout` (whole seconds,
    /// cut to [`CriClient::exec_timeout`]; zero means no limit); the call
    /// itself gets `timeout` plus [`RUNTIME_REQUEST_TIMEOUT`] and no deadline
    /// when `timeout` is zero. A non-zero exit code is not an error: it is
    /// in the response.
    pub async fn exec_sync(
        &self,
        pod: &str,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecSyncResponse, CriError> {
        let timeout = self.exec_timeout(timeout);
        let _slot = match &self.exec_slots {
            None => None,
            Some((slots, _)) => {
                // A probe waits for a slot as long as its command may run.
                let waited = timeout.max(Duration::from_secs(1));
                match slots.acquire(pod, waited).await {
                    Ok(slot) => Some(slot),
                    Err(SlotsBusy) => {
                        return Err(CriError::ExecSlotsBusy {
                            limit: slots.limit(),
                            per_pod: slots.per_pod(),
                            waited,
                        });
                    }
                }
            }
        };
        self.exec_sync_unslotted(container_id, cmd, timeout).await
    }

    /// [`exec_sync`](Self::exec_sync) without waiting for one of the
    /// node-wide exec slots, for commands that are no probe (preStop hooks,
    /// which may run for a whole grace period and must not hold probes
    /// back).
    pub async fn exec_sync_unslotted(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecSyncResponse, CriError> {
        let request = v1::ExecSyncRequest {
            container_id: runtime_container_id(container_id)?.to_string(),
            cmd: cmd.to_vec(),
            timeout: secs_i64(timeout),
        };
        let deadline = (!timeout.is_zero()).then(|| RUNTIME_REQUEST_TIMEOUT + timeout);
        let _in_flight = self.exec_in_flight.enter();
        self.call_limited(MAX_EXEC_RESPONSE_BYTES, deadline, |mut c| async move {
            c.exec_sync(request).await
        })
        .await
    }

    /// `Ok` if the runtime labels `container_id` as `identity`'s container
    /// (the labels the kubelet sets when it creates a container). The
    /// runtime is asked once per container: a match is remembered by this
    /// client and its clones (see `ContainerFacts`).
    pub async fn verify_identity(
        &self,
        container_id: &str,
        identity: ContainerIdentity<'_>,
    ) -> Result<(), CriError> {
        let id = runtime_container_id(container_id)?;
        if self.facts().is_verified(id, identity) {
            return Ok(());
        }
        let status = self.container_status(container_id).await?;
        let label = |key| status.labels.get(key).cloned().unwrap_or_default();
        let (found_pod_uid, found_container) = (label(POD_UID_LABEL), label(CONTAINER_NAME_LABEL));
        if found_pod_uid == identity.pod_uid && found_container == identity.container_name {
            self.facts().verified(id, identity);
            return Ok(());
        }
        Err(CriError::ForeignContainer {
            container_id: container_id.to_string(),
            expected_pod_uid: identity.pod_uid.to_string(),
            expected_container: identity.container_name.to_string(),
            found_pod_uid,
            found_container,
        })
    }

    /// `StopContainer`: signals the container to stop and kills it after
    /// `grace_seconds`. Stopping a stopped container succeeds.
    pub async fn stop_container(
        &self,
        container_id: &str,
        grace_seconds: i64,
    ) -> Result<(), CriError> {
        let request = v1::StopContainerRequest {
            container_id: runtime_container_id(container_id)?.to_string(),
            timeout: grace_seconds,
        };
        let grace = Duration::from_secs(u64::try_from(grace_seconds).unwrap_or(0));
        self.call(Some(RUNTIME_REQUEST_TIMEOUT + grace), |mut c| async move {
            c.stop_container(request).await
        })
        .await
        .map(drop)
    }

    /// `ContainerStatus` (not verbose).
    pub async fn container_status(&self, container_id: &str) -> Result<ContainerStatus, CriError> {
        let request = v1::ContainerStatusRequest {
            container_id: runtime_container_id(container_id)?.to_string(),
            verbose: false,
        };
        let response = self
            .call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
                c.container_status(request).await
            })
            .await?;
        response
            .status
            .ok_or_else(|| self.incomplete("ContainerStatus", "status"))
    }

    /// Where the network namespace of pod `pod_uid` can be opened: the
    /// namespace of its ready sandbox (the newest, should a replacement be
    /// starting), from the sandbox's verbose status
    /// ([`network_namespace_path`]). The sandbox is found by the
    /// `io.kubernetes.pod.uid` label the kubelet sets, so it is this pod's.
    /// With the probed container's ID, the runtime is asked once per
    /// container (see `ContainerFacts`); a path that cannot be opened is
    /// to be forgotten with [`CriClient::forget_network_namespace`].
    pub async fn pod_network_namespace(
        &self,
        pod_uid: &str,
        container_id: Option<&str>,
    ) -> Result<PathBuf, CriError> {
        if let Some(id) = container_id
            && let Some(path) = self.facts().network_namespace(id, pod_uid)
        {
            return Ok(path.clone());
        }
        let filter = PodSandboxFilter {
            state: Some(v1::PodSandboxStateValue {
                state: PodSandboxState::SandboxReady.into(),
            }),
            label_selector: [(POD_UID_LABEL.to_string(), pod_uid.to_string())].into(),
            ..PodSandboxFilter::default()
        };
        let sandbox = self
            .list_pod_sandbox(filter)
            .await?
            .into_iter()
            .max_by_key(|s| s.created_at)
            .ok_or_else(|| CriError::NoReadySandbox {
                pod_uid: pod_uid.to_string(),
            })?;
        let request = v1::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox.id.clone(),
            verbose: true,
        };
        let response = self
            .call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
                c.pod_sandbox_status(request).await
            })
            .await?;
        let path = network_namespace_path(&response.info).ok_or(CriError::NoNetworkNamespace {
            sandbox_id: sandbox.id,
        })?;
        if let Some(id) = container_id {
            self.facts()
                .set_network_namespace(id, pod_uid, path.clone());
        }
        Ok(path)
    }

    /// Forgets the network namespace remembered for `container_id`: it
    /// could not be opened, so the next probe run asks the runtime again.
    pub fn forget_network_namespace(&self, container_id: &str) {
        self.facts().forget_network_namespace(container_id);
    }

    /// `ListPodSandbox` matching `filter` (`PodSandboxFilter::default()` for all).
    pub async fn list_pod_sandbox(
        &self,
        filter: PodSandboxFilter,
    ) -> Result<Vec<PodSandbox>, CriError> {
        let request = v1::ListPodSandboxRequest {
            filter: Some(filter),
        };
        let response = self
            .call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
                c.list_pod_sandbox(request).await
            })
            .await?;
        Ok(response.items)
    }

    /// Runs one RPC with `deadline` (none: wait as long as it takes) and
    /// turns its failure into a [`CriError`].
    async fn call<T, F, Fut>(&self, deadline: Option<Duration>, rpc: F) -> Result<T, CriError>
    where
        F: FnOnce(RuntimeServiceClient<WithoutStatusDetails<Channel>>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.call_limited(MAX_MESSAGE_BYTES, deadline, rpc).await
    }

    /// [`CriClient::call`] accepting responses of at most `max_response` bytes.
    async fn call_limited<T, F, Fut>(
        &self,
        max_response: usize,
        deadline: Option<Duration>,
        rpc: F,
    ) -> Result<T, CriError>
    where
        F: FnOnce(RuntimeServiceClient<WithoutStatusDetails<Channel>>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let reply = rpc(self.client().max_decoding_message_size(max_response));
        let result = match deadline {
            // Go's client reports an expired deadline as DeadlineExceeded;
            // tonic's own timeout would say Cancelled, so time it here.
            Some(deadline) => tokio::time::timeout(deadline, reply)
                .await
                .unwrap_or_else(|_| Err(Status::deadline_exceeded("context deadline exceeded"))),
            None => reply.await,
        };
        result
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(&self.endpoint, &s))
    }

    fn client(&self) -> RuntimeServiceClient<WithoutStatusDetails<Channel>> {
        let channel = self.channel.get_or_init(|| {
            let socket = self.socket.clone();
            let connector = tower::service_fn(move |_: http::Uri| {
                let socket = socket.clone();
                async move { UnixStream::connect(socket).await.map(TokioIo::new) }
            });
            // The authority is unused on a unix socket; "localhost" is what
            // the kubelet sends.
            Endpoint::from_static("http://localhost").connect_with_connector_lazy(connector)
        });
        // A runtime's bad status details would panic inside tonic; see
        // `without_status_details`.
        RuntimeServiceClient::new(without_status_details(channel.clone()))
    }

    /// Forgets the facts of every container but those in `listed` (the IDs
    /// pod statuses still name, `<runtime>://<id>`; #39): a removed
    /// container's are never asked for again.
    pub fn retain_containers(&self, listed: &HashSet<String>) {
        let listed: HashSet<&str> = listed
            .iter()
            .filter_map(|id| runtime_container_id(id).ok())
            .collect();
        self.facts()
            .by_id
            .retain(|id, _| listed.contains(id.as_str()));
    }

    /// Containers it keeps facts of.
    pub fn containers_known(&self) -> usize {
        self.facts().by_id.len()
    }

    fn facts(&self) -> std::sync::MutexGuard<'_, ContainerFacts> {
        // The map is valid whatever a panicking holder left half done.
        self.facts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn incomplete(&self, method: &'static str, field: &'static str) -> CriError {
        CriError::IncompleteResponse {
            endpoint: self.endpoint.to_string(),
            method,
            field,
        }
    }
}

/// The socket path of `unix:///path` or `/path`.
fn parse_endpoint(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') && path.len() > 1 {
        Ok(PathBuf::from(path))
    } else {
        Err(CriError::InvalidEndpoint(endpoint.to_string()))
    }
}

/// The runtime's own ID of a container: the Kubernetes form
/// `<runtime>://<id>` (`containerd://`, `cri-o://`, `docker://`, ...) loses
/// its prefix whatever the runtime name, as the kubelet's `ParseContainerID`
/// does; a bare ID is used as is.
pub fn runtime_container_id(id: &str) -> Result<&str, CriError> {
    let bare = pod::runtime_container_id(id);
    if bare.is_empty() || bare.contains('/') {
        return Err(CriError::InvalidContainerId(id.to_string()));
    }
    Ok(bare)
}

/// Maps a failed call to what went wrong from the user's point of view.
fn classify(endpoint: &str, status: &Status) -> CriError {
    if status.code() == Code::Unavailable
        && let Some(io) = io_error_in(status)
    {
        return CriError::Unreachable {
            endpoint: endpoint.to_string(),
            reason: io_reason(io),
        };
    }
    let grpc = GrpcStatus {
        code: status.code(),
        message: message_with_causes(status),
    };
    if status.code() == Code::Unimplemented {
        return CriError::NotCriRuntime {
            endpoint: endpoint.to_string(),
            status: grpc,
        };
    }
    CriError::Status(grpc)
}

/// The status message, followed by its causes when the failure happened in
/// the client ("transport error: connection error: broken pipe"): tonic's
/// message alone does not say what broke.
fn message_with_causes(status: &Status) -> String {
    let mut message = status.message().to_string();
    let mut cause = status.source();
    while let Some(err) = cause {
        let text = err.to_string();
        if !message.ends_with(&text) {
            message = format!("{message}: {text}");
        }
        cause = err.source();
    }
    message
}

/// The first I/O error among the causes of `status` (a failed dial).
fn io_error_in(status: &Status) -> Option<&io::Error> {
    let mut cause = status.source();
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return Some(io);
        }
        cause = err.source();
    }
    None
}

/// The C library's wording for the usual dial failures, without Rust's
/// "(os error N)" suffix.
fn io_reason(err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::NotFound => "no such file or directory".to_string(),
        io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => err.to_string(),
    }
}

/// The network namespace a sandbox's verbose `info` names: containerd's
/// `info` document carries the sandbox's OCI runtime spec, whose
/// `linux.namespaces` entry of type `network` has the namespace's path
/// (`/var/run/netns/cni-...`). A spec without such an entry means the
/// sandbox shares the node's namespace: `None`. Only a runtime that gives
/// no spec at all is asked for the sandbox's process instead
/// (`/proc/<pid>/ns/net`).
pub fn network_namespace_path(info: &HashMap<String, String>) -> Option<PathBuf> {
    let document: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    match document.get("runtimeSpec") {
        Some(spec) => spec["linux"]["namespaces"]
            .as_array()?
            .iter()
            .find(|ns| ns["type"] == "network")?["path"]
            .as_str()
            .filter(|path| path.starts_with('/'))
            .map(PathBuf::from),
        None => document["pid"]
            .as_u64()
            .filter(|&pid| pid > 1)
            .map(|pid| PathBuf::from(format!("/proc/{pid}/ns/net"))),
    }
}

/// Whole seconds of `d` as the CRI's int64, saturating.
fn secs_i64(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verbose_info(document: serde_json::Value) -> HashMap<String, String> {
        [("info".to_string(), document.to_string())].into()
    }

    #[test]
    fn the_network_namespace_comes_from_the_sandboxs_runtime_spec() {
        // As containerd 1.7/2.x reports it (trimmed).
        let containerd = verbose_info(serde_json::json!({
            "pid": 4242,
            "runtimeSpec": {"linux": {"namespaces": [
                {"type": "pid"},
                {"type": "ipc"},
                {"type": "network", "path": "/var/run/netns/cni-0b1c"},
            ]}},
        }));
        assert_eq!(
            network_namespace_path(&containerd),
            Some(PathBuf::from("/var/run/netns/cni-0b1c"))
        );
        // hostNetwork: the spec has no network namespace of its own; the
        // pid would name the node's, so it is not used.
        let host_network = verbose_info(serde_json::json!({
            "pid": 4242,
            "runtimeSpec": {"linux": {"namespaces": [{"type": "pid"}]}},
        }));
        assert_eq!(network_namespace_path(&host_network), None);
        let no_spec = verbose_info(serde_json::json!({"pid": 4242}));
        assert_eq!(
            network_namespace_path(&no_spec),
            Some(PathBuf::from("/proc/4242/ns/net"))
        );
        for useless in [
            HashMap::new(),
            [("info".to_string(), "not json".to_string())].into(),
            verbose_info(serde_json::json!({"pid": 0})),
            verbose_info(serde_json::json!({"runtimeSpec": {"linux": {"namespaces": [
                {"type": "network", "path": "relative"}]}}})),
        ] {
            assert_eq!(network_namespace_path(&useless), None, "{useless:?}");
        }
    }

    /// #39: a container no pod status names any more is forgotten, or the
    /// facts grow with every container the node ever ran.
    #[tokio::test]
    async fn facts_of_containers_no_status_names_are_forgotten() {
        let client = CriClient::new("unix:///nonexistent/cri.sock").unwrap();
        let app = ContainerIdentity {
            pod_uid: "uid-1",
            container_name: "app",
        };
        client.facts().verified("abc", app);
        client.facts().verified("def", app);
        client.retain_containers(&["containerd://abc".to_string()].into());
        assert_eq!(client.containers_known(), 1);
        assert!(client.facts().is_verified("abc", app));
        client.retain_containers(&HashSet::new());
        assert_eq!(client.containers_known(), 0);
    }

    #[test]
    fn container_facts_remember_identity_matches_per_id_and_identity() {
        let app = ContainerIdentity {
            pod_uid: "uid-1",
            container_name: "app",
        };
        let mut facts = ContainerFacts::default();
        assert!(!facts.is_verified("abc", app));
        facts.verified("abc", app);
        assert!(facts.is_verified("abc", app));
        // Another ID, or the same ID claimed for another pod or container,
        // is asked about again.
        assert!(!facts.is_verified("def", app));
        for other in [
            ContainerIdentity {
                pod_uid: "uid-2",
                container_name: "app",
            },
            ContainerIdentity {
                pod_uid: "uid-1",
                container_name: "sidecar",
            },
        ] {
            assert!(!facts.is_verified("abc", other));
        }
    }

    #[test]
    fn container_facts_remember_a_network_namespace_per_id_and_pod() {
        let mut facts = ContainerFacts::default();
        let path = PathBuf::from("/run/netns/cni-1");
        assert_eq!(facts.network_namespace("abc", "uid-1"), None);
        facts.set_network_namespace("abc", "uid-1", path.clone());
        assert_eq!(facts.network_namespace("abc", "uid-1"), Some(&path));
        // The same ID claimed for another pod is looked up afresh.
        assert_eq!(facts.network_namespace("abc", "uid-2"), None);
        assert_eq!(facts.network_namespace("def", "uid-1"), None);
        // Both facts of one container live side by side; forgetting one
        // keeps the other.
        let app = ContainerIdentity {
            pod_uid: "uid-1",
            container_name: "app",
        };
        facts.verified("abc", app);
        facts.forget_network_namespace("abc");
        assert_eq!(facts.network_namespace("abc", "uid-1"), None);
        assert!(facts.is_verified("abc", app));
    }

    #[test]
    fn container_facts_start_over_when_full() {
        let app = ContainerIdentity {
            pod_uid: "uid-1",
            container_name: "app",
        };
        let mut facts = ContainerFacts::default();
        for i in 0..CONTAINER_FACTS_CAPACITY {
            facts.verified(&i.to_string(), app);
        }
        assert_eq!(facts.by_id.len(), CONTAINER_FACTS_CAPACITY);
        // A known container adds nothing...
        facts.set_network_namespace("7", "uid-1", PathBuf::from("/run/netns/x"));
        assert_eq!(facts.by_id.len(), CONTAINER_FACTS_CAPACITY);
        // ... a new one starts over.
        facts.verified("one-more", app);
        assert_eq!(facts.by_id.len(), 1);
        assert!(facts.is_verified("one-more", app));
    }

    #[test]
    fn endpoint_accepts_unix_uri_and_absolute_path() {
        let uri = CriClient::new("unix:///run/containerd/containerd.sock").unwrap();
        assert_eq!(uri.endpoint(), "unix:///run/containerd/containerd.sock");
        let bare = CriClient::new("/var/run/crio/crio.sock").unwrap();
        assert_eq!(bare.endpoint(), "unix:///var/run/crio/crio.sock");
    }

    #[test]
    fn endpoint_rejects_other_schemes_and_relative_paths() {
        for bad in [
            "tcp://127.0.0.1:1234",
            "unix://relative.sock",
            "containerd.sock",
            "unix://",
            "",
            "/",
        ] {
            assert!(
                matches!(CriClient::new(bad), Err(CriError::InvalidEndpoint(e)) if e == bad),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn container_id_prefix_is_stripped_for_any_runtime() {
        assert_eq!(
            runtime_container_id("containerd://abc123").unwrap(),
            "abc123"
        );
        assert_eq!(runtime_container_id("cri-o://abc123").unwrap(), "abc123");
        assert_eq!(runtime_container_id("docker://abc123").unwrap(), "abc123");
        assert_eq!(runtime_container_id("abc123").unwrap(), "abc123");
    }

    #[test]
    fn container_id_must_not_be_empty_or_a_path() {
        for bad in ["", "containerd://", "containerd://a/b"] {
            assert!(
                matches!(
                    runtime_container_id(bad),
                    Err(CriError::InvalidContainerId(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn status_displays_like_go_grpc() {
        let status = GrpcStatus {
            code: Code::NotFound,
            message: "container \"x\" not found".into(),
        };
        assert_eq!(
            status.to_string(),
            "rpc error: code = NotFound desc = container \"x\" not found"
        );
        assert_eq!(
            crate::runtime::grpc_status::go_code_name(Code::Cancelled),
            "Canceled"
        );
    }

    #[test]
    fn failed_dial_is_unreachable_with_the_os_reason() {
        let mut status = Status::unavailable("error trying to connect");
        status.set_source(Arc::new(io::Error::from(io::ErrorKind::NotFound)));
        let err = classify("unix:///x.sock", &status);
        assert_eq!(
            err.to_string(),
            "cannot reach the container runtime at unix:///x.sock: no such file or directory \
             (is the container runtime running?)"
        );
        assert_eq!(err.code(), None);
    }

    #[test]
    fn client_side_failures_name_their_causes() {
        let mut status = Status::unknown("transport error");
        status.set_source(Arc::new(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "broken pipe",
        )));
        assert_eq!(
            classify("unix:///x.sock", &status).to_string(),
            "rpc error: code = Unknown desc = transport error: broken pipe"
        );
    }

    #[test]
    fn unimplemented_means_not_a_cri_runtime() {
        let err = classify("unix:///x.sock", &Status::unimplemented(""));
        assert_eq!(
            err.to_string(),
            "unix:///x.sock is not a CRI v1 runtime: rpc error: code = Unimplemented desc = "
        );
    }

    #[test]
    fn other_statuses_keep_code_and_message() {
        let err = classify(
            "unix:///x.sock",
            &Status::deadline_exceeded("context deadline exceeded"),
        );
        assert_eq!(err.code(), Some(Code::DeadlineExceeded));
        assert_eq!(
            err.to_string(),
            "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
        );
    }
}
