//! `/healthz`, `/readyz` and `/metrics` served on 127.0.0.1:0 and read by a
//! real HTTP client.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use podprobe::metrics::{self, Metrics};
use podprobe::server::{CriState, Health, Server};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Running {
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

async fn start() -> Running {
    let metrics = Metrics::new();
    let health = Health::new(Duration::from_secs(60));
    let server = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        metrics.clone(),
        health.clone(),
    )
    .await
    .expect("bind 127.0.0.1:0");
    let addr = server.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        metrics,
        health,
        stop,
        task,
    }
}

struct Reply {
    status: StatusCode,
    content_type: String,
    body: String,
}

async fn request(addr: SocketAddr, method: Method, path: &str) -> Reply {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1.1 handshake");
    tokio::spawn(connection);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.expect("response");
    read(response).await
}

async fn read(response: http::Response<hyper::body::Incoming>) -> Reply {
    let status = response.status();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        content_type,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, Method::GET, path).await
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
async fn readyz_follows_pod_sync_and_cri_state() {
    let server = start().await;

    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.body,
        "pod watch has not synced; container runtime unreachable: not checked yet\n"
    );

    server.health.set_pods_synced(true);
    server.health.set_cri(CriState::Reachable);
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "ok\n")
    );

    server
        .health
        .set_cri(CriState::Unreachable("connection refused".into()));
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.body,
        "container runtime unreachable: connection refused\n"
    );

    server.health.set_cri(CriState::NotNeeded);
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
