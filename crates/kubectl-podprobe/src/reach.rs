//! Reaching the podprobe of a pod's node (PS3): the podprobe pod on the
//! pod's node (a list by label and `spec.nodeName`), then its
//! `/pods/{namespace}/{name}/probes` through the API server's pods/proxy,
//! with the caller's bearer token in `X-Podprobe-Authorization` (the proxy
//! drops `Authorization`).

use http_body_util::{BodyExt, Limited};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use podprobe_core::probe_ledger::PodReport;
use secrecy::ExposeSecret;

/// The header podprobe reads the caller's token from.
const CALLER_TOKEN_HEADER: &str = "x-podprobe-authorization";

/// Most bytes of an answer read: a report holds at most 16 KiB of output
/// and a few hundred bytes per probe.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Most bytes of a refusal's body quoted in an error.
const QUOTED_BODY_BYTES: usize = 400;

/// Why no report could be had.
#[derive(Debug, thiserror::Error)]
pub enum ReachError {
    #[error("cannot load the kubeconfig: {0}")]
    Config(String),
    #[error(
        "the kubeconfig user has no bearer token (a client certificate or exec plugin cannot be forwarded to podprobe); pass --token, e.g. --token \"$(kubectl create token SERVICE_ACCOUNT)\""
    )]
    NoToken,
    #[error("cannot read the token file {path}: {source}")]
    TokenFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot get pod {namespace}/{name}: {source}")]
    Pod {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("pod {0} is not scheduled to a node yet: no podprobe probes it")]
    NotScheduled(String),
    #[error("cannot list podprobe's pods in namespace {namespace} ({selector}): {source}")]
    List {
        namespace: String,
        selector: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "no running podprobe pod on node {node} (namespace {namespace}, selector {selector}); see --podprobe-namespace and --podprobe-selector"
    )]
    NoPodprobe {
        node: String,
        namespace: String,
        selector: String,
    },
    #[error("cannot reach podprobe pod {podprobe} through the API server: {source}")]
    Proxy {
        podprobe: String,
        #[source]
        source: kube::Error,
    },
    #[error("{podprobe}: {message}")]
    NoProbes { podprobe: String, message: String },
    #[error("refused ({status}) by {by}: {body}")]
    Refused {
        status: u16,
        by: String,
        body: String,
    },
    #[error("podprobe pod {podprobe} answered {status}: {body}")]
    Unexpected {
        podprobe: String,
        status: u16,
        body: String,
    },
    #[error("cannot encode the output: {0}")]
    Encode(String),
}

/// The bearer token of the kubeconfig's user: its `token`, or its
/// `tokenFile` read now.
pub fn kubeconfig_token(config: &kube::Config) -> Result<String, ReachError> {
    let auth = &config.auth_info;
    if let Some(token) = &auth.token {
        return Ok(token.expose_secret().to_string());
    }
    if let Some(path) = &auth.token_file {
        return std::fs::read_to_string(path)
            .map(|t| t.trim().to_string())
            .map_err(|source| ReachError::TokenFile {
                path: path.clone(),
                source,
            });
    }
    Err(ReachError::NoToken)
}

/// Where podprobe runs, and who asks it.
pub struct Podprobe {
    pub client: kube::Client,
    pub namespace: String,
    pub selector: String,
    pub token: String,
}

impl Podprobe {
    /// The report of `pod`'s probes from the podprobe of its node.
    pub async fn report(&self, pod: &Pod) -> Result<PodReport, ReachError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .ok_or_else(|| ReachError::NotScheduled(format!("{namespace}/{name}")))?;
        let (podprobe, port) = self.on_node(node).await?;
        let path = format!(
            "/api/v1/namespaces/{}/pods/{podprobe}:{port}/proxy/pods/{namespace}/{name}/probes",
            self.namespace
        );
        let request = http::Request::get(path)
            .header(CALLER_TOKEN_HEADER, format!("Bearer {}", self.token))
            .body(kube::client::Body::empty())
            .map_err(|e| ReachError::Config(e.to_string()))?;
        let response = self
            .client
            .send(request)
            .await
            .map_err(|source| ReachError::Proxy {
                podprobe: podprobe.clone(),
                source,
            })?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| ReachError::Unexpected {
                podprobe: podprobe.clone(),
                status: status.as_u16(),
                body: format!("cannot read the answer: {e}"),
            })?;
        let text = String::from_utf8_lossy(&body);
        match status.as_u16() {
            200 => serde_json::from_slice(&body).map_err(|e| ReachError::Unexpected {
                podprobe,
                status: 200,
                body: format!("not a probe report: {e}"),
            }),
            404 if !is_api_status(&text) => Err(ReachError::NoProbes {
                podprobe,
                message: text.trim().to_string(),
            }),
            code @ (401 | 403) => Err(ReachError::Refused {
                status: code,
                // The API server refuses the proxy with a Status object;
                // podprobe refuses the caller in plain text.
                by: if is_api_status(&text) {
                    "the API server (pods/proxy of podprobe's pods: the Role podprobe-status-reader grants it)".to_string()
                } else {
                    format!(
                        "podprobe pod {podprobe} (you may not get pod {namespace}/{name}, or your token was not accepted)"
                    )
                },
                body: cut(text.trim()),
            }),
            code => Err(ReachError::Unexpected {
                podprobe,
                status: code,
                body: cut(text.trim()),
            }),
        }
    }

    /// The running podprobe pod on `node` and its port.
    async fn on_node(&self, node: &str) -> Result<(String, i32), ReachError> {
        let params = ListParams::default()
            .labels(&self.selector)
            .fields(&format!("spec.nodeName={node}"));
        let pods = Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&params)
            .await
            .map_err(|source| ReachError::List {
                namespace: self.namespace.clone(),
                selector: self.selector.clone(),
                source,
            })?;
        pods.items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .find_map(|p| Some((p.metadata.name.clone()?, http_port(p)?)))
            .ok_or_else(|| ReachError::NoPodprobe {
                node: node.to_string(),
                namespace: self.namespace.clone(),
                selector: self.selector.clone(),
            })
    }
}

/// The container port named `http` (the chart's), else the first one.
fn http_port(pod: &Pod) -> Option<i32> {
    let ports: Vec<_> = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .collect();
    ports
        .iter()
        .find(|p| p.name.as_deref() == Some("http"))
        .or(ports.first())
        .map(|p| p.container_port)
}

/// Whether `text` is a metav1 Status object, as the API server answers.
fn is_api_status(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text)
        .is_ok_and(|v| v.get("kind").and_then(|k| k.as_str()) == Some("Status"))
}

fn cut(text: &str) -> String {
    let mut end = text.len().min(QUOTED_BODY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}
