//! The CRI sandbox and container lifecycle calls: test support, not
//! product (feature `testing`). The test node agent (`tests/node_agent`)
//! runs its pods with them, the CRI tests (`tests/support/cri.rs`,
//! `tests/cri_exec.rs`) their sandboxes and containers, and `bench/exec`
//! its containers. podprobe itself only looks sandboxes up (`ListPodSandbox`
//! and the verbose `PodSandboxStatus`, [`CriClient::pod_network_namespace`]).

use super::{
    Container, ContainerConfig, ContainerFilter, CriClient, CriError, PodSandboxConfig,
    PodSandboxStatus, RUNTIME_REQUEST_TIMEOUT, runtime_container_id, v1,
};

impl CriClient {
    /// `ListContainers` matching `filter` (`ContainerFilter::default()` for all).
    pub async fn list_containers(
        &self,
        filter: ContainerFilter,
    ) -> Result<Vec<Container>, CriError> {
        let request = v1::ListContainersRequest {
            filter: Some(filter),
        };
        let response = self
            .call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
                c.list_containers(request).await
            })
            .await?;
        Ok(response.containers)
    }

    /// `RunPodSandbox` with the runtime's default handler when
    /// `runtime_handler` is empty; returns the sandbox ID.
    pub async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, CriError> {
        let request = v1::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_string(),
        };
        // Sandboxes get twice the usual deadline, as in the kubelet.
        let response = self
            .call(Some(2 * RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
                c.run_pod_sandbox(request).await
            })
            .await?;
        non_empty(response.pod_sandbox_id)
            .ok_or_else(|| self.incomplete("RunPodSandbox", "pod_sandbox_id"))
    }

    /// `StopPodSandbox`: kills the sandbox's containers and frees its network.
    pub async fn stop_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let request = v1::StopPodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        };
        self.call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
            c.stop_pod_sandbox(request).await
        })
        .await
        .map(drop)
    }

    /// `RemovePodSandbox`: removes the sandbox and its containers.
    pub async fn remove_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let request = v1::RemovePodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        };
        self.call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
            c.remove_pod_sandbox(request).await
        })
        .await
        .map(drop)
    }

    /// `PodSandboxStatus` (not verbose): the sandbox's state and its IP
    /// (`network.ip`).
    pub async fn pod_sandbox_status(
        &self,
        pod_sandbox_id: &str,
    ) -> Result<PodSandboxStatus, CriError> {
        let request = v1::PodSandboxStatusRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            verbose: false,
        };
        let response = self
            .call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
                c.pod_sandbox_status(request).await
            })
            .await?;
        response
            .status
            .ok_or_else(|| self.incomplete("PodSandboxStatus", "status"))
    }

    /// `CreateContainer` in a sandbox started with `sandbox_config`; returns
    /// the container ID.
    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, CriError> {
        let request = v1::CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let response = self
            .call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
                c.create_container(request).await
            })
            .await?;
        non_empty(response.container_id)
            .ok_or_else(|| self.incomplete("CreateContainer", "container_id"))
    }

    /// `StartContainer`.
    pub async fn start_container(&self, container_id: &str) -> Result<(), CriError> {
        let request = v1::StartContainerRequest {
            container_id: runtime_container_id(container_id)?.to_string(),
        };
        self.call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
            c.start_container(request).await
        })
        .await
        .map(drop)
    }

    /// `RemoveContainer`, killing it first if it runs.
    pub async fn remove_container(&self, container_id: &str) -> Result<(), CriError> {
        let request = v1::RemoveContainerRequest {
            container_id: runtime_container_id(container_id)?.to_string(),
        };
        self.call(Some(RUNTIME_REQUEST_TIMEOUT), |mut c| async move {
            c.remove_container(request).await
        })
        .await
        .map(drop)
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}
