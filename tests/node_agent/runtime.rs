//! The agent's side of the container runtime: sandboxes and containers for
//! API pods, labelled as the kubelet labels them so that they are found again
//! by pod UID (also after an agent restart), and what is observed of them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, Pod};
use podprobe::runtime::cri::{
    ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState, CriClient, CriError,
    ImageSpec, KeyValue, PodSandboxConfig, PodSandboxFilter, PodSandboxMetadata, PodSandboxState,
};

use crate::observed::{self, Exit, Instance, State};

/// The kubelet's labels on sandboxes and containers.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// Why starting a container failed, with the kubelet's waiting reason.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Create(CriError),
    #[error("{0}")]
    Start(CriError),
}

impl StartError {
    /// The waiting reason the kubelet reports for it.
    pub fn reason(&self) -> &'static str {
        match self {
            StartError::Create(_) => "CreateContainerError",
            StartError::Start(_) => "RunContainerError",
        }
    }
}

/// Runs API pods in one CRI runtime. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runtime {
    cri: CriClient,
    /// Pod log directories go under `<state_dir>/pods/`.
    state_dir: PathBuf,
}

impl Runtime {
    pub fn new(cri: CriClient, state_dir: PathBuf) -> Runtime {
        Runtime { cri, state_dir }
    }

    pub fn cri(&self) -> &CriClient {
        &self.cri
    }

    /// The pod's newest sandbox and the two newest instances of each of its
    /// containers. Older instances are removed on the way, as the kubelet's
    /// container garbage collector keeps only what `lastState` needs.
    pub async fn observe(&self, uid: &str) -> Result<observed::Pod, CriError> {
        let sandbox = self.newest_sandbox(uid).await?;
        let filter = ContainerFilter {
            label_selector: HashMap::from([(POD_UID_LABEL.to_string(), uid.to_string())]),
            ..Default::default()
        };
        let mut by_name: BTreeMap<String, Vec<(u32, String)>> = BTreeMap::new();
        for container in self.cri.list_containers(filter).await? {
            // Containers of an older sandbox went with it.
            if sandbox
                .as_ref()
                .is_some_and(|s| s.id != container.pod_sandbox_id)
            {
                continue;
            }
            let Some(metadata) = container.metadata else {
                continue;
            };
            by_name
                .entry(metadata.name)
                .or_default()
                .push((metadata.attempt, container.id));
        }
        let mut containers = BTreeMap::new();
        for (name, mut instances) in by_name {
            instances.sort_unstable_by_key(|(attempt, _)| std::cmp::Reverse(*attempt));
            let mut kept = Vec::new();
            for (i, (attempt, id)) in instances.into_iter().enumerate() {
                if i >= 2 {
                    if let Err(e) = self.cri.remove_container(&id).await {
                        tracing::debug!(container = %name, id, error = %e, "cannot remove an old instance");
                    }
                    continue;
                }
                kept.push(self.instance(&id, attempt).await?);
            }
            let mut kept = kept.into_iter();
            containers.insert(
                name,
                observed::Container {
                    latest: kept.next(),
                    previous: kept.next(),
                },
            );
        }
        Ok(observed::Pod {
            sandbox,
            containers,
        })
    }

    async fn newest_sandbox(&self, uid: &str) -> Result<Option<observed::Sandbox>, CriError> {
        let Some(newest) = self
            .sandboxes_of(uid)
            .await?
            .into_iter()
            .max_by_key(|s| s.created_at)
        else {
            return Ok(None);
        };
        let status = self.cri.pod_sandbox_status(&newest.id).await?;
        let ready = status.state() == PodSandboxState::SandboxReady;
        Ok(Some(observed::Sandbox {
            id: newest.id,
            attempt: newest.metadata.map_or(0, |m| m.attempt),
            ready,
            ip: status
                .network
                .map(|n| n.ip)
                .filter(|ip| ready && !ip.is_empty()),
        }))
    }

    async fn sandboxes_of(
        &self,
        uid: &str,
    ) -> Result<Vec<podprobe::runtime::cri::PodSandbox>, CriError> {
        let filter = PodSandboxFilter {
            label_selector: HashMap::from([(POD_UID_LABEL.to_string(), uid.to_string())]),
            ..Default::default()
        };
        self.cri.list_pod_sandbox(filter).await
    }

    async fn instance(&self, id: &str, attempt: u32) -> Result<Instance, CriError> {
        let status = self.cri.container_status(id).await?;
        let state = match status.state() {
            ContainerState::ContainerCreated => State::Created,
            ContainerState::ContainerRunning => match observed::time(status.started_at) {
                Some(started_at) => State::Running { started_at },
                None => State::Unknown,
            },
            ContainerState::ContainerExited => State::Exited(Exit {
                exit_code: status.exit_code,
                reason: status.reason.clone(),
                message: status.message.clone(),
                started_at: observed::time(status.started_at),
                finished_at: observed::time(status.finished_at)
                    .or_else(|| observed::time(status.created_at))
                    .unwrap_or_else(observed::now),
                probe_kill: None,
            }),
            ContainerState::ContainerUnknown => State::Unknown,
        };
        Ok(Instance {
            id: id.to_string(),
            attempt,
            image_ref: status.image_ref,
            state,
        })
    }

    /// The sandbox configuration of `pod`'s sandbox number `attempt`.
    pub fn sandbox_config(&self, pod: &Pod, attempt: u32) -> PodSandboxConfig {
        let meta = &pod.metadata;
        let name = meta.name.clone().unwrap_or_default();
        let namespace = meta.namespace.clone().unwrap_or_default();
        let uid = meta.uid.clone().unwrap_or_default();
        let hostname = pod
            .spec
            .as_ref()
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| name.clone());
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.clone(),
                uid: uid.clone(),
                namespace: namespace.clone(),
                attempt,
            }),
            hostname: hostname.chars().take(63).collect(),
            log_directory: self.log_directory(pod).display().to_string(),
            labels: HashMap::from([
                (POD_NAME_LABEL.to_string(), name),
                (POD_NAMESPACE_LABEL.to_string(), namespace),
                (POD_UID_LABEL.to_string(), uid),
            ]),
            ..Default::default()
        }
    }

    /// `<state_dir>/pods/<namespace>_<name>_<uid>`, as the kubelet names pod
    /// log directories.
    fn log_directory(&self, pod: &Pod) -> PathBuf {
        let meta = &pod.metadata;
        self.state_dir.join("pods").join(format!(
            "{}_{}_{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
            meta.uid.as_deref().unwrap_or_default()
        ))
    }

    /// Runs sandbox number `attempt` for `pod`; returns its ID.
    pub async fn run_sandbox(&self, pod: &Pod, attempt: u32) -> Result<String, CriError> {
        let config = self.sandbox_config(pod, attempt);
        // The runtime writes logs there but does not create it.
        if let Err(e) = tokio::fs::create_dir_all(&config.log_directory).await {
            tracing::warn!(dir = %config.log_directory, error = %e, "cannot create the pod log directory");
        }
        self.cri.run_pod_sandbox(config, "").await
    }

    /// Creates and starts instance `attempt` of `container` in the sandbox.
    pub async fn start_container(
        &self,
        pod: &Pod,
        sandbox: &observed::Sandbox,
        container: &Container,
        attempt: u32,
    ) -> Result<String, StartError> {
        let sandbox_config = self.sandbox_config(pod, sandbox.attempt);
        let config = container_config(pod, container, attempt);
        let log_dir = PathBuf::from(&sandbox_config.log_directory).join(&container.name);
        if let Err(e) = tokio::fs::create_dir_all(&log_dir).await {
            tracing::warn!(dir = %log_dir.display(), error = %e, "cannot create the container log directory");
        }
        let id = self
            .cri
            .create_container(&sandbox.id, config, sandbox_config)
            .await
            .map_err(StartError::Create)?;
        self.cri
            .start_container(&id)
            .await
            .map_err(StartError::Start)?;
        Ok(id)
    }

    /// Stops and removes every sandbox of the pod `uid` (and with them their
    /// containers).
    pub async fn remove_pod(&self, uid: &str) -> Result<(), CriError> {
        for sandbox in self.sandboxes_of(uid).await? {
            self.cri.stop_pod_sandbox(&sandbox.id).await?;
            self.cri.remove_pod_sandbox(&sandbox.id).await?;
        }
        Ok(())
    }

    /// Removes the sandboxes and containers of pods whose UID is not in
    /// `bound` (pods deleted while the agent was not watching); returns the
    /// UIDs removed.
    pub async fn remove_all_but(&self, bound: &HashSet<String>) -> Result<Vec<String>, CriError> {
        let mut removed = Vec::new();
        for sandbox in self
            .cri
            .list_pod_sandbox(PodSandboxFilter::default())
            .await?
        {
            let uid = sandbox
                .labels
                .get(POD_UID_LABEL)
                .cloned()
                .unwrap_or_default();
            if bound.contains(&uid) {
                continue;
            }
            self.cri.stop_pod_sandbox(&sandbox.id).await?;
            self.cri.remove_pod_sandbox(&sandbox.id).await?;
            removed.push(uid);
        }
        for container in self.cri.list_containers(ContainerFilter::default()).await? {
            let uid = container
                .labels
                .get(POD_UID_LABEL)
                .cloned()
                .unwrap_or_default();
            if !bound.contains(&uid) {
                self.cri.remove_container(&container.id).await?;
                removed.push(uid);
            }
        }
        removed.sort();
        removed.dedup();
        Ok(removed)
    }
}

/// The CRI configuration of instance `attempt` of `container`: the API
/// container's command, args, working directory and plain environment
/// values; the image must be present already (nothing is pulled).
fn container_config(pod: &Pod, container: &Container, attempt: u32) -> ContainerConfig {
    let meta = &pod.metadata;
    let mut labels: HashMap<String, String> = meta
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    for (key, value) in [
        (POD_NAME_LABEL, meta.name.as_deref()),
        (POD_NAMESPACE_LABEL, meta.namespace.as_deref()),
        (POD_UID_LABEL, meta.uid.as_deref()),
        (CONTAINER_NAME_LABEL, Some(container.name.as_str())),
    ] {
        labels.insert(key.to_string(), value.unwrap_or_default().to_string());
    }
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: container.name.clone(),
            attempt,
        }),
        image: Some(ImageSpec {
            image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: container.command.clone().unwrap_or_default(),
        args: container.args.clone().unwrap_or_default(),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: container
            .env
            .iter()
            .flatten()
            // Only plain values: references to other objects need the API.
            .filter(|e| e.value_from.is_none())
            .map(|e| KeyValue {
                key: e.name.clone(),
                value: e.value.clone().unwrap_or_default(),
            })
            .collect(),
        labels,
        log_path: format!("{}/{attempt}.log", container.name),
        ..Default::default()
    }
}
