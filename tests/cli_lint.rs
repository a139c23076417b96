//! `podprobe lint` as a user runs it: the binary on manifest files.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn lint(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_podprobe"))
        .arg("lint")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("podprobe runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("podprobe exits")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const MANIFESTS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        podprobe.io/probes: '{"app": {"readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}}}}'
    spec:
      containers: [{name: app, image: web}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  selector: {matchLabels: {app: db}}
  serviceName: db
  template:
    metadata: {labels: {app: db}}
    spec:
      readinessGates: [{conditionType: podprobe.io/ready}]
      containers: [{name: db, image: db}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: shop}
spec:
  template:
    metadata:
      annotations:
        podprobe.io/probes: '{"job": {"livenessProbe": {"tcpSocket": {"port": "admin"}}}}'
    spec:
      restartPolicy: Never
      readinessGates: [{conditionType: podprobe.io/ready}]
      containers: [{name: job, image: job}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
"#;

#[test]
fn findings_name_the_object_and_what_to_fix_and_exit_1() {
    let out = lint(&["-"], Some(MANIFESTS));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("-: Deployment shop/web: the pod has the podprobe.io/probes annotation but does not list the readiness gate podprobe.io/ready"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("-: StatefulSet shop/db: the pod lists the readiness gate podprobe.io/ready but has no podprobe.io/probes annotation"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("-: Job shop/migrate: the podprobe.io/probes annotation is refused: ")
            && lines[2].contains("\"admin\""),
        "{stdout}"
    );
}

/// The shipped examples are set up right, so lint passes them.
#[test]
fn the_example_pods_are_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples");
    let mut files: Vec<String> = std::fs::read_dir(&root)
        .expect("deploy/examples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let args: Vec<&str> = files.iter().map(String::as_str).collect();
    let out = lint(&args, None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn unreadable_input_exits_64_and_says_where() {
    let out = lint(&["/nonexistent/pods.yaml"], None);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).starts_with("/nonexistent/pods.yaml: "));
    let out = lint(&["-"], Some("kind: Pod\nspec: [unclosed"));
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    let out = lint(
        &["--allow-probe-hosts", "db.internal", "-"],
        Some("kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: app}]}\n"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
