//! What one worker probes: the probe, its container and the pod snapshot it
//! was created with (W3), and the values derived from them (W4, P5).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::prober::results::CachedResult;
use crate::prober::takeover::Takeover;
use crate::spec::{ProbeKind, ProbeSpec};
use crate::util::pod::{ContainerList, is_restartable_init_container};

/// What a worker probes. Fixed when the worker is created: like the kubelet,
/// a worker keeps the pod snapshot, container and probe it started with (W3).
///
/// Lean on purpose (#15): one worker per probe, thousands per node. The pod
/// snapshot is shared by the pod's workers, the container is found in it by
/// position rather than copied (a `Container` is over 2 KB inline), and the
/// takeover set is shared.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub(super) kind: ProbeKind,
    pub(super) spec: ProbeSpec,
    pub(super) pod: Arc<Pod>,
    container: ContainerSlot,
    /// See [`predates_prober`](crate::prober::takeover::predates_prober).
    pub(super) takeover: Arc<Takeover>,
}

/// Where a worker's container is.
#[derive(Debug, Clone)]
enum ContainerSlot {
    /// `spec.containers[i]` of the pod snapshot.
    Regular(usize),
    /// `spec.initContainers[i]`.
    Init(usize),
    /// Not in the snapshot (a caller's own container): a copy.
    Own(Box<Container>),
}

impl WorkerConfig {
    /// The `kind` probe `spec` of `container`, a container of `pod`.
    pub fn new(kind: ProbeKind, spec: ProbeSpec, pod: Arc<Pod>, container: &Container) -> Self {
        let position = |list: Option<&Vec<Container>>| {
            list.and_then(|list| list.iter().position(|c| c.name == container.name))
        };
        let pod_spec = pod.spec.as_ref();
        // A name is unique across both lists.
        let slot = if let Some(i) = position(pod_spec.and_then(|s| s.init_containers.as_ref())) {
            ContainerSlot::Init(i)
        } else if let Some(i) = position(pod_spec.map(|s| &s.containers)) {
            ContainerSlot::Regular(i)
        } else {
            ContainerSlot::Own(Box::new(container.clone()))
        };
        WorkerConfig {
            kind,
            spec,
            pod,
            container: slot,
            takeover: Arc::default(),
        }
    }

    /// Which container instances count as predating the prober (see
    /// [`predates_prober`](crate::prober::takeover::predates_prober)); shared by the workers of one pod.
    pub fn with_takeover(mut self, takeover: impl Into<Arc<Takeover>>) -> Self {
        self.takeover = takeover.into();
        self
    }

    pub fn kind(&self) -> ProbeKind {
        self.kind
    }

    pub fn spec(&self) -> &ProbeSpec {
        &self.spec
    }

    /// The pod as it was when the worker was created.
    pub fn pod(&self) -> &Pod {
        &self.pod
    }

    pub fn pod_uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    pub fn container(&self) -> &Container {
        let spec = self.pod.spec.as_ref();
        let found = match &self.container {
            ContainerSlot::Regular(i) => spec.and_then(|s| s.containers.get(*i)),
            ContainerSlot::Init(i) => spec
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|list| list.get(*i)),
            ContainerSlot::Own(container) => Some(&**container),
        };
        // The snapshot is immutable, so the slot found at creation is there.
        found.expect("a worker's container is in its pod snapshot")
    }

    pub fn container_name(&self) -> &str {
        &self.container().name
    }

    /// Whether the container is listed in `spec.initContainers` (the
    /// kubelet's events then point at `spec.initContainers{name}`).
    pub fn is_init_container(&self) -> bool {
        matches!(self.container, ContainerSlot::Init(_))
    }

    /// Whether the container is a restartable init container (sidecar).
    pub fn is_restartable_init_container(&self) -> bool {
        self.is_init_container() && is_restartable_init_container(self.container())
    }

    /// The value cached when the worker first sees a container (W4).
    pub fn initial_value(&self) -> CachedResult {
        match self.kind {
            ProbeKind::Startup => CachedResult::Unknown,
            ProbeKind::Readiness => CachedResult::Failure,
            ProbeKind::Liveness => CachedResult::Success,
        }
    }

    /// `fieldPath` of the container, for events (P5).
    pub fn field_path(&self) -> String {
        let list = if self.is_init_container() {
            ContainerList::InitContainers
        } else {
            ContainerList::Containers
        };
        list.field_path(self.container_name())
    }
}
