//! The ledger as the Kubernetes API serves it (PS2): the read-only resource
//! `probes` of the aggregated group `status.podprobe.io`, one object per pod
//! named like the pod, `GET /apis/status.podprobe.io/v1alpha1/namespaces/
//! {namespace}/probes/{pod}`. podprobe serves it behind an `APIService`;
//! `kubectl podprobe` reads it. Both sides use these types, so the wire
//! format has one definition.

use serde::{Deserialize, Serialize};

use super::{PodReport, ProbeReport};

/// The API group.
pub const GROUP: &str = "status.podprobe.io";
/// The one version served.
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as in `apiVersion`.
pub const API_VERSION: &str = "status.podprobe.io/v1alpha1";
/// The resource (plural), as RBAC names it.
pub const RESOURCE: &str = "probes";
/// The kind of one object.
pub const KIND: &str = "PodProbes";
/// The `APIService` that registers the group with the API server.
pub const API_SERVICE: &str = "v1alpha1.status.podprobe.io";

/// The path of pod `namespace/name`'s object.
pub fn path(namespace: &str, name: &str) -> String {
    format!("/apis/{API_VERSION}/namespaces/{namespace}/{RESOURCE}/{name}")
}

/// A `meta/v1` `Status` of a failure, as the API server answers errors
/// (kubectl shows its message): what podprobe answers in place of an
/// object.
pub fn failure(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// The object's metadata: the pod's namespace, name and UID.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

/// The last run of each of a pod's probes, as podprobe on the pod's node
/// recorded them. `outputShown` is false for a caller who may not read the
/// pod's logs (`get pods/log`): a probe's output is the container's output,
/// so such a caller gets results, counts and times, and empty outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodProbes {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    /// The node whose podprobe answered (the pod's).
    pub node: String,
    /// Whether `probes[].output` holds the probes' output.
    pub output_shown: bool,
    /// Probes by container name, then kind.
    pub probes: Vec<ProbeReport>,
}

impl PodProbes {
    /// `report` as an object of node `node`, with the outputs kept only
    /// when `show_output`.
    pub fn new(report: PodReport, node: &str, show_output: bool) -> Self {
        let mut probes = report.probes;
        if !show_output {
            for probe in &mut probes {
                probe.output.clear();
                probe.output_truncated = false;
            }
        }
        PodProbes {
            api_version: API_VERSION.to_string(),
            kind: KIND.to_string(),
            metadata: Metadata {
                name: report.name,
                namespace: report.namespace,
                uid: report.uid,
            },
            node: node.to_string(),
            output_shown: show_output,
            probes,
        }
    }

    /// The report the object holds.
    pub fn into_report(self) -> PodReport {
        PodReport {
            namespace: self.metadata.namespace,
            name: self.metadata.name,
            uid: self.metadata.uid,
            probes: self.probes,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::prober::probe_ledger::RunResult;
    use crate::spec::ProbeKind;

    fn report() -> PodReport {
        let at = Time(Timestamp::from_second(1_700_000_000).expect("time"));
        PodReport {
            namespace: "ns".to_string(),
            name: "web".to_string(),
            uid: "u1".to_string(),
            probes: vec![ProbeReport {
                container: "app".to_string(),
                probe: ProbeKind::Readiness,
                result: RunResult::Failure,
                ran_at: at.clone(),
                duration_ms: 3,
                consecutive: 2,
                threshold: 3,
                next_run: at,
                output: "secret output".to_string(),
                output_truncated: true,
            }],
        }
    }

    #[test]
    fn ps2_output_is_shown_only_when_asked_and_the_rest_always() {
        let shown = PodProbes::new(report(), "node-a", true);
        assert_eq!(shown.probes[0].output, "secret output");
        assert_eq!(shown.clone().into_report(), report());
        let hidden = PodProbes::new(report(), "node-a", false);
        assert!(!hidden.output_shown);
        assert_eq!(hidden.probes[0].output, "");
        assert!(!hidden.probes[0].output_truncated);
        assert_eq!(hidden.probes[0].consecutive, 2);
        let json = serde_json::to_value(&hidden).expect("json");
        assert_eq!(json["apiVersion"], "status.podprobe.io/v1alpha1");
        assert_eq!(json["kind"], "PodProbes");
        assert_eq!(json["metadata"]["name"], "web");
        assert_eq!(json["outputShown"], false);
        assert_eq!(
            path("ns", "web"),
            "/apis/status.podprobe.io/v1alpha1/namespaces/ns/probes/web"
        );
    }
}
