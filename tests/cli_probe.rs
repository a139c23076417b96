//! `podprobe probe` end to end, as a process: real servers on loopback, real
//! exit codes, real JSON.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::thread;

use serde_json::Value;

// Shared with the TLS tests of the probers; this file uses only part of it.
#[allow(dead_code)]
#[path = "support/pki.rs"]
mod pki;

// Shared with the CRI tests; this file uses only part of it. It makes its
// pods with the CRI lifecycle calls of the `testing` feature.
#[cfg(feature = "testing")]
#[allow(dead_code)]
#[path = "support/cri.rs"]
mod cri_support;

/// A one-thread HTTP/1 server on 127.0.0.1 that answers every request with
/// `status` and `headers`/`body`, until the test process exits.
fn http_server(status: u16, extra_headers: &'static str, body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            answer(stream, status, extra_headers, body);
        }
    });
    port
}

fn answer(mut stream: TcpStream, status: u16, extra_headers: &str, body: &str) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        if line == "\r\n" {
            break;
        }
        line.clear();
    }
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn podprobe(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_podprobe"))
        .arg("probe")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn podprobe");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait podprobe")
}

/// Runs a probe given on stdin and returns (exit code, parsed JSON report).
fn probe_json(probe: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["--probe", "-", "--output", "json"];
    args.extend_from_slice(extra);
    let out = podprobe(&args, probe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {stdout:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exit code"), report)
}

fn invalid(probe: &str, extra: &[&str]) -> String {
    let mut args = vec!["--probe", "-"];
    args.extend_from_slice(extra);
    let out = podprobe(&args, probe);
    assert_eq!(
        out.status.code(),
        Some(64),
        "want exit 64; stdout {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn http_success_exits_0_with_body_as_output() {
    let port = http_server(200, "", "all good");
    let (code, report) = probe_json(&format!("httpGet: {{path: /healthz, port: {port}}}"), &[]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["result"], "success");
    assert_eq!(report["output"], "all good");
    assert_eq!(report["error"], Value::Null);
    assert_eq!(report["event"], Value::Null);
    assert!(report["duration_ms"].as_f64().is_some());
}

#[test]
fn http_failure_exits_1_with_unhealthy_event() {
    let port = http_server(503, "", "secret body");
    let (code, report) = probe_json(
        &format!(r#"{{"httpGet": {{"port": {port}}}}}"#),
        &["--kind", "liveness"],
    );
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["result"], "failure");
    assert_eq!(report["output"], "HTTP probe failed with statuscode: 503");
    assert_eq!(report["event"]["type"], "Warning");
    assert_eq!(report["event"]["reason"], "Unhealthy");
    assert_eq!(
        report["event"]["message"],
        "Liveness probe failed: HTTP probe failed with statuscode: 503"
    );
}

#[test]
fn http_redirect_to_other_host_exits_0_with_probe_warning() {
    let port = http_server(302, "Location: http://other.invalid/\r\n", "moved");
    let (code, report) = probe_json(&format!("httpGet: {{port: {port}}}"), &[]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["result"], "warning");
    assert_eq!(report["event"]["reason"], "ProbeWarning");
    assert_eq!(
        report["event"]["message"],
        "Readiness probe warning: Probe terminated redirects, Response body: moved"
    );
}

#[test]
fn tcp_open_port_exits_0_and_closed_port_exits_1() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let open = listener.local_addr().expect("addr").port();
    let (code, report) = probe_json(&format!("tcpSocket: {{port: {open}}}"), &[]);
    assert_eq!(
        (code, &report["result"]),
        (0, &Value::from("success")),
        "{report}"
    );

    let closed = closed_port();
    let (code, report) = probe_json(&format!("tcpSocket: {{port: {closed}}}"), &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["output"],
        format!("dial tcp 127.0.0.1:{closed}: connect: connection refused")
    );
}

#[test]
fn pod_manifest_selects_container_and_kind_and_resolves_named_port() {
    let port = http_server(200, "", "");
    let pod = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  containers:
  - name: sidecar
    image: busybox
  - name: app
    image: busybox
    ports: [{{name: http, containerPort: {port}}}]
    livenessProbe:
      httpGet: {{path: /live, port: http}}
    readinessProbe:
      tcpSocket: {{port: 1}}
"#
    );
    let (code, report) = probe_json(&pod, &["--container", "app", "--kind", "liveness"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["kind"], "liveness");
    assert_eq!(report["container"], "app");
    assert_eq!(
        report["handler"],
        format!("httpGet http://127.0.0.1:{port}/live")
    );
}

#[test]
fn text_output_names_kind_handler_and_result() {
    let port = http_server(200, "", "ok");
    let out = podprobe(
        &["--probe", "-"],
        &format!("httpGet: {{port: {port}, path: /x}}"),
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!(
            "Readiness probe (httpGet http://127.0.0.1:{port}/x): success\n"
        )),
        "{text}"
    );
}

#[test]
fn probe_file_is_read_from_a_path() {
    let port = http_server(200, "", "");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("probe.json");
    std::fs::write(&path, format!(r#"{{"httpGet":{{"port":{port}}}}}"#)).expect("write");
    let out = podprobe(&["--probe", path.to_str().expect("utf-8 path")], "");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn unknown_named_port_is_invalid_input_naming_the_field() {
    let pod = r#"
kind: Pod
spec:
  containers:
  - name: app
    readinessProbe:
      httpGet: {port: web}
"#;
    let stderr = invalid(pod, &["--container", "app"]);
    assert!(
        stderr.contains(r#"readinessProbe.httpGet.port: port "web" not found in container "app""#),
        "{stderr}"
    );
}

#[test]
fn probe_without_handler_is_invalid_input() {
    let stderr = invalid("periodSeconds: 3", &[]);
    assert!(stderr.contains("must specify a handler type"), "{stderr}");
}

#[test]
fn liveness_success_threshold_other_than_1_is_invalid_input() {
    let stderr = invalid(
        "{tcpSocket: {port: 80}, successThreshold: 2}",
        &["--kind", "liveness"],
    );
    assert!(
        stderr.contains("livenessProbe.successThreshold"),
        "{stderr}"
    );
}

#[test]
fn malformed_yaml_and_wrong_types_are_invalid_input() {
    for input in [
        "{httpGet: [",
        "httpGet: {port: {}}",
        "\u{0}\u{1}garbage",
        "[]",
        "42",
    ] {
        let stderr = invalid(input, &[]);
        assert!(stderr.contains("invalid input"), "{input:?}: {stderr}");
    }
}

#[test]
fn missing_probe_file_is_invalid_input() {
    let out = podprobe(&["--probe", "/nonexistent/probe.yaml"], "");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/probe.yaml"));
}

#[test]
fn exec_probe_without_container_id_is_invalid_input() {
    let stderr = invalid("exec: {command: [\"true\"]}", &[]);
    assert!(stderr.contains("--container-id"), "{stderr}");
}

/// H25: header values from Secrets are refused (exit 64), saying how to
/// try the probe with the value instead.
#[test]
fn secret_headers_are_invalid_input_pointing_to_http_headers() {
    let stderr = invalid(
        "httpGet: {port: 1}\npodprobe: {http: {headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: probe-auth, key: token}}}]}}",
        &[],
    );
    assert_eq!(
        stderr.trim_end(),
        "podprobe probe: invalid input: podprobe.http.headers \"Authorization\": podprobe probe reads \
         no Secrets; put the value in httpHeaders to try the probe here (kubectl get secret \
         probe-auth -o jsonpath='{.data.token}' | base64 -d)"
    );
}

/// `network: pod` needs a pod to find the namespace of; the CLI has none
/// and says how to run it inside one instead. `network` on exec is the
/// annotation's field error.
#[test]
fn pod_network_is_invalid_input_pointing_to_nsenter() {
    let stderr = invalid(
        "tcpSocket: {port: 1}\npodprobe: {network: pod}",
        &["--kind", "liveness"],
    );
    assert_eq!(
        stderr.trim_end(),
        "podprobe probe: invalid input: livenessProbe.podprobe.network: \"pod\" runs only under \
         podprobe run; to probe from inside a pod's network, run podprobe probe there without it: \
         nsenter --net=/proc/<PID>/ns/net podprobe probe --pod-ip 127.0.0.1 ..."
    );
    let stderr = invalid(
        "exec: {command: [\"true\"]}\npodprobe: {network: node}",
        &[],
    );
    assert!(
        stderr.contains(
            "podprobe.network: Forbidden: may only be set for httpGet, tcpSocket and grpc probes, not exec"
        ),
        "{stderr}"
    );
}

#[test]
fn pod_with_several_containers_needs_container_flag() {
    let pod = "kind: Pod\nspec:\n  containers:\n  - name: a\n  - name: b\n";
    let stderr = invalid(pod, &[]);
    assert!(stderr.contains("--container is required"), "{stderr}");
    assert!(stderr.contains("a, b"), "{stderr}");
}

#[test]
fn exec_probe_against_unreachable_runtime_errors_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = format!("unix://{}/none.sock", dir.path().display());
    let (code, report) = probe_json(
        "exec: {command: [\"true\"]}",
        &[
            "--container-id",
            "containerd://abc",
            "--cri-endpoint",
            &socket,
        ],
    );
    assert_eq!(code, 2, "{report}");
    assert_eq!(report["attempts"], 3);
    let error = report["error"].as_str().expect("error text");
    assert!(error.contains("none.sock"), "{error}");
    assert_eq!(report["event"]["reason"], "Unhealthy");
}

#[test]
fn help_explains_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_podprobe"))
        .args(["probe", "--help"])
        .output()
        .expect("run");
    let mut help = String::new();
    out.stdout
        .as_slice()
        .read_to_string(&mut help)
        .expect("utf-8");
    for flag in [
        "--probe",
        "--container",
        "--kind",
        "--pod-ip",
        "--container-id",
        "--cri-endpoint",
        "--kube-probe-version",
        "--output",
        "--client-cert",
        "--client-key",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn exec_probe_runs_in_a_real_container_with_env_expansion() {
    let cri = cri_support::client();
    let pod = cri_support::TestPod::start(&cri, "cli-exec").await;
    let id = pod.kubernetes_container_id();
    let manifest = r#"
kind: Pod
spec:
  containers:
  - name: app
    env: [{name: WORD, value: hello}]
    readinessProbe:
      exec: {command: [sh, -c, "echo $(WORD); echo oops >&2; exit 3"]}
"#;
    let args = [
        "--container-id",
        id.as_str(),
        "--cri-endpoint",
        cri_support::endpoint(),
    ];
    let (code, report) = probe_json(manifest, &args);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["result"], "failure");
    assert_eq!(report["output"], "hello\noops\n");
    assert_eq!(
        report["event"]["message"],
        "Readiness probe failed: hello\noops\n"
    );

    let (code, report) = probe_json(r#"{"exec": {"command": ["true"]}}"#, &args);
    assert_eq!(
        (code, &report["result"]),
        (0, &Value::from("success")),
        "{report}"
    );
}

/// A tonic health server on 127.0.0.1 where "" is SERVING and "down" is
/// NOT_SERVING, on a runtime of its own until the test process exits.
fn grpc_health_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let (reporter, service) = tonic_health::server::health_reporter();
            reporter
                .set_service_status("down", tonic_health::ServingStatus::NotServing)
                .await;
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming(service, incoming)
                .await;
        });
    });
    port
}

#[test]
fn grpc_serving_exits_0_and_not_serving_exits_1() {
    let port = grpc_health_server();
    let (code, report) = probe_json(&format!("grpc: {{port: {port}}}"), &[]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["output"], "service healthy");

    let (code, report) = probe_json(&format!("grpc: {{port: {port}, service: down}}"), &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["event"]["message"],
        r#"Readiness probe failed: service unhealthy (responded with "NOT_SERVING")"#
    );
}

#[test]
fn misspelt_fields_are_invalid_input_naming_the_field() {
    // Once run as plain HTTP with the defaults, the typos dropped unseen.
    let stderr = invalid(
        r#"{"httpGet": {"path": "/", "port": 1, "sheme": "HTTPS"}, "timeoutSecond": 1, "initialDelaySecond": 5}"#,
        &[],
    );
    assert_eq!(
        stderr,
        "podprobe probe: invalid input: readinessProbe.httpGet.sheme: unknown field\n"
    );
    let stderr = invalid(
        "{tcpSocket: {port: 1}, podprobe: {periodMiliseconds: 100}}",
        &["--kind", "liveness"],
    );
    assert!(
        stderr.contains("livenessProbe.podprobe.periodMiliseconds: unknown field"),
        "{stderr}"
    );
}

/// `podprobe probe` runs once, so the period changes nothing there, but it
/// is validated as in the annotation.
#[test]
fn period_milliseconds_is_validated_as_in_the_annotation() {
    let stderr = invalid(
        "{tcpSocket: {port: 1}, podprobe: {periodMilliseconds: 99}}",
        &["--kind", "liveness"],
    );
    assert_eq!(
        stderr,
        "podprobe probe: invalid input: livenessProbe.podprobe.periodMilliseconds: Invalid value: 99: must be greater than or equal to 100\n"
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (code, report) = probe_json(
        &format!("{{tcpSocket: {{port: {port}}}, podprobe: {{periodMilliseconds: 100}}}}"),
        &["--kind", "liveness"],
    );
    assert_eq!(
        (code, &report["result"]),
        (0, &Value::from("success")),
        "{report}"
    );
}

#[test]
fn status_code_expectation_runs_through_the_cli() {
    let port = http_server(503, "", "secret body");
    let probe = format!(
        r#"
httpGet: {{path: /healthz, port: {port}}}
podprobe:
  expect:
    statusCodes: ["200", "204", "300-399"]
"#
    );
    let (code, report) = probe_json(&probe, &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["output"],
        "HTTP probe failed with statuscode: 503 (expected 200, 204 or 300-399)"
    );
    assert_eq!(
        report["event"]["message"],
        "Readiness probe failed: HTTP probe failed with statuscode: 503 (expected 200, 204 or 300-399)"
    );

    let draining =
        format!("{{httpGet: {{port: {port}}}, podprobe: {{expect: {{statusCodes: [\"503\"]}}}}}}");
    let (code, report) = probe_json(&draining, &[]);
    assert_eq!(
        (code, &report["result"]),
        (0, &Value::from("success")),
        "{report}"
    );

    let stderr = invalid(
        &format!(
            "{{httpGet: {{port: {port}}}, podprobe: {{method: HEAD, expect: {{bodyContains: ok}}}}}}"
        ),
        &[],
    );
    assert!(
        stderr.contains(
            "readinessProbe.podprobe.expect.bodyContains: Forbidden: a HEAD response has no body"
        ),
        "{stderr}"
    );
}

/// An HTTPS server on 127.0.0.1 with `config`, answering every request
/// 200 `tls ok`, on a runtime of its own until the test process exits.
fn https_server(config: std::sync::Arc<rustls::ServerConfig>) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            while let Ok((stream, _)) = listener.accept().await {
                let Ok(mut stream) = acceptor.accept(stream).await else {
                    continue;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ntls ok",
                    )
                    .await;
                let _ = stream.shutdown().await;
            }
        });
    });
    port
}

fn https_probe(port: u16, tls: Value) -> String {
    serde_json::json!({
        "httpGet": {"path": "/healthz", "port": port, "scheme": "HTTPS"},
        "podprobe": {"tls": tls},
    })
    .to_string()
}

#[test]
fn ca_bundle_verifies_through_the_cli() {
    let ca = pki::TestCa::new("probe-ca");
    let port = https_server(pki::server_config(&ca.leaf(&["127.0.0.1"]), None, &[]));
    let (code, report) = probe_json(
        &https_probe(port, serde_json::json!({"caBundle": ca.pem()})),
        &[],
    );
    assert_eq!(
        (code, &report["output"]),
        (0, &Value::from("tls ok")),
        "{report}"
    );
    let stranger = pki::TestCa::new("other-ca");
    let (code, report) = probe_json(
        &https_probe(port, serde_json::json!({"caBundle": stranger.pem()})),
        &[],
    );
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["output"],
        format!(
            "Get \"https://127.0.0.1:{port}/healthz\": tls: failed to verify certificate: x509: certificate signed by unknown authority"
        )
    );
}

#[test]
fn client_cert_flags_present_a_certificate() {
    let ca = pki::TestCa::new("probe-ca");
    let clients = pki::TestCa::new("client-ca");
    let port = https_server(pki::server_config(
        &ca.leaf(&["127.0.0.1"]),
        Some(&clients),
        &[],
    ));
    let probe = https_probe(port, serde_json::json!({"caBundle": ca.pem()}));
    let (code, report) = probe_json(&probe, &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["output"],
        format!(
            "Get \"https://127.0.0.1:{port}/healthz\": remote error: tls: certificate required"
        )
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let client = clients.leaf(&["probe.client"]);
    let (cert, key) = (dir.path().join("client.crt"), dir.path().join("client.key"));
    std::fs::write(&cert, &client.cert_pem).unwrap();
    std::fs::write(&key, &client.key_pem).unwrap();
    let flags = [
        "--client-cert",
        cert.to_str().unwrap(),
        "--client-key",
        key.to_str().unwrap(),
    ];
    let (code, report) = probe_json(&probe, &flags);
    assert_eq!(
        (code, &report["output"]),
        (0, &Value::from("tls ok")),
        "{report}"
    );
    // A probe naming a Secret: the CLI reads none and says which flags
    // stand in for it; with them, the files are presented.
    let from_secret = https_probe(
        port,
        serde_json::json!({"caBundle": ca.pem(), "clientCertificate": {"secretName": "app-probe-client"}}),
    );
    let stderr = invalid(&from_secret, &[]);
    assert!(
        stderr.contains(
            r#"podprobe.tls.clientCertificate.secretName "app-probe-client": podprobe probe reads no Secrets; give the certificate and key with --client-cert FILE --client-key FILE"#
        ),
        "{stderr}"
    );
    let (code, report) = probe_json(&from_secret, &flags);
    assert_eq!(
        (code, &report["output"]),
        (0, &Value::from("tls ok")),
        "{report}"
    );
    // Plain HTTP has no TLS connection to present it on.
    let stderr = invalid(&format!("httpGet: {{port: {port}}}"), &flags);
    assert!(
        stderr.contains("--client-cert: the probe makes no TLS connection"),
        "{stderr}"
    );
    // A key file that holds no key is named.
    let stderr = invalid(
        &probe,
        &[
            "--client-cert",
            cert.to_str().unwrap(),
            "--client-key",
            cert.to_str().unwrap(),
        ],
    );
    assert!(
        stderr.contains("client key: no PEM private key"),
        "{stderr}"
    );
}
