//! The probe status of a pod as part of the Kubernetes API (PS2, #38): the
//! aggregated group `status.podprobe.io/v1alpha1` and its read-only
//! resource `probes` ([`podprobe_core::prober::probe_ledger::api_types`]), served over
//! TLS on `--status-api-listen` behind the `APIService`
//! `v1alpha1.status.podprobe.io`.
//!
//! The API server authenticates the user, with whatever the user's
//! kubeconfig holds, and proxies the request here with its front-proxy
//! certificate and the user's name and groups in request headers
//! ([`front_proxy`]): the user's credential never leaves the API server.
//! podprobe then asks the API server (`SubjectAccessReview`s, cached per
//! user, through the review client and its own request limit) whether the
//! user may `get` the `probes` object (RBAC on its own resource), `get`
//! the pod, and `get pods/log` of it: only then does the answer carry the
//! probes' output (the container's output), otherwise results, counts and
//! times only.
//!
//! Every podprobe is an endpoint of the `APIService`'s Service; the one the
//! API server picks answers from its own ledger when the pod is on its
//! node, and otherwise forwards the authorized request to the podprobe of
//! the pod's node (the pod's `status.hostIP`, the same port), over TLS with
//! both ends verified by the status API's own CA ([`tls`]). A podprobe
//! answers a forwarded request only from a peer certificate, and the
//! request-header user only from the front-proxy certificate.
//!
//! Bounds: [`MAX_IN_FLIGHT`] requests at once, [`MAX_IN_FLIGHT_PER_USER`]
//! and a token bucket ([`USER_BURST`], one per [`USER_INTERVAL`]) per user;
//! beyond them 429. Open connections at most `--max-connections`, TLS
//! handshakes within [`HANDSHAKE_TIMEOUT`].

mod certificate;
pub(crate) mod front_proxy;
pub(crate) mod hop_tls;
mod identity;
mod status_api_metrics;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use podprobe_core::prober::probe_ledger::ProbeLedger;
use podprobe_core::prober::probe_ledger::api_types::{self, PodProbes};
use podprobe_core::util::rate_limit::TokenBucket;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use self::front_proxy::RequestHeader;
use self::hop_tls::{Caller, TlsSource};
pub use self::status_api_metrics::StatusApiMetrics;
use super::auth_metrics::AuthOutcome;
use super::delegated_auth::{AccessDecision, Attributes, DelegatedAuth, UserInfo};
use super::{Limits, builder};

/// Requests answered at once, all users together.
pub const MAX_IN_FLIGHT: usize = 32;
/// Requests of one user answered at once.
pub const MAX_IN_FLIGHT_PER_USER: usize = 4;
/// Requests one user may make at once after a pause, then one per
/// [`USER_INTERVAL`].
pub const USER_BURST: u32 = 20;
pub const USER_INTERVAL: Duration = Duration::from_millis(200);
/// Users whose buckets are remembered; beyond, idle ones are forgotten.
const MAX_USERS: usize = 1024;
/// A TLS handshake must finish within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A forwarded request must be answered within this.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a forwarded answer read: a report holds at most 16 KiB of
/// output and a few hundred bytes per probe.
const MAX_FORWARDED_BYTES: usize = 1024 * 1024;
/// How often the API server's front-proxy settings are read again, and how
/// long to wait before retrying a failed first read.
const REQUEST_HEADER_REFRESH: Duration = Duration::from_secs(300);
const REQUEST_HEADER_RETRY: Duration = Duration::from_secs(5);
/// The response header naming the node whose podprobe answered the
/// request it was sent (the pod's node, or the one that forwarded it).
pub const SERVED_BY: &str = "x-podprobe-served-by";
/// The path prefix of a forwarded request (peers only).
const PEER_PREFIX: &str = "/peer/namespaces/";

/// `--status-api-*`.
#[derive(Debug, Clone)]
pub struct StatusApiConfig {
    pub listen: SocketAddr,
    pub tls_dir: PathBuf,
    pub peer_name: String,
}

/// The status API of one podprobe.
pub struct StatusApi {
    config: StatusApiConfig,
    node: String,
    client: kube::Client,
    auth: DelegatedAuth,
    ledger: Arc<ProbeLedger>,
    metrics: StatusApiMetrics,
    limits: Limits,
    requests: Semaphore,
    users: Mutex<HashMap<String, UserLimit>>,
}

struct UserLimit {
    bucket: TokenBucket,
    in_flight: usize,
}

impl std::fmt::Debug for StatusApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusApi")
            .field("config", &self.config)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl StatusApi {
    /// The status API of node `node`'s podprobe: reviews and pod reads
    /// through `client` (the review client), answers from `ledger`.
    pub fn new(
        config: StatusApiConfig,
        node: String,
        client: kube::Client,
        ledger: Arc<ProbeLedger>,
        metrics: StatusApiMetrics,
        limits: Limits,
    ) -> Self {
        StatusApi {
            config,
            node,
            auth: DelegatedAuth::kube(client.clone()),
            client,
            ledger,
            metrics,
            limits,
            requests: Semaphore::new(MAX_IN_FLIGHT),
            users: Mutex::new(HashMap::new()),
        }
    }

    /// Reads the API server's front-proxy settings (retrying until they
    /// can be read), binds the listener and serves until `shutdown`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let this = Arc::new(self);
        tokio::select! {
            () = shutdown => {}
            () = this.clone().serve_loop() => {}
        }
    }

    async fn serve_loop(self: Arc<Self>) {
        let request_header = loop {
            match self.read_request_header().await {
                Ok(request_header) => break request_header,
                Err(error) => {
                    tracing::warn!(%error, "status API: cannot read the API server's front-proxy settings; retrying");
                    tokio::time::sleep(REQUEST_HEADER_RETRY).await;
                }
            }
        };
        let tls = loop {
            match TlsSource::new(
                self.config.tls_dir.clone(),
                &self.config.peer_name,
                request_header.clone(),
            ) {
                Ok(tls) => break Arc::new(tls),
                Err(error) => {
                    tracing::warn!(%error, "status API: cannot load its certificates; retrying");
                    tokio::time::sleep(REQUEST_HEADER_RETRY).await;
                }
            }
        };
        let listener = loop {
            match TcpListener::bind(self.config.listen).await {
                Ok(listener) => break listener,
                Err(error) => {
                    tracing::warn!(addr = %self.config.listen, %error, "status API: cannot listen; retrying");
                    tokio::time::sleep(REQUEST_HEADER_RETRY).await;
                }
            }
        };
        tracing::info!(addr = %self.config.listen, "serving the status API (status.podprobe.io)");
        let refresh = {
            let (this, tls) = (self.clone(), tls.clone());
            async move {
                loop {
                    tokio::time::sleep(REQUEST_HEADER_REFRESH).await;
                    match this.read_request_header().await {
                        Ok(request_header) => {
                            if let Err(error) = tls.set_request_header(request_header) {
                                tracing::warn!(%error, "status API: the API server's new front-proxy settings cannot be used; keeping the previous ones");
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "status API: cannot read the API server's front-proxy settings again; keeping the previous ones")
                        }
                    }
                }
            }
        };
        // The API server keeps its connections open for long, so new
        // connections alone would not make the files be looked at again.
        let reload = {
            let tls = tls.clone();
            async move {
                loop {
                    tokio::time::sleep(hop_tls::RELOAD_INTERVAL).await;
                    tls.current();
                }
            }
        };
        tokio::select! {
            () = refresh => {}
            () = reload => {}
            () = self.accept_loop(listener, tls) => {}
        }
    }

    async fn read_request_header(&self) -> Result<RequestHeader, String> {
        let map =
            Api::<ConfigMap>::namespaced(self.client.clone(), front_proxy::CONFIG_MAP_NAMESPACE)
                .get(front_proxy::CONFIG_MAP_NAME)
                .await
                .map_err(|e| {
                    format!(
                        "cannot get {}/{}: {e}",
                        front_proxy::CONFIG_MAP_NAMESPACE,
                        front_proxy::CONFIG_MAP_NAME
                    )
                })?;
        RequestHeader::from_config_map(&map.data.unwrap_or_default()).map_err(|e| e.to_string())
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener, tls: Arc<TlsSource>) {
        let connections = Arc::new(Semaphore::new(self.limits.max_connections));
        let builder = Arc::new(builder(&self.limits));
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "status API: cannot accept a connection");
                    tokio::time::sleep(super::ACCEPT_ERROR_BACKOFF).await;
                    continue;
                }
            };
            let Ok(permit) = connections.clone().try_acquire_owned() else {
                tracing::debug!(%peer, "status API: closing a new connection: at the connection cap");
                continue;
            };
            let (this, tls, builder) = (self.clone(), tls.clone(), builder.clone());
            tokio::spawn(async move {
                let settings = tls.current();
                let accepted = tokio::time::timeout(
                    HANDSHAKE_TIMEOUT,
                    TlsAcceptor::from(settings.server.clone()).accept(stream),
                )
                .await;
                let stream = match accepted {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "status API: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "status API: TLS handshake timed out");
                        return;
                    }
                };
                let chain = stream.get_ref().1.peer_certificates().unwrap_or_default();
                let Some(caller) = settings.caller(chain) else {
                    return;
                };
                let service = service_fn(|request: Request<Incoming>| {
                    let (this, tls, settings, caller) =
                        (this.clone(), tls.clone(), settings.clone(), caller.clone());
                    async move {
                        let mut response = this.respond(&tls, &settings, &caller, &request).await;
                        if let Ok(node) = header::HeaderValue::from_str(&this.node) {
                            response.headers_mut().insert(SERVED_BY, node);
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                if let Err(error) = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(%error, "status API connection ended with an error");
                }
                drop(permit);
            });
        }
    }

    async fn respond(
        &self,
        tls: &TlsSource,
        settings: &hop_tls::Settings,
        caller: &Caller,
        request: &Request<Incoming>,
    ) -> Response<Full<Bytes>> {
        if request.method() != Method::GET {
            return status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "the status API is read-only: only get is supported",
            );
        }
        let path = request.uri().path();
        match caller {
            Caller::Peer => match peer_request(path, request.uri().query()) {
                Some((namespace, name, output)) => self.local(namespace, name, output),
                None => status(StatusCode::NOT_FOUND, "NotFound", "not found"),
            },
            Caller::FrontProxy => {
                if let Some(discovery) = discovery(path) {
                    return json_response(StatusCode::OK, &discovery);
                }
                let Some((namespace, name)) = probes_request(path) else {
                    return status(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        &format!(
                            "the server could not find the requested resource; get one pod's probes at {}",
                            api_types::path("NAMESPACE", "POD")
                        ),
                    );
                };
                let Some(user) = settings.request_header().user(request.headers()) else {
                    self.metrics.probe_status_auth(AuthOutcome::Unauthenticated);
                    return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
                };
                let Some(_turn) = self.admit(&user.username) else {
                    self.metrics.probe_status_auth(AuthOutcome::Throttled);
                    let mut response = status(
                        StatusCode::TOO_MANY_REQUESTS,
                        "TooManyRequests",
                        "Too many requests, please try again later.",
                    );
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
                    return response;
                };
                self.authorized(tls, &user, namespace, name).await
            }
        }
    }

    /// A user's request, once admitted.
    async fn authorized(
        &self,
        tls: &TlsSource,
        user: &UserInfo,
        namespace: &str,
        name: &str,
    ) -> Response<Full<Bytes>> {
        let (namespace_owned, name_owned) = (namespace.to_string(), name.to_string());
        for attributes in [
            Attributes::GetProbes {
                namespace: namespace_owned.clone(),
                name: name_owned.clone(),
            },
            Attributes::GetPod {
                namespace: namespace_owned.clone(),
                name: name_owned.clone(),
            },
        ] {
            if let Some(refusal) = self.refusal(
                self.auth.decide_for(user, attributes.clone()).await,
                &attributes,
            ) {
                return refusal;
            }
        }
        let log = Attributes::GetPodLog {
            namespace: namespace_owned,
            name: name_owned,
        };
        let output = match self.auth.decide_for(user, log.clone()).await {
            AccessDecision::Allowed { .. } => true,
            AccessDecision::Forbidden { .. } => false,
            other => match self.refusal(other, &log) {
                Some(refusal) => return refusal,
                None => false,
            },
        };
        self.metrics.probe_status_auth(AuthOutcome::Allowed);
        if self.ledger.report(namespace, name).is_some() {
            return self.local(namespace, name, output);
        }
        let pod = match Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
        {
            Ok(Some(pod)) => pod,
            Ok(None) => {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("pods \"{name}\" not found"),
                );
            }
            Err(error) => {
                tracing::warn!(namespace, pod = name, %error, "status API: cannot get the pod to find its node");
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    &format!("cannot get pod {namespace}/{name}: {error}"),
                );
            }
        };
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let host_ip = pod
            .status
            .as_ref()
            .and_then(|s| s.host_ip.as_deref())
            .and_then(|ip| ip.parse::<IpAddr>().ok());
        match host_ip {
            _ if node.is_empty() => status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!(
                    "pod {namespace}/{name} is not scheduled to a node yet: no podprobe probes it"
                ),
            ),
            _ if node == self.node => self.local(namespace, name, output),
            None => status(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                &format!(
                    "pod {namespace}/{name} is on node {node}, whose address is not known yet"
                ),
            ),
            Some(ip) => {
                self.metrics.status_api_forwarded();
                self.forward(
                    tls,
                    SocketAddr::new(ip, self.config.listen.port()),
                    &node,
                    namespace,
                    name,
                    output,
                )
                .await
            }
        }
    }

    /// The answer to a request `decision` did not allow.
    fn refusal(
        &self,
        decision: AccessDecision,
        attributes: &Attributes,
    ) -> Option<Response<Full<Bytes>>> {
        let (outcome, response) = match decision {
            AccessDecision::Allowed { .. } => return None,
            AccessDecision::Forbidden { user, .. } => (
                AuthOutcome::Forbidden,
                status(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    &format!("user \"{user}\" cannot {attributes}"),
                ),
            ),
            AccessDecision::Throttled => (
                AuthOutcome::Throttled,
                status(
                    StatusCode::TOO_MANY_REQUESTS,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                ),
            ),
            AccessDecision::Unauthenticated { .. } | AccessDecision::Failed { .. } => (
                AuthOutcome::Failed,
                status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "the access review failed",
                ),
            ),
        };
        self.metrics.probe_status_auth(outcome);
        Some(response)
    }

    /// The answer from this node's ledger.
    fn local(&self, namespace: &str, name: &str, output: bool) -> Response<Full<Bytes>> {
        match self.ledger.report(namespace, name) {
            Some(report) => {
                json_response(StatusCode::OK, &PodProbes::new(report, &self.node, output))
            }
            None => status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!(
                    "podprobe on node {} has run no probe of pod {namespace}/{name}: it has no probe podprobe runs, or its probes have not run yet",
                    self.node
                ),
            ),
        }
    }

    /// The answer of the podprobe at `addr` (node `node`), asked as a peer
    /// with the certificates in force now (not those of the API server's
    /// connection, which may be older than a rotation).
    async fn forward(
        &self,
        tls: &TlsSource,
        addr: SocketAddr,
        node: &str,
        namespace: &str,
        name: &str,
        output: bool,
    ) -> Response<Full<Bytes>> {
        let settings = tls.current();
        let asked = tokio::time::timeout(FORWARD_TIMEOUT, async {
            let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let stream = TlsConnector::from(settings.peer_client.clone())
                .connect(tls.peer_name().clone(), tcp)
                .await
                .map_err(|e| e.to_string())?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            let request = Request::get(format!(
                "{PEER_PREFIX}{namespace}/probes/{name}?output={output}"
            ))
            .header(header::HOST, self.config.peer_name.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())?;
            let code = response.status();
            let body = Limited::new(response.into_body(), MAX_FORWARDED_BYTES)
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((code, body))
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {FORWARD_TIMEOUT:?}")));
        match asked {
            Ok((code, body)) => {
                let mut response = Response::new(Full::new(body));
                *response.status_mut() = code;
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                response
            }
            Err(error) => {
                tracing::warn!(namespace, pod = name, node, %addr, error, "status API: cannot ask the podprobe of the pod's node");
                status(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailable",
                    &format!(
                        "cannot reach podprobe on node {node} ({addr}), which probes pod {namespace}/{name}: {error}"
                    ),
                )
            }
        }
    }

    /// A turn for `user`'s request, or `None` when it is over its bounds.
    fn admit(&self, user: &str) -> Option<Turn<'_>> {
        let global = self.requests.try_acquire().ok()?;
        let now = Instant::now();
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if users.len() >= MAX_USERS && !users.contains_key(user) {
            users.retain(|_, limit| limit.in_flight > 0);
        }
        let limit = users.entry(user.to_string()).or_insert_with(|| UserLimit {
            bucket: TokenBucket::new(USER_BURST, USER_INTERVAL, now),
            in_flight: 0,
        });
        if limit.in_flight >= MAX_IN_FLIGHT_PER_USER || !limit.bucket.try_take(now) {
            return None;
        }
        limit.in_flight += 1;
        Some(Turn {
            api: self,
            user: user.to_string(),
            _global: global,
        })
    }
}

/// A request's place in the bounds, given back when dropped.
struct Turn<'a> {
    api: &'a StatusApi,
    user: String,
    _global: tokio::sync::SemaphorePermit<'a>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut users = self.api.users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(limit) = users.get_mut(&self.user) {
            limit.in_flight = limit.in_flight.saturating_sub(1);
        }
    }
}

/// `namespace` and `name` of `/apis/status.podprobe.io/v1alpha1/
/// namespaces/{namespace}/probes/{name}`, both valid names.
fn probes_request(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix(&format!("/apis/{}/namespaces/", api_types::API_VERSION))?;
    let (namespace, rest) = rest.split_once('/')?;
    let name = rest.strip_prefix(&format!("{}/", api_types::RESOURCE))?;
    valid(namespace, name)
}

/// `namespace`, `name` and whether to show output of a peer's
/// `/peer/namespaces/{namespace}/probes/{name}?output=true|false`.
fn peer_request<'a>(path: &'a str, query: Option<&str>) -> Option<(&'a str, &'a str, bool)> {
    let rest = path.strip_prefix(PEER_PREFIX)?;
    let (namespace, name) = rest.split_once("/probes/")?;
    let (namespace, name) = valid(namespace, name)?;
    let output = match query? {
        "output=true" => true,
        "output=false" => false,
        _ => return None,
    };
    Some((namespace, name, output))
}

fn valid<'a>(namespace: &'a str, name: &'a str) -> Option<(&'a str, &'a str)> {
    use podprobe_core::spec::probe_spec::{is_dns_label, is_dns_subdomain};
    (is_dns_label(namespace) && is_dns_subdomain(name)).then_some((namespace, name))
}

/// The discovery documents: the group list, the group, the resource list.
fn discovery(path: &str) -> Option<serde_json::Value> {
    let version = json!({"groupVersion": api_types::API_VERSION, "version": api_types::VERSION});
    let group = json!({
        "name": api_types::GROUP,
        "versions": [version.clone()],
        "preferredVersion": version,
    });
    match path.trim_end_matches('/') {
        "/apis" => Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]})),
        p if p == format!("/apis/{}", api_types::GROUP) => {
            let mut group = group;
            group["kind"] = json!("APIGroup");
            group["apiVersion"] = json!("v1");
            Some(group)
        }
        p if p == format!("/apis/{}", api_types::API_VERSION) => Some(json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": api_types::API_VERSION,
            "resources": [{
                "name": api_types::RESOURCE,
                "singularName": "",
                "namespaced": true,
                "kind": api_types::KIND,
                "verbs": ["get"],
            }],
        })),
        _ => None,
    }
}

fn json_response(code: StatusCode, body: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let body =
        serde_json::to_vec(body).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes());
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A `meta/v1` `Status`, as the API server answers errors (kubectl shows
/// its message).
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    json_response(code, &api_types::failure(code.as_u16(), reason, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps2_only_well_formed_paths_name_a_pod() {
        assert_eq!(
            probes_request("/apis/status.podprobe.io/v1alpha1/namespaces/ns/probes/web-0"),
            Some(("ns", "web-0"))
        );
        for bad in [
            "/apis/status.podprobe.io/v1alpha1/namespaces/ns/probes",
            "/apis/status.podprobe.io/v1alpha1/namespaces/ns/probes/",
            "/apis/status.podprobe.io/v1alpha1/namespaces/NS/probes/web",
            "/apis/status.podprobe.io/v1alpha1/namespaces/a.b/probes/web",
            "/apis/status.podprobe.io/v1alpha1/namespaces/ns/probes/web/extra",
            "/apis/status.podprobe.io/v1alpha1/namespaces/ns/pods/web",
            "/pods/ns/web/probes",
        ] {
            assert_eq!(probes_request(bad), None, "{bad}");
        }
        assert_eq!(
            peer_request("/peer/namespaces/ns/probes/web", Some("output=false")),
            Some(("ns", "web", false))
        );
        assert_eq!(peer_request("/peer/namespaces/ns/probes/web", None), None);
        assert_eq!(
            peer_request("/peer/namespaces/ns/probes/web", Some("output=yes")),
            None
        );
    }

    #[test]
    fn discovery_names_the_one_resource() {
        let list = discovery("/apis/status.podprobe.io/v1alpha1").expect("resource list");
        assert_eq!(list["resources"][0]["name"], "probes");
        assert_eq!(list["resources"][0]["verbs"], json!(["get"]));
        assert_eq!(
            discovery("/apis/status.podprobe.io").expect("group")["preferredVersion"]["version"],
            "v1alpha1"
        );
        assert_eq!(
            discovery("/apis").expect("groups")["groups"][0]["name"],
            "status.podprobe.io"
        );
        assert_eq!(discovery("/api"), None);
    }
}
