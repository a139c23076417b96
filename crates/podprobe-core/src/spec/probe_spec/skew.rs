//! Version skew (V10): probe fields of a pod that podprobe's API types do
//! not have. The pod watch decodes pods into the core/v1 types of
//! [`crate::KUBE_PROBE_VERSION`]; a field of a newer API is dropped by that
//! decoding, so the probe would run without it, as something the user did
//! not write. The watch therefore checks each probe of the raw object
//! strictly, as the annotation is checked, and authority mode refuses a
//! probe with such a field (every run errors, a Warning names the field).

use k8s_openapi::api::core::v1::Probe;
use serde_json::Value;

use super::decode::decode_strict;
use crate::spec::ProbeKind;

/// A probe of the pod spec with a field podprobe's types do not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProbeField {
    pub container: String,
    pub kind: ProbeKind,
    /// Path from the probe's field (`readinessProbe.httpGet.foo`), clipped.
    pub field: String,
}

/// The first field each probe of `pod` (a Pod as the API server sent it)
/// has that podprobe's `Probe` type lacks, for the probes of init and
/// regular containers (ephemeral containers may not have probes).
pub fn unknown_probe_fields(pod: &Value) -> Vec<UnknownProbeField> {
    let spec = &pod["spec"];
    let containers = ["initContainers", "containers"]
        .into_iter()
        .filter_map(|list| spec[list].as_array())
        .flatten();
    let mut unknown = Vec::new();
    for container in containers {
        for kind in ProbeKind::ALL {
            let Some(probe) = container.get(kind.field_name()).filter(|p| !p.is_null()) else {
                continue;
            };
            if let Err(error) = decode_strict::<Probe>(kind.field_name(), probe) {
                unknown.push(UnknownProbeField {
                    container: container["name"].as_str().unwrap_or_default().to_string(),
                    kind,
                    field: error.field,
                });
            }
        }
    }
    unknown
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn v10_probe_fields_of_a_newer_api_are_found_per_container_and_kind() {
        let pod = json!({"spec": {
            "initContainers": [{"name": "sidecar", "restartPolicy": "Always",
                "startupProbe": {"grpc": {"port": 9, "mode": "TLS", "tlsServerName": "x"}}}],
            "containers": [
                {"name": "app",
                 "readinessProbe": {"httpGet": {"port": 80, "protocol": "HTTP1"}, "periodSeconds": 1},
                 "livenessProbe": {"tcpSocket": {"port": 80}, "fromTheFuture": {"a": 1}}},
                {"name": "plain", "readinessProbe": null},
            ],
        }});
        assert_eq!(
            unknown_probe_fields(&pod),
            [
                UnknownProbeField {
                    container: "sidecar".into(),
                    kind: ProbeKind::Startup,
                    field: "startupProbe.grpc.tlsServerName".into(),
                },
                UnknownProbeField {
                    container: "app".into(),
                    kind: ProbeKind::Liveness,
                    field: "livenessProbe.fromTheFuture".into(),
                },
            ]
        );
    }

    #[test]
    fn v10_a_pod_without_probes_or_spec_has_none() {
        assert!(unknown_probe_fields(&json!({})).is_empty());
        assert!(unknown_probe_fields(&json!({"spec": {"containers": "x"}})).is_empty());
        let plain = json!({"spec": {"containers": [{"name": "a", "image": "b", "future": 1}]}});
        assert!(unknown_probe_fields(&plain).is_empty());
    }
}
