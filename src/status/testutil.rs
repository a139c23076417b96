//! Builders shared by the status module's tests.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition,
    PodReadinessGate, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::ContainerProbeView;
use super::conditions::condition;

pub const UID: &str = "5f0c1a2e-8b7d-4c3e-9a41-2f6d7e8c9b10";

pub fn time(rfc3339: &str) -> Time {
    Time(rfc3339.parse().expect("test timestamp"))
}

pub use crate::worker::testing::{container, sidecar};

/// A running container's status with ID `containerd://<name>`.
pub fn container_status(name: &str, ready: bool) -> ContainerStatus {
    ContainerStatus {
        name: name.to_string(),
        container_id: Some(format!("containerd://{name}")),
        image: format!("docker.io/local/{name}:1"),
        image_id: format!("docker.io/local/{name}@sha256:00"),
        ready,
        started: Some(ready),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(time("2025-03-01T10:00:03Z")),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// The verdict about the instance [`container_status`] describes.
pub fn view(name: &str, started: bool, ready: bool) -> ContainerProbeView {
    ContainerProbeView {
        name: name.to_string(),
        container_id: Some(format!("containerd://{name}")),
        started,
        ready,
        note: None,
    }
}

/// A condition with a transition time.
pub fn timed(
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    at: &str,
) -> PodCondition {
    PodCondition {
        last_transition_time: Some(time(at)),
        ..condition(type_, status, reason, message.map(str::to_string))
    }
}

/// A running pod `shop/web-0` with UID [`UID`] and resourceVersion `42`.
pub fn pod(
    init_containers: Vec<Container>,
    containers: Vec<Container>,
    gates: &[&str],
    status: PodStatus,
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some("shop".to_string()),
            name: Some("web-0".to_string()),
            uid: Some(UID.to_string()),
            resource_version: Some("42".to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            init_containers: (!init_containers.is_empty()).then_some(init_containers),
            containers,
            readiness_gates: (!gates.is_empty()).then(|| {
                gates
                    .iter()
                    .map(|g| PodReadinessGate {
                        condition_type: g.to_string(),
                    })
                    .collect()
            }),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: status.phase.clone().or_else(|| Some("Running".to_string())),
            ..status
        }),
    }
}

/// The first container status of `pod`, to change in a test.
pub fn first_container_status(pod: &mut Pod) -> &mut ContainerStatus {
    let status = pod.status.as_mut().expect("pod status");
    let statuses = status
        .container_statuses
        .as_mut()
        .expect("container statuses");
    &mut statuses[0]
}
