//! gRPC health probes against real loopback servers (spec G1-G7): tonic's
//! own health service, small custom health services, a server without the
//! health service, HTTP/2 servers answering as no gRPC server would, and
//! servers that do not speak gRPC at all.

mod support {
    // Shared with the HTTP tests; gRPC uses part of it.
    #[allow(dead_code)]
    pub mod pki;
}

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::time::Duration;

use podprobe::probe::grpc;
use podprobe_core::KUBE_PROBE_VERSION;
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::{Outcome, ProbeResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::body::Body;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::health_check_response::ServingStatus as ProtoStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

const TIMEOUT: Duration = Duration::from_secs(2);
/// For probes that must run into the deadline; short to keep tests fast.
const SHORT_TIMEOUT: Duration = Duration::from_millis(500);

fn user_agent() -> String {
    format!("kube-probe/{KUBE_PROBE_VERSION}")
}

async fn probe(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    grpc::probe(
        host,
        port,
        service,
        timeout,
        &user_agent(),
        &Destinations::default(),
    )
    .await
    .expect("gRPC probes report failures as results, never as errors")
}

fn failure(output: impl Into<String>) -> Outcome {
    Outcome::new(ProbeResult::Failure, output)
}

fn connect_deadline(port: u16, timeout: &str) -> Outcome {
    failure(format!(
        "timeout: failed to connect service \"127.0.0.1:{port}\" within {timeout}: context deadline exceeded"
    ))
}

/// Serves `service` as a gRPC server on `addr` (port 0) until the test ends.
async fn serve<S>(addr: &str, service: S) -> SocketAddr
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let listener = TcpListener::bind(addr)
        .await
        .expect("bind loopback listener");
    serve_on(listener, service)
}

/// Serves `service` as a gRPC server on `listener` until the test ends.
fn serve_on<S>(listener: TcpListener, service: S) -> SocketAddr
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let local = listener.local_addr().expect("listener address");
    tokio::spawn(Server::builder().serve_with_incoming(service, TcpIncoming::from(listener)));
    local
}

/// A listener on the IPv6 loopback. The IPv6 tests fail, never skip, on a
/// machine without one: a skipped test would hide an untested code path.
async fn ipv6_loopback_listener() -> TcpListener {
    TcpListener::bind("[::1]:0").await.unwrap_or_else(|error| {
        panic!(
            "no IPv6 loopback ([::1]) on this machine ({error}): enable it with \
             `sysctl -w net.ipv6.conf.lo.disable_ipv6=0` (hack/install-deps.sh does)"
        )
    })
}

/// tonic's health service: "" is SERVING, plus the given services.
async fn serve_reporter(services: &[(&str, ServingStatus)]) -> u16 {
    let (reporter, service) = tonic_health::server::health_reporter();
    for &(name, status) in services {
        reporter.set_service_status(name, status).await;
    }
    serve("127.0.0.1:0", service).await.port()
}

/// A health service that answers every Check with `status` after `delay`
/// and reports the User-Agent it saw.
#[derive(Clone)]
struct FixedHealth {
    status: ProtoStatus,
    delay: Duration,
    user_agents: mpsc::UnboundedSender<String>,
}

#[tonic::async_trait]
impl Health for FixedHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let user_agent = request
            .metadata()
            .get("user-agent")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        // The test may not be listening for user agents.
        let _ = self.user_agents.send(user_agent);
        tokio::time::sleep(self.delay).await;
        Ok(Response::new(HealthCheckResponse {
            status: self.status as i32,
        }))
    }

    type WatchStream = futures::stream::Empty<Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("not used by probes"))
    }
}

/// Serves a [`FixedHealth`]; returns its port and the user agents it sees.
async fn serve_fixed(
    status: ProtoStatus,
    delay: Duration,
) -> (u16, mpsc::UnboundedReceiver<String>) {
    let (user_agents, seen) = mpsc::unbounded_channel();
    let health = FixedHealth {
        status,
        delay,
        user_agents,
    };
    let addr = serve("127.0.0.1:0", HealthServer::new(health)).await;
    (addr.port(), seen)
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback listener");
    listener.local_addr().expect("listener address").port()
}

/// A TCP server that runs `handle` on every connection it accepts.
async fn serve_raw<F, Fut>(handle: F) -> u16
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback listener");
    let port = listener.local_addr().expect("listener address").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(handle(stream));
        }
    });
    port
}

#[tokio::test]
async fn g5_serving_is_success() {
    let port = serve_reporter(&[]).await;
    let outcome = probe("127.0.0.1", port, "", TIMEOUT).await;
    assert_eq!(
        outcome,
        Outcome::new(ProbeResult::Success, "service healthy")
    );
}

#[tokio::test]
async fn g2_service_name_is_checked() {
    let port = serve_reporter(&[("orders", ServingStatus::Serving)]).await;
    let outcome = probe("127.0.0.1", port, "orders", TIMEOUT).await;
    assert_eq!(
        outcome,
        Outcome::new(ProbeResult::Success, "service healthy")
    );
}

#[tokio::test]
async fn g5_not_serving_is_failure() {
    let port = serve_reporter(&[("orders", ServingStatus::NotServing)]).await;
    let outcome = probe("127.0.0.1", port, "orders", TIMEOUT).await;
    assert_eq!(
        outcome,
        failure(r#"service unhealthy (responded with "NOT_SERVING")"#)
    );
}

#[tokio::test]
async fn g5_unknown_status_is_failure() {
    let port = serve_reporter(&[("orders", ServingStatus::Unknown)]).await;
    let outcome = probe("127.0.0.1", port, "orders", TIMEOUT).await;
    assert_eq!(
        outcome,
        failure(r#"service unhealthy (responded with "UNKNOWN")"#)
    );
}

#[tokio::test]
async fn g5_service_unknown_status_is_failure() {
    let (port, _) = serve_fixed(ProtoStatus::ServiceUnknown, Duration::ZERO).await;
    let outcome = probe("127.0.0.1", port, "", TIMEOUT).await;
    assert_eq!(
        outcome,
        failure(r#"service unhealthy (responded with "SERVICE_UNKNOWN")"#)
    );
}

#[tokio::test]
async fn g5_unregistered_service_is_rpc_error_failure() {
    let port = serve_reporter(&[]).await;
    let outcome = probe("127.0.0.1", port, "nosuchservice", TIMEOUT).await;
    assert_eq!(
        outcome,
        failure(
            "error: health rpc probe failed: rpc error: code = NotFound desc = service not registered"
        )
    );
}

#[tokio::test]
async fn g5_server_without_health_service_is_unimplemented_failure() {
    let unimplemented = tower::service_fn(|_request: http::Request<Body>| async {
        Ok::<_, Infallible>(
            Status::unimplemented("unknown service grpc.health.v1.Health").into_http(),
        )
    });
    let port = serve("127.0.0.1:0", unimplemented).await.port();
    let outcome = probe("127.0.0.1", port, "", TIMEOUT).await;
    assert_eq!(
        outcome,
        failure(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): \
             unknown service grpc.health.v1.Health"
        )
    );
}

#[tokio::test]
async fn g4_slow_check_is_deadline_exceeded_failure() {
    let (port, _) = serve_fixed(ProtoStatus::Serving, Duration::from_secs(30)).await;
    let outcome = probe("127.0.0.1", port, "", SHORT_TIMEOUT).await;
    assert_eq!(
        outcome,
        failure("timeout: health rpc did not complete within 500ms")
    );
}

#[tokio::test]
async fn g5_closed_port_fails_with_connect_deadline() {
    let port = closed_port().await;
    let outcome = probe("127.0.0.1", port, "", SHORT_TIMEOUT).await;
    assert_eq!(outcome, connect_deadline(port, "500ms"));
}

#[tokio::test]
async fn g4_failed_connection_is_retried_within_the_deadline() {
    // grpc-go retries a failed connection (first retry after 1 s) until the
    // deadline. This server drops its first connection and serves the next.
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback listener");
    let port = listener.local_addr().expect("listener address").port();
    let incoming = futures::stream::unfold((listener, true), |(listener, mut first)| async move {
        loop {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            if !std::mem::replace(&mut first, false) {
                return Some((accepted, (listener, false)));
            }
        }
    });
    let (_reporter, service) = tonic_health::server::health_reporter();
    tokio::spawn(Server::builder().serve_with_incoming(service, incoming));
    let outcome = probe("127.0.0.1", port, "", Duration::from_secs(3)).await;
    assert_eq!(
        outcome,
        Outcome::new(ProbeResult::Success, "service healthy")
    );
}

#[tokio::test]
async fn g5_unparsable_target_is_connect_error() {
    let outcome = probe("bad\nhost", 80, "", SHORT_TIMEOUT).await;
    assert_eq!(outcome.result, ProbeResult::Failure);
    assert!(
        outcome
            .output
            .starts_with(r#"error: failed to connect service at "bad\nhost:80": invalid URI"#),
        "{}",
        outcome.output
    );
}

#[tokio::test]
async fn g7_plain_http1_server_is_failure() {
    let port = serve_raw(|mut stream| async move {
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request).await;
        let _ = stream
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await;
    })
    .await;
    let outcome = probe("127.0.0.1", port, "", SHORT_TIMEOUT).await;
    assert_eq!(outcome, connect_deadline(port, "500ms"));
}

#[tokio::test]
async fn g7_server_closing_at_once_is_failure() {
    let port = serve_raw(|stream| async move { drop(stream) }).await;
    let outcome = probe("127.0.0.1", port, "", SHORT_TIMEOUT).await;
    assert_eq!(outcome, connect_deadline(port, "500ms"));
}

#[tokio::test]
async fn g3_user_agent_is_kube_probe() {
    let (port, mut seen) = serve_fixed(ProtoStatus::Serving, Duration::ZERO).await;
    let outcome = probe("127.0.0.1", port, "", TIMEOUT).await;
    assert_eq!(outcome.result, ProbeResult::Success);
    let seen_user_agent = seen.recv().await.expect("the server saw the Check");
    assert!(
        seen_user_agent.starts_with(&format!("{} podprobe/", user_agent())),
        "{seen_user_agent}"
    );
}

#[tokio::test]
async fn g1_ipv6_pod_ip_is_bracketed() {
    let listener = ipv6_loopback_listener().await;
    let (_reporter, service) = tonic_health::server::health_reporter();
    let port = serve_on(listener, service).port();
    let outcome = probe("::1", port, "", TIMEOUT).await;
    assert_eq!(
        outcome,
        Outcome::new(ProbeResult::Success, "service healthy")
    );
}

#[tokio::test]
async fn g5_empty_host_dials_the_local_system() {
    let port = closed_port().await;
    let outcome = probe("", port, "", SHORT_TIMEOUT).await;
    assert_eq!(
        outcome,
        failure(format!(
            "timeout: failed to connect service \":{port}\" within 500ms: context deadline exceeded"
        ))
    );
}

#[tokio::test]
async fn a_denied_pod_address_fails_at_once_without_a_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let denied = Destinations::new(Vec::new(), Destinations::node_local());
    let outcome = grpc::probe("127.0.0.1", port, "", TIMEOUT, &user_agent(), &denied)
        .await
        .expect("never an error");
    assert_eq!(outcome.result, ProbeResult::Failure);
    assert!(
        outcome.output.starts_with(&format!(
            "dial tcp 127.0.0.1:{port}: destination 127.0.0.1 is refused by podprobe"
        )),
        "{}",
        outcome.output
    );
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "the probe connected");
}

/// tonic's health service over TLS presenting a certificate `ca` signed for
/// 127.0.0.1, offering `h2`, requiring a client certificate `client_ca`
/// signed when given; returns the port.
async fn serve_tls_reporter(
    ca: &support::pki::TestCa,
    client_ca: Option<&support::pki::TestCa>,
) -> u16 {
    let (_reporter, service) = tonic_health::server::health_reporter();
    let config = support::pki::server_config(&ca.leaf(&["127.0.0.1"]), client_ca, &[b"h2"]);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, service) = (acceptor.clone(), service.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let hyper_service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let mut service = service.clone();
                        async move { tower::Service::call(&mut service, request.map(Body::new)).await }
                    },
                );
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), hyper_service)
                        .await;
            });
        }
    });
    port
}

fn tls_settings(
    value: serde_json::Value,
) -> podprobe_core::spec::probe_spec::extension::TlsSettings {
    let object = serde_json::json!({"grpc": {"port": 1}, "podprobe": {"tls": value}});
    let kind = podprobe_core::spec::ProbeKind::Readiness;
    let object =
        podprobe_core::spec::probe_spec::decode_probe_object(kind, &object).expect("decodes");
    let container = k8s_openapi::api::core::v1::Container::default();
    match podprobe_core::spec::probe_spec::normalize_object(kind, &object, &container)
        .expect("valid")
        .handler
    {
        podprobe_core::spec::Handler::Grpc(action) => action.tls.expect("tls on"),
        other => panic!("expected grpc, got {other:?}"),
    }
}

async fn probe_tls(
    port: u16,
    tls: &podprobe_core::spec::probe_spec::extension::TlsSettings,
) -> Outcome {
    grpc::probe_with_tls(
        "127.0.0.1",
        port,
        "",
        SHORT_TIMEOUT,
        &user_agent(),
        &Destinations::default(),
        Some(tls),
    )
    .await
    .expect("gRPC probes report failures as results")
}

#[tokio::test]
async fn tls_grpc_verified_against_the_bundle_is_healthy() {
    let ca = support::pki::TestCa::new("probe-ca");
    let port = serve_tls_reporter(&ca, None).await;
    let verified = tls_settings(serde_json::json!({"caBundle": ca.pem()}));
    assert_eq!(
        probe_tls(port, &verified).await,
        Outcome::new(ProbeResult::Success, "service healthy")
    );
    let unverified = tls_settings(serde_json::json!({}));
    assert_eq!(
        probe_tls(port, &unverified).await.result,
        ProbeResult::Success
    );
    // Plain text to a TLS server never gets the server's HTTP/2 preface.
    assert_eq!(
        probe("127.0.0.1", port, "", SHORT_TIMEOUT).await,
        connect_deadline(port, "500ms")
    );
}

/// The handler's TLS of a spec probe `{"grpc": {"port": 1, "mode": mode}}`.
fn mode_tls(mode: &str) -> Option<podprobe_core::spec::probe_spec::extension::TlsSettings> {
    let probe = serde_json::from_value(serde_json::json!({"grpc": {"port": 1, "mode": mode}}))
        .expect("a core/v1 Probe");
    let container = k8s_openapi::api::core::v1::Container::default();
    let kind = podprobe_core::spec::ProbeKind::Readiness;
    match podprobe_core::spec::probe_spec::normalize_accepted(kind, &probe, &container)
        .expect("valid")
        .handler
    {
        podprobe_core::spec::Handler::Grpc(action) => action.tls,
        other => panic!("expected grpc, got {other:?}"),
    }
}

/// G8: `grpc.mode: TLS` (Kubernetes 1.37) is TLS that trusts any server
/// certificate, as the kubelet's `InsecureSkipVerify`.
#[tokio::test]
async fn g8_grpc_mode_tls_probes_a_tls_server_without_verifying_it() {
    let port = serve_tls_reporter(&support::pki::TestCa::new("nobody-trusts-this"), None).await;
    let tls = mode_tls("TLS").expect("mode TLS turns TLS on");
    assert_eq!(
        probe_tls(port, &tls).await,
        Outcome::new(ProbeResult::Success, "service healthy")
    );
    assert_eq!(
        mode_tls("Plaintext"),
        None,
        "Plaintext is the kubelet's plain text"
    );
}

#[tokio::test]
async fn tls_grpc_unknown_authority_is_reported_with_the_deadline() {
    let port = serve_tls_reporter(&support::pki::TestCa::new("server-ca"), None).await;
    let other = support::pki::TestCa::new("probe-ca");
    let tls = tls_settings(serde_json::json!({"caBundle": other.pem()}));
    assert_eq!(
        probe_tls(port, &tls).await,
        failure(format!(
            "timeout: failed to connect service \"127.0.0.1:{port}\" within 500ms: context deadline exceeded: \
             connection error: desc = \"transport: authentication handshake failed: \
             tls: failed to verify certificate: x509: certificate signed by unknown authority\""
        ))
    );
}

/// Serves one `kubernetes.io/tls` Secret, whatever is asked for.
struct OneSecret(k8s_openapi::api::core::v1::Secret);

impl podprobe::api::secret_cache::SecretReader for OneSecret {
    fn get<'a>(
        &'a self,
        _namespace: &'a str,
        _name: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<k8s_openapi::api::core::v1::Secret, podprobe::api::secret_cache::ReadError>,
    > {
        Box::pin(async move { Ok(self.0.clone()) })
    }
}

/// A `kubernetes.io/tls` Secret holding `leaf`.
fn tls_secret(leaf: &support::pki::Leaf) -> k8s_openapi::api::core::v1::Secret {
    use k8s_openapi::ByteString;
    k8s_openapi::api::core::v1::Secret {
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [("tls.crt", &leaf.cert_pem), ("tls.key", &leaf.key_pem)]
                .into_iter()
                .map(|(key, pem)| (key.to_string(), ByteString(pem.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

#[tokio::test]
async fn tls_grpc_presents_the_client_certificate_of_the_named_secret() {
    use podprobe::api::client_certificates::ClientCertificates;
    use podprobe::api::secret_cache::SECRET_TTL;
    use podprobe::probe::Prober;
    use podprobe_core::spec::{ProbeKind, ProbeTarget};
    let ca = support::pki::TestCa::new("server-ca");
    let clients = support::pki::TestCa::new("client-ca");
    let port = serve_tls_reporter(&ca, Some(&clients)).await;
    let object = serde_json::json!({
        "grpc": {"port": port},
        "timeoutSeconds": 1,
        "podprobe": {"tls": {"caBundle": ca.pem(), "clientCertificate": {"secretName": "app-client"}}},
    });
    let kind = ProbeKind::Readiness;
    let object =
        podprobe_core::spec::probe_spec::decode_probe_object(kind, &object).expect("decodes");
    let spec =
        podprobe_core::spec::probe_spec::normalize_object(kind, &object, &Default::default())
            .expect("valid");
    let target = ProbeTarget {
        pod_ip: "127.0.0.1",
        container_id: None,
        identity: None,
        namespace: Some("shop"),
    };
    let with_secret = |leaf: &support::pki::Leaf| {
        Prober::new(KUBE_PROBE_VERSION, None).with_client_certificates(ClientCertificates::new(
            OneSecret(tls_secret(leaf)),
            SECRET_TTL,
        ))
    };
    let granted = with_secret(&clients.leaf(&["probe.client"]));
    let verdict = granted.probe(kind, &spec, target).await;
    assert_eq!(
        (verdict.result, verdict.output.as_str()),
        (ProbeResult::Success, "service healthy")
    );
    let stranger = with_secret(&support::pki::TestCa::new("stranger").leaf(&["probe.client"]));
    let verdict = stranger.probe(kind, &spec, target).await;
    // Refused by the server after TLS 1.3's handshake completed on the
    // client's side; what the message should name then is item 1's (#14).
    assert_eq!(verdict.result, ProbeResult::Failure, "{verdict:?}");
}

/// An HTTP/2 answer: status, headers and body frames (data and trailers).
type H2Answer = (u16, Vec<(&'static str, &'static str)>, Vec<Frame<Bytes>>);

/// An HTTP/2 server that answers every request with `answer()`.
async fn serve_h2(answer: fn() -> H2Answer) -> u16 {
    serve_h2_after(&[], answer).await
}

/// [`serve_h2`], with `first` written to each connection before the
/// server's own preface.
async fn serve_h2_after(first: &'static [u8], answer: fn() -> H2Answer) -> u16 {
    serve_raw(move |mut stream| async move {
        if stream.write_all(first).await.is_err() {
            return;
        }
        let service = hyper::service::service_fn(move |_: hyper::Request<Incoming>| async move {
            let (status, headers, frames) = answer();
            let mut response = hyper::Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(name, value);
            }
            let body = StreamBody::new(futures::stream::iter(
                frames.into_iter().map(Ok::<_, Infallible>),
            ));
            Ok::<_, Infallible>(response.body(body).expect("a valid response"))
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), service)
            .await;
    })
    .await
}

fn trailers(fields: &[(&'static str, &'static str)]) -> Frame<Bytes> {
    let mut map = http::HeaderMap::new();
    for (name, value) in fields {
        map.insert(*name, http::HeaderValue::from_static(value));
    }
    Frame::trailers(map)
}

#[tokio::test]
async fn g5_a_web_server_on_the_port_is_read_as_grpc_go_reads_it() {
    let port = serve_h2(|| {
        (
            404,
            vec![("content-type", "text/html")],
            vec![Frame::data(Bytes::from_static(b"<h1>not here</h1>"))],
        )
    })
    .await;
    let outcome = probe("127.0.0.1", port, "", TIMEOUT).await;
    assert_eq!(
        outcome,
        failure(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): \
             unexpected HTTP status code received from server: 404 (Not Found); \
             transport: received unexpected content-type \"text/html\""
        )
    );
}

#[tokio::test]
async fn g5_answers_without_a_message_or_with_two_fail_as_in_grpc_go() {
    let port = serve_h2(|| {
        (
            200,
            vec![("content-type", "application/grpc")],
            vec![trailers(&[("grpc-status", "0")])],
        )
    })
    .await;
    assert_eq!(
        probe("127.0.0.1", port, "", TIMEOUT).await,
        failure("error: health rpc probe failed: EOF")
    );
    // SERVING twice, in one DATA frame.
    let port = serve_h2(|| {
        (
            200,
            vec![("content-type", "application/grpc")],
            vec![
                Frame::data(Bytes::from_static(&[
                    0, 0, 0, 0, 2, 8, 1, 0, 0, 0, 0, 2, 8, 1,
                ])),
                trailers(&[("grpc-status", "0")]),
            ],
        )
    })
    .await;
    assert_eq!(
        probe("127.0.0.1", port, "", TIMEOUT).await,
        failure(
            "error: health rpc probe failed: rpc error: code = Unknown desc = \
             grpc: client streaming protocol violation: get <nil>, want <EOF>"
        )
    );
    // A message, then the stream's end without trailers.
    let port = serve_h2(|| {
        (
            200,
            vec![("content-type", "application/grpc")],
            vec![Frame::data(Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1]))],
        )
    })
    .await;
    assert_eq!(
        probe("127.0.0.1", port, "", TIMEOUT).await,
        failure(
            "error: health rpc probe failed: rpc error: code = Internal desc = \
             server closed the stream without sending trailers"
        )
    );
    // The message and a failing status: the status wins.
    let port = serve_h2(|| {
        (
            200,
            vec![("content-type", "application/grpc")],
            vec![
                Frame::data(Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1])),
                trailers(&[("grpc-status", "14"), ("grpc-message", "going%20away")]),
            ],
        )
    })
    .await;
    assert_eq!(
        probe("127.0.0.1", port, "", TIMEOUT).await,
        failure("error: health rpc probe failed: rpc error: code = Unavailable desc = going away")
    );
}

/// A healthy answer: SERVING and status 0.
fn serving() -> H2Answer {
    (
        200,
        vec![("content-type", "application/grpc")],
        vec![
            Frame::data(Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1])),
            trailers(&[("grpc-status", "0")]),
        ],
    )
}

#[tokio::test]
async fn g7_a_server_whose_first_frame_is_not_settings_is_never_connected() {
    // The same server answers SERVING once its own preface comes first.
    let port = serve_h2(serving).await;
    assert_eq!(
        probe("127.0.0.1", port, "", TIMEOUT).await,
        Outcome::new(ProbeResult::Success, "service healthy")
    );
    // A PING frame on stream 0 before it: grpc-go's dial never completes,
    // whatever follows.
    const PING: &[u8] = &[0, 0, 8, 0x6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let port = serve_h2_after(PING, serving).await;
    assert_eq!(
        probe("127.0.0.1", port, "", SHORT_TIMEOUT).await,
        connect_deadline(port, "500ms")
    );
}
