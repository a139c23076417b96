//! Reading a pod's `PodProbes` (PS3): `GET /apis/status.podprobe.io/
//! v1alpha1/namespaces/{namespace}/probes/{pod}`, the aggregated API that
//! podprobe serves behind the APIService `v1alpha1.status.podprobe.io`.
//!
//! The API server authenticates the caller with whatever the kubeconfig
//! holds (client certificate, token, exec plugin) and proxies the request
//! to podprobe, which authorizes it with SubjectAccessReviews. An answer
//! other than the object is turned into an error that says what to check:
//! [`object_answer`] reads the object's answer and, when a 404 or an
//! object of another kind leaves it unclear whether podprobe or the API
//! server answered, [`group_answer`] reads the group's discovery document.
//! Both are pure; [`pod_probes`] does the two GETs around them.

use http_body_util::{BodyExt, Limited};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
use podprobe_core::prober::probe_ledger::api_types::{self, PodProbes};

/// Most bytes of an answer read: an object holds at most 16 KiB of output
/// and a few hundred bytes per probe.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Most bytes of an unexpected body quoted in an error.
const QUOTED_BODY_BYTES: usize = 400;

/// What to run to see whether the API server has podprobe's APIService.
const CHECK_API_SERVICE: &str = "kubectl get apiservice v1alpha1.status.podprobe.io";

/// Why no `PodProbes` could be had.
#[derive(Debug, thiserror::Error)]
pub enum ReachError {
    #[error("cannot load the kubeconfig: {0}")]
    Config(String),
    #[error("cannot get pod {namespace}/{name}: {source}")]
    Pod {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot send GET {path} to the API server: {source}")]
    Request {
        path: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the API server does not serve status.podprobe.io: podprobe's APIService v1alpha1.status.podprobe.io is missing (installed with the chart's statusApi.enabled?); check: {CHECK_API_SERVICE}"
    )]
    NotServed,
    #[error(
        "the APIService v1alpha1.status.podprobe.io is not available: {message}; check: {CHECK_API_SERVICE} -o jsonpath='{{.status.conditions}}'"
    )]
    Unavailable { message: String },
    #[error(
        "podprobe is older (or newer) than this plugin: it serves {serves}, the plugin reads v1alpha1"
    )]
    VersionSkew { serves: String },
    #[error(
        "the API server did not accept your credentials: {message}; check: kubectl auth whoami"
    )]
    Unauthorized { message: String },
    #[error(
        "{message}; bind the ClusterRole podprobe-status-reader, or the view ClusterRole, in the pod's namespace"
    )]
    Forbidden { message: String },
    /// podprobe's own 404: the pod is unknown to it, or it runs none of
    /// the pod's probes.
    #[error("{message}")]
    NoProbes { message: String },
    #[error("GET {path} answered {status}: {body}")]
    Unexpected {
        path: String,
        status: u16,
        body: String,
    },
    #[error("cannot encode the output: {0}")]
    Encode(String),
}

/// A `PodProbes` object as podprobe served it.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// The object, typed.
    pub probes: PodProbes,
    /// The object as it came, unknown fields included, for `-o json|yaml`.
    pub raw: serde_json::Value,
}

/// What the answer to the GET of the object says.
#[derive(Debug)]
pub enum ObjectAnswer {
    Served(Box<Served>),
    /// Whether podprobe or the API server answered is for the group's
    /// discovery document to tell.
    Unclear(Doubt),
    Failed(ReachError),
}

/// An answer that may be podprobe's, or a sign that the API server does
/// not serve podprobe's group or version.
#[derive(Debug, Clone, PartialEq)]
pub enum Doubt {
    /// A 404 and its message.
    NotFound { message: String },
    /// An object of another `apiVersion` or `kind`.
    OtherKind { api_version: String, kind: String },
}

/// The `PodProbes` of pod `namespace/name`, read with `client` (the
/// caller's kubeconfig).
pub async fn pod_probes(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Served, ReachError> {
    let path = api_types::path(namespace, name);
    let (status, body) = get(client, &path).await?;
    let doubt = match object_answer(&path, status, &body) {
        ObjectAnswer::Served(served) => return Ok(*served),
        ObjectAnswer::Failed(error) => return Err(error),
        ObjectAnswer::Unclear(doubt) => doubt,
    };
    let group_path = format!("/apis/{}", api_types::GROUP);
    let (status, body) = get(client, &group_path).await?;
    Err(group_answer(&group_path, status, &body, doubt))
}

/// `GET path`: the status and at most [`MAX_ANSWER_BYTES`] of the body.
async fn get(client: &kube::Client, path: &str) -> Result<(u16, Vec<u8>), ReachError> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .map_err(|e| ReachError::Config(e.to_string()))?;
    let response = client
        .send(request)
        .await
        .map_err(|source| ReachError::Request {
            path: path.to_string(),
            source,
        })?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| ReachError::Unexpected {
            path: path.to_string(),
            status,
            body: format!("cannot read the answer (at most {MAX_ANSWER_BYTES} bytes): {e}"),
        })?;
    Ok((status, body.to_bytes().to_vec()))
}

/// What `status` and `body`, the answer to `GET path` of a `PodProbes`,
/// mean.
pub fn object_answer(path: &str, status: u16, body: &[u8]) -> ObjectAnswer {
    match status {
        200 => served(path, body),
        401 => ObjectAnswer::Failed(ReachError::Unauthorized {
            message: message(body),
        }),
        403 => ObjectAnswer::Failed(ReachError::Forbidden {
            message: message(body),
        }),
        404 => ObjectAnswer::Unclear(Doubt::NotFound {
            message: message(body),
        }),
        503 => ObjectAnswer::Failed(ReachError::Unavailable {
            message: message(body),
        }),
        status => ObjectAnswer::Failed(unexpected(path, status, body)),
    }
}

/// The object in a 200's `body`, if it is a `PodProbes` of v1alpha1.
fn served(path: &str, body: &[u8]) -> ObjectAnswer {
    let raw: serde_json::Value = match serde_json::from_slice(body) {
        Ok(raw) => raw,
        Err(e) => {
            return ObjectAnswer::Failed(ReachError::Unexpected {
                path: path.to_string(),
                status: 200,
                body: format!("not JSON ({e}): {}", cut(&String::from_utf8_lossy(body))),
            });
        }
    };
    let field = |name: &str| raw.get(name).and_then(|v| v.as_str()).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if api_version != api_types::API_VERSION || kind != api_types::KIND {
        return ObjectAnswer::Unclear(Doubt::OtherKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    }
    match serde_json::from_value(raw.clone()) {
        Ok(probes) => ObjectAnswer::Served(Box::new(Served { probes, raw })),
        Err(e) => ObjectAnswer::Failed(ReachError::Unexpected {
            path: path.to_string(),
            status: 200,
            body: format!("not a {} {}: {e}", api_types::API_VERSION, api_types::KIND),
        }),
    }
}

/// The error that `doubt` is, given `status` and `body`, the answer to
/// `GET path` of the group `status.podprobe.io`'s discovery document.
pub fn group_answer(path: &str, status: u16, body: &[u8], doubt: Doubt) -> ReachError {
    match status {
        404 => return ReachError::NotServed,
        503 => {
            return ReachError::Unavailable {
                message: message(body),
            };
        }
        200 => {}
        status => return unexpected(path, status, body),
    }
    let versions: Vec<String> = match serde_json::from_slice::<APIGroup>(body) {
        Ok(group) => group.versions.into_iter().map(|v| v.version).collect(),
        Err(e) => {
            return ReachError::Unexpected {
                path: path.to_string(),
                status,
                body: format!("not an APIGroup: {e}"),
            };
        }
    };
    if !versions.iter().any(|v| v == api_types::VERSION) {
        let serves = if versions.is_empty() {
            "no version".to_string()
        } else {
            versions.join(", ")
        };
        return ReachError::VersionSkew { serves };
    }
    match doubt {
        Doubt::NotFound { message } => ReachError::NoProbes { message },
        Doubt::OtherKind { api_version, kind } => ReachError::VersionSkew {
            serves: format!("kind {kind:?} of apiVersion {api_version:?}"),
        },
    }
}

/// The `message` of a metav1 Status in `body`, else the body as text.
fn message(body: &[u8]) -> String {
    let status = serde_json::from_slice::<serde_json::Value>(body).ok();
    match status.as_ref().and_then(|s| s.get("message")?.as_str()) {
        Some(message) => cut(message.trim()),
        None => cut(String::from_utf8_lossy(body).trim()),
    }
}

fn unexpected(path: &str, status: u16, body: &[u8]) -> ReachError {
    ReachError::Unexpected {
        path: path.to_string(),
        status,
        body: message(body),
    }
}

/// `text` cut to [`QUOTED_BODY_BYTES`], control characters escaped: a
/// body may come from anything between the API server and podprobe.
fn cut(text: &str) -> String {
    let mut end = text.len().min(QUOTED_BODY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    crate::render::escape(&text[..end])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PATH: &str = "/apis/status.podprobe.io/v1alpha1/namespaces/shop/probes/web-0";
    const GROUP_PATH: &str = "/apis/status.podprobe.io";

    fn status(code: u16, reason: &str, message: &str) -> Vec<u8> {
        podprobe_core::prober::probe_ledger::api_types::failure(code, reason, message)
            .to_string()
            .into_bytes()
    }

    fn object() -> serde_json::Value {
        json!({
            "apiVersion": "status.podprobe.io/v1alpha1",
            "kind": "PodProbes",
            "metadata": {"name": "web-0", "namespace": "shop", "uid": "u1", "resourceVersion": "7"},
            "node": "node-a",
            "outputShown": false,
            "probes": [],
        })
    }

    fn group(versions: &[&str]) -> Vec<u8> {
        let versions: Vec<_> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("status.podprobe.io/{v}"), "version": v}))
            .collect();
        json!({
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": "status.podprobe.io",
            "versions": versions,
        })
        .to_string()
        .into_bytes()
    }

    fn failed(answer: ObjectAnswer) -> ReachError {
        match answer {
            ObjectAnswer::Failed(error) => error,
            other => panic!("not an error: {other:?}"),
        }
    }

    fn unclear(answer: ObjectAnswer) -> Doubt {
        match answer {
            ObjectAnswer::Unclear(doubt) => doubt,
            other => panic!("not unclear: {other:?}"),
        }
    }

    #[test]
    fn ps3_a_podprobes_object_is_served_as_it_came() {
        let body = object().to_string().into_bytes();
        let ObjectAnswer::Served(served) = object_answer(PATH, 200, &body) else {
            panic!("not served");
        };
        assert_eq!(served.probes.metadata.name, "web-0");
        assert_eq!(served.probes.node, "node-a");
        assert!(!served.probes.output_shown);
        // -o json prints what podprobe served, fields this plugin does not
        // know included.
        assert_eq!(served.raw, object());
    }

    #[test]
    fn ps3_the_group_not_served_says_to_check_the_api_service() {
        let doubt = unclear(object_answer(
            PATH,
            404,
            &status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ));
        let error = group_answer(
            GROUP_PATH,
            404,
            &status(404, "NotFound", "404 page not found"),
            doubt,
        );
        assert!(matches!(error, ReachError::NotServed), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the API server does not serve status.podprobe.io: podprobe's APIService \
             v1alpha1.status.podprobe.io is missing (installed with the chart's \
             statusApi.enabled?); check: kubectl get apiservice v1alpha1.status.podprobe.io"
        );
    }

    #[test]
    fn ps3_an_unavailable_api_service_quotes_the_server_and_names_its_conditions() {
        // The aggregator answers in plain text, as http.Error does.
        let error = failed(object_answer(PATH, 503, b"service unavailable\n"));
        assert_eq!(
            error.to_string(),
            "the APIService v1alpha1.status.podprobe.io is not available: service unavailable; \
             check: kubectl get apiservice v1alpha1.status.podprobe.io -o jsonpath='{.status.conditions}'"
        );
        let error = failed(object_answer(
            PATH,
            503,
            &status(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
        ));
        assert!(
            error
                .to_string()
                .contains("not available: the server is currently unable to handle the request;"),
            "{error}"
        );
    }

    #[test]
    fn ps3_another_version_of_the_group_is_a_version_skew() {
        let doubt = unclear(object_answer(
            PATH,
            404,
            &status(404, "NotFound", "not found"),
        ));
        let error = group_answer(GROUP_PATH, 200, &group(&["v1beta1", "v1"]), doubt);
        assert_eq!(
            error.to_string(),
            "podprobe is older (or newer) than this plugin: it serves v1beta1, v1, the plugin reads v1alpha1"
        );

        let mut other = object();
        other["apiVersion"] = json!("status.podprobe.io/v1beta1");
        let doubt = unclear(object_answer(PATH, 200, other.to_string().as_bytes()));
        assert_eq!(
            doubt,
            Doubt::OtherKind {
                api_version: "status.podprobe.io/v1beta1".into(),
                kind: "PodProbes".into()
            }
        );
        let error = group_answer(GROUP_PATH, 200, &group(&["v1beta1"]), doubt.clone());
        assert!(
            error.to_string().contains("it serves v1beta1, the plugin"),
            "{error}"
        );
        // The group still lists v1alpha1 but the object is of another kind.
        let error = group_answer(GROUP_PATH, 200, &group(&["v1alpha1"]), doubt);
        assert!(
            matches!(&error, ReachError::VersionSkew { serves } if serves.contains("status.podprobe.io/v1beta1")),
            "{error:?}"
        );
    }

    #[test]
    fn ps3_a_refusal_quotes_the_server_and_says_what_to_bind() {
        let message = "probes.status.podprobe.io \"web-0\" is forbidden: User \"alice\" cannot get \
             resource \"probes\" in API group \"status.podprobe.io\" in the namespace \"shop\"";
        let error = failed(object_answer(PATH, 403, &status(403, "Forbidden", message)));
        assert_eq!(
            error.to_string(),
            format!(
                "{message}; bind the ClusterRole podprobe-status-reader, or the view ClusterRole, \
                 in the pod's namespace"
            )
        );
        let error = failed(object_answer(
            PATH,
            401,
            &status(401, "Unauthorized", "Unauthorized"),
        ));
        assert!(
            matches!(error, ReachError::Unauthorized { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn ps3_podprobes_own_not_found_is_shown_as_it_said() {
        let message = "podprobe on node node-a runs no probe of pod shop/web-0";
        let doubt = unclear(object_answer(PATH, 404, &status(404, "NotFound", message)));
        let error = group_answer(GROUP_PATH, 200, &group(&["v1alpha1"]), doubt);
        assert!(matches!(error, ReachError::NoProbes { .. }), "{error:?}");
        assert_eq!(error.to_string(), message);
    }

    #[test]
    fn ps3_anything_else_is_quoted_cut_and_escaped() {
        let body = format!("\u{1b}[2J{}", "x".repeat(1000));
        let error = failed(object_answer(PATH, 500, body.as_bytes()));
        let ReachError::Unexpected { status, body, .. } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(*status, 500);
        assert!(body.starts_with("\\u{1b}[2Jxxx"), "{body}");
        assert!(body.len() < QUOTED_BODY_BYTES + 10, "{}", body.len());
        let error = failed(object_answer(PATH, 200, b"<html>"));
        assert!(error.to_string().contains("not JSON"), "{error}");
        let mut broken = object();
        broken["probes"] = json!("none");
        let error = failed(object_answer(PATH, 200, broken.to_string().as_bytes()));
        assert!(
            error
                .to_string()
                .contains("not a status.podprobe.io/v1alpha1 PodProbes"),
            "{error}"
        );
    }
}
