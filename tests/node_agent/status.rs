//! The pod status the agent reports, built by pure functions from the pod as
//! the API server has it and what the runtime shows, plus the patch that
//! sends it.
//!
//! The agent owns what a kubelet reports about the pod's life: phase, host
//! and pod IPs, start time, QoS class, the container status lists and the
//! conditions `PodReadyToStartContainers`, `Initialized` and `PodScheduled`.
//! It never decides container `ready`/`started` and never writes the
//! `Ready`/`ContainersReady` conditions: podprobe (authority mode) owns
//! those. Because a patch replaces a container status list whole (it has no
//! merge key), each status carries `ready`/`started` over from the API's
//! status of the same container instance (same `containerID`), so that the
//! agent's writes never undo podprobe's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use crate::observed::{self, Instance, State};
use crate::policy;

/// A container held in `waiting` by the agent: a restart in back-off
/// (`CrashLoopBackOff`) or a failed create/start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// Everything [`desired`] reads.
pub struct Inputs<'a> {
    /// The pod as the API server has it (spec, current status).
    pub pod: &'a Pod,
    pub observed: &'a observed::Pod,
    /// Containers the agent holds in `waiting`, by name.
    pub waiting: &'a BTreeMap<String, Waiting>,
    /// The node's InternalIP: the pod's `hostIP`.
    pub node_ip: &'a str,
    /// The pod is being torn down: nothing will run again (the kubelet's
    /// `podIsTerminal`), so stopped containers make the phase terminal.
    pub terminal: bool,
    /// Now, in whole seconds (the API's precision, so reports compare equal).
    pub now: &'a Time,
}

/// The status the agent reports for `inputs.pod`: only the fields it owns,
/// with only its own conditions.
pub fn desired(inputs: &Inputs) -> PodStatus {
    let pod = inputs.pod;
    let no_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&no_spec);
    let no_status = PodStatus::default();
    let current = pod.status.as_ref().unwrap_or(&no_status);
    let init_specs = spec.init_containers.as_deref().unwrap_or_default();
    // As the kubelet: containers that have not been created yet wait for
    // PodInitializing in pods with init containers.
    let default_reason = if init_specs.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let current_init = current
        .init_container_statuses
        .as_deref()
        .unwrap_or_default();
    let current_regular = current.container_statuses.as_deref().unwrap_or_default();
    let init_statuses: Vec<ContainerStatus> = init_specs
        .iter()
        .map(|c| container_status(c, inputs, current_init, default_reason))
        .collect();
    let mut statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(c, inputs, current_regular, default_reason))
        .collect();
    // The kubelet sorts container statuses by name (init ones stay in spec order).
    statuses.sort_by(|a, b| a.name.cmp(&b.name));

    // Once a regular container has been created the pod has been initialized
    // for good, even while a sidecar restarts.
    let has_initialized = statuses.iter().any(|s| s.container_id.is_some());
    let phase = match current.phase.as_deref() {
        // A terminal phase is final.
        Some(terminal @ ("Succeeded" | "Failed")) => terminal,
        _ => phase(
            spec,
            &init_statuses,
            &statuses,
            inputs.terminal,
            has_initialized,
        ),
    };

    let sandbox = inputs.observed.sandbox.as_ref();
    let sandbox_ip = sandbox.and_then(|s| s.ip.clone());
    // A stopped or removed sandbox leaves the pod its last address, as the
    // kubelet keeps it for terminated pods.
    let pod_ip = sandbox_ip.or_else(|| current.pod_ip.clone());
    let ready_to_start = sandbox.is_some_and(|s| s.ready && s.ip.is_some());
    let (initialized, init_reason, init_message) =
        initialized(init_specs, &init_statuses, phase, has_initialized);
    let current_conditions = current.conditions.as_deref().unwrap_or_default();
    let generation = pod.metadata.generation.filter(|g| *g != 0);
    let condition = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        // The transition time moves only when the status does.
        let last_transition_time = current_conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| inputs.now.clone());
        PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.map(str::to_string),
            message,
            last_transition_time: Some(last_transition_time),
            observed_generation: generation,
            last_probe_time: None,
        }
    };
    let conditions = vec![
        condition("PodReadyToStartContainers", ready_to_start, None, None),
        condition("Initialized", initialized, init_reason, init_message),
        condition("PodScheduled", true, None, None),
    ];

    PodStatus {
        phase: Some(phase.to_string()),
        observed_generation: generation,
        host_ip: Some(inputs.node_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: inputs.node_ip.to_string(),
        }]),
        pod_ips: pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        pod_ip,
        start_time: Some(
            current
                .start_time
                .clone()
                .unwrap_or_else(|| inputs.now.clone()),
        ),
        // Set by the API server at creation and immutable since.
        qos_class: Some(
            current
                .qos_class
                .clone()
                .unwrap_or_else(|| qos_class(spec).to_string()),
        ),
        conditions: Some(conditions),
        init_container_statuses: (!init_specs.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ..Default::default()
    }
}

/// Whether `desired` says something about a field the agent owns that
/// `current` does not say already (so a patch is due).
pub fn differs(current: Option<&PodStatus>, desired: &PodStatus) -> bool {
    let no_status = PodStatus::default();
    let current = current.unwrap_or(&no_status);
    let condition = |type_: &str| {
        current
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
    };
    current.phase != desired.phase
        || current.observed_generation != desired.observed_generation
        || current.host_ip != desired.host_ip
        || current.host_ips != desired.host_ips
        || current.pod_ip != desired.pod_ip
        || current.pod_ips != desired.pod_ips
        || current.start_time != desired.start_time
        || current.qos_class != desired.qos_class
        || current.init_container_statuses != desired.init_container_statuses
        || current.container_statuses != desired.container_statuses
        || desired
            .conditions
            .iter()
            .flatten()
            .any(|c| condition(&c.type_) != Some(c))
}

/// The strategic-merge patch of `pods/status` that writes `desired` over
/// `pod`: preconditions on the UID (a pod recreated under the same name must
/// never get the old one's status) and on the resource version (the
/// container status lists are replaced whole, so a concurrent write by
/// podprobe must fail with a conflict rather than be lost).
pub fn patch(pod: &Pod, desired: &PodStatus) -> Value {
    let mut status = serde_json::to_value(desired).expect("a PodStatus serializes");
    // Conditions merge by `type`: a reason or message the condition no longer
    // has must be cleared explicitly, or the old one stays.
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        for field in ["reason", "message"] {
            if condition.get(field).is_none() {
                condition[field] = Value::Null;
            }
        }
    }
    // podIPs merge by `ip`: an address the pod lost must be deleted explicitly.
    let current_ips = pod.status.as_ref().and_then(|s| s.pod_ips.as_deref());
    let desired_ips = desired.pod_ips.as_deref().unwrap_or_default();
    let stale: Vec<Value> = current_ips
        .unwrap_or_default()
        .iter()
        .filter(|ip| !desired_ips.contains(ip))
        .map(|ip| json!({"ip": ip.ip, "$patch": "delete"}))
        .collect();
    if !stale.is_empty() {
        let ips = status["podIPs"].as_array().cloned().unwrap_or_default();
        status["podIPs"] = Value::Array(ips.into_iter().chain(stale).collect());
    }
    json!({
        "metadata": {
            "uid": pod.metadata.uid,
            "resourceVersion": pod.metadata.resource_version,
        },
        "status": status,
    })
}

/// The API status of one container from its spec and its instances.
fn container_status(
    spec: &Container,
    inputs: &Inputs,
    current: &[ContainerStatus],
    default_reason: &str,
) -> ContainerStatus {
    let observed = inputs.observed.containers.get(&spec.name);
    let latest = observed.and_then(|c| c.latest.as_ref());
    let previous = observed.and_then(|c| c.previous.as_ref());
    let mut status = ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        state: Some(waiting(default_reason, None)),
        // The API server returns an empty object for "no last state".
        last_state: Some(ContainerState::default()),
        ready: false,
        started: Some(false),
        ..Default::default()
    };
    if let Some(instance) = latest {
        status.container_id = Some(kubernetes_id(instance));
        status.image_id = instance.image_ref.clone();
        status.restart_count = i32::try_from(instance.attempt).unwrap_or(i32::MAX);
        status.state = Some(state(instance));
        if let Some(previous) = previous.filter(|p| p.exit().is_some()) {
            status.last_state = Some(state(previous));
        }
        // podprobe's verdicts about this very instance; a new instance
        // starts unready and unstarted until podprobe says otherwise.
        if let Some(same) = current
            .iter()
            .find(|c| c.name == spec.name && c.container_id == status.container_id)
        {
            status.ready = same.ready;
            status.started = Some(same.started.unwrap_or(false));
        }
    }
    if let Some(held) = inputs.waiting.get(&spec.name) {
        // The instance that exited becomes the last state while the next
        // one waits, as the kubelet shows a container in back-off.
        if let Some(state) = status.state.take().filter(|s| s.terminated.is_some()) {
            status.last_state = Some(state);
        }
        status.state = Some(waiting(&held.reason, Some(&held.message)));
    }
    status
}

/// `containerd://<id>`, the API's form of a CRI container ID.
pub fn kubernetes_id(instance: &Instance) -> String {
    format!("containerd://{}", instance.id)
}

fn waiting(reason: &str, message: Option<&str>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_string()),
            message: message.map(str::to_string),
        }),
        ..Default::default()
    }
}

fn state(instance: &Instance) -> ContainerState {
    match &instance.state {
        State::Created => waiting("ContainerCreating", None),
        State::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at.clone()),
            }),
            ..Default::default()
        },
        State::Exited(exit) => {
            let reason = if !exit.reason.is_empty() {
                exit.reason.clone()
            } else if exit.exit_code == 0 {
                "Completed".to_string()
            } else {
                "Error".to_string()
            };
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: exit.exit_code,
                    reason: Some(reason),
                    message: (!exit.message.is_empty()).then(|| exit.message.clone()),
                    started_at: exit.started_at.clone(),
                    finished_at: Some(exit.finished_at.clone()),
                    container_id: Some(kubernetes_id(instance)),
                    signal: None,
                }),
                ..Default::default()
            }
        }
        // As the kubelet reports a container the runtime lost.
        State::Unknown => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some("ContainerStatusUnknown".to_string()),
                message: Some(
                    "The container could not be located when the pod was terminated".to_string(),
                ),
                container_id: Some(kubernetes_id(instance)),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

fn status_of<'a>(statuses: &'a [ContainerStatus], name: &str) -> Option<&'a ContainerStatus> {
    statuses.iter().find(|s| s.name == name)
}

fn terminated(status: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    status.state.as_ref()?.terminated.as_ref()
}

fn last_terminated(status: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    status.last_state.as_ref()?.terminated.as_ref()
}

fn is_running(status: &ContainerStatus) -> bool {
    status.state.as_ref().is_some_and(|s| s.running.is_some())
}

fn is_waiting(status: &ContainerStatus) -> bool {
    status.state.as_ref().is_some_and(|s| s.waiting.is_some())
}

/// The pod phase, as the kubelet's `getPhase` computes it.
fn phase(
    spec: &PodSpec,
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
    terminal: bool,
    has_initialized: bool,
) -> &'static str {
    let init_specs = spec.init_containers.as_deref().unwrap_or_default();
    let mut pending_init = 0;
    let mut pending_sidecars = 0;
    let mut failed_init = 0;
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for container in init_specs {
        let Some(status) = status_of(init, &container.name) else {
            if policy::is_sidecar(container) {
                unknown += 1;
            } else {
                pending_init += 1;
            }
            continue;
        };
        if policy::is_sidecar(container) {
            if is_running(status) {
                if status.started != Some(true) {
                    pending_sidecars += 1;
                }
                running += 1;
            } else if is_waiting(status) && last_terminated(status).is_none() {
                pending_sidecars += 1;
                waiting += 1;
            }
            // A sidecar that stopped does not count.
        } else if let Some(t) = terminated(status) {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if let (true, Some(t)) = (is_waiting(status), last_terminated(status)) {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else {
            pending_init += 1;
        }
    }
    for container in &spec.containers {
        let Some(status) = status_of(regular, &container.name) else {
            unknown += 1;
            continue;
        };
        if is_running(status) {
            running += 1;
        } else if let Some(t) = terminated(status) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if is_waiting(status) && last_terminated(status).is_some() {
            stopped += 1;
        } else if is_waiting(status) {
            waiting += 1;
        } else {
            unknown += 1;
        }
    }
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    if failed_init > 0 && restart_policy == "Never" {
        return "Failed";
    }
    if pending_init > 0 || (pending_sidecars > 0 && !has_initialized) || waiting > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if terminal {
            return if stopped == succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        return match restart_policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        };
    }
    "Pending"
}

/// The `Initialized` condition as the kubelet generates it: status, reason,
/// message.
fn initialized(
    init_specs: &[Container],
    init: &[ContainerStatus],
    phase: &str,
    has_initialized: bool,
) -> (bool, Option<&'static str>, Option<String>) {
    if init_specs.is_empty() {
        return (true, None, None);
    }
    if phase == "Succeeded" {
        return (true, Some("PodCompleted"), None);
    }
    let incomplete: Vec<&str> = init_specs
        .iter()
        .filter(|c| {
            let status = status_of(init, &c.name);
            if policy::is_sidecar(c) {
                status.is_none_or(|s| s.started != Some(true))
            } else {
                status.and_then(terminated).is_none_or(|t| t.exit_code != 0)
            }
        })
        .map(|c| c.name.as_str())
        .collect();
    if incomplete.is_empty() || has_initialized {
        return (true, None, None);
    }
    (
        false,
        Some("ContainersNotInitialized"),
        Some(format!(
            "containers with incomplete status: [{}]",
            incomplete.join(" ")
        )),
    )
}

/// The QoS class the API server gives a pod: `Guaranteed` when every
/// container limits CPU and memory with requests equal to the limits,
/// `BestEffort` when none requests or limits anything, else `Burstable`.
fn qos_class(spec: &PodSpec) -> &'static str {
    let containers: Vec<&Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .collect();
    let resources = |c: &Container| c.resources.clone().unwrap_or_default();
    let any_set = containers.iter().any(|c| {
        let r = resources(c);
        !r.requests.unwrap_or_default().is_empty() || !r.limits.unwrap_or_default().is_empty()
    });
    if !any_set {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let r = resources(c);
        let limits = r.limits.unwrap_or_default();
        let requests = r.requests.unwrap_or_default();
        ["cpu", "memory"].iter().all(|k| {
            limits
                .get(*k)
                .is_some_and(|l| requests.get(*k).is_none_or(|q| q == l))
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{Exit, Sandbox};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(1_700_000_000 + second).unwrap())
    }

    fn container(name: &str) -> Container {
        Container {
            name: name.to_string(),
            image: Some("docker.io/local/busybox:latest".to_string()),
            ..Default::default()
        }
    }

    fn pod(containers: &[&str], init: &[Container]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                resource_version: Some("42".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: containers.iter().map(|n| container(n)).collect(),
                init_containers: (!init.is_empty()).then(|| init.to_vec()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn running(id: &str, attempt: u32) -> Instance {
        Instance {
            id: id.to_string(),
            attempt,
            image_ref: "sha256:abc".to_string(),
            state: State::Running { started_at: at(1) },
        }
    }

    fn exited(id: &str, attempt: u32, exit_code: i32) -> Instance {
        Instance {
            id: id.to_string(),
            attempt,
            image_ref: "sha256:abc".to_string(),
            state: State::Exited(Exit {
                exit_code,
                reason: String::new(),
                message: String::new(),
                started_at: Some(at(1)),
                finished_at: at(6),
                probe_kill: Some(false),
            }),
        }
    }

    fn observed(containers: &[(&str, Option<Instance>, Option<Instance>)]) -> observed::Pod {
        observed::Pod {
            sandbox: Some(Sandbox {
                id: "sb".into(),
                attempt: 0,
                ready: true,
                ip: Some("10.88.79.5".into()),
            }),
            containers: containers
                .iter()
                .map(|(name, latest, previous)| {
                    (
                        name.to_string(),
                        observed::Container {
                            latest: latest.clone(),
                            previous: previous.clone(),
                        },
                    )
                })
                .collect(),
        }
    }

    fn build(
        pod: &Pod,
        observed: &observed::Pod,
        waiting: &BTreeMap<String, Waiting>,
    ) -> PodStatus {
        desired(&Inputs {
            pod,
            observed,
            waiting,
            node_ip: "10.88.79.1",
            terminal: false,
            now: &at(10),
        })
    }

    fn statuses(status: &PodStatus) -> &[ContainerStatus] {
        status.container_statuses.as_deref().unwrap()
    }

    #[test]
    fn running_pod_reports_phase_ips_and_running_states() {
        let pod = pod(&["main"], &[]);
        let status = build(
            &pod,
            &observed(&[("main", Some(running("c1", 0)), None)]),
            &BTreeMap::new(),
        );
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.88.79.5"));
        assert_eq!(status.host_ip.as_deref(), Some("10.88.79.1"));
        assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
        assert_eq!(status.start_time, Some(at(10)));
        let main = &statuses(&status)[0];
        assert_eq!(main.container_id.as_deref(), Some("containerd://c1"));
        assert_eq!(main.image_id, "sha256:abc");
        assert!(main.state.as_ref().unwrap().running.is_some());
        assert_eq!((main.ready, main.started), (false, Some(false)));
    }

    #[test]
    fn ready_and_started_are_carried_for_the_same_instance_only() {
        let mut pod = pod(&["a", "b"], &[]);
        let verdict = |name: &str, id: &str| ContainerStatus {
            name: name.to_string(),
            container_id: Some(format!("containerd://{id}")),
            ready: true,
            started: Some(true),
            ..Default::default()
        };
        pod.status = Some(PodStatus {
            container_statuses: Some(vec![verdict("a", "a1"), verdict("b", "b1")]),
            ..Default::default()
        });
        // `b` was restarted: its new instance b2 has no verdict yet.
        let status = build(
            &pod,
            &observed(&[
                ("a", Some(running("a1", 0)), None),
                ("b", Some(running("b2", 1)), Some(exited("b1", 0, 1))),
            ]),
            &BTreeMap::new(),
        );
        let [a, b] = statuses(&status) else {
            panic!("two statuses")
        };
        assert_eq!((a.ready, a.started), (true, Some(true)));
        assert_eq!((b.ready, b.started), (false, Some(false)));
        assert_eq!(b.restart_count, 1);
        let last = b.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    }

    #[test]
    fn ready_and_container_ready_conditions_are_never_written() {
        let mut pod = pod(&["main"], &[]);
        let foreign = |type_: &str| PodCondition {
            type_: type_.to_string(),
            status: "True".to_string(),
            ..Default::default()
        };
        pod.status = Some(PodStatus {
            conditions: Some(vec![foreign("Ready"), foreign("ContainersReady")]),
            ..Default::default()
        });
        let status = build(
            &pod,
            &observed(&[("main", Some(running("c1", 0)), None)]),
            &BTreeMap::new(),
        );
        let types: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            ["PodReadyToStartContainers", "Initialized", "PodScheduled"]
        );
        let body = patch(&pod, &status);
        let text = body.to_string();
        assert!(!text.contains("\"Ready\""), "{text}");
        assert!(!text.contains("ContainersReady"), "{text}");
        assert_eq!(body["metadata"]["uid"], "uid-1");
        // Absent reasons are cleared, not left to the merge.
        assert_eq!(body["status"]["conditions"][0]["reason"], Value::Null);
        assert!(
            body["status"]["conditions"][0]
                .as_object()
                .unwrap()
                .contains_key("message")
        );
        assert_eq!(body["metadata"]["resourceVersion"], "42");
    }

    #[test]
    fn container_statuses_are_sorted_by_name_and_init_ones_keep_spec_order() {
        let init = [container("z-init"), container("a-init")];
        let pod = pod(&["zeta", "alpha", "mid"], &init);
        let status = build(&pod, &observed(&[]), &BTreeMap::new());
        let names = |list: &[ContainerStatus]| -> Vec<String> {
            list.iter().map(|s| s.name.clone()).collect()
        };
        assert_eq!(names(statuses(&status)), ["alpha", "mid", "zeta"]);
        assert_eq!(
            names(status.init_container_statuses.as_deref().unwrap()),
            ["z-init", "a-init"]
        );
        let reason = statuses(&status)[0]
            .state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref();
        assert_eq!(reason.unwrap().reason.as_deref(), Some("PodInitializing"));
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let initialized = &status.conditions.as_ref().unwrap()[1];
        assert_eq!(initialized.status, "False");
        assert_eq!(
            initialized.message.as_deref(),
            Some("containers with incomplete status: [z-init a-init]")
        );
    }

    #[test]
    fn backoff_shows_waiting_with_the_exit_as_last_state() {
        let pod = pod(&["main"], &[]);
        let waiting = BTreeMap::from([(
            "main".to_string(),
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 10s restarting failed container=main pod=web_default(uid-1)"
                    .into(),
            },
        )]);
        let status = build(
            &pod,
            &observed(&[("main", Some(exited("c2", 1, 1)), Some(exited("c1", 0, 1)))]),
            &waiting,
        );
        let main = &statuses(&status)[0];
        let state = main.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(state.reason.as_deref(), Some("CrashLoopBackOff"));
        let last = main
            .last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap();
        assert_eq!(last.container_id.as_deref(), Some("containerd://c2"));
        assert_eq!(main.restart_count, 1);
        // Restarting under `Always` is still Running.
        assert_eq!(status.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn phase_follows_the_restart_policy_once_everything_stopped() {
        let observed = observed(&[("main", Some(exited("c1", 0, 1)), None)]);
        for (policy, want) in [
            ("Never", "Failed"),
            ("OnFailure", "Running"),
            ("Always", "Running"),
        ] {
            let mut pod = pod(&["main"], &[]);
            pod.spec.as_mut().unwrap().restart_policy = Some(policy.into());
            let status = build(&pod, &observed, &BTreeMap::new());
            assert_eq!(status.phase.as_deref(), Some(want), "{policy}");
        }
        let done = observed::Pod {
            containers: BTreeMap::from([(
                "main".to_string(),
                observed::Container {
                    latest: Some(exited("c1", 0, 0)),
                    previous: None,
                },
            )]),
            ..Default::default()
        };
        let mut pod = pod(&["main"], &[]);
        pod.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
        let status = build(&pod, &done, &BTreeMap::new());
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    }

    #[test]
    fn sidecar_that_has_not_started_keeps_the_pod_pending() {
        let sidecar = Container {
            restart_policy: Some("Always".into()),
            ..container("proxy")
        };
        let mut pod = pod(&["main"], std::slice::from_ref(&sidecar));
        let observed = observed(&[("proxy", Some(running("s1", 0)), None)]);
        let status = build(&pod, &observed, &BTreeMap::new());
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert_eq!(status.conditions.as_ref().unwrap()[1].status, "False");
        // podprobe says it started: the pod is initialized.
        pod.status = Some(PodStatus {
            init_container_statuses: Some(vec![ContainerStatus {
                name: "proxy".into(),
                container_id: Some("containerd://s1".into()),
                started: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let status = build(&pod, &observed, &BTreeMap::new());
        assert_eq!(status.conditions.as_ref().unwrap()[1].status, "True");
    }

    #[test]
    fn terminal_phase_is_final_and_transition_times_stay() {
        let mut pod = pod(&["main"], &[]);
        let observed = observed(&[("main", Some(running("c1", 0)), None)]);
        let first = build(&pod, &observed, &BTreeMap::new());
        pod.status = Some(first.clone());
        assert!(!differs(pod.status.as_ref(), &first));
        let later = desired(&Inputs {
            pod: &pod,
            observed: &observed,
            waiting: &BTreeMap::new(),
            node_ip: "10.88.79.1",
            terminal: false,
            now: &at(99),
        });
        assert!(!differs(pod.status.as_ref(), &later), "nothing changed");
        pod.status.as_mut().unwrap().phase = Some("Failed".into());
        let status = build(&pod, &observed, &BTreeMap::new());
        assert_eq!(status.phase.as_deref(), Some("Failed"));
    }

    #[test]
    fn a_lost_pod_ip_is_deleted_by_the_patch() {
        let mut pod = pod(&["main"], &[]);
        pod.status = Some(PodStatus {
            pod_ips: Some(vec![PodIP {
                ip: "10.88.79.4".into(),
            }]),
            ..Default::default()
        });
        let status = build(&pod, &observed(&[]), &BTreeMap::new());
        let body = patch(&pod, &status);
        assert_eq!(
            body["status"]["podIPs"],
            json!([{"ip": "10.88.79.5"}, {"ip": "10.88.79.4", "$patch": "delete"}])
        );
    }
}
