//! `/healthz`, `/readyz` and `/metrics` served on 127.0.0.1:0 and read by a
//! real HTTP client, and the server's hardening: idle-connection floods,
//! slow and oversized headers, request bodies, and `/metrics`' delegated
//! authentication and authorisation, with scripted reviews and against the
//! real API server of the local cluster (`hack/local-cluster.sh`, which must
//! be up for `metrics_auth_against_the_real_api_server`, as for the other
//! cluster tests).

#[path = "support/cluster.rs"]
mod cluster;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use podprobe::apiclient::WatchActivity;
use podprobe::health::Reachability;
use podprobe::metrics::{self, Metrics};
use podprobe::server::delegated_auth::{
    Authentication, Authorization, ReviewError, Reviewer, UserInfo,
};
use podprobe::server::{DelegatedAuth, Health, Limits, MetricsAccess, Server, ServerConfig};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The DaemonSet's liveness probe gives `/healthz` this long to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Slack for timing assertions on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(1500);

struct Running {
    addr: SocketAddr,
    plain_metrics_addr: Option<SocketAddr>,
    metrics: Metrics,
    health: Health,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// A server with open metrics and default limits.
async fn start() -> Running {
    start_with(|_| {}).await
}

/// A server on 127.0.0.1:0 with open metrics and default limits, as
/// `configure` changes them.
async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> Running {
    let metrics = Metrics::new();
    let health = Health::new(Duration::from_secs(60), WatchActivity::new());
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), MetricsAccess::Open);
    configure(&mut config);
    let server = Server::bind(config, metrics.clone(), health.clone())
        .await
        .expect("bind 127.0.0.1:0");
    let addr = server.local_addr().unwrap();
    let plain_metrics_addr = server.plain_metrics_addr().map(Result::unwrap);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        plain_metrics_addr,
        metrics,
        health,
        stop,
        task,
    }
}

struct Reply {
    status: StatusCode,
    content_type: String,
    www_authenticate: String,
    body: String,
}

async fn request(addr: SocketAddr, method: Method, path: &str) -> Reply {
    request_with(addr, method, path, &[]).await
}

/// A request with extra `headers` on a connection of its own.
async fn request_with(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    try_request_with(addr, method, path, headers)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// [`request_with`], or what went wrong.
async fn try_request_with(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Reply, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP/1.1 handshake: {e}"))?;
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("no response: {e}"))?;
    Ok(read(response).await)
}

async fn read(response: http::Response<hyper::body::Incoming>) -> Reply {
    let status = response.status();
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v: &http::HeaderValue| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let content_type = header(http::header::CONTENT_TYPE);
    let www_authenticate = header(http::header::WWW_AUTHENTICATE);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        content_type,
        www_authenticate,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, Method::GET, path).await
}

/// `GET path` with `Authorization: Bearer token`.
async fn get_with_token(addr: SocketAddr, path: &str, token: &str) -> Reply {
    let authorization = format!("Bearer {token}");
    request_with(
        addr,
        Method::GET,
        path,
        &[("authorization", &authorization)],
    )
    .await
}

/// Reads what the server sends until it closes the connection (EOF or
/// reset) or `within` passes: what it read, and after how long it closed
/// (`None`: still open).
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> (String, Option<Duration>) {
    let start = Instant::now();
    let mut received = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (
        String::from_utf8_lossy(&received).into_owned(),
        closed.then(|| start.elapsed()),
    )
}

/// One raw HTTP/1.1 request on a fresh connection, read until the server
/// closes it; the response's text.
async fn raw_request(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    // The server may close before reading all of an oversized request.
    let _ = stream.write_all(request).await;
    let (response, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(closed.is_some(), "connection still open; got {response:?}");
    response
}

#[tokio::test]
async fn healthz_is_ok_while_the_loop_beats() {
    let server = start().await;
    server.health.beat();
    let reply = get(server.addr, "/healthz").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "ok\n");
}

#[tokio::test]
async fn readyz_follows_pod_sync_api_and_cri_state() {
    let server = start().await;

    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.body,
        "pod watch has not synced; API server unreachable: not checked yet; \
         container runtime unreachable: not checked yet\n"
    );

    server.health.set_pods_synced(true);
    server.health.set_api(Reachability::Reachable);
    server.health.set_cri(Reachability::Reachable);
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "ok\n")
    );

    server
        .health
        .set_cri(Reachability::Unreachable("connection refused".into()));
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.body,
        "container runtime unreachable: connection refused\n"
    );

    server.health.set_cri(Reachability::NotNeeded);
    server.health.set_pods_synced(false);
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.body, "pod watch has not synced\n");
}

#[tokio::test]
async fn metrics_serves_openmetrics_text() {
    let server = start().await;
    server.metrics.set_workers(4);
    let reply = get(server.addr, "/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type, metrics::CONTENT_TYPE);
    assert!(
        reply.body.lines().any(|l| l == "podprobe_workers 4"),
        "{}",
        reply.body
    );
    assert!(reply.body.ends_with("# EOF\n"));
}

#[tokio::test]
async fn metrics_probes_serves_the_prober_metrics_only() {
    let server = start().await;
    let reply = get(server.addr, "/metrics/probes").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type, metrics::CONTENT_TYPE);
    assert_eq!(reply.body, server.metrics.encode_probes());
}

#[tokio::test]
async fn metrics_over_h2c() {
    let server = start().await;
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2c handshake");
    tokio::spawn(connection);
    let request = Request::builder()
        .uri(format!("http://{}/metrics", server.addr))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let reply = read(sender.send_request(request).await.unwrap()).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.ends_with("# EOF\n"));
}

#[tokio::test]
async fn unknown_path_is_404_and_wrong_method_405() {
    let server = start().await;
    assert_eq!(get(server.addr, "/").await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        get(server.addr, "/healthz/extra").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        request(server.addr, Method::POST, "/metrics").await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    let head = request(server.addr, Method::HEAD, "/healthz").await;
    assert_eq!((head.status, head.body.as_str()), (StatusCode::OK, ""));
}

#[tokio::test]
async fn shutdown_finishes_open_connections_and_stops_accepting() {
    let server = start().await;
    // An idle keep-alive connection must not hold the shutdown up.
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let client_connection = tokio::spawn(connection);
    let request = Request::get("/healthz")
        .header("host", "x")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(
        sender.send_request(request).await.unwrap().status(),
        StatusCode::OK
    );

    server.stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(2), server.task)
        .await
        .expect("server stops within 2 s")
        .unwrap();
    // The server closed the idle connection gracefully.
    tokio::time::timeout(Duration::from_secs(2), client_connection)
        .await
        .expect("client connection closed")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(server.addr).await.is_err());
}

// ---------------------------------------------------------------- limits

/// The kubelet's HTTP probe of `/healthz`: the request written as soon as
/// the connection is up (`Connection: close`, as the kubelet disables
/// keep-alive); the response, or why none.
async fn probe(addr: SocketAddr) -> String {
    let mut stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(e) => return format!("connect: {e}"),
    };
    let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-probe/1.35\r\nConnection: close\r\n\r\n";
    if let Err(e) = stream.write_all(request).await {
        return format!("write: {e}");
    }
    let mut response = Vec::new();
    match stream.read_to_end(&mut response).await {
        Ok(_) => String::from_utf8_lossy(&response).into_owned(),
        Err(e) => format!("read: {e}"),
    }
}

/// 500 idle connections, and more opened all along as fast as a thread
/// can: with the default limits (64 connections) the kubelet's liveness
/// probes of `/healthz` keep passing, each answered within the probe
/// timeout and at once, not after the idle timeout reaped a flooder.
///
/// The kubelet restarts a container after `failureThreshold` (3)
/// consecutive failures. A probe whose request is not even written while
/// the server accepts 64 flood connections is indistinguishable from a
/// flooder and may be evicted (seen only with several floods starving two
/// cores), so one failure in ten is tolerated, far from three in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connection_flood_leaves_healthz_answering() {
    let server = start().await;
    let limits = Limits::default();
    assert!(
        limits.max_connections < 500,
        "the flood must exceed the cap"
    );
    let mut idle = Vec::new();
    for _ in 0..500 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    // More, all along, from a thread of its own, as another process would.
    let flooding = Arc::new(AtomicBool::new(true));
    let flood = std::thread::spawn({
        let (addr, flooding) = (server.addr, flooding.clone());
        move || {
            let mut more = Vec::new();
            while flooding.load(Ordering::SeqCst) {
                if let Ok(stream) = std::net::TcpStream::connect(addr) {
                    more.push(stream);
                }
                if more.len() >= 300 {
                    more.clear();
                }
            }
        }
    });
    let mut failures = Vec::new();
    for round in 0..10 {
        let started = Instant::now();
        let reply = tokio::time::timeout(PROBE_TIMEOUT, probe(server.addr))
            .await
            .unwrap_or_else(|_| format!("no answer within {PROBE_TIMEOUT:?}"));
        if reply.starts_with("HTTP/1.1 200 OK") {
            assert!(
                started.elapsed() < limits.idle_timeout / 2,
                "probe {round} waited {:?} (for the idle timeout to reap a flooder?)",
                started.elapsed()
            );
        } else {
            failures.push((round, reply));
        }
        assert!(failures.len() <= 1, "probes failed: {failures:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    flooding.store(false, Ordering::SeqCst);
    flood.join().unwrap();
}

/// Connections that send nothing, that stall inside the HTTP/2 preface
/// (hyper-util's protocol detection has no timeout of its own), or that went
/// quiet after a keep-alive request are closed once idle for the idle
/// timeout, and not before.
#[tokio::test]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    let idle_timeout = Duration::from_secs(1);
    let server = start_with(|config| {
        config.limits.idle_timeout = idle_timeout;
        // Not the header timeout doing it.
        config.limits.header_read_timeout = Duration::from_secs(60);
    })
    .await;
    let mut connections = Vec::new();
    for _ in 0..10 {
        connections.push(("silent", TcpStream::connect(server.addr).await.unwrap()));
    }
    let mut preface = TcpStream::connect(server.addr).await.unwrap();
    preface.write_all(b"PRI * HT").await.unwrap();
    connections.push(("stalled in the h2 preface", preface));
    let mut kept_alive = TcpStream::connect(server.addr).await.unwrap();
    kept_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = kept_alive.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    connections.push(("idle after a request", kept_alive));

    let opened = Instant::now();
    for (what, stream) in &mut connections {
        let (_, closed) = read_until_closed(stream, idle_timeout + SLACK).await;
        let closed_at = opened.elapsed();
        assert!(closed.is_some(), "{what}: still open after {closed_at:?}");
        assert!(
            closed_at >= idle_timeout - Duration::from_millis(100),
            "{what}: closed after {closed_at:?}, before the idle timeout"
        );
    }
    assert_eq!(get(server.addr, "/healthz").await.status, StatusCode::OK);
}

/// At the cap a new connection evicts the one idle the longest; the others
/// stay open.
#[tokio::test]
async fn connections_over_the_cap_evict_the_longest_idle() {
    let server = start_with(|config| {
        config.limits.max_connections = 3;
        config.limits.idle_timeout = Duration::from_secs(60);
    })
    .await;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(TcpStream::connect(server.addr).await.unwrap());
        // Accepted in this order.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut oldest = open.remove(0);
    let _newest = TcpStream::connect(server.addr).await.unwrap();
    let (_, closed) = read_until_closed(&mut oldest, SLACK).await;
    assert!(
        closed.is_some(),
        "the longest idle connection is still open"
    );
    for (i, stream) in open.iter_mut().enumerate() {
        let (_, closed) = read_until_closed(stream, Duration::from_millis(300)).await;
        assert_eq!(closed, None, "connection {} was closed too", i + 1);
    }
    assert_eq!(get(server.addr, "/healthz").await.status, StatusCode::OK);
}

/// A [`Reviewer`] whose token reviews wait for a permit of `gate`: requests
/// to `/metrics` stay in flight until the test releases them.
struct Gated {
    gate: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
}

impl Reviewer for Gated {
    fn review_token<'a>(
        &'a self,
        _token: &'a str,
    ) -> BoxFuture<'a, Result<Authentication, ReviewError>> {
        Box::pin(async move {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let _permit = self.gate.acquire().await;
            Ok(Authentication::Authenticated(UserInfo {
                username: "scraper".into(),
                ..UserInfo::default()
            }))
        })
    }

    fn review_access<'a>(
        &'a self,
        _user: &'a UserInfo,
        _path: &'a str,
        _verb: &'a str,
    ) -> BoxFuture<'a, Result<Authorization, ReviewError>> {
        Box::pin(async { Ok(Authorization::Allowed) })
    }
}

/// Connections answering a request are never evicted; when every one is,
/// a new connection is closed at once, and served again once they finish.
#[tokio::test]
async fn busy_connections_are_kept_and_new_ones_closed_when_all_are_busy() {
    let gate = Arc::new(Semaphore::new(0));
    let waiting = Arc::new(AtomicUsize::new(0));
    let auth = DelegatedAuth::new(Gated {
        gate: gate.clone(),
        waiting: waiting.clone(),
    });
    let server = start_with(|config| {
        config.limits.max_connections = 2;
        config.metrics_access = MetricsAccess::Delegated(auth);
    })
    .await;
    let busy: Vec<_> = ["one", "two"]
        .into_iter()
        .map(|token| tokio::spawn(get_with_token(server.addr, "/metrics", token)))
        .collect();
    let deadline = Instant::now() + SLACK;
    while waiting.load(Ordering::SeqCst) < 2 {
        assert!(
            Instant::now() < deadline,
            "the requests never reached the review"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut refused = TcpStream::connect(server.addr).await.unwrap();
    let _ = refused
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let (response, closed) = read_until_closed(&mut refused, SLACK).await;
    assert!(closed.is_some(), "a connection over the cap stayed open");
    assert_eq!(response, "", "a connection over the cap was answered");

    gate.add_permits(2);
    for request in busy {
        assert_eq!(request.await.unwrap().status, StatusCode::OK);
    }
    assert_eq!(get(server.addr, "/healthz").await.status, StatusCode::OK);
}

/// Headers sent a byte at a time (slowloris) are cut off by the header read
/// timeout, long before the idle timeout.
#[tokio::test]
async fn slow_headers_are_cut_off_by_the_header_read_timeout() {
    let header_read_timeout = Duration::from_secs(1);
    let server = start_with(|config| {
        config.limits.header_read_timeout = header_read_timeout;
        config.limits.idle_timeout = Duration::from_secs(60);
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let drip = async {
        for byte in b"X-Slow: ".iter().chain([b'a'; 100].iter()).cycle() {
            if stream.write_all(&[*byte]).await.is_err() {
                return started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        unreachable!("cycle() never ends")
    };
    let cut_off = tokio::time::timeout(header_read_timeout + Duration::from_secs(10), drip)
        .await
        .expect("headers still accepted 10 s after the header read timeout");
    assert!(
        cut_off >= header_read_timeout,
        "cut off after {cut_off:?}, before the header read timeout"
    );
    assert!(
        cut_off <= header_read_timeout + SLACK + Duration::from_millis(500),
        "cut off only after {cut_off:?}"
    );
    let (response, _) = read_until_closed(&mut stream, Duration::from_millis(100)).await;
    assert!(!response.starts_with("HTTP/1.1 200"), "{response}");
}

/// Request headers beyond the size or count limit are refused (431); a
/// request with a service account token's worth of headers is not.
#[tokio::test]
async fn oversized_request_headers_are_refused() {
    let server = start().await;
    let limit = Limits::default().max_header_bytes;

    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        "a".repeat(limit * 4)
    );
    let response = raw_request(server.addr, big.as_bytes()).await;
    assert!(
        response.starts_with("HTTP/1.1 431") || response.is_empty(),
        "{response}"
    );

    let many: String = (0..80).map(|i| format!("X-Many-{i}: a\r\n")).collect();
    let many = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{many}\r\n");
    let response = raw_request(server.addr, many.as_bytes()).await;
    assert!(
        response.starts_with("HTTP/1.1 431") || response.is_empty(),
        "{response}"
    );

    let token = "t".repeat(2048);
    let reply = get_with_token(server.addr, "/healthz", &token).await;
    assert_eq!(reply.status, StatusCode::OK);
}

/// A request body is refused (413) without being read.
#[tokio::test]
async fn a_request_body_is_refused() {
    let server = start().await;
    let response = raw_request(
        server.addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");

    let chunked = raw_request(
        server.addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
}

// ------------------------------------------------------------ metrics auth

/// Token `scraper` may read the metrics, `stranger` is a user RBAC does not
/// allow to, anything else is not a token the API server accepts.
struct Scripted;

impl Reviewer for Scripted {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Authentication, ReviewError>> {
        Box::pin(async move {
            Ok(match token {
                "scraper" | "stranger" => Authentication::Authenticated(UserInfo {
                    username: format!("system:serviceaccount:monitoring:{token}"),
                    ..UserInfo::default()
                }),
                _ => Authentication::Unauthenticated("invalid bearer token".into()),
            })
        })
    }

    fn review_access<'a>(
        &'a self,
        user: &'a UserInfo,
        _path: &'a str,
        _verb: &'a str,
    ) -> BoxFuture<'a, Result<Authorization, ReviewError>> {
        Box::pin(async move {
            Ok(if user.username.ends_with(":scraper") {
                Authorization::Allowed
            } else {
                Authorization::Denied(String::new())
            })
        })
    }
}

#[tokio::test]
async fn metrics_need_a_token_the_api_server_authorises() {
    let server = start_with(|config| {
        config.metrics_access = MetricsAccess::Delegated(DelegatedAuth::new(Scripted));
    })
    .await;
    server.health.set_pods_synced(true);
    server.health.set_api(Reachability::Reachable);
    server.health.set_cri(Reachability::Reachable);
    for path in ["/metrics", "/metrics/probes"] {
        let reply = get(server.addr, path).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(reply.www_authenticate, "Bearer");
        assert_eq!(reply.body, "Unauthorized\n");
        assert!(!reply.body.contains("prober_"));
        assert_eq!(
            request(server.addr, Method::HEAD, path).await.status,
            StatusCode::UNAUTHORIZED
        );
        let basic = request_with(
            server.addr,
            Method::GET,
            path,
            &[("authorization", "Basic c2NyYXBlcjp4")],
        )
        .await;
        assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
        let forged = get_with_token(server.addr, path, "forged").await;
        assert_eq!(forged.status, StatusCode::UNAUTHORIZED);

        let forbidden = get_with_token(server.addr, path, "stranger").await;
        assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
        assert_eq!(
            forbidden.body,
            format!(
                "Forbidden (user=system:serviceaccount:monitoring:stranger, verb=get, path={path})\n"
            )
        );

        let allowed = get_with_token(server.addr, path, "scraper").await;
        assert_eq!(allowed.status, StatusCode::OK, "{path}");
        assert!(allowed.body.ends_with("# EOF\n"));
    }
    // The DaemonSet's own probes need no token.
    assert_eq!(get(server.addr, "/healthz").await.status, StatusCode::OK);
    assert_eq!(get(server.addr, "/readyz").await.status, StatusCode::OK);
}

#[tokio::test]
async fn the_plain_metrics_listener_serves_metrics_without_a_token() {
    let server = start_with(|config| {
        config.metrics_access = MetricsAccess::Delegated(DelegatedAuth::new(Scripted));
        config.plain_metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let plain = server.plain_metrics_addr.expect("plain metrics bound");
    assert_ne!(plain, server.addr);
    let reply = get(plain, "/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.ends_with("# EOF\n"));
    assert_eq!(get(plain, "/metrics/probes").await.status, StatusCode::OK);
    assert_eq!(get(plain, "/healthz").await.status, StatusCode::NOT_FOUND);
    assert_eq!(get(plain, "/readyz").await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        get(server.addr, "/metrics").await.status,
        StatusCode::UNAUTHORIZED
    );
}

// ------------------------------------------------- against the API server

/// The ClusterRoles of `deploy/base/rbac.yaml`, by name.
fn shipped_cluster_role(name: &str) -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/rbac.yaml");
    let text = std::fs::read_to_string(path).expect("read deploy/base/rbac.yaml");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("rbac.yaml parses"))
        .find(|doc| doc["kind"] == "ClusterRole" && doc["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("deploy/base/rbac.yaml has no ClusterRole {name}"))
}

/// Cluster-scoped objects a test created, deleted when dropped.
struct ClusterScoped(Vec<(&'static str, String)>);

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = cluster::cluster().kubectl(&["delete", kind, name, "--wait=false"]);
        }
    }
}

/// `/metrics` guarded by TokenReviews and SubjectAccessReviews of the local
/// cluster's real API server, sent with exactly the rights
/// `deploy/base/rbac.yaml` gives podprobe: no token or a forged one is 401,
/// the token of a service account bound to the shipped
/// `podprobe-metrics-reader` ClusterRole is 200, another account's is 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_auth_against_the_real_api_server() {
    let cluster = cluster::cluster();
    let id = cluster::unique_id();
    let ns = cluster::Namespace::create(&format!("podprobe-metrics-auth-{id}"));
    for account in ["scraper", "stranger", "reviewer"] {
        ns.kubectl(&["create", "serviceaccount", account]);
    }
    let account = |name: &str| format!("system:serviceaccount:{}:{name}", ns.name);

    // The scraper role as shipped (applying it again changes nothing), and
    // podprobe's own role as shipped, under a name of this test's.
    cluster
        .apply(&shipped_cluster_role("podprobe-metrics-reader"))
        .unwrap_or_else(|e| panic!("{e}"));
    let reviewer_role = format!("podprobe-metrics-auth-{id}");
    let mut podprobe_role = shipped_cluster_role("podprobe");
    podprobe_role["metadata"] = serde_json::json!({"name": reviewer_role});
    let mut created = ClusterScoped(vec![("clusterrole", reviewer_role.clone())]);
    cluster
        .apply(&podprobe_role)
        .unwrap_or_else(|e| panic!("{e}"));
    for (binding, role, subject) in [
        ("scraper", "podprobe-metrics-reader", "scraper"),
        ("reviewer", reviewer_role.as_str(), "reviewer"),
    ] {
        let name = format!("podprobe-metrics-auth-{id}-{binding}");
        cluster
            .kubectl(&[
                "create",
                "clusterrolebinding",
                &name,
                &format!("--clusterrole={role}"),
                &format!("--serviceaccount={}:{subject}", ns.name),
            ])
            .unwrap_or_else(|e| panic!("{e}"));
        created.0.push(("clusterrolebinding", name));
    }
    // RBAC reaches the authorizer through an informer: wait for it, so no
    // stale denial is cached.
    for (who, verb, what) in [
        ("scraper", "get", "/metrics"),
        ("scraper", "get", "/metrics/probes"),
        ("reviewer", "create", "tokenreviews.authentication.k8s.io"),
        (
            "reviewer",
            "create",
            "subjectaccessreviews.authorization.k8s.io",
        ),
    ] {
        let as_ = format!("--as={}", account(who));
        ns.wait_for(
            &format!("{who} may {verb} {what}"),
            Duration::from_secs(30),
            || cluster.kubectl(&["auth", "can-i", verb, what, &as_]),
        );
    }
    let token = |name: &str| ns.kubectl(&["create", "token", name]).trim().to_string();
    let (scraper, stranger) = (token("scraper"), token("stranger"));

    let kubeconfig =
        kube::config::Kubeconfig::read_from(&cluster.kubeconfig).expect("readable kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("valid kubeconfig");
    config.auth_info.impersonate = Some(account("reviewer"));
    let client = kube::Client::try_from(config).expect("client");
    let server = start_with(|config| {
        config.metrics_access = MetricsAccess::Delegated(DelegatedAuth::kube(client));
    })
    .await;

    for path in ["/metrics", "/metrics/probes"] {
        assert_eq!(
            get(server.addr, path).await.status,
            StatusCode::UNAUTHORIZED,
            "{path} without a token"
        );
        assert_eq!(
            get_with_token(server.addr, path, "forged.token.value")
                .await
                .status,
            StatusCode::UNAUTHORIZED,
            "{path} with a forged token"
        );
        let reply = get_with_token(server.addr, path, &scraper).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{path} as the scraper: {}",
            reply.body
        );
        assert!(reply.body.ends_with("# EOF\n"));
        let reply = get_with_token(server.addr, path, &stranger).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{path} as another account: {}",
            reply.body
        );
        assert!(reply.body.contains(&account("stranger")), "{}", reply.body);
    }
    assert_eq!(get(server.addr, "/healthz").await.status, StatusCode::OK);
}
