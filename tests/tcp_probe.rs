//! TCP probes against real loopback listeners (spec T1-T4).

use std::net::SocketAddr;
use std::time::Duration;

use podprobe::probe::dial::{PROBE_LINGER, dial};
use podprobe::probe::tcp;
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::{Outcome, ProbeResult};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::{Instant, timeout};

const TIMEOUT: Duration = Duration::from_secs(1);

async fn probe(host: &str, port: u16, timeout: Duration) -> Outcome {
    tcp::probe(host, port, timeout, &Destinations::default())
        .await
        .expect("TCP probes report failures as results, never as errors")
}

/// A listener that accepts every connection and keeps it open.
async fn accepting_listener(addr: &str) -> SocketAddr {
    let listener = TcpListener::bind(addr)
        .await
        .expect("bind loopback listener");
    let local = listener.local_addr().expect("listener address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
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

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback listener");
    listener.local_addr().expect("listener address").port()
}

#[tokio::test]
async fn t2_accepted_connection_is_success_with_empty_output() {
    let addr = accepting_listener("127.0.0.1:0").await;
    let outcome = probe("127.0.0.1", addr.port(), TIMEOUT).await;
    assert_eq!(outcome, Outcome::new(ProbeResult::Success, ""));
}

#[tokio::test]
async fn t1_ipv6_literal_host_is_dialed() {
    let listener = ipv6_loopback_listener().await;
    let port = listener.local_addr().expect("listener address").port();
    let outcome = probe("::1", port, TIMEOUT).await;
    assert_eq!(outcome, Outcome::new(ProbeResult::Success, ""));
}

#[tokio::test]
async fn t1_host_name_is_resolved() {
    let addr = accepting_listener("127.0.0.1:0").await;
    let outcome = probe("localhost", addr.port(), TIMEOUT).await;
    assert_eq!(outcome, Outcome::new(ProbeResult::Success, ""));
}

#[tokio::test]
async fn t4_peer_that_accepts_and_closes_is_success() {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback listener");
    let port = listener.local_addr().expect("listener address").port();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept the probe");
        drop(stream);
    });
    let outcome = probe("127.0.0.1", port, TIMEOUT).await;
    assert_eq!(outcome, Outcome::new(ProbeResult::Success, ""));
    server.await.expect("server task");
}

#[tokio::test]
async fn t2_refused_connection_is_failure_with_go_dial_error() {
    let port = closed_port().await;
    let outcome = probe("127.0.0.1", port, TIMEOUT).await;
    assert_eq!(
        outcome,
        Outcome::new(
            ProbeResult::Failure,
            format!("dial tcp 127.0.0.1:{port}: connect: connection refused")
        )
    );
}

#[tokio::test]
async fn t2_connect_timeout_is_failure_with_io_timeout() {
    // A listener that never accepts: once its accept queue is full, the
    // kernel drops further SYNs and a connect hangs as if blackholed.
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("literal address"))
        .expect("bind");
    let listener = socket.listen(1).expect("listen");
    let addr = listener.local_addr().expect("listener address");
    let mut queued: Vec<TcpStream> = Vec::new();
    let full = loop {
        match timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) if queued.len() < 16 => queued.push(stream),
            Ok(_) => break false,
            Err(_) => break true,
        }
    };
    assert!(
        full,
        "the accept queue never filled up: {} connections queued",
        queued.len()
    );

    let started = Instant::now();
    let outcome = probe("127.0.0.1", addr.port(), Duration::from_millis(300)).await;
    assert_eq!(
        outcome,
        Outcome::new(
            ProbeResult::Failure,
            format!("dial tcp 127.0.0.1:{}: i/o timeout", addr.port())
        )
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn t3_probe_socket_lingers_one_second() {
    let addr = accepting_listener("127.0.0.1:0").await;
    let stream = dial(
        "127.0.0.1",
        addr.port(),
        Instant::now() + TIMEOUT,
        &Destinations::default(),
    )
    .await
    .expect("dial the listener");
    let linger = stream.get_ref().linger().expect("read SO_LINGER");
    assert_eq!(linger, Some(PROBE_LINGER));
    assert_eq!(PROBE_LINGER, Duration::from_secs(1));
}

/// Go's dialer sets TCP_NODELAY on every connection; gRPC probes depend on
/// it to avoid waiting for delayed ACKs.
#[tokio::test]
async fn probe_socket_sets_tcp_nodelay_like_go() {
    let addr = accepting_listener("127.0.0.1:0").await;
    let stream = dial(
        "127.0.0.1",
        addr.port(),
        Instant::now() + TIMEOUT,
        &Destinations::default(),
    )
    .await
    .expect("dial the listener");
    assert!(stream.get_ref().nodelay().expect("read TCP_NODELAY"));
}

#[tokio::test]
async fn a_denied_destination_is_refused_without_a_connection() {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback listener");
    let port = listener.local_addr().expect("listener address").port();
    let denied = Destinations::new(Vec::new(), Destinations::node_local());
    let outcome = tcp::probe("127.0.0.1", port, TIMEOUT, &denied)
        .await
        .expect("never an error");
    assert_eq!(
        outcome,
        Outcome::new(
            ProbeResult::Failure,
            format!(
                "dial tcp 127.0.0.1:{port}: destination 127.0.0.1 is refused by podprobe: it is \
                 in 127.0.0.0/8, which --deny-probe-destinations denies and --allow-probe-hosts \
                 does not allow"
            )
        )
    );
    let accepted = timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "the probe connected: {accepted:?}");
}
