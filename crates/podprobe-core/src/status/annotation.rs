//! The `podprobe.io/probes` annotation: gate mode's probe source.
//!
//! The value is a JSON object keyed by container name; each value holds any of
//! `startupProbe`, `readinessProbe` and `livenessProbe` in the core/v1 `Probe`
//! schema:
//!
//! ```json
//! {"app": {"readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}}
//! ```
//!
//! Regular containers and restartable init containers (sidecars) can be
//! annotated, as they can carry probes in the spec; classic init containers
//! cannot. Each probe object is decoded by the one strict parser
//! ([`decode_probe_object`], shared with `podprobe probe`): an unknown field
//! is an error, like `kubectl --validate=strict`, because a misspelt field
//! in an annotation would otherwise be dropped without a word; podprobe's
//! extensions (#14) sit under the probe's `podprobe` key. Each probe is then
//! defaulted, validated and resolved by [`normalize_object`] against its
//! container.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde_json::Value;

use super::readiness_containers;
use crate::spec::destinations::Destinations;
pub use crate::spec::probe_spec::budget::MAX_ANNOTATION_BYTES;
use crate::spec::probe_spec::budget::{OverBudget, PodBudget};
use crate::spec::probe_spec::extension::Network;
use crate::spec::probe_spec::extension::workload_options::ReadinessFloor;
use crate::spec::probe_spec::{clipped, decode_probe_object, normalize_object};
use crate::spec::{Handler, ProbeKind, ProbeSpec, SpecError};
use crate::util::pod::find_container;

/// The annotation holding gate mode's probes.
pub const PROBES_ANNOTATION: &str = "podprobe.io/probes";

/// One annotated probe, defaulted, validated and resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotatedProbe {
    pub container: String,
    pub kind: ProbeKind,
    pub spec: ProbeSpec,
}

/// A pod's annotated probes in the order the kubelet creates workers:
/// restartable init containers, then regular containers, each in spec order,
/// and per container [`ProbeKind::ALL`] order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnnotatedProbes {
    probes: Vec<AnnotatedProbe>,
}

impl AnnotatedProbes {
    /// Whether the annotation declares no probe at all.
    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &AnnotatedProbe> {
        self.probes.iter()
    }

    /// The `kind` probe of `container`, if annotated.
    pub fn get(&self, container: &str, kind: ProbeKind) -> Option<&ProbeSpec> {
        self.probes
            .iter()
            .find(|p| p.container == container && p.kind == kind)
            .map(|p| &p.spec)
    }

    /// Whether `container` has an annotated probe that holds back its
    /// readiness: a readiness probe, or a startup probe (until it succeeds the
    /// kubelet reports the container not ready, status.md rule 1.2).
    pub fn gates_readiness(&self, container: &str) -> bool {
        self.get(container, ProbeKind::Readiness).is_some()
            || self.get(container, ProbeKind::Startup).is_some()
    }

    /// The readiness floor of the workload (WG3): the first annotated
    /// readiness probe's, in annotation order, that has one.
    pub fn readiness_floor(&self) -> Option<ReadinessFloor> {
        self.probes
            .iter()
            .filter(|p| p.kind == ProbeKind::Readiness)
            .find_map(|p| p.spec.workload.readiness_floor)
    }

    #[cfg(test)]
    pub(crate) fn from_probes(probes: Vec<AnnotatedProbe>) -> Self {
        AnnotatedProbes { probes }
    }
}

/// Why the annotation cannot be used; the message names the container, the
/// probe and the field to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error("podprobe.io/probes: Too long: may not be more than {limit} bytes, got {len}")]
    TooLong { len: usize, limit: usize },
    /// A probe would take the pod over one of its budgets (#25).
    #[error("podprobe.io/probes: container {container:?}: {over}", container = .0.container, over = .0)]
    OverBudget(OverBudget),
    #[error("podprobe.io/probes: invalid JSON: {0}")]
    InvalidJson(String),
    #[error("podprobe.io/probes: expected a JSON object keyed by container name, got {found}")]
    NotAnObject { found: &'static str },
    #[error("podprobe.io/probes: container {container:?} is not in the pod")]
    UnknownContainer { container: String },
    #[error(
        "podprobe.io/probes: container {container:?}: probes may not be set for init containers without \
         restartPolicy=Always"
    )]
    InitContainer { container: String },
    #[error(
        "podprobe.io/probes: container {container:?}: expected an object with startupProbe, readinessProbe \
         or livenessProbe, got {found}"
    )]
    ContainerNotAnObject {
        container: String,
        found: &'static str,
    },
    #[error(
        "podprobe.io/probes: container {container:?}: unknown key {key:?} (expected startupProbe, \
         readinessProbe or livenessProbe)"
    )]
    UnknownKey { container: String, key: String },
    /// The probe object does not decode (a core/v1 `Probe` plus the
    /// `podprobe` key), or has a field the schema does not know.
    #[error("podprobe.io/probes: container {container:?}: {field}: {message}")]
    InvalidProbe {
        container: String,
        field: String,
        message: String,
    },
    /// The probe decodes but fails defaulting, validation or resolution.
    #[error("podprobe.io/probes: container {container:?}: {error}")]
    Spec { container: String, error: SpecError },
    /// The probe names a `host` the node's operator has not allowed.
    #[error(
        "podprobe.io/probes: container {container:?}: {field}: Forbidden: {host:?} is not in the \
         node's --allow-probe-hosts (without `host`, a probe targets its own pod)"
    )]
    HostNotAllowed {
        container: String,
        field: String,
        host: String,
    },
    /// `podprobe.network: pod` on a node whose podprobe may not enter pod
    /// network namespaces.
    #[error(
        "podprobe.io/probes: container {container:?}: {field}: Forbidden: \"pod\" is not enabled on \
         this node (podprobe run --pod-network; Helm value podNetwork.enabled)"
    )]
    PodNetworkNotEnabled { container: String, field: String },
    /// `podprobe.network: pod` in a pod that has no network of its own.
    #[error(
        "podprobe.io/probes: container {container:?}: {field}: Forbidden: the pod uses the node's \
         network (hostNetwork: true); use \"node\""
    )]
    PodNetworkOfHostNetworkPod { container: String, field: String },
}

impl AnnotationError {
    /// The container whose entry is refused, when the error is about one.
    pub fn container(&self) -> Option<&str> {
        match self {
            AnnotationError::TooLong { .. }
            | AnnotationError::InvalidJson(_)
            | AnnotationError::NotAnObject { .. } => None,
            AnnotationError::UnknownContainer { container }
            | AnnotationError::InitContainer { container }
            | AnnotationError::ContainerNotAnObject { container, .. }
            | AnnotationError::UnknownKey { container, .. }
            | AnnotationError::InvalidProbe { container, .. }
            | AnnotationError::Spec { container, .. }
            | AnnotationError::HostNotAllowed { container, .. }
            | AnnotationError::PodNetworkNotEnabled { container, .. }
            | AnnotationError::PodNetworkOfHostNetworkPod { container, .. } => Some(container),
            AnnotationError::OverBudget(over) => Some(&over.container),
        }
    }
}

/// The probes in `pod`'s `podprobe.io/probes` annotation, charged to
/// `budget`; none when the pod has no such annotation.
pub fn pod_probes(pod: &Pod, budget: &mut PodBudget) -> Result<AnnotatedProbes, AnnotationError> {
    let value = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROBES_ANNOTATION));
    match value {
        None => Ok(AnnotatedProbes::default()),
        Some(value) => parse_probes(&pod.spec.clone().unwrap_or_default(), value, budget),
    }
}

/// Parses and validates an annotation value against the pod spec it
/// belongs to, charging its probes to `budget`.
pub fn parse_probes(
    spec: &PodSpec,
    value: &str,
    budget: &mut PodBudget,
) -> Result<AnnotatedProbes, AnnotationError> {
    let limit = budget.limits().annotation_bytes;
    if value.len() > limit {
        return Err(AnnotationError::TooLong {
            len: value.len(),
            limit,
        });
    }
    let document: Value =
        serde_json::from_str(value).map_err(|e| AnnotationError::InvalidJson(e.to_string()))?;
    let Value::Object(by_container) = document else {
        return Err(AnnotationError::NotAnObject {
            found: json_type(&document),
        });
    };
    for name in by_container.keys() {
        probeable_container(spec, name)?;
    }
    let mut probes = Vec::new();
    // The containers that may carry probes, in the kubelet's worker order.
    for container in readiness_containers(spec) {
        if let Some(entry) = by_container.get(&container.name) {
            probes.extend(container_probes(container, entry, budget)?);
        }
    }
    Ok(AnnotatedProbes { probes })
}

/// Gate mode's rule for annotated targets: every `httpGet.host` and
/// `tcpSocket.host` must be one `destinations` allows, since whoever writes
/// the annotation could otherwise aim podprobe at the node's own services
/// or any address its network reaches.
pub fn check_hosts(
    probes: &AnnotatedProbes,
    destinations: &Destinations,
) -> Result<(), AnnotationError> {
    for probe in probes.iter() {
        let (handler, host) = match &probe.spec.handler {
            Handler::HttpGet(action) => ("httpGet", &action.host),
            Handler::TcpSocket(action) => ("tcpSocket", &action.host),
            _ => continue,
        };
        if let Some(host) = host.as_deref().filter(|h| !destinations.allows_host(h)) {
            return Err(AnnotationError::HostNotAllowed {
                container: probe.container.clone(),
                field: format!("{}.{handler}.host", probe.kind.field_name()),
                host: host.to_string(),
            });
        }
    }
    Ok(())
}

/// Gate mode's rule for `podprobe.network: pod`: the node's podprobe must
/// be allowed to enter pod network namespaces (`pod_network_enabled`,
/// `--pod-network`, an opt-in because it needs CAP_SYS_ADMIN), and the pod
/// must have a network of its own: a `hostNetwork` pod's is the node's,
/// where loopback is the node's.
pub fn check_network(
    spec: &PodSpec,
    probes: &AnnotatedProbes,
    pod_network_enabled: bool,
) -> Result<(), AnnotationError> {
    let Some(probe) = probes.iter().find(|p| p.spec.network == Network::Pod) else {
        return Ok(());
    };
    let container = probe.container.clone();
    let field = format!("{}.podprobe.network", probe.kind.field_name());
    if !pod_network_enabled {
        return Err(AnnotationError::PodNetworkNotEnabled { container, field });
    }
    if spec.host_network == Some(true) {
        return Err(AnnotationError::PodNetworkOfHostNetworkPod { container, field });
    }
    Ok(())
}

/// The container `name`, if it may carry probes.
fn probeable_container<'a>(
    spec: &'a PodSpec,
    name: &str,
) -> Result<&'a Container, AnnotationError> {
    match find_container(spec, name) {
        Some(placed) if placed.is_probed() => Ok(placed.container),
        Some(_) => Err(AnnotationError::InitContainer {
            container: name.to_string(),
        }),
        None => Err(AnnotationError::UnknownContainer {
            container: clipped(name),
        }),
    }
}

/// The probes of one container's annotation entry, in [`ProbeKind::ALL`] order.
fn container_probes(
    container: &Container,
    entry: &Value,
    budget: &mut PodBudget,
) -> Result<Vec<AnnotatedProbe>, AnnotationError> {
    let Value::Object(by_kind) = entry else {
        return Err(AnnotationError::ContainerNotAnObject {
            container: container.name.clone(),
            found: json_type(entry),
        });
    };
    if let Some(key) = by_kind.keys().find(|key| kind_for_key(key).is_none()) {
        return Err(AnnotationError::UnknownKey {
            container: container.name.clone(),
            key: clipped(key),
        });
    }
    let mut probes = Vec::new();
    for kind in ProbeKind::ALL {
        // A null probe is an absent one, as when Go decodes a nil pointer.
        let Some(value) = by_kind.get(kind.field_name()).filter(|v| !v.is_null()) else {
            continue;
        };
        let object =
            decode_probe_object(kind, value).map_err(|e| AnnotationError::InvalidProbe {
                container: container.name.clone(),
                field: e.field,
                message: e.message,
            })?;
        let spec =
            normalize_object(kind, &object, container).map_err(|error| AnnotationError::Spec {
                container: container.name.clone(),
                error,
            })?;
        budget
            .charge(&container.name, kind, &spec)
            .map_err(AnnotationError::OverBudget)?;
        probes.push(AnnotatedProbe {
            container: container.name.clone(),
            kind,
            spec,
        });
    }
    Ok(probes)
}

fn kind_for_key(key: &str) -> Option<ProbeKind> {
    ProbeKind::ALL
        .into_iter()
        .find(|kind| kind.field_name() == key)
}

/// The JSON type name of `value`, for error messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{container, running_pod as pod, sidecar};
    use k8s_openapi::api::core::v1::ContainerPort;

    fn pod_spec() -> PodSpec {
        let app = Container {
            ports: Some(vec![ContainerPort {
                name: Some("web".to_string()),
                container_port: 8080,
                ..ContainerPort::default()
            }]),
            ..container("app")
        };
        PodSpec {
            init_containers: Some(vec![container("setup"), sidecar("proxy")]),
            containers: vec![app, container("worker")],
            ..PodSpec::default()
        }
    }

    fn error(value: &str) -> String {
        match parse_probes(&pod_spec(), value, &mut PodBudget::default()) {
            Ok(probes) => panic!("expected an error, got {probes:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn parsed(value: &str) -> AnnotatedProbes {
        parse_probes(&pod_spec(), value, &mut PodBudget::default()).expect("valid annotation")
    }

    #[test]
    fn probes_over_the_pods_budget_refuse_the_annotation() {
        let regex = serde_json::json!({"httpGet": {"port": 80},
            "podprobe": {"expect": {"bodyRegex": "(?:a*b*){100}[^ab]"}}});
        let value = serde_json::json!({"app": {"readinessProbe": regex, "livenessProbe": regex}})
            .to_string();
        let limits = crate::spec::probe_spec::budget::BudgetLimits::default();
        assert!(parse_probes(&pod_spec(), &value, &mut PodBudget::new(limits)).is_ok());
        let one_fits = crate::spec::probe_spec::budget::BudgetLimits {
            regex_bytes: 15_000,
            ..limits
        };
        match parse_probes(&pod_spec(), &value, &mut PodBudget::new(one_fits)) {
            Err(AnnotationError::OverBudget(over)) => {
                assert_eq!(
                    (over.container.as_str(), over.kind),
                    ("app", ProbeKind::Liveness)
                );
                assert!(over.needed > 15_000, "{over}");
            }
            other => panic!("expected OverBudget, got {other:?}"),
        }
        let short = crate::spec::probe_spec::budget::BudgetLimits {
            annotation_bytes: 10,
            ..limits
        };
        assert_eq!(
            parse_probes(&pod_spec(), &value, &mut PodBudget::new(short)),
            Err(AnnotationError::TooLong {
                len: value.len(),
                limit: 10
            })
        );
    }

    #[test]
    fn pod_network_needs_the_nodes_opt_in_and_a_network_of_the_pods_own() {
        let probes = parsed(
            r#"{"app": {"readinessProbe": {"httpGet": {"port": 1}}},
                "worker": {"livenessProbe": {"tcpSocket": {"port": 1}, "podprobe": {"network": "pod"}}}}"#,
        );
        let refused = check_network(&pod_spec(), &probes, false).unwrap_err();
        assert_eq!(refused.container(), Some("worker"));
        assert_eq!(
            refused.to_string(),
            "podprobe.io/probes: container \"worker\": livenessProbe.podprobe.network: Forbidden: \
             \"pod\" is not enabled on this node (podprobe run --pod-network; Helm value \
             podNetwork.enabled)"
        );
        assert_eq!(check_network(&pod_spec(), &probes, true), Ok(()));
        let host_network = PodSpec {
            host_network: Some(true),
            ..pod_spec()
        };
        assert_eq!(
            check_network(&host_network, &probes, true)
                .unwrap_err()
                .to_string(),
            "podprobe.io/probes: container \"worker\": livenessProbe.podprobe.network: Forbidden: \
             the pod uses the node's network (hostNetwork: true); use \"node\""
        );
        let node_only = parsed(
            r#"{"app": {"readinessProbe": {"grpc": {"port": 1}, "podprobe": {"network": "node"}}}}"#,
        );
        assert_eq!(check_network(&host_network, &node_only, false), Ok(()));
        assert_eq!(
            error(
                r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}, "podprobe": {"network": "pod"}}}}"#
            ),
            "podprobe.io/probes: container \"app\": readinessProbe.podprobe.network: Forbidden: \
             may only be set for httpGet, tcpSocket and grpc probes, not exec"
        );
    }

    #[test]
    fn annotated_hosts_must_be_allowed_by_the_operator() {
        let probes = parsed(
            r#"{"app": {"readinessProbe": {"httpGet": {"port": 1, "host": "169.254.169.254"}},
                        "livenessProbe": {"tcpSocket": {"port": 1, "host": "db.internal"}}},
                "worker": {"readinessProbe": {"grpc": {"port": 9090}}}}"#,
        );
        let refused = check_hosts(&probes, &Destinations::default()).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "podprobe.io/probes: container \"app\": readinessProbe.httpGet.host: Forbidden: \
             \"169.254.169.254\" is not in the node's --allow-probe-hosts (without `host`, a \
             probe targets its own pod)"
        );
        let allow = |hosts: &[&str]| {
            let allowed = hosts.iter().map(|h| h.parse().unwrap()).collect();
            Destinations::new(allowed, Vec::new())
        };
        let refused = check_hosts(&probes, &allow(&["169.254.0.0/16"])).unwrap_err();
        assert!(
            matches!(&refused, AnnotationError::HostNotAllowed { field, .. }
                if field == "livenessProbe.tcpSocket.host"),
            "{refused}"
        );
        assert_eq!(
            check_hosts(&probes, &allow(&["169.254.0.0/16", "db.internal"])),
            Ok(())
        );
        let own_pod =
            parsed(r#"{"app": {"readinessProbe": {"httpGet": {"port": 1, "host": ""}}}}"#);
        assert_eq!(check_hosts(&own_pod, &Destinations::default()), Ok(()));
    }

    #[test]
    fn names_from_the_annotation_are_clipped_in_errors() {
        let long = "é".repeat(200);
        let message = error(&format!(r#"{{"{long}": {{}}}}"#));
        assert_eq!(
            message,
            format!(
                "podprobe.io/probes: container \"{}...\" is not in the pod",
                "é".repeat(126)
            )
        );
        let key = error(&format!(r#"{{"app": {{"{long}": {{}}}}}}"#));
        assert!(key.len() < 600, "{key}");
        let field = error(&format!(
            r#"{{"app": {{"readinessProbe": {{"exec": {{"command": ["true"]}}, "{long}": 1}}}}}}"#
        ));
        assert!(field.len() < 600, "{field}");
    }

    #[test]
    fn an_annotation_larger_than_the_api_servers_limit_is_refused_unparsed() {
        let padding = " ".repeat(MAX_ANNOTATION_BYTES);
        assert_eq!(
            error(&format!("{{}}{padding}")),
            format!(
                "podprobe.io/probes: Too long: may not be more than 262144 bytes, got {}",
                MAX_ANNOTATION_BYTES + 2
            )
        );
        assert!(parsed(&format!("{{}}{}", &padding[2..])).is_empty());
    }

    #[test]
    fn annotation_probes_listed_in_kubelet_worker_order() {
        let probes = parsed(
            r#"{
                "app": {"livenessProbe": {"tcpSocket": {"port": 8080}},
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": "web"}}},
                "worker": {"livenessProbe": {"exec": {"command": ["true"]}}},
                "proxy": {"startupProbe": {"grpc": {"port": 9090}}}
            }"#,
        );
        let order: Vec<_> = probes
            .iter()
            .map(|p| (p.container.as_str(), p.kind))
            .collect();
        assert_eq!(
            order,
            [
                ("proxy", ProbeKind::Startup),
                ("app", ProbeKind::Readiness),
                ("app", ProbeKind::Liveness),
                ("worker", ProbeKind::Liveness),
            ]
        );
    }

    #[test]
    fn annotation_probes_get_api_defaults_and_resolved_ports() {
        let probes = parsed(
            r#"{"app": {"readinessProbe": {"httpGet": {"path": "/ready", "port": "web"}}}}"#,
        );
        let spec = probes
            .get("app", ProbeKind::Readiness)
            .expect("readiness probe");
        let Handler::HttpGet(action) = &spec.handler else {
            panic!("expected httpGet, got {:?}", spec.handler);
        };
        assert_eq!((action.port, action.path.as_str()), (8080, "/ready"));
        assert_eq!(
            (
                spec.timeout_seconds,
                spec.period_seconds,
                spec.success_threshold,
                spec.failure_threshold
            ),
            (1, 10, 1, 3)
        );
        assert!(probes.get("app", ProbeKind::Liveness).is_none());
    }

    #[test]
    fn annotation_readiness_or_startup_probe_gates_readiness() {
        let probes = parsed(
            r#"{"app": {"startupProbe": {"tcpSocket": {"port": 8080}}},
                "worker": {"livenessProbe": {"tcpSocket": {"port": 80}}},
                "proxy": {"readinessProbe": {"tcpSocket": {"port": 80}}}}"#,
        );
        assert!(probes.gates_readiness("app"));
        assert!(probes.gates_readiness("proxy"));
        assert!(!probes.gates_readiness("worker"));
    }

    #[test]
    fn annotation_probe_extensions_are_parsed_once_and_validated() {
        let probes = parsed(
            r#"{"app": {"readinessProbe": {"httpGet": {"port": 8080},
                "podprobe": {"method": "HEAD", "expect": {"statusCodes": ["204", "300-399"]}}}},
                "worker": {"livenessProbe": {"httpGet": {"port": 80},
                "podprobe": {"expect": {"bodyRegex": "^ok$"}}}}}"#,
        );
        let action = |container| match &probes
            .get(container, ProbeKind::Readiness)
            .or(probes.get(container, ProbeKind::Liveness))
            .unwrap()
            .handler
        {
            Handler::HttpGet(action) => action.clone(),
            other => panic!("expected httpGet, got {other:?}"),
        };
        let app = action("app").extensions;
        assert_eq!(app.method, crate::spec::probe_spec::extension::Method::Head);
        assert_eq!(
            app.expect.status_codes.map(|c| c.to_string()).as_deref(),
            Some("204 or 300-399")
        );
        let worker = action("worker")
            .extensions
            .expect
            .body_regex
            .expect("compiled");
        assert!(worker.is_match("ok") == Ok(true) && worker.is_match("not ok") == Ok(false));

        assert_eq!(
            error(
                r#"{"app": {"readinessProbe": {"httpGet": {"port": 80}, "podprobe": {"tls": {}}}}}"#
            ),
            r#"podprobe.io/probes: container "app": readinessProbe.podprobe.tls: Forbidden: may only be set for httpGet probes with scheme HTTPS and for grpc probes, not scheme HTTP"#
        );
        let mtls = parsed(
            r#"{"app": {"readinessProbe": {"grpc": {"port": 443}, "podprobe": {"tls": {"clientCertificate": {"secretName": "app-probe-client"}}}}}}"#,
        );
        assert_eq!(
            mtls.get("app", ProbeKind::Readiness)
                .unwrap()
                .client_certificate_secret(),
            Some("app-probe-client"),
            "the Secret is named, not read, when the annotation is parsed"
        );
        assert_eq!(
            error(
                r#"{"worker": {"livenessProbe": {"tcpSocket": {"port": 80}, "podprobe": {"expect": {"statusCodes": ["200"]}}}}}"#
            ),
            "podprobe.io/probes: container \"worker\": livenessProbe.podprobe.expect: Forbidden: \
             may only be set for httpGet probes, not tcpSocket"
        );
        assert_eq!(
            error(
                r#"{"app": {"readinessProbe": {"httpGet": {"port": 80}, "podprobe": {"expect": {"statusCodes": ["200", "2000"]}}}}}"#
            ),
            r#"podprobe.io/probes: container "app": readinessProbe.podprobe.expect.statusCodes[1]: Invalid value: "2000": must be a status code (100-599) or an inclusive range of them ("300-399")"#
        );
    }

    #[test]
    fn annotation_null_probe_is_absent() {
        assert!(parsed(r#"{"app": {"readinessProbe": null}}"#).is_empty());
    }

    #[test]
    fn annotation_read_from_the_pod() {
        let mut pod = pod(vec![], pod_spec().containers, &[], Default::default());
        let value = r#"{"worker": {"livenessProbe": {"tcpSocket": {"port": 80}}}}"#;
        pod.metadata.annotations =
            Some([(PROBES_ANNOTATION.to_string(), value.to_string())].into());
        let probes = pod_probes(&pod, &mut PodBudget::default()).expect("valid annotation");
        assert!(probes.get("worker", ProbeKind::Liveness).is_some());
    }

    #[test]
    fn annotation_spec_errors_name_container_probe_and_field() {
        assert_eq!(
            error(r#"{"app": {"readinessProbe": {"tcpSocket": {"port": "metrics"}}}}"#),
            r#"podprobe.io/probes: container "app": readinessProbe.tcpSocket.port: port "metrics" not found in container "app""#
        );
        assert_eq!(
            error(r#"{"worker": {"livenessProbe": {"periodSeconds": 10}}}"#),
            r#"podprobe.io/probes: container "worker": livenessProbe: Required value: must specify a handler type"#
        );
    }

    #[test]
    fn annotation_absent_means_no_probes() {
        let pod = pod(vec![], vec![container("app")], &[], Default::default());
        assert_eq!(
            pod_probes(&pod, &mut PodBudget::default()),
            Ok(AnnotatedProbes::default())
        );
    }

    #[test]
    fn annotation_empty_object_means_no_probes() {
        assert!(
            parse_probes(&pod_spec(), "{}", &mut PodBudget::default()).is_ok_and(|p| p.is_empty())
        );
    }

    #[test]
    fn annotation_invalid_json_carries_serde_message() {
        assert_eq!(
            error(r#"{"app": "#),
            "podprobe.io/probes: invalid JSON: EOF while parsing a value at line 1 column 8"
        );
    }

    #[test]
    fn annotation_must_be_an_object() {
        assert_eq!(
            error(r#"["app"]"#),
            "podprobe.io/probes: expected a JSON object keyed by container name, got an array"
        );
    }

    #[test]
    fn annotation_unknown_container() {
        assert_eq!(
            error(r#"{"x": {}}"#),
            r#"podprobe.io/probes: container "x" is not in the pod"#
        );
    }

    #[test]
    fn annotation_classic_init_container_rejected() {
        assert_eq!(
            error(r#"{"setup": {"readinessProbe": {"exec": {"command": ["true"]}}}}"#),
            r#"podprobe.io/probes: container "setup": probes may not be set for init containers without restartPolicy=Always"#
        );
    }

    #[test]
    fn annotation_container_entry_must_be_an_object() {
        assert_eq!(
            error(r#"{"app": true}"#),
            r#"podprobe.io/probes: container "app": expected an object with startupProbe, readinessProbe or livenessProbe, got a boolean"#
        );
    }

    #[test]
    fn annotation_unknown_probe_key() {
        assert_eq!(
            error(r#"{"app": {"readyProbe": {}}}"#),
            r#"podprobe.io/probes: container "app": unknown key "readyProbe" (expected startupProbe, readinessProbe or livenessProbe)"#
        );
    }

    #[test]
    fn annotation_probe_of_wrong_type() {
        assert_eq!(
            error(r#"{"app": {"livenessProbe": {"periodSeconds": "10"}}}"#),
            r#"podprobe.io/probes: container "app": livenessProbe: invalid type: string "10", expected i32"#
        );
    }

    #[test]
    fn annotation_unknown_probe_field_is_named() {
        assert_eq!(
            error(r#"{"app": {"readinessProbe": {"perodSeconds": 5, "httpGet": {"port": 80}}}}"#),
            r#"podprobe.io/probes: container "app": readinessProbe.perodSeconds: unknown field"#
        );
        assert_eq!(
            error(
                r#"{"app": {"readinessProbe": {"httpGet": {"port": 80, "httpHeaders": [{"name": "a", "value": "b", "vlaue": "c"}]}}}}"#
            ),
            r#"podprobe.io/probes: container "app": readinessProbe.httpGet.httpHeaders[0].vlaue: unknown field"#
        );
    }

    #[test]
    fn annotation_spec_errors_are_prefixed_with_the_container() {
        let err = AnnotationError::Spec {
            container: "app".to_string(),
            error: SpecError {
                container: "app".to_string(),
                kind: ProbeKind::Readiness,
                field: "readinessProbe.httpGet.port".to_string(),
                message: "must be between 1 and 65535, inclusive".to_string(),
            },
        };
        assert_eq!(
            err.to_string(),
            r#"podprobe.io/probes: container "app": readinessProbe.httpGet.port: must be between 1 and 65535, inclusive"#
        );
    }
}
