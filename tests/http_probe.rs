//! HTTP GET probes (spec section 6) against real servers on loopback,
//! scripted per case; test names carry the rule they check.

mod support {
    pub mod http_server;
    pub mod pki;
}

use std::time::Duration;

use podprobe::probe::Prober;
use podprobe::probe::http::probe;
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::probe_spec::{self, Handler, HttpGetAction, Scheme};
use podprobe_core::spec::{
    Attempt, Outcome, ProbeError, ProbeKind, ProbeResult, ProbeSpec, ProbeTarget,
};
use support::http_server::{Step, TestServer, redirect, reply, response};
use support::pki::{TestCa, server_config};

const USER_AGENT: &str = "kube-probe/1.35";
const TIMEOUT: Duration = Duration::from_secs(5);
const LOCAL: &str = "127.0.0.1:0";

fn action(port: u16, path: &str) -> HttpGetAction {
    HttpGetAction {
        scheme: Scheme::Http,
        host: None,
        port,
        path: path.to_string(),
        headers: Vec::new(),
        protocol: Default::default(),
        extensions: Default::default(),
    }
}

fn with_headers(mut action: HttpGetAction, headers: &[(&str, &str)]) -> HttpGetAction {
    action.headers = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    action
}

async fn run(action: &HttpGetAction) -> Attempt {
    probe(
        action,
        "127.0.0.1",
        TIMEOUT,
        USER_AGENT,
        &Destinations::default(),
    )
    .await
}

async fn outcome(action: &HttpGetAction) -> Outcome {
    run(action).await.expect("probe completes without error")
}

/// A server answering every request with `status` and `body`.
async fn answering(status: u16, body: &'static [u8]) -> TestServer {
    TestServer::start(LOCAL, move |_| reply(status, body)).await
}

#[tokio::test]
async fn h13_2xx_is_success_with_the_body() {
    for (status, body) in [(200, &b"ok"[..]), (204, &b""[..]), (299, &b"fine"[..])] {
        let server = answering(status, body).await;
        let got = outcome(&action(server.port(), "/")).await;
        assert_eq!(
            got,
            Outcome::new(ProbeResult::Success, String::from_utf8_lossy(body)),
            "{status}"
        );
    }
}

#[tokio::test]
async fn h13_3xx_final_response_is_warning_with_the_body() {
    for status in [300, 301, 304, 399] {
        // No Location: Go's client returns the 3xx itself.
        let server = answering(status, b"see other").await;
        let got = outcome(&action(server.port(), "/")).await;
        let body = if status == 304 { "" } else { "see other" };
        let expected = format!("Probe terminated redirects, Response body: {body}");
        assert_eq!(
            got,
            Outcome::new(ProbeResult::Warning, expected),
            "{status}"
        );
    }
}

#[tokio::test]
async fn h13_h15_4xx_and_5xx_fail_without_the_body() {
    for status in [400, 404, 500, 503] {
        let server = answering(status, b"secret details").await;
        let got = outcome(&action(server.port(), "/")).await;
        let expected = format!("HTTP probe failed with statuscode: {status}");
        assert_eq!(got, Outcome::new(ProbeResult::Failure, expected));
    }
}

#[tokio::test]
async fn h13_final_101_is_failure() {
    let server = TestServer::start(LOCAL, |_| {
        vec![Step::Write(
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec(),
        )]
    })
    .await;
    let got = outcome(&action(server.port(), "/")).await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Failure,
            "HTTP probe failed with statuscode: 101"
        )
    );
}

#[tokio::test]
async fn h13_informational_1xx_is_skipped_like_go() {
    // Over HTTP/1.1 a 1xx other than 101 is never final (Go and hyper both
    // read on), so a 199 can only be seen followed by the real status.
    let server = TestServer::start(LOCAL, |_| {
        let mut bytes = b"HTTP/1.1 199 Interim\r\n\r\n".to_vec();
        bytes.extend(response(200, &[], b"final"));
        vec![Step::Write(bytes)]
    })
    .await;
    let got = outcome(&action(server.port(), "/")).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "final"));
}

#[tokio::test]
async fn h12_same_host_relative_redirect_is_followed() {
    let server = TestServer::start(LOCAL, |request| match request.target() {
        "/start" => redirect(302, "/healthy"),
        _ => reply(200, b"arrived"),
    })
    .await;
    let got = outcome(&action(server.port(), "/start")).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "arrived"));
    let received = server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(server.connections(), 2, "each hop uses a fresh connection");
    assert_eq!(received[1].target(), "/healthy");
    let referer = format!("http://127.0.0.1:{}/start", server.port());
    assert_eq!(received[1].header("Referer"), [referer.as_str()]);
    assert_eq!(received[1].header("User-Agent"), [USER_AGENT]);
}

#[tokio::test]
async fn h12_same_hostname_on_another_port_is_followed() {
    let target = answering(200, b"other port").await;
    let location = format!("http://127.0.0.1:{}/there", target.port());
    let origin = TestServer::start(LOCAL, move |_| redirect(307, &location)).await;
    let got = outcome(&action(origin.port(), "/")).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "other port"));
    assert_eq!(target.received()[0].target(), "/there");
}

#[tokio::test]
async fn h12_other_host_redirect_is_warning_with_the_redirect_body() {
    let origin = TestServer::start(LOCAL, |_| redirect(301, "http://localhost:1/elsewhere")).await;
    let got = outcome(&action(origin.port(), "/")).await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Warning,
            "Probe terminated redirects, Response body: moved"
        )
    );
    assert_eq!(origin.connections(), 1);
}

#[tokio::test]
async fn h12_redirect_loop_fails_after_10_requests() {
    let server = TestServer::start(LOCAL, |_| redirect(302, "/loop")).await;
    let got = outcome(&action(server.port(), "/")).await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Failure,
            "Get \"/loop\": stopped after 10 redirects"
        )
    );
    assert_eq!(server.received().len(), 10);
}

#[tokio::test]
async fn h8_host_header_overrides_host_and_survives_relative_redirects() {
    let server = TestServer::start(LOCAL, |request| match request.target() {
        "/start" => redirect(302, "/next"),
        _ => reply(200, b""),
    })
    .await;
    let probe_action = with_headers(action(server.port(), "/start"), &[("host", "svc.example")]);
    assert_eq!(outcome(&probe_action).await.result, ProbeResult::Success);
    let received = server.received();
    assert_eq!(received[0].header("Host"), ["svc.example"]);
    assert_eq!(received[1].header("Host"), ["svc.example"]);
}

#[tokio::test]
async fn h8_absolute_redirect_drops_the_host_override() {
    let server = TestServer::start(LOCAL, |request| match request.target() {
        "/start" => {
            let location = format!("http://127.0.0.1:{}/next", request.header("X-Port")[0]);
            redirect(302, &location)
        }
        _ => reply(200, b""),
    })
    .await;
    let port = server.port().to_string();
    let headers = [("Host", "svc.example"), ("X-Port", port.as_str())];
    let probe_action = with_headers(action(server.port(), "/start"), &headers);
    assert_eq!(outcome(&probe_action).await.result, ProbeResult::Success);
    let expected = format!("127.0.0.1:{port}");
    assert_eq!(server.received()[1].header("Host"), [expected.as_str()]);
}

#[tokio::test]
async fn h4_path_and_query_reach_the_server_as_go_sends_them() {
    let server = answering(200, b"").await;
    let cases = [
        ("/healthz", "/healthz"),
        ("healthz", "/healthz"),
        ("", "/"),
        ("?foo", "/?foo"),
        ("/path?a=1&b", "/path?a=1&b"),
        ("/a b", "/a%20b"),
        ("/a%2Fb", "/a%2Fb"),
        ("%zz", "/%25zz"),
        ("/x#fragment", "/x"),
    ];
    for (path, _) in cases {
        outcome(&action(server.port(), path)).await;
    }
    let targets: Vec<String> = server
        .received()
        .iter()
        .map(|r| r.target().to_string())
        .collect();
    let expected: Vec<&str> = cases.iter().map(|(_, target)| *target).collect();
    assert_eq!(targets, expected);
    assert_eq!(
        server.received()[0].header("Host"),
        [format!("127.0.0.1:{}", server.port()).as_str()]
    );
}

#[tokio::test]
async fn h5_header_names_are_canonical_and_repeats_are_separate_lines() {
    let server = answering(200, b"").await;
    let headers = [
        ("x-custom", "a"),
        ("X-CUSTOM", "b"),
        ("FOO-bAR", "c"),
        ("accept", "application/json"),
    ];
    outcome(&with_headers(action(server.port(), "/"), &headers)).await;
    let request = &server.received()[0];
    assert_eq!(request.header("X-Custom"), ["a", "b"]);
    assert_eq!(request.header("Foo-Bar"), ["c"]);
    assert_eq!(request.header("Accept"), ["application/json"]);
    let names: Vec<&str> = request.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "Host",
            "User-Agent",
            "Accept",
            "Foo-Bar",
            "X-Custom",
            "X-Custom",
            "Connection"
        ]
    );
}

#[tokio::test]
async fn h6_user_agent_default_override_and_empty() {
    let server = answering(200, b"").await;
    let port = server.port();
    outcome(&action(port, "/")).await;
    outcome(&with_headers(
        action(port, "/"),
        &[("user-agent", "custom/1")],
    ))
    .await;
    outcome(&with_headers(action(port, "/"), &[("User-Agent", "")])).await;
    let received = server.received();
    assert_eq!(received[0].header("User-Agent"), [USER_AGENT]);
    assert_eq!(received[1].header("User-Agent"), ["custom/1"]);
    assert!(
        !received[2].has_header("User-Agent"),
        "{:?}",
        received[2].headers
    );
}

#[tokio::test]
async fn h7_accept_default_override_and_empty() {
    let server = answering(200, b"").await;
    let port = server.port();
    outcome(&action(port, "/")).await;
    outcome(&with_headers(
        action(port, "/"),
        &[("Accept", "text/plain")],
    ))
    .await;
    outcome(&with_headers(action(port, "/"), &[("Accept", "")])).await;
    let received = server.received();
    assert_eq!(received[0].header("Accept"), ["*/*"]);
    assert_eq!(received[1].header("Accept"), ["text/plain"]);
    assert!(
        !received[2].has_header("Accept"),
        "{:?}",
        received[2].headers
    );
}

#[tokio::test]
async fn h9_connection_close_and_no_accept_encoding() {
    let server = answering(200, b"").await;
    outcome(&action(server.port(), "/")).await;
    let request = &server.received()[0];
    assert_eq!(request.request_line, "GET / HTTP/1.1");
    assert_eq!(request.header("Connection"), ["close"]);
    assert!(!request.has_header("Accept-Encoding"));
    assert!(
        !request.has_header("Content-Length"),
        "a GET carries no body (H11)"
    );
}

#[tokio::test]
async fn h9_every_probe_opens_a_fresh_connection() {
    let server = answering(200, b"").await;
    for _ in 0..3 {
        outcome(&action(server.port(), "/")).await;
    }
    assert_eq!(server.connections(), 3);
}

#[tokio::test]
async fn h14_body_is_capped_at_10_kib() {
    for (size, kept) in [(10_239, 10_239), (10_240, 10_240), (1 << 20, 10_240)] {
        let server = TestServer::start(LOCAL, move |_| reply(200, &vec![b'a'; size])).await;
        let got = outcome(&action(server.port(), "/")).await;
        assert_eq!(got.result, ProbeResult::Success);
        assert_eq!(got.output.len(), kept, "body of {size} bytes");
    }
}

#[tokio::test]
async fn h14_endless_body_is_cut_at_the_cap_without_reading_on() {
    let server = TestServer::start(LOCAL, |_| {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n".to_vec();
        vec![Step::Write(head), Step::WriteForever(vec![b'z'; 64 * 1024])]
    })
    .await;
    let got = outcome(&action(server.port(), "/")).await;
    assert_eq!(got.output.len(), 10_240);
}

#[tokio::test]
async fn h10_h16_slow_headers_time_out_as_failure() {
    let server = TestServer::start(LOCAL, |_| vec![Step::Stall]).await;
    let got = probe(
        &action(server.port(), "/"),
        "127.0.0.1",
        Duration::from_millis(300),
        USER_AGENT,
        &Destinations::default(),
    )
    .await
    .unwrap();
    let expected = format!(
        "Get \"http://127.0.0.1:{}/\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
        server.port()
    );
    assert_eq!(got, Outcome::new(ProbeResult::Failure, expected));
}

#[tokio::test]
async fn h17_slow_body_errors_and_the_wrapper_retries_three_times() {
    let server = TestServer::start(LOCAL, |_| {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial".to_vec();
        vec![Step::Write(head), Step::Stall]
    })
    .await;
    let spec = ProbeSpec {
        handler: Handler::HttpGet(action(server.port(), "/")),
        initial_delay_seconds: 0,
        timeout_seconds: 1,
        period_seconds: 10,
        period_milliseconds: None,
        success_threshold: 1,
        failure_threshold: 3,
        termination_grace_period_seconds: None,
        network: Default::default(),
        markers: Vec::new(),
        workload: Default::default(),
    };
    let target = ProbeTarget {
        pod_ip: "127.0.0.1",
        container_id: None,
        identity: None,
        namespace: None,
    };
    let verdict = Prober::new("1.35", None)
        .probe(ProbeKind::Readiness, &spec, target)
        .await;
    let message =
        "context deadline exceeded (Client.Timeout or context cancellation while reading body)";
    assert_eq!(server.connections(), 3);
    assert_eq!(verdict.attempts, 3);
    assert_eq!(verdict.result, ProbeResult::Failure);
    assert_eq!(verdict.error.as_deref(), Some(message));
    assert!(!verdict.is_success());
    let event = verdict.event.expect("an Unhealthy event");
    assert_eq!(event.reason, "Unhealthy");
    assert_eq!(
        event.message,
        format!("Readiness probe errored and resulted in failure state: {message}")
    );
}

#[tokio::test]
async fn h17_reset_mid_body_is_an_error() {
    let server = TestServer::start(LOCAL, |_| {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\npartial".to_vec();
        vec![Step::Write(head), Step::Reset]
    })
    .await;
    let err = run(&action(server.port(), "/")).await.unwrap_err();
    assert_eq!(err.result, ProbeResult::Failure);
    let suffix = format!(
        "->127.0.0.1:{}: read: connection reset by peer",
        server.port()
    );
    assert!(
        err.message.starts_with("read tcp 127.0.0.1:"),
        "{}",
        err.message
    );
    assert!(err.message.ends_with(&suffix), "{}", err.message);
}

#[tokio::test]
async fn h17_body_cut_short_is_unexpected_eof() {
    let server = TestServer::start(LOCAL, |_| {
        vec![Step::Write(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort".to_vec(),
        )]
    })
    .await;
    let err = run(&action(server.port(), "/")).await.unwrap_err();
    assert_eq!(
        err,
        ProbeError {
            result: ProbeResult::Failure,
            message: "unexpected EOF".into()
        }
    );
}

#[tokio::test]
async fn h16_closed_port_is_a_refused_failure() {
    let port = {
        let listener = std::net::TcpListener::bind(LOCAL).unwrap();
        listener.local_addr().unwrap().port()
    };
    let got = outcome(&action(port, "/")).await;
    let expected = format!(
        "Get \"http://127.0.0.1:{port}/\": dial tcp 127.0.0.1:{port}: connect: connection refused"
    );
    assert_eq!(got, Outcome::new(ProbeResult::Failure, expected));
}

#[tokio::test]
async fn h16_peer_closing_without_answer_is_eof_failure() {
    let server = TestServer::start(LOCAL, |_| Vec::new()).await;
    let got = outcome(&action(server.port(), "/")).await;
    let expected = format!("Get \"http://127.0.0.1:{}/\": EOF", server.port());
    assert_eq!(got, Outcome::new(ProbeResult::Failure, expected));
}

#[tokio::test]
async fn h16_invalid_header_name_fails_before_connecting() {
    let server = answering(200, b"").await;
    let got = outcome(&with_headers(
        action(server.port(), "/"),
        &[("bad name", "x")],
    ))
    .await;
    let expected = format!(
        "Get \"http://127.0.0.1:{}/\": net/http: invalid header field name \"bad name\"",
        server.port()
    );
    assert_eq!(got, Outcome::new(ProbeResult::Failure, expected));
    assert_eq!(server.connections(), 0);
}

/// Go's transport sets no bound on a header name's length (hyper's types
/// refuse 64 KiB and more): a pod's long name is sent as it is.
#[tokio::test]
async fn h16_a_header_name_of_64_kib_and_more_is_sent() {
    let server = answering(200, b"").await;
    let name = format!("X-A{}", "a".repeat(70_000));
    let got = outcome(&with_headers(action(server.port(), "/"), &[(&name, "v")])).await;
    let start: String = got.output.chars().take(120).collect();
    assert_eq!(got.result, ProbeResult::Success, "{start}");
    let received = server.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].header(&name), ["v"]);
}

#[tokio::test]
async fn h18_unbuildable_request_is_an_unknown_error() {
    let mut bad_host = action(80, "/");
    bad_host.host = Some("bad host".into());
    let err = run(&bad_host).await.unwrap_err();
    assert_eq!(
        err,
        ProbeError::unknown("parse \"http://bad%20host:80/\": invalid URL escape \"%20\"")
    );
}

#[tokio::test]
async fn h2_h4_ipv6_pod_ip_is_bracketed() {
    let server = TestServer::start("[::1]:0", |_| reply(200, b"v6")).await;
    let got = probe(
        &action(server.port(), "/"),
        "::1",
        TIMEOUT,
        USER_AGENT,
        &Destinations::default(),
    )
    .await
    .unwrap();
    assert_eq!(got, Outcome::new(ProbeResult::Success, "v6"));
    let host = format!("[::1]:{}", server.port());
    assert_eq!(server.received()[0].header("Host"), [host.as_str()]);
}

#[tokio::test]
async fn h9_https_accepts_a_self_signed_certificate() {
    let server = TestServer::start_tls(LOCAL, |_| reply(200, b"secure")).await;
    let mut https = action(server.port(), "/tls");
    https.scheme = Scheme::Https;
    let got = outcome(&https).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "secure"));
    let request = &server.received()[0];
    assert_eq!(request.request_line, "GET /tls HTTP/1.1");
    assert_eq!(request.sni, None, "no SNI for an IP address");
}

#[tokio::test]
async fn h9_https_negotiates_http2_like_the_kubelet_transport() {
    let server = TestServer::start_h2(LOCAL, 200, b"over h2").await;
    let mut https = with_headers(
        action(server.port(), "/h2?x=1"),
        &[("host", "svc.example"), ("X-Custom", "1")],
    );
    https.scheme = Scheme::Https;
    let got = outcome(&https).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "over h2"));
    let request = &server.received()[0];
    assert_eq!(request.request_line, "GET /h2?x=1 HTTP/2.0");
    assert_eq!(request.header(":authority"), ["svc.example"]);
    assert_eq!(request.header("user-agent"), [USER_AGENT]);
    assert_eq!(request.header("accept"), ["*/*"]);
    assert_eq!(request.header("x-custom"), ["1"]);
    for absent in ["host", "connection", "accept-encoding"] {
        assert!(
            !request.has_header(absent),
            "{absent}: {:?}",
            request.headers
        );
    }
}

#[tokio::test]
async fn h9_https_sends_sni_for_dns_names() {
    let server = TestServer::start_tls(LOCAL, |_| reply(200, b"")).await;
    let mut https = action(server.port(), "/");
    https.scheme = Scheme::Https;
    https.host = Some("localhost".into());
    assert_eq!(outcome(&https).await.result, ProbeResult::Success);
    let requests = server.received();
    assert_eq!(requests.last().unwrap().sni.as_deref(), Some("localhost"));
}

#[tokio::test]
async fn h16_https_to_a_plain_http_server_fails_like_go() {
    let server = TestServer::start(LOCAL, |_| {
        reply(400, b"Client sent an HTTP request to an HTTPS server")
    })
    .await;
    let mut https = action(server.port(), "/");
    https.scheme = Scheme::Https;
    let got = outcome(&https).await;
    let expected = format!(
        "Get \"https://127.0.0.1:{}/\": http: server gave HTTP response to HTTPS client",
        server.port()
    );
    assert_eq!(got, Outcome::new(ProbeResult::Failure, expected));
}

/// A policy denying the node-local networks, as gate mode's default.
fn node_local_denied() -> Destinations {
    Destinations::new(Vec::new(), Destinations::node_local())
}

#[tokio::test]
async fn a_denied_destination_is_never_connected_to_even_by_name() {
    let server = answering(200, b"secret").await;
    // The name and the IPv4-mapped IPv6 form reach the same listener.
    for host in ["127.0.0.1", "localhost", "::ffff:127.0.0.1"] {
        let action = HttpGetAction {
            host: Some(host.to_string()),
            ..action(server.port(), "/")
        };
        let got = probe(
            &action,
            "10.0.0.1",
            TIMEOUT,
            USER_AGENT,
            &node_local_denied(),
        )
        .await
        .expect("a refused destination is a failure, not an error");
        assert_eq!(got.result, ProbeResult::Failure, "{host}: {got:?}");
        assert!(
            got.output
                .contains("is refused by podprobe: it is in 127.0.0.0/8"),
            "{host}: {}",
            got.output
        );
    }
    assert_eq!(server.connections(), 0, "the server was reached");
}

/// An `httpGet` probe of `port` and `path` with `podprobe` as its
/// extensions, read by the parser gate mode and `podprobe probe` use.
fn extended(port: u16, path: &str, podprobe: serde_json::Value) -> HttpGetAction {
    let object = serde_json::json!({"httpGet": {"port": port, "path": path}, "podprobe": podprobe});
    let kind = ProbeKind::Readiness;
    let object = probe_spec::decode_probe_object(kind, &object).expect("decodes");
    let container = k8s_openapi::api::core::v1::Container::default();
    let probe_spec = probe_spec::normalize_object(kind, &object, &container).expect("valid");
    match probe_spec.handler {
        Handler::HttpGet(action) => action,
        other => panic!("expected httpGet, got {other:?}"),
    }
}

fn expecting(port: u16, expect: serde_json::Value) -> HttpGetAction {
    extended(port, "/", serde_json::json!({"expect": expect}))
}

#[tokio::test]
async fn ext_status_codes_replace_the_200_399_rule() {
    let codes = serde_json::json!({"statusCodes": ["200", "204", "300-399"]});
    for (status, result) in [
        (200, ProbeResult::Success),
        (204, ProbeResult::Success),
        // A listed 3xx is what was asked for: a success, not a warning.
        (302, ProbeResult::Success),
        (399, ProbeResult::Success),
    ] {
        let server = answering(status, b"body").await;
        let got = outcome(&expecting(server.port(), codes.clone())).await;
        let body = if status == 204 { "" } else { "body" };
        assert_eq!(got, Outcome::new(result, body), "{status}");
    }
    for status in [201, 299, 400, 503] {
        let server = answering(status, b"secret body").await;
        let got = outcome(&expecting(server.port(), codes.clone())).await;
        let expected =
            format!("HTTP probe failed with statuscode: {status} (expected 200, 204 or 300-399)");
        assert_eq!(
            got,
            Outcome::new(ProbeResult::Failure, expected),
            "{status}"
        );
    }
    // A code the kubelet fails can be a success when listed.
    let server = answering(503, b"draining").await;
    let got = outcome(&expecting(
        server.port(),
        serde_json::json!({"statusCodes": ["500-503"]}),
    ))
    .await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "draining"));
}

#[tokio::test]
async fn ext_expectations_apply_to_the_final_response_of_a_redirect() {
    let server = TestServer::start(LOCAL, |request| match request.target() {
        "/start" => redirect(302, "/healthy"),
        _ => reply(200, b"arrived"),
    })
    .await;
    let both = serde_json::json!({"expect": {"statusCodes": ["200"], "bodyContains": "arrived"}});
    let got = outcome(&extended(server.port(), "/start", both)).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "arrived"));
    let redirect_only = serde_json::json!({"expect": {"statusCodes": ["302"]}});
    let got = outcome(&extended(server.port(), "/start", redirect_only)).await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Failure,
            "HTTP probe failed with statuscode: 200 (expected 302)"
        )
    );
    assert_eq!(
        server.received().len(),
        4,
        "both probes followed the redirect"
    );
}

#[tokio::test]
async fn ext_body_contains_matches_and_misses() {
    let server = answering(200, br#"{"status":"UP","checks":"ok"}"#).await;
    let got = outcome(&expecting(
        server.port(),
        serde_json::json!({"bodyContains": "\"ok\""}),
    ))
    .await;
    assert_eq!(
        got,
        Outcome::new(ProbeResult::Success, r#"{"status":"UP","checks":"ok"}"#)
    );
    let got = outcome(&expecting(
        server.port(),
        serde_json::json!({"bodyContains": "DOWN"}),
    ))
    .await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Failure,
            r#"HTTP probe failed: body does not contain "DOWN""#
        )
    );
}

#[tokio::test]
async fn ext_body_regex_matches_and_misses() {
    let pattern = r#"^\{"status":"UP""#;
    let up = answering(200, br#"{"status":"UP"}"#).await;
    let got = outcome(&expecting(
        up.port(),
        serde_json::json!({"bodyRegex": pattern}),
    ))
    .await;
    assert_eq!(
        got,
        Outcome::new(ProbeResult::Success, r#"{"status":"UP"}"#)
    );
    let down = answering(200, br#"{"status":"DOWN","detail":"secret"}"#).await;
    let got = outcome(&expecting(
        down.port(),
        serde_json::json!({"bodyRegex": pattern}),
    ))
    .await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Failure,
            r#"HTTP probe failed: body does not match ^\{"status":"UP""#
        )
    );
}

/// #25: a pattern whose lazy DFA thrashes on the body gives up within the
/// probe's timeout, failing the probe and saying why, instead of falling
/// back to a search as slow as the program's size times the body's.
#[tokio::test]
async fn ext_body_regex_gives_up_instead_of_burning_the_timeout() {
    let mut state: u64 = 7;
    let body: Vec<u8> = (0..10 * 1024)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            if (state >> 33) & 1 == 0 { b'a' } else { b'b' }
        })
        .collect();
    let body: &'static [u8] = Box::leak(body.into_boxed_slice());
    let server = answering(200, body).await;
    let pattern = "[ab]*a[ab]{200}c";
    let got = outcome(&expecting(
        server.port(),
        serde_json::json!({"bodyRegex": pattern}),
    ))
    .await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Failure,
            format!(
                "HTTP probe failed: matching the body against {pattern} gave up: too costly to match against this body"
            )
        )
    );
}

#[tokio::test]
async fn ext_body_expectations_see_only_the_first_10_kib() {
    for (padding, found) in [(10_240 - 2, true), (10_240 - 1, false), (10_240, false)] {
        let mut body = vec![b'a'; padding];
        body.extend_from_slice(b"OK");
        let server = TestServer::start(LOCAL, move |_| reply(200, &body)).await;
        for expect in [
            serde_json::json!({"bodyContains": "OK"}),
            serde_json::json!({"bodyRegex": "OK$"}),
        ] {
            let got = outcome(&expecting(server.port(), expect.clone())).await;
            let result = if found {
                ProbeResult::Success
            } else {
                ProbeResult::Failure
            };
            assert_eq!(
                got.result,
                result,
                "{padding} bytes before OK, {expect}: {}",
                &got.output[..got.output.len().min(80)]
            );
        }
    }
}

#[tokio::test]
async fn ext_body_expectations_leave_the_kubelets_status_rule() {
    // Without statusCodes: a 3xx is still a warning, a 5xx still fails with
    // the kubelet's message, before any body expectation.
    let moved = answering(301, b"see other").await;
    let got = outcome(&expecting(
        moved.port(),
        serde_json::json!({"bodyContains": "see"}),
    ))
    .await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Warning,
            "Probe terminated redirects, Response body: see other"
        )
    );
    let broken = answering(500, b"no").await;
    let got = outcome(&expecting(
        broken.port(),
        serde_json::json!({"bodyContains": "ok"}),
    ))
    .await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Failure,
            "HTTP probe failed with statuscode: 500"
        )
    );
}

#[tokio::test]
async fn ext_head_sends_head_on_every_hop_and_reads_no_body() {
    // The server announces a body it never sends: a GET would wait for it
    // until the deadline; a HEAD must not read any.
    let server = TestServer::start(LOCAL, |request| match request.target() {
        "/start" => redirect(307, "/healthy"),
        _ => vec![
            Step::Write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n".to_vec()),
            Step::Stall,
        ],
    })
    .await;
    let head = extended(
        server.port(),
        "/start",
        serde_json::json!({"method": "HEAD"}),
    );
    let started = std::time::Instant::now();
    let got = probe(
        &head,
        "127.0.0.1",
        Duration::from_secs(2),
        USER_AGENT,
        &Destinations::default(),
    )
    .await
    .expect("no body read, no error");
    assert_eq!(got, Outcome::new(ProbeResult::Success, ""));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let lines: Vec<String> = server
        .received()
        .iter()
        .map(|r| r.request_line.clone())
        .collect();
    assert_eq!(lines, ["HEAD /start HTTP/1.1", "HEAD /healthy HTTP/1.1"]);

    let get = action(server.port(), "/healthy");
    let got = probe(
        &get,
        "127.0.0.1",
        Duration::from_millis(300),
        USER_AGENT,
        &Destinations::default(),
    )
    .await;
    assert!(got.is_err(), "a GET waits for the announced body: {got:?}");
}

#[tokio::test]
async fn ext_head_with_status_codes() {
    let server = answering(204, b"").await;
    let podprobe = serde_json::json!({"method": "HEAD", "expect": {"statusCodes": ["200"]}});
    let got = outcome(&extended(server.port(), "/", podprobe)).await;
    assert_eq!(
        got,
        Outcome::new(
            ProbeResult::Failure,
            "HTTP probe failed with statuscode: 204 (expected 200)"
        )
    );
    assert_eq!(server.received()[0].request_line, "HEAD / HTTP/1.1");
}

/// An HTTPS `httpGet` probe of `port` (host `host`, else the pod IP
/// 127.0.0.1) with `podprobe.tls` set to `tls`, read by the strict parser.
fn https_with_tls(port: u16, host: Option<&str>, tls: serde_json::Value) -> HttpGetAction {
    let mut http_get = serde_json::json!({"port": port, "path": "/healthz", "scheme": "HTTPS"});
    if let Some(host) = host {
        http_get["host"] = host.into();
    }
    let object = serde_json::json!({"httpGet": http_get, "podprobe": {"tls": tls}});
    let kind = ProbeKind::Readiness;
    let object = probe_spec::decode_probe_object(kind, &object).expect("decodes");
    let container = k8s_openapi::api::core::v1::Container::default();
    match probe_spec::normalize_object(kind, &object, &container)
        .expect("valid")
        .handler
    {
        Handler::HttpGet(action) => action,
        other => panic!("expected httpGet, got {other:?}"),
    }
}

/// An HTTPS server presenting `leaf`, requiring a client certificate
/// signed by `client_ca` when given.
async fn tls_server(leaf: &support::pki::Leaf, client_ca: Option<&TestCa>) -> TestServer {
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(leaf, client_ca, &[]));
    TestServer::start_with_acceptor(LOCAL, acceptor, |_| reply(200, b"verified")).await
}

fn tls_failure(port: u16, text: &str) -> Outcome {
    Outcome::new(
        ProbeResult::Failure,
        format!("Get \"https://127.0.0.1:{port}/healthz\": {text}"),
    )
}

#[tokio::test]
async fn tls_ca_bundle_verifies_the_server_by_its_ip() {
    let ca = TestCa::new("probe-ca");
    let server = tls_server(&ca.leaf(&["127.0.0.1"]), None).await;
    let action = https_with_tls(
        server.port(),
        None,
        serde_json::json!({"caBundle": ca.pem()}),
    );
    assert_eq!(
        outcome(&action).await,
        Outcome::new(ProbeResult::Success, "verified")
    );
}

#[tokio::test]
async fn tls_unknown_authority_fails_like_go() {
    let ca = TestCa::new("probe-ca");
    let other = TestCa::new("other-ca");
    let server = tls_server(&other.leaf(&["127.0.0.1"]), None).await;
    let action = https_with_tls(
        server.port(),
        None,
        serde_json::json!({"caBundle": ca.pem()}),
    );
    assert_eq!(
        outcome(&action).await,
        tls_failure(
            server.port(),
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        )
    );
    // Without podprobe.tls the same server is the kubelet's success.
    let mut plain = action.clone();
    plain.extensions = Default::default();
    assert_eq!(outcome(&plain).await.result, ProbeResult::Success);
}

#[tokio::test]
async fn tls_name_mismatch_names_both_names() {
    let ca = TestCa::new("probe-ca");
    let server = tls_server(&ca.leaf(&["other.internal"]), None).await;
    let action = https_with_tls(
        server.port(),
        None,
        serde_json::json!({"caBundle": ca.pem(), "serverName": "app.internal"}),
    );
    assert_eq!(
        outcome(&action).await,
        tls_failure(
            server.port(),
            "tls: failed to verify certificate: x509: certificate is valid for other.internal, not app.internal"
        )
    );
    let by_ip = https_with_tls(
        server.port(),
        None,
        serde_json::json!({"caBundle": ca.pem()}),
    );
    assert_eq!(
        outcome(&by_ip).await,
        tls_failure(
            server.port(),
            "tls: failed to verify certificate: x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"
        )
    );
}

#[tokio::test]
async fn tls_server_name_overrides_the_name_verified_and_sent() {
    let ca = TestCa::new("probe-ca");
    let server = tls_server(&ca.leaf(&["app.internal"]), None).await;
    let action = https_with_tls(
        server.port(),
        None,
        serde_json::json!({"caBundle": ca.pem(), "serverName": "app.internal"}),
    );
    assert_eq!(outcome(&action).await.result, ProbeResult::Success);
    assert_eq!(server.received()[0].sni.as_deref(), Some("app.internal"));
}

#[tokio::test]
async fn tls_host_header_is_the_default_name() {
    let ca = TestCa::new("probe-ca");
    let server = tls_server(&ca.leaf(&["app.internal"]), None).await;
    let mut action = https_with_tls(
        server.port(),
        None,
        serde_json::json!({"caBundle": ca.pem()}),
    );
    action.headers = vec![("Host".into(), "app.internal:8443".into())];
    assert_eq!(outcome(&action).await.result, ProbeResult::Success);
    assert_eq!(server.received()[0].sni.as_deref(), Some("app.internal"));
}

#[tokio::test]
async fn tls_expired_certificate_fails_like_go() {
    let ca = TestCa::new("probe-ca");
    let server = tls_server(&ca.expired_leaf(&["127.0.0.1"]), None).await;
    let action = https_with_tls(
        server.port(),
        None,
        serde_json::json!({"caBundle": ca.pem()}),
    );
    assert_eq!(
        outcome(&action).await,
        tls_failure(
            server.port(),
            "tls: failed to verify certificate: x509: certificate has expired or is not yet valid"
        )
    );
}

#[tokio::test]
async fn tls_client_certificate_is_presented_or_refused() {
    let ca = TestCa::new("probe-ca");
    let clients = TestCa::new("client-ca");
    let server = tls_server(&ca.leaf(&["127.0.0.1"]), Some(&clients)).await;
    let mut action = https_with_tls(
        server.port(),
        None,
        serde_json::json!({"caBundle": ca.pem()}),
    );
    assert_eq!(
        outcome(&action).await,
        tls_failure(server.port(), "remote error: tls: certificate required")
    );
    let client = clients.leaf(&["probe.client"]);
    action.extensions.tls.client_identity = Some(
        podprobe::api::client_pem::client_identity_from_pem(
            client.cert_pem.as_bytes(),
            client.key_pem.as_bytes(),
        )
        .unwrap(),
    );
    assert_eq!(
        outcome(&action).await,
        Outcome::new(ProbeResult::Success, "verified")
    );
    let stranger = TestCa::new("stranger").leaf(&["probe.client"]);
    action.extensions.tls.client_identity = Some(
        podprobe::api::client_pem::client_identity_from_pem(
            stranger.cert_pem.as_bytes(),
            stranger.key_pem.as_bytes(),
        )
        .unwrap(),
    );
    assert_eq!(
        outcome(&action).await,
        tls_failure(
            server.port(),
            "remote error: tls: unknown certificate authority"
        )
    );
}

/// H23: `podprobe.http.protocol: HTTP2` (as `httpGet.protocol: HTTP2`)
/// speaks HTTP/2 with prior knowledge on the cleartext connection, with the
/// request Go's HTTP/2 transport would send.
#[tokio::test]
async fn h23_http2_speaks_h2c_with_prior_knowledge() {
    let server = TestServer::start_h2c(LOCAL, 200, b"over h2c").await;
    let h2c = serde_json::json!({"http": {"protocol": "HTTP2"}});
    let action = with_headers(
        extended(server.port(), "/h2c?x=1", h2c),
        &[("X-Custom", "1")],
    );
    let got = outcome(&action).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "over h2c"));
    let request = &server.received()[0];
    assert_eq!(request.request_line, "GET /h2c?x=1 HTTP/2.0");
    assert_eq!(request.header(":scheme"), ["http"]);
    let authority = format!("127.0.0.1:{}", server.port());
    assert_eq!(request.header(":authority"), [authority.as_str()]);
    assert_eq!(request.header("user-agent"), [USER_AGENT]);
    assert_eq!(request.header("accept"), ["*/*"]);
    assert_eq!(request.header("x-custom"), ["1"]);
    for absent in ["host", "connection", "content-length"] {
        assert!(!request.has_header(absent), "{absent}: {request:?}");
    }
    // The kubelet's status rule, unchanged over h2c.
    let failing = TestServer::start_h2c(LOCAL, 503, b"down").await;
    let action = extended(
        failing.port(),
        "/",
        serde_json::json!({"http": {"protocol": "HTTP2"}}),
    );
    assert_eq!(
        outcome(&action).await,
        Outcome::new(
            ProbeResult::Failure,
            "HTTP probe failed with statuscode: 503"
        )
    );
}

/// H23: an h2c probe of a server that speaks only HTTP/1.1 fails with Go's
/// client error shape; an HTTP/1.1 probe of an h2c-only server fails too.
#[tokio::test]
async fn h23_h2c_and_http1_do_not_mix() {
    let http1 = answering(200, b"ok").await;
    let h2c = extended(
        http1.port(),
        "/",
        serde_json::json!({"http": {"protocol": "HTTP2"}}),
    );
    let got = outcome(&h2c).await;
    let prefix = format!("Get \"http://127.0.0.1:{}/\": ", http1.port());
    assert!(
        got.result == ProbeResult::Failure && got.output.starts_with(&prefix),
        "{got:?}"
    );
    let h2c_only = TestServer::start_h2c(LOCAL, 200, b"ok").await;
    let got = outcome(&action(h2c_only.port(), "/")).await;
    assert_eq!(got.result, ProbeResult::Failure, "{got:?}");
}

/// H24: a POST sends its body with `Content-Length` right after
/// `User-Agent`, where Go's request writer puts it.
#[tokio::test]
async fn h24_post_sends_its_body_with_content_length_in_gos_order() {
    let server = answering(200, b"ok").await;
    let post = serde_json::json!({"method": "POST", "body": "{\"deep\":true}"});
    let action = with_headers(
        extended(server.port(), "/check", post),
        &[("Content-Type", "application/json")],
    );
    assert_eq!(
        outcome(&action).await,
        Outcome::new(ProbeResult::Success, "ok")
    );
    let request = &server.received()[0];
    assert_eq!(request.request_line, "POST /check HTTP/1.1");
    let host = format!("127.0.0.1:{}", server.port());
    let expected = [
        ("Host", host.as_str()),
        ("User-Agent", USER_AGENT),
        ("Content-Length", "13"),
        ("Accept", "*/*"),
        ("Content-Type", "application/json"),
        ("Connection", "close"),
    ];
    let headers: Vec<(&str, &str)> = (request.headers.iter())
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(headers, expected);
    assert_eq!(request.body, br#"{"deep":true}"#);
    // A PUT without a body still says so, as Go does for PUT and POST.
    let put = extended(server.port(), "/", serde_json::json!({"method": "PUT"}));
    outcome(&put).await;
    let request = &server.received()[1];
    assert_eq!(request.request_line, "PUT / HTTP/1.1");
    assert_eq!(request.header("Content-Length"), ["0"]);
    assert!(request.body.is_empty());
}

/// H24, H12: a 307 or 308 keeps the method and the body; a 301, 302 or
/// 303 turns a POST into a bodiless GET, as Go's client does.
#[tokio::test]
async fn h24_redirects_keep_post_on_307_and_308_and_make_it_get_otherwise() {
    let server = TestServer::start(LOCAL, |request| match request.target() {
        "/end" => reply(200, b"ok"),
        start => {
            let status = start.trim_start_matches("/start").parse().unwrap_or(500);
            redirect(status, "/end")
        }
    })
    .await;
    for (status, method, body) in [
        (307, "POST", &b"ping"[..]),
        (308, "POST", b"ping"),
        (301, "GET", b""),
        (302, "GET", b""),
        (303, "GET", b""),
    ] {
        let before = server.received().len();
        let post = serde_json::json!({"method": "POST", "body": "ping"});
        let action = extended(server.port(), &format!("/start{status}"), post);
        assert_eq!(
            outcome(&action).await,
            Outcome::new(ProbeResult::Success, "ok"),
            "{status}"
        );
        let received = server.received();
        let [first, second] = &received[before..] else {
            panic!("{status}: {received:?}");
        };
        assert_eq!(first.request_line, format!("POST /start{status} HTTP/1.1"));
        assert_eq!(first.body, b"ping");
        assert_eq!(
            second.request_line,
            format!("{method} /end HTTP/1.1"),
            "{status}"
        );
        assert_eq!(second.body, body, "{status}");
        assert_eq!(
            second.has_header("Content-Length"),
            method == "POST",
            "{status}"
        );
    }
}

/// H23, H24: a PUT over h2c carries its body and its length.
#[tokio::test]
async fn h23_h24_h2c_put_carries_its_body() {
    let server = TestServer::start_h2c(LOCAL, 204, b"").await;
    let put =
        serde_json::json!({"method": "PUT", "body": "state=ok", "http": {"protocol": "HTTP2"}});
    let got = outcome(&extended(server.port(), "/state", put)).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, ""));
    let request = &server.received()[0];
    assert_eq!(request.request_line, "PUT /state HTTP/2.0");
    assert_eq!(request.header("content-length"), ["8"]);
    assert_eq!(request.body, b"state=ok");
}

/// H23 over a hostile server: a response header block larger than 64 KiB
/// fails the probe instead of being buffered (hyper would take 16 MiB).
#[tokio::test]
async fn h23_an_oversized_http2_header_block_fails_the_probe() {
    let h2c = serde_json::json!({"http": {"protocol": "HTTP2"}});
    let fits = TestServer::start_h2c_with_header_bytes(LOCAL, 200, b"ok", 32 * 1024).await;
    let got = outcome(&extended(fits.port(), "/", h2c.clone())).await;
    assert_eq!(got, Outcome::new(ProbeResult::Success, "ok"));
    let huge = TestServer::start_h2c_with_header_bytes(LOCAL, 200, b"ok", 256 * 1024).await;
    let got = outcome(&extended(huge.port(), "/", h2c)).await;
    assert_eq!(got.result, ProbeResult::Failure, "{got:?}");
}
