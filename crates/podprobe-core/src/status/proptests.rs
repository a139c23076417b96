//! Properties of the whole pipeline, desired status -> patch -> API server,
//! over random pods: the patch is a fixed point, touches only owned fields,
//! and `Ready` never claims more than its inputs allow.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::annotation::{AnnotatedProbe, AnnotatedProbes};
use super::conditions::{CONTAINERS_READY, POD_READY, TRUE, condition};
use super::gate::{READY_CONDITION, gate_condition};
use super::patch::owned_conditions;
use super::{
    ContainerProbeView, Mode, build_patch, desired_authority_status, desired_gate_status,
    readiness_containers, status_named,
};
use crate::spec::probe_spec::{Handler, TcpSocketAction};
use crate::spec::{ProbeKind, ProbeSpec};
use crate::testing::{container, container_status, running_pod as pod, sidecar, time};

const CONDITION_TYPES: [&str; 6] = [
    "PodScheduled",
    "Initialized",
    CONTAINERS_READY,
    POD_READY,
    "example.com/lb",
    READY_CONDITION,
];
const GATES: [&str; 2] = ["example.com/lb", READY_CONDITION];

/// A pod as the API server might hold it, podprobe's verdicts about its
/// containers and its annotated probes.
#[derive(Debug, Clone)]
struct Scenario {
    pod: Pod,
    views: Vec<ContainerProbeView>,
    probes: AnnotatedProbes,
}

/// Per container: restartable (init containers only), status (ready,
/// started, running), verdict (started, ready, about the current instance),
/// annotated probe kinds (startup, readiness, liveness).
type ContainerDraw = (
    bool,
    Option<(bool, Option<bool>, bool)>,
    Option<(bool, bool, bool)>,
    (bool, bool, bool),
);

/// Per condition type: status, reason, message, transition time, probe time.
type ConditionDraw = Option<(usize, bool, bool, bool, bool)>;

fn scenario() -> impl Strategy<Value = Scenario> {
    let draw = || {
        (
            any::<bool>(),
            proptest::option::weighted(
                0.8,
                (
                    any::<bool>(),
                    proptest::option::of(any::<bool>()),
                    any::<bool>(),
                ),
            ),
            proptest::option::weighted(
                0.9,
                (any::<bool>(), any::<bool>(), proptest::bool::weighted(0.85)),
            ),
            any::<(bool, bool, bool)>(),
        )
    };
    let conditions = proptest::collection::vec(
        proptest::option::of((
            0usize..3,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )),
        CONDITION_TYPES.len(),
    );
    (
        proptest::collection::vec(draw(), 0..3),
        proptest::collection::vec(draw(), 1..4),
        any::<(bool, bool)>(),
        conditions,
        proptest::sample::select(vec!["Pending", "Running", "Succeeded", "Failed"]),
        proptest::option::of(0i64..4),
        any::<u64>(),
    )
        .prop_map(
            |(init, regular, gates, conditions, phase, generation, seed)| {
                build(init, regular, gates, conditions, phase, generation, seed)
            },
        )
}

fn build(
    init: Vec<ContainerDraw>,
    regular: Vec<ContainerDraw>,
    gates: (bool, bool),
    conditions: Vec<ConditionDraw>,
    phase: &str,
    generation: Option<i64>,
    seed: u64,
) -> Scenario {
    let mut views = Vec::new();
    let mut probes = Vec::new();
    let mut side = |prefix: &str, draws: &[ContainerDraw], init: bool| {
        let mut containers = Vec::new();
        let mut statuses = Vec::new();
        for (i, (restartable, status, view, kinds)) in draws.iter().enumerate() {
            let name = format!("{prefix}{i}");
            let restartable = init && *restartable;
            containers.push(if restartable {
                sidecar(&name)
            } else {
                container(&name)
            });
            if let Some((ready, started, running)) = status {
                statuses.push(container_state(&name, *ready, *started, *running));
                if let Some((started, ready, current)) = view {
                    let id = if *current {
                        format!("containerd://{name}")
                    } else {
                        "containerd://old".into()
                    };
                    views.push(ContainerProbeView {
                        name: name.clone(),
                        container_id: Some(id),
                        started: *started,
                        ready: *ready,
                        note: None,
                    });
                }
            }
            if !init || restartable {
                let (startup, readiness, liveness) = *kinds;
                let wanted = [
                    (startup, ProbeKind::Startup),
                    (readiness, ProbeKind::Readiness),
                    (liveness, ProbeKind::Liveness),
                ];
                probes.extend(
                    wanted
                        .into_iter()
                        .filter(|(on, _)| *on)
                        .map(|(_, kind)| annotated(&name, kind)),
                );
            }
        }
        (containers, statuses)
    };
    let (init_containers, init_statuses) = side("i", &init, true);
    let (containers, statuses) = side("c", &regular, false);
    let gates: Vec<&str> = GATES
        .iter()
        .zip([gates.0, gates.1])
        .filter(|(_, on)| *on)
        .map(|(g, _)| *g)
        .collect();
    let status = PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(shuffled(pod_conditions(&conditions), seed)).filter(|c| !c.is_empty()),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: (!statuses.is_empty()).then_some(statuses),
        ..PodStatus::default()
    };
    let mut pod = pod(init_containers, containers, &gates, status);
    pod.metadata.generation = generation;
    Scenario {
        pod,
        views,
        probes: AnnotatedProbes::from_probes(probes),
    }
}

fn container_state(
    name: &str,
    ready: bool,
    started: Option<bool>,
    running: bool,
) -> ContainerStatus {
    let mut status = container_status(name, ready);
    status.started = started;
    if !running {
        status.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
    }
    status
}

fn annotated(container: &str, kind: ProbeKind) -> AnnotatedProbe {
    AnnotatedProbe {
        container: container.to_string(),
        kind,
        spec: ProbeSpec {
            handler: Handler::TcpSocket(TcpSocketAction {
                host: None,
                port: 80,
            }),
            initial_delay_seconds: 0,
            timeout_seconds: 1,
            period_seconds: 10,
            period_milliseconds: None,
            success_threshold: 1,
            failure_threshold: 3,
            termination_grace_period_seconds: None,
            network: Default::default(),
            markers: Vec::new(),
            workload: Default::default(),
        },
    }
}

fn pod_conditions(draws: &[ConditionDraw]) -> Vec<PodCondition> {
    let statuses = [TRUE, "False", "Unknown"];
    CONDITION_TYPES
        .iter()
        .zip(draws)
        .filter_map(|(type_, draw)| {
            let (status, reason, message, transition, probe) = (*draw)?;
            let mut c = condition(
                type_,
                statuses[status],
                reason.then_some("SomeReason"),
                message.then(|| "some message".to_string()),
            );
            c.last_transition_time = transition.then(|| time("2025-03-01T09:00:00Z"));
            c.last_probe_time = probe.then(|| time("2025-03-01T09:30:00Z"));
            Some(c)
        })
        .collect()
}

/// `items` in an order drawn from `seed` (a Fisher-Yates shuffle).
fn shuffled<T>(mut items: Vec<T>, mut seed: u64) -> Vec<T> {
    for i in (1..items.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        items.swap(i, (seed >> 33) as usize % (i + 1));
    }
    items
}

fn desired(mode: Mode, scenario: &Scenario, pod: &Pod, now: &Time) -> PodStatus {
    match mode {
        Mode::Gate => desired_gate_status(pod, &scenario.probes, &scenario.views, None, now),
        Mode::Authority => desired_authority_status(pod, &scenario.views, now),
    }
}

fn patch_for(mode: Mode, scenario: &Scenario, pod: &Pod, now: &Time) -> Option<Value> {
    build_patch(mode, pod, &desired(mode, scenario, pod, now))
        .expect("pods under test have a uid and version")
}

/// What the API server does with podprobe's patches (strategic merge for the
/// shapes [`build_patch`] emits): check the preconditions, merge `conditions`
/// by `type` (a `null` removes a key) and order them by
/// `$setElementOrder/conditions`, replace any other status field whole.
fn apply(pod: &Pod, patch: &Value) -> Pod {
    let mut document = serde_json::to_value(pod).expect("pod serialises");
    for (key, value) in patch["metadata"].as_object().expect("metadata") {
        assert_eq!(
            &document["metadata"][key], value,
            "precondition metadata.{key}"
        );
    }
    let status = document["status"].as_object_mut().expect("status");
    let patch_status = patch["status"].as_object().expect("status patch");
    for (key, value) in patch_status {
        match key.as_str() {
            "$setElementOrder/conditions" => {}
            "conditions" => merge_by_type(status.entry("conditions").or_insert(json!([])), value),
            _ => {
                status.insert(key.clone(), value.clone());
            }
        }
    }
    if let (Some(order), Some(Value::Array(conditions))) = (
        patch_status.get("$setElementOrder/conditions"),
        status.get_mut("conditions"),
    ) {
        let order = order.as_array().expect("order list");
        conditions.sort_by_key(|c| {
            order
                .iter()
                .position(|o| o["type"] == c["type"])
                .unwrap_or(usize::MAX)
        });
    }
    serde_json::from_value(document).expect("patched pod deserialises")
}

fn merge_by_type(list: &mut Value, entries: &Value) {
    let list = list.as_array_mut().expect("conditions list");
    for entry in entries.as_array().expect("conditions patch") {
        let fields = entry.as_object().expect("condition patch");
        let index = match list.iter().position(|c| c["type"] == entry["type"]) {
            Some(index) => index,
            None => {
                list.push(json!({}));
                list.len() - 1
            }
        };
        let target = list[index].as_object_mut().expect("condition");
        for (key, value) in fields {
            if value.is_null() {
                target.remove(key);
            } else {
                target.insert(key.clone(), value.clone());
            }
        }
    }
}

/// `pod` without anything podprobe owns in `mode`.
fn without_owned(mode: Mode, pod: &Pod) -> Pod {
    let mut pod = pod.clone();
    let status = pod.status.get_or_insert_with(PodStatus::default);
    let owned = owned_conditions(mode);
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| !owned.contains(&c.type_.as_str()));
    }
    status.conditions = status.conditions.take().filter(|c| !c.is_empty());
    if mode == Mode::Authority {
        let lists = [
            &mut status.init_container_statuses,
            &mut status.container_statuses,
        ];
        for s in lists.into_iter().flatten().flatten() {
            s.ready = false;
            s.started = None;
        }
    }
    pod
}

/// `pod` with its status replaced by the desired one.
fn desired_pod(mode: Mode, scenario: &Scenario, now: &Time) -> Pod {
    Pod {
        status: Some(desired(mode, scenario, &scenario.pod, now)),
        ..scenario.pod.clone()
    }
}

/// What podprobe owns in `pod` in `mode`: the verdict of each owned condition
/// and, in authority mode, each container's `ready` and `started`.
fn owned_fields(mode: Mode, pod: &Pod) -> Vec<String> {
    let status = pod.status.clone().unwrap_or_default();
    let owned = owned_conditions(mode);
    let conditions = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| owned.contains(&c.type_.as_str()));
    let mut fields: Vec<String> = conditions
        .map(|c| format!("{} {} {:?} {:?}", c.type_, c.status, c.reason, c.message))
        .collect();
    if mode == Mode::Authority {
        let lists = [&status.init_container_statuses, &status.container_statuses];
        let statuses = lists.into_iter().flatten().flatten();
        fields.extend(
            statuses.map(|s| format!("{} ready={} started={:?}", s.name, s.ready, s.started)),
        );
    }
    fields
}

fn object_keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .map(Map::keys)
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

const MODES: [Mode; 2] = [Mode::Gate, Mode::Authority];

proptest! {
    #[test]
    fn rule5_desired_status_is_a_fixed_point(s in scenario()) {
        for mode in MODES {
            let now = time("2025-03-01T10:00:31Z");
            let Some(patch) = patch_for(mode, &s, &s.pod, &now) else { continue };
            let patched = apply(&s.pod, &patch);
            prop_assert_eq!(owned_fields(mode, &patched), owned_fields(mode, &desired_pod(mode, &s, &now)));
            let again = patch_for(mode, &s, &patched, &time("2025-03-01T10:05:00Z"));
            prop_assert_eq!(again, None, "{:?} patch {}", mode, patch);
        }
    }

    #[test]
    fn rule3_2_ready_never_true_while_a_gate_or_container_is_not(s in scenario()) {
        let status = desired_authority_status(&s.pod, &s.views, &time("2025-03-01T10:00:31Z"));
        let conditions = status.conditions.clone().unwrap_or_default();
        let ready = conditions.iter().find(|c| c.type_ == POD_READY).expect("Ready generated");
        if ready.status == TRUE {
            let spec = s.pod.spec.as_ref().expect("spec");
            for gate in spec.readiness_gates.iter().flatten() {
                let gate_condition = conditions.iter().find(|c| c.type_ == gate.condition_type);
                prop_assert!(gate_condition.is_some_and(|c| c.status == TRUE), "gate {}", gate.condition_type);
            }
            for c in readiness_containers(spec) {
                prop_assert!(status_named(&status, &c.name).is_some_and(|st| st.ready), "container {}", c.name);
            }
        }
    }

    #[test]
    fn gate_true_only_when_every_gated_container_is_ready(s in scenario()) {
        let gate = gate_condition(&s.pod, &s.probes, &s.views, None);
        if gate.status == TRUE {
            let spec = s.pod.spec.as_ref().expect("spec");
            let status = s.pod.status.as_ref().expect("status");
            let gated = readiness_containers(spec).filter(|c: &&Container| s.probes.gates_readiness(&c.name));
            for c in gated {
                let current = status_named(status, &c.name);
                let ready = current.and_then(|st| s.views.iter().find(|v| v.name == c.name && v.container_id == st.container_id));
                prop_assert!(ready.is_some_and(|v| v.ready && v.started), "container {}", c.name);
            }
        }
    }

    #[test]
    fn design_gate_patch_holds_only_the_gate_condition(s in scenario()) {
        let Some(patch) = patch_for(Mode::Gate, &s, &s.pod, &time("2025-03-01T10:00:31Z")) else { return Ok(()) };
        prop_assert_eq!(object_keys(&patch), ["metadata", "status"]);
        prop_assert_eq!(object_keys(&patch["metadata"]), ["uid"]);
        for key in object_keys(&patch["status"]) {
            prop_assert!(["$setElementOrder/conditions", "conditions"].contains(&key), "status.{}", key);
        }
        for entry in patch["status"]["conditions"].as_array().expect("conditions") {
            prop_assert_eq!(&entry["type"], READY_CONDITION);
        }
        prop_assert_eq!(without_owned(Mode::Gate, &apply(&s.pod, &patch)), without_owned(Mode::Gate, &s.pod));
    }

    #[test]
    fn design_authority_patch_touches_only_owned_fields(s in scenario()) {
        let Some(patch) = patch_for(Mode::Authority, &s, &s.pod, &time("2025-03-01T10:00:31Z")) else { return Ok(()) };
        prop_assert_eq!(object_keys(&patch["metadata"]), ["resourceVersion", "uid"]);
        let allowed = ["$setElementOrder/conditions", "conditions", "containerStatuses", "initContainerStatuses"];
        for key in object_keys(&patch["status"]) {
            prop_assert!(allowed.contains(&key), "status.{}", key);
        }
        for entry in patch["status"]["conditions"].as_array().into_iter().flatten() {
            prop_assert!(entry["type"] == POD_READY || entry["type"] == CONTAINERS_READY, "{}", entry);
        }
        let patched = apply(&s.pod, &patch);
        prop_assert_eq!(without_owned(Mode::Authority, &patched), without_owned(Mode::Authority, &s.pod));
    }
}
