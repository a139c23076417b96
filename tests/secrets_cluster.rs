//! Client certificates from Secrets (#14) on the real local cluster:
//! `podprobe run` in gate mode as podprobe's own ServiceAccount
//! (`podprobe-system/podprobe`, with the ClusterRole rendered from the
//! chart and nothing more; a token bound to the node, so the admission
//! policy lets it write), probing an HTTPS server on loopback that requires
//! a client certificate from the test's own CA. The probe's certificate is
//! a `kubernetes.io/tls` Secret of the test's namespace, readable only once
//! the Role and RoleBinding of docs/extensions.md (Client certificates)
//! exist.

mod support {
    pub mod cluster;
    pub mod host_podprobe;
    pub mod http_server;
    // Shared with the HTTP tests; this one uses part of it.
    #[allow(dead_code)]
    pub mod pki;
}

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::cluster::{
    BUSYBOX_IMAGE, GATE, Namespace, SLEEP_LOOP, TEST_RUN_LABEL, cluster, condition, gated_pod,
    node_token, token_kubeconfig, unique_id, wait_for,
};
use support::host_podprobe::HostPodprobe;
use support::http_server::{TestServer, reply};
use support::pki::{Leaf, TestCa, server_config};

const SECRET: &str = "app-probe-client";

/// podprobe re-reads the Secret this often here (the default is 60 s), so
/// that the rotation below shows within seconds.
const TTL_SECONDS: u64 = 5;

/// A probe's verdict reaches the gate within: `failureThreshold` (3) ×
/// `periodSeconds` (1), one more period for the probe's phase, and 10 s of
/// slack for the patch, the API server and the test's `kubectl get` on a
/// loaded two-core machine.
const VERDICT_WITHIN: Duration = Duration::from_secs(3 + 1 + 10);

/// After the Role is created the Secret is read at the next retry of the
/// backoff (2 s, 4 s, ... each with up to half again of jitter; the test
/// creates the Role after the first failed read or two), then the probe
/// must pass once.
const GRANT_NOTICED_WITHIN: Duration = Duration::from_secs(12 + 10);

/// Writes `leaf`'s PEM files into `dir`: (certificate, key).
fn pem_files(dir: &Path, name: &str, leaf: &Leaf) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert, &leaf.cert_pem).expect("write certificate");
    std::fs::write(&key, &leaf.key_pem).expect("write key");
    (cert, key)
}

/// docs/extensions.md's `kubectl create secret tls`, as an object to apply
/// (so that the same call both creates and rotates it).
fn tls_secret(ns: &Namespace, cert: &Path, key: &Path) -> String {
    ns.kubectl(&[
        "create",
        "secret",
        "tls",
        SECRET,
        &format!("--cert={}", cert.display()),
        &format!("--key={}", key.display()),
        "--dry-run=client",
        "-o",
        "json",
    ])
}

/// The latest Event about `pod` with `reason`, once there is one.
fn wait_event(ns: &Namespace, pod: &str, reason: &str) -> Value {
    ns.wait_for(
        &format!("a {reason} event"),
        Duration::from_secs(60),
        || {
            events(ns, pod, reason)
                .pop()
                .ok_or_else(|| "none yet".to_string())
        },
    )
}

fn events(ns: &Namespace, pod: &str, reason: &str) -> Vec<Value> {
    ns.events_for(pod)
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

fn gate(ns: &Namespace, pod: &str) -> Result<String, String> {
    let object = ns.pod(pod)?;
    condition(&object, GATE)
        .map(|(status, _)| status)
        .ok_or_else(|| "no podprobe.io/ready condition yet".to_string())
}

fn wait_gate(ns: &Namespace, pod: &str, status: &str, within: Duration, logs: &HostPodprobe) {
    wait_for(
        &format!("{pod} {GATE}={status}"),
        within,
        || match gate(ns, pod)? {
            s if s == status => Ok(()),
            other => Err(format!("{GATE} is {other}")),
        },
        || format!("{}\n--- podprobe\n{}", ns.diagnostics(), logs.log_tail(60)),
    );
}

/// podprobe's namespace, ServiceAccount and ClusterRole as the chart
/// renders them (deploy/base: no rule names Secrets), and a kubeconfig in a
/// new temporary directory with that ServiceAccount's token bound to the
/// node: (node, directory, kubeconfig).
fn as_podprobe() -> (String, tempfile::TempDir, PathBuf) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    cluster()
        .kubectl(&[
            "apply",
            "-f",
            &repo
                .join("deploy/base/namespace.yaml")
                .display()
                .to_string(),
            "-f",
            &repo.join("deploy/base/rbac.yaml").display().to_string(),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    let node = cluster().node_name();
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = token_kubeconfig(
        &node_token("podprobe-system", "podprobe", &node),
        dir.path(),
    );
    (node, dir, kubeconfig)
}

#[test]
fn a_client_certificate_secret_is_read_only_once_granted_and_rotation_is_followed() {
    let run_id = unique_id();
    let ns = Namespace::create(&format!("podprobe-secrets-{run_id}"));
    let (node, dir, kubeconfig) = as_podprobe();

    let server_ca = TestCa::new("server-ca");
    let clients = TestCa::new("client-ca");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(
        &server_ca.leaf(&["127.0.0.1"]),
        Some(&clients),
        &[],
    ));
    let server = runtime.block_on(TestServer::start_with_acceptor(
        "127.0.0.1:0",
        acceptor,
        |_| reply(200, b"ok"),
    ));

    let granted = clients.leaf(&["probe.client"]);
    let (cert, key) = pem_files(dir.path(), "granted", &granted);
    cluster()
        .kubectl_with_input(
            &["-n", &ns.name, "apply", "-f", "-"],
            Some(&tls_secret(&ns, &cert, &key)),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let mut pod = gated_pod(
        "web",
        "app",
        BUSYBOX_IMAGE,
        &["sh", "-c", SLEEP_LOOP],
        &[],
        json!({"readinessProbe": {
            "httpGet": {"host": "127.0.0.1", "port": server.port(), "scheme": "HTTPS"},
            "periodSeconds": 1,
            "podprobe": {"tls": {
                "caBundle": server_ca.pem(),
                "clientCertificate": {"secretName": SECRET},
            }},
        }}),
    );
    pod["metadata"]["labels"] = json!({TEST_RUN_LABEL: run_id});
    ns.create_pod(&pod);
    let podprobe = HostPodprobe::start_with(
        "gate",
        &node,
        &run_id,
        &kubeconfig.display().to_string(),
        &[
            "--allow-probe-hosts",
            "127.0.0.1/32",
            "--secret-ttl-seconds",
            &TTL_SECONDS.to_string(),
        ],
    );

    // Without a Role: a Warning Event that says what to grant, the gate
    // False, and no connection made without the certificate.
    let event = wait_event(&ns, "web", "ClientCertificateUnavailable");
    let message = event["message"].as_str().unwrap_or_default();
    let expected = format!(
        r#"Readiness probe failed: client certificate: Secret "{SECRET}" in namespace "{}": podprobe may not read it; grant get on it to podprobe's ServiceAccount with a Role and RoleBinding in the namespace (secrets "{SECRET}" is forbidden: User "system:serviceaccount:podprobe-system:podprobe" cannot get resource "secrets""#,
        ns.name
    );
    assert!(message.starts_with(&expected), "{message}");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["fieldPath"], "spec.containers{app}");
    assert_eq!(gate(&ns, "web").as_deref(), Ok("False"));
    assert_eq!(
        server.connections(),
        0,
        "no probe connected without a certificate"
    );
    let logs = podprobe.logs();
    let logged = logs
        .lines()
        .find(|line| line.contains("cannot use the probe's client certificate Secret"))
        .unwrap_or_else(|| panic!("no log line:\n{logs}"));
    for field in [
        format!("namespace={}", ns.name),
        "pod=web".to_string(),
        "container=app".to_string(),
        format!("secret={SECRET}"),
        "forbidden".to_string(),
    ] {
        assert!(logged.contains(&field), "{field} not in {logged}");
    }

    // The namespace's owner runs docs/extensions.md's two lines.
    ns.grant_get(
        "podprobe-client-cert",
        "secrets",
        Some(SECRET),
        "podprobe-system:podprobe",
    );
    wait_gate(&ns, "web", "True", GRANT_NOTICED_WITHIN, &podprobe);

    // Rotated to a certificate of another CA, which the server refuses:
    // podprobe presents it within the TTL and the gate turns False.
    let stranger = TestCa::new("stranger").leaf(&["probe.client"]);
    let (cert, key) = pem_files(dir.path(), "stranger", &stranger);
    cluster()
        .kubectl_with_input(
            &["-n", &ns.name, "apply", "-f", "-"],
            Some(&tls_secret(&ns, &cert, &key)),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    wait_gate(
        &ns,
        "web",
        "False",
        Duration::from_secs(TTL_SECONDS) + VERDICT_WITHIN,
        &podprobe,
    );
    let refused = events(&ns, "web", "Unhealthy");
    assert!(
        refused.iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("remote error: tls: unknown certificate authority"))),
        "{refused:#?}"
    );

    // Neither the Events nor the log hold what the Secrets held.
    let everything = format!(
        "{}\n{}",
        podprobe.logs(),
        ns.kubectl(&["get", "events", "-o", "json"])
    );
    for leaf in [&granted, &stranger] {
        let key_line = leaf.key_pem.lines().nth(1).expect("a PEM body line");
        assert!(!everything.contains(key_line), "key material leaked");
    }
    assert!(!everything.contains("PRIVATE KEY"), "key material leaked");
}

/// H25: a header value from a Secret (`podprobe.http.headers`) is read only
/// once a Role grants `get` on that Secret to podprobe; before, every run
/// fails without connecting, with a `HeaderSecretUnavailable` Warning that
/// says what to grant. The value reaches the server and never a log line
/// or an Event.
#[test]
fn a_header_value_secret_is_read_only_once_granted() {
    const HEADER_SECRET: &str = "probe-auth";
    const TOKEN: &str = "Bearer s3cret-header-value";
    let run_id = unique_id();
    let ns = Namespace::create(&format!("podprobe-headers-{run_id}"));
    let (node, _dir, kubeconfig) = as_podprobe();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // 200 only with the Secret's value as the Authorization header.
    let server = runtime.block_on(TestServer::start("127.0.0.1:0", |request| {
        if request.header("Authorization") == [TOKEN] {
            reply(200, b"ok")
        } else {
            reply(401, b"who are you")
        }
    }));
    ns.kubectl(&[
        "create",
        "secret",
        "generic",
        HEADER_SECRET,
        &format!("--from-literal=token={TOKEN}"),
    ]);
    let mut pod = gated_pod(
        "web",
        "app",
        BUSYBOX_IMAGE,
        &["sh", "-c", SLEEP_LOOP],
        &[],
        json!({"readinessProbe": {
            "httpGet": {"host": "127.0.0.1", "port": server.port()},
            "periodSeconds": 1,
            "podprobe": {"http": {"headers": [{
                "name": "Authorization",
                "valueFrom": {"secretKeyRef": {"name": HEADER_SECRET, "key": "token"}},
            }]}},
        }}),
    );
    pod["metadata"]["labels"] = json!({TEST_RUN_LABEL: run_id});
    ns.create_pod(&pod);
    let podprobe = HostPodprobe::start_with(
        "gate",
        &node,
        &run_id,
        &kubeconfig.display().to_string(),
        &["--allow-probe-hosts", "127.0.0.1/32"],
    );

    let event = wait_event(&ns, "web", "HeaderSecretUnavailable");
    let message = event["message"].as_str().unwrap_or_default();
    let expected = format!(
        r#"Readiness probe failed: Authorization: header value: Secret "{HEADER_SECRET}" in namespace "{}": podprobe may not read it; grant get on it to podprobe's ServiceAccount with a Role and RoleBinding in the namespace"#,
        ns.name
    );
    assert!(message.starts_with(&expected), "{message}");
    assert_eq!(event["type"], "Warning");
    assert_eq!(gate(&ns, "web").as_deref(), Ok("False"));
    assert_eq!(
        server.connections(),
        0,
        "no probe connected without its header"
    );

    ns.grant_get(
        "podprobe-probe-auth",
        "secrets",
        Some(HEADER_SECRET),
        "podprobe-system:podprobe",
    );
    wait_gate(&ns, "web", "True", GRANT_NOTICED_WITHIN, &podprobe);
    assert!(
        server
            .received()
            .iter()
            .any(|r| r.header("Authorization") == [TOKEN]),
        "the header reached the server"
    );
    let everything = format!(
        "{}\n{}",
        podprobe.logs(),
        ns.kubectl(&["get", "events", "-o", "json"])
    );
    assert!(!everything.contains("s3cret"), "the header value leaked");
}
