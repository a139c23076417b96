//! `/healthz`, `/readyz` and `/metrics` served on 127.0.0.1:0 and read by a
//! real HTTP client, and the server's hardening: idle-connection floods,
//! slow and oversized headers, request bodies, floods of forged tokens, and
//! `/metrics`' delegated authentication and authorisation, with scripted
//! reviews and against the real API server of the local cluster
//! (`hack/local-cluster.sh`, which must be up for
//! `metrics_auth_against_the_real_api_server`, as for the other cluster
//! tests).

#[path = "support/cluster.rs"]
mod cluster;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use podprobe::daemon::metric_set::MetricSet;
use podprobe::server::delegated_auth::{
    Attributes, Authentication, Authorization, PLACES_PER_SOURCE, REVIEW_TIMEOUT, ReviewError,
    Reviewer, TURNS_PER_SOURCE, UserInfo,
};
use podprobe::server::health::Reachability;
use podprobe::server::metrics::{self, Metrics};
use podprobe::server::{
    DelegatedAuth, Health, Limits, MAX_CONCURRENT_STREAMS, MAX_REVIEWS_PER_CONNECTION,
    MetricsAccess, Server, ServerConfig,
};
use podprobe_core::util::watch_activity::WatchActivity;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The DaemonSet's liveness probe gives `/healthz` this long to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Slack for timing assertions on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(1500);

struct Running {
    addr: SocketAddr,
    plain_metrics_addr: Option<SocketAddr>,
    /// What the server serves.
    metrics: Metrics,
    /// The families it serves.
    parts: MetricSet,
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
    let parts = MetricSet::new(WatchActivity::new());
    let metrics = parts.served.clone();
    let health = Health::new(Duration::from_secs(60), WatchActivity::new());
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), MetricsAccess::Open);
    configure(&mut config);
    let server = Server::bind(config, metrics.clone(), parts.auth.clone(), health.clone())
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
        parts,
        health,
        stop,
        task,
    }
}

struct Reply {
    status: StatusCode,
    content_type: String,
    www_authenticate: String,
    retry_after: String,
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
    try_request_from(None, addr, method, path, headers).await
}

/// [`try_request_with`] from the local address `from` (any of 127/8 on
/// loopback), another client as far as the server can tell.
async fn try_request_from(
    from: Option<IpAddr>,
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Reply, String> {
    let stream = match from {
        None => TcpStream::connect(addr).await,
        Some(from) => {
            async {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.bind(SocketAddr::new(from, 0))?;
                socket.connect(addr).await
            }
            .await
        }
    }
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
    let retry_after = header(http::header::RETRY_AFTER);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        content_type,
        www_authenticate,
        retry_after,
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
    server.parts.probes.set_workers(4);
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

/// The kubelet's HTTP probe of `path`: the request written as soon as the
/// connection is up (`Connection: close`, as the kubelet disables
/// keep-alive); the response, or why none.
async fn probe(addr: SocketAddr, path: &str) -> String {
    let mut stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(e) => return format!("connect: {e}"),
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-probe/1.35\r\nConnection: close\r\n\r\n"
    );
    if let Err(e) = stream.write_all(request.as_bytes()).await {
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
        let reply = tokio::time::timeout(PROBE_TIMEOUT, probe(server.addr, "/healthz"))
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
/// to `/metrics` stay in flight until the test releases them. `sent` counts
/// the reviews sent.
struct Gated {
    gate: Arc<Semaphore>,
    sent: watch::Sender<usize>,
}

impl Reviewer for Gated {
    fn review_token<'a>(
        &'a self,
        _token: &'a str,
    ) -> BoxFuture<'a, Result<Authentication, ReviewError>> {
        Box::pin(async move {
            self.sent.send_modify(|n| *n += 1);
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
        _attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<Authorization, ReviewError>> {
        Box::pin(async { Ok(Authorization::Allowed) })
    }
}

/// Waits until `reviews` counts `expected`, and no more.
async fn reviews_reach(reviews: &mut watch::Receiver<usize>, expected: usize) {
    let reached = tokio::time::timeout(SLACK, reviews.wait_for(|n| *n >= expected))
        .await
        .is_ok_and(|alive| alive.is_ok());
    let counted = *reviews.borrow();
    assert!(reached, "{counted} reviews, not {expected}");
    assert_eq!(counted, expected, "more reviews than expected");
}

/// A connection whose requests all wait on a review holds no claim to its
/// slot: when every connection is reviewing, a new one evicts the one
/// reviewing the longest (dropping its request) and is answered at once;
/// the other's request is answered once reviewed. (Busy connections are
/// never evicted: `connections::tests`; no request of these endpoints stays
/// busy for long.)
#[tokio::test]
async fn reviewing_connections_make_room_for_a_new_one() {
    let gate = Arc::new(Semaphore::new(0));
    let (sent, mut reviews) = watch::channel(0);
    let auth = DelegatedAuth::new(Gated {
        gate: gate.clone(),
        sent,
    });
    let server = start_with(|config| {
        config.limits.max_connections = 2;
        config.metrics_access = MetricsAccess::Delegated(auth);
    })
    .await;
    let reviewed = |token: &'static str| {
        let addr = server.addr;
        tokio::spawn(async move {
            let authorization = format!("Bearer {token}");
            try_request_with(
                addr,
                Method::GET,
                "/metrics",
                &[("authorization", &authorization)],
            )
            .await
        })
    };
    let first = reviewed("one");
    reviews_reach(&mut reviews, 1).await;
    let second = reviewed("two");
    reviews_reach(&mut reviews, 2).await;

    let healthz = tokio::time::timeout(SLACK, get(server.addr, "/healthz"))
        .await
        .expect("/healthz answered while every connection reviews");
    assert_eq!(healthz.status, StatusCode::OK);
    let evicted = first.await.unwrap();
    assert!(
        evicted.is_err(),
        "the longest reviewing connection was kept"
    );

    gate.add_permits(1);
    let reviewed = second.await.unwrap().expect("the other connection kept");
    assert_eq!(reviewed.status, StatusCode::OK);
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
        _attributes: &'a Attributes,
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

// ------------------------------------------------------------ review floods

/// A [`Reviewer`] for an API server that never answers a review of a
/// forged token (each is cut off by the review timeout); `scraper`'s
/// token is accepted and allowed at once. `stalled` counts the reviews
/// being sent.
struct Stalled {
    stalled: watch::Sender<usize>,
}

impl Stalled {
    fn new() -> (Self, watch::Receiver<usize>) {
        let (stalled, reviews) = watch::channel(0);
        (Stalled { stalled }, reviews)
    }
}

/// One stalled review, counted until it is cut off.
struct StalledReview<'a>(&'a watch::Sender<usize>);

impl Drop for StalledReview<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Reviewer for Stalled {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Authentication, ReviewError>> {
        Box::pin(async move {
            if token.starts_with("scraper") {
                return Ok(Authentication::Authenticated(UserInfo {
                    username: "scraper".into(),
                    ..UserInfo::default()
                }));
            }
            self.stalled.send_modify(|n| *n += 1);
            let _stalled = StalledReview(&self.stalled);
            std::future::pending().await
        })
    }

    fn review_access<'a>(
        &'a self,
        _user: &'a UserInfo,
        _attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<Authorization, ReviewError>> {
        Box::pin(async { Ok(Authorization::Allowed) })
    }
}

/// A server whose `/metrics` is reviewed by [`Stalled`], ready.
async fn start_stalled() -> (Running, watch::Receiver<usize>) {
    let (reviewer, stalled) = Stalled::new();
    let server = start_with(|config| {
        config.metrics_access = MetricsAccess::Delegated(DelegatedAuth::new(reviewer));
    })
    .await;
    server.health.set_pods_synced(true);
    server.health.set_api(Reachability::Reachable);
    server.health.set_cri(Reachability::Reachable);
    (server, stalled)
}

type H2Sender = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;

/// An h2c connection to `addr`.
async fn h2c(addr: SocketAddr) -> Result<H2Sender, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| format!("h2c handshake: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

/// `GET /metrics` with `Authorization: Bearer token`, as one stream of
/// `sender`'s connection.
async fn h2_get_metrics(mut sender: H2Sender, token: &str) -> Result<Reply, String> {
    let request = Request::get("http://podprobe/metrics")
        .header("authorization", format!("Bearer {token}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("no response: {e}"))?;
    Ok(read(response).await)
}

/// `requests` forged tokens for `/metrics`, all at once on one h2c
/// connection: each answer and how long it took, on `answers`.
async fn forged_requests(
    addr: SocketAddr,
    requests: usize,
    answers: &mpsc::UnboundedSender<(Reply, Duration)>,
) {
    let sender = h2c(addr).await.expect("h2c connection");
    for _ in 0..requests {
        let (sender, answers) = (sender.clone(), answers.clone());
        tokio::spawn(async move {
            let sent = Instant::now();
            let token = format!("forged-{}", rand::random::<u64>());
            let reply = h2_get_metrics(sender, &token).await.expect("an answer");
            let _ = answers.send((reply, sent.elapsed()));
        });
    }
}

/// Expects `expected` answers on `answers`, each a prompt 429: within
/// [`SLACK`], where a request waiting for a review turn would wait for the
/// review timeout.
async fn expect_throttled(
    answers: &mut mpsc::UnboundedReceiver<(Reply, Duration)>,
    expected: usize,
) {
    assert!(SLACK < REVIEW_TIMEOUT / 2);
    for answered in 0..expected {
        let (reply, took) = tokio::time::timeout(SLACK, answers.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("{answered} of {expected} requests answered within {SLACK:?}")
            })
            .expect("requests outstanding");
        assert_eq!(
            (reply.status, reply.retry_after.as_str()),
            (StatusCode::TOO_MANY_REQUESTS, "1"),
            "{}",
            reply.body
        );
        assert!(took < SLACK, "a 429 took {took:?}");
    }
}

/// The samples of `podprobe_metrics_auth_decisions_total` by outcome.
fn auth_decisions(metrics: &Metrics, outcome: &str) -> String {
    let series = format!(r#"podprobe_metrics_auth_decisions_total{{outcome="{outcome}"}} "#);
    metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&series).map(str::to_string))
        .unwrap_or_else(|| format!("no {series}"))
}

/// Forged tokens for `/metrics` as fast as the server answers them, from
/// `connections` h2c connections with [`MAX_CONCURRENT_STREAMS`] requests in
/// flight on each: every request sent again once answered, every
/// connection opened again once closed. From a thread and runtime of its
/// own, as another process on the network would; stops when dropped.
struct Flood {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(addr: SocketAddr, connections: usize) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("flood runtime");
            runtime.block_on(async move {
                let flood = (0..connections).map(|_| Self::connection(addr));
                tokio::select! {
                    _ = stopped => {}
                    _ = futures::future::join_all(flood) => {}
                }
            });
        });
        Flood {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    async fn connection(addr: SocketAddr) {
        loop {
            let Ok(sender) = h2c(addr).await else {
                tokio::task::yield_now().await;
                continue;
            };
            let streams = (0..MAX_CONCURRENT_STREAMS).map(|_| {
                let sender = sender.clone();
                async move {
                    loop {
                        let token = format!("forged-{}", rand::random::<u64>());
                        if h2_get_metrics(sender.clone(), &token).await.is_err() {
                            return;
                        }
                    }
                }
            });
            futures::future::join_all(streams).await;
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// As many h2c connections as the server takes, each with as many streams
/// as it allows, ask for `/metrics` with forged tokens, again as soon as
/// answered, while the API server never answers a review: the DaemonSet's
/// probes of `/healthz` and `/readyz`, each on a fresh connection as the
/// kubelet's, a scraper whose token was reviewed before, and a scraper on
/// another address whose token is new each time (#37: on kind, such a
/// scraper was refused for as long as a flood from one pod lasted), keep
/// being answered, each within the probe timeout, for as long as a review
/// of the flood's first requests could last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_readyz_and_a_known_scraper_are_answered_under_a_flood_of_forged_tokens() {
    assert!(
        PROBE_TIMEOUT < REVIEW_TIMEOUT / 2,
        "a probe answered once a review timed out must fail"
    );
    let (server, mut reviews) = start_stalled().await;
    let scraper = get_with_token(server.addr, "/metrics", "scraper").await;
    assert_eq!(scraper.status, StatusCode::OK, "before the flood");

    let _flood = Flood::start(server.addr, Limits::default().max_connections);
    // One client: it gets its turns, not all of them.
    reviews_reach(&mut reviews, TURNS_PER_SOURCE).await;
    let flooded = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut round = 0;
    // The flood comes from 127.0.0.1; the new scraper from elsewhere.
    let elsewhere = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    while flooded.elapsed() < REVIEW_TIMEOUT / 2 {
        let (path, from, token) = match round % 4 {
            0 => ("/healthz", None, String::new()),
            1 => ("/readyz", None, String::new()),
            2 => ("/metrics", None, "scraper".to_string()),
            _ => ("/metrics", Some(elsewhere), format!("scraper-{round}")),
        };
        let started = Instant::now();
        let reply = tokio::time::timeout(PROBE_TIMEOUT, async {
            if path == "/metrics" {
                let authorization = format!("Bearer {token}");
                match try_request_from(
                    from,
                    server.addr,
                    Method::GET,
                    path,
                    &[("authorization", &authorization)],
                )
                .await
                {
                    Ok(reply) => format!("{} {}", reply.status, reply.body),
                    Err(e) => e,
                }
            } else {
                probe(server.addr, path).await
            }
        })
        .await
        .unwrap_or_else(|_| format!("no answer within {PROBE_TIMEOUT:?}"));
        assert!(
            reply.starts_with("HTTP/1.1 200 OK") || reply.starts_with("200 OK"),
            "{path} {token} (round {round}, {:?} into the flood): {reply:?}",
            flooded.elapsed()
        );
        slowest = slowest.max(started.elapsed());
        round += 1;
        // The kubelet probes at a period, not back to back.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "{round} probes and scrapes under the flood, the slowest answered in {slowest:?}; \
         forged requests answered 429 meanwhile: {}",
        auth_decisions(&server.metrics, "throttled")
    );
}

/// Requests of one client beyond its review turns and places are answered
/// 429, with `Retry-After`, at once rather than after waiting for a turn,
/// and counted; those within wait for their reviews.
#[tokio::test]
async fn reviews_beyond_a_clients_places_are_answered_429_at_once() {
    let (server, mut reviews) = start_stalled().await;
    let places = PLACES_PER_SOURCE;
    let extra = 5;
    let (answers_tx, mut answers) = mpsc::unbounded_channel();
    // Within the per-connection limit, so the queue is what refuses.
    let connections = (places + extra).div_ceil(MAX_REVIEWS_PER_CONNECTION);
    for _ in 0..connections {
        forged_requests(server.addr, MAX_REVIEWS_PER_CONNECTION, &answers_tx).await;
    }
    let throttled = connections * MAX_REVIEWS_PER_CONNECTION - places;
    expect_throttled(&mut answers, throttled).await;
    reviews_reach(&mut reviews, TURNS_PER_SOURCE).await;
    assert!(answers.try_recv().is_err(), "the queued requests wait");
    assert_eq!(
        auth_decisions(&server.metrics, "throttled"),
        throttled.to_string()
    );

    // Still full: a new request too is refused at once.
    forged_requests(server.addr, 1, &answers_tx).await;
    expect_throttled(&mut answers, 1).await;
    // The probes wait on no review.
    assert_eq!(get(server.addr, "/healthz").await.status, StatusCode::OK);
}

/// One h2c connection with as many streams as the server allows gets
/// at most [`MAX_REVIEWS_PER_CONNECTION`] of them reviewed; the others are
/// answered 429 at once, leaving the review queue to other clients.
#[tokio::test]
async fn one_connection_gets_at_most_two_requests_reviewed_at_once() {
    let (server, mut reviews) = start_stalled().await;
    let (answers_tx, mut answers) = mpsc::unbounded_channel();
    let streams = usize::try_from(MAX_CONCURRENT_STREAMS).unwrap();
    forged_requests(server.addr, streams, &answers_tx).await;
    expect_throttled(&mut answers, streams - MAX_REVIEWS_PER_CONNECTION).await;
    reviews_reach(&mut reviews, MAX_REVIEWS_PER_CONNECTION).await;
    assert!(answers.try_recv().is_err(), "the reviewed requests wait");

    // Another client's connection still gets its request reviewed (one
    // of the same client would wait for the client's turns: review_turns).
    let addr = server.addr;
    tokio::spawn(async move {
        let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let forged = [("authorization", "Bearer forged-elsewhere")];
        try_request_from(Some(from), addr, Method::GET, "/metrics", &forged).await
    });
    reviews_reach(&mut reviews, MAX_REVIEWS_PER_CONNECTION + 1).await;
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
