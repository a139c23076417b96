//! What podprobe reads off a pod object, one home per reading: its name and
//! namespace, its containers and which of them may be probed (W1), a
//! container's field path for Events (P5), its container statuses, and the
//! runtime's ID of a container. Pure functions of the API object; the
//! kubelet has them in `pkg/api/v1/pod`, `podutil` and `kubecontainer`.

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec};

/// The pod's name, empty if it has none.
pub fn pod_name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// The pod's namespace, empty if it has none.
pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or_default()
}

/// Every container status of `pod`: init containers', then regular ones.
pub fn all_container_statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let status = pod.status.as_ref();
    let init = status.and_then(|s| s.init_container_statuses.as_ref());
    let regular = status.and_then(|s| s.container_statuses.as_ref());
    init.into_iter()
        .flatten()
        .chain(regular.into_iter().flatten())
}

/// Whether the pod's `Ready` condition is True.
pub fn is_pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Whether the container status says it is running now.
pub fn is_running(status: &ContainerStatus) -> bool {
    status.state.as_ref().is_some_and(|s| s.running.is_some())
}

/// Whether `container` has `restartPolicy: Always`, which in
/// `spec.initContainers` makes it a restartable init container (sidecar).
pub fn is_restartable_init_container(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The list of the pod spec a container is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerList {
    Containers,
    InitContainers,
}

impl ContainerList {
    /// The list's field in the pod spec.
    pub fn field(self) -> &'static str {
        match self {
            ContainerList::Containers => "containers",
            ContainerList::InitContainers => "initContainers",
        }
    }

    /// `fieldPath` of the container `name` in this list, for Events (P5):
    /// `spec.containers{name}`.
    pub fn field_path(self, name: &str) -> String {
        format!("spec.{}{{{name}}}", self.field())
    }
}

/// A container of a pod spec and where it is.
#[derive(Debug, Clone, Copy)]
pub struct PodContainer<'a> {
    pub list: ContainerList,
    /// Its index in `list`.
    pub index: usize,
    pub container: &'a Container,
}

impl PodContainer<'_> {
    /// Its path in the pod: `spec.containers[0]`.
    pub fn path(&self) -> String {
        format!("spec.{}[{}]", self.list.field(), self.index)
    }

    /// Whether it may have probes (W1): a regular container or a
    /// restartable init container.
    pub fn is_probed(&self) -> bool {
        self.list == ContainerList::Containers || is_restartable_init_container(self.container)
    }
}

/// Every container of `spec`: regular ones, then init ones, each in spec
/// order.
pub fn all_containers(spec: &PodSpec) -> impl Iterator<Item = PodContainer<'_>> {
    let placed = |list| {
        move |(index, container)| PodContainer {
            list,
            index,
            container,
        }
    };
    let regular = spec.containers.iter().enumerate();
    let init = spec.init_containers.iter().flatten().enumerate();
    regular
        .map(placed(ContainerList::Containers))
        .chain(init.map(placed(ContainerList::InitContainers)))
}

/// The containers that may have probes, in the kubelet's worker order:
/// regular containers, then restartable init containers (W1).
pub fn probed_containers(spec: &PodSpec) -> impl Iterator<Item = PodContainer<'_>> {
    all_containers(spec).filter(PodContainer::is_probed)
}

/// The container (regular or init) named `name`.
pub fn find_container<'a>(spec: &'a PodSpec, name: &str) -> Option<PodContainer<'a>> {
    all_containers(spec).find(|c| c.container.name == name)
}

/// `spec.containers{name}`, or `spec.initContainers{name}` when `name` is an
/// init container of `pod`.
pub fn container_field_path(pod: &Pod, name: &str) -> String {
    pod.spec
        .as_ref()
        .and_then(|spec| find_container(spec, name))
        .map_or(ContainerList::Containers, |c| c.list)
        .field_path(name)
}

/// The runtime's own ID of a container: `abc` for `containerd://abc`. The
/// Kubernetes form `<runtime>://<id>` loses its prefix whatever the runtime
/// name, as the kubelet's `ParseContainerID` does; a bare ID is kept as is.
pub fn runtime_container_id(container_id: &str) -> &str {
    container_id
        .split_once("://")
        .map_or(container_id, |(_, id)| id)
}

/// Which pod and container a runtime container must belong to before
/// podprobe execs in it or stops it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerIdentity<'a> {
    pub pod_uid: &'a str,
    pub container_name: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, restart_policy: Option<&str>) -> Container {
        Container {
            name: name.into(),
            restart_policy: restart_policy.map(Into::into),
            ..Container::default()
        }
    }

    fn spec() -> PodSpec {
        PodSpec {
            init_containers: Some(vec![
                container("setup", None),
                container("proxy", Some("Always")),
            ]),
            containers: vec![container("app", None), container("worker", None)],
            ..PodSpec::default()
        }
    }

    #[test]
    fn w1_probed_containers_are_regular_then_sidecars() {
        let spec = spec();
        let probed: Vec<String> = probed_containers(&spec).map(|c| c.path()).collect();
        assert_eq!(
            probed,
            [
                "spec.containers[0]",
                "spec.containers[1]",
                "spec.initContainers[1]"
            ]
        );
        assert!(!find_container(&spec, "setup").unwrap().is_probed());
        assert!(find_container(&spec, "absent").is_none());
    }

    #[test]
    fn p5_field_paths_name_the_containers_list() {
        let pod = Pod {
            spec: Some(spec()),
            ..Pod::default()
        };
        assert_eq!(
            container_field_path(&pod, "proxy"),
            "spec.initContainers{proxy}"
        );
        assert_eq!(container_field_path(&pod, "app"), "spec.containers{app}");
        assert_eq!(
            container_field_path(&Pod::default(), "x"),
            "spec.containers{x}"
        );
    }

    #[test]
    fn runtime_ids_lose_any_runtime_prefix() {
        assert_eq!(runtime_container_id("containerd://abc"), "abc");
        assert_eq!(runtime_container_id("cri-o://abc"), "abc");
        assert_eq!(runtime_container_id("abc"), "abc");
    }
}
