//! Helpers for end-to-end tests against the local cluster of
//! `hack/local-cluster.sh`: `kubectl` (the cached build, with the cluster's
//! admin kubeconfig), podprobe deployed as the real DaemonSet from
//! `tests/e2e`, namespaces that delete themselves, and waits with deadlines
//! that print what the cluster looked like when they give up.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The namespace and label of podprobe's DaemonSet (`deploy/base`).
pub const PODPROBE_NAMESPACE: &str = "podprobe-system";
pub const PODPROBE_SELECTOR: &str = "app.kubernetes.io/name=podprobe";

/// Gate mode's condition, listed in `spec.readinessGates` by the test pods.
pub const GATE: &str = "podprobe.io/ready";

/// The images pods may use (imported, never pulled).
pub const BUSYBOX: &str = "docker.io/local/busybox:latest";
pub const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.59";

/// How often waits look again.
const POLL: Duration = Duration::from_millis(500);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `hack/<script> args` and returns its stdout, panicking with its
/// stderr when it fails.
pub fn hack(script: &str, args: &[&str]) -> String {
    let output = Command::new("bash")
        .arg(repo().join("hack").join(script))
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run hack/{script}: {e}"));
    assert!(
        output.status.success(),
        "hack/{script} {args:?} failed ({})",
        output.status
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `kubectl` against the local cluster.
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: String,
}

/// The cluster's kubectl; the cluster must be up (`hack/local-cluster.sh up`).
pub fn kubectl() -> &'static Kubectl {
    static KUBECTL: OnceLock<Kubectl> = OnceLock::new();
    KUBECTL.get_or_init(|| {
        let bin_dir = hack("k8s-build.sh", &["--bin-dir"]);
        let env = hack("local-cluster.sh", &["env"]);
        let kubeconfig = env
            .lines()
            .find_map(|l| l.strip_prefix("KUBECONFIG="))
            .unwrap_or_else(|| panic!("no KUBECONFIG in `hack/local-cluster.sh env`: {env:?}"))
            .to_string();
        Kubectl {
            bin: PathBuf::from(bin_dir.trim()).join("kubectl"),
            kubeconfig,
        }
    })
}

impl Kubectl {
    fn output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.bin.display()));
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())
                .expect("write kubectl stdin");
        }
        child.wait_with_output().expect("wait for kubectl")
    }

    /// `kubectl args`: its stdout, or its stderr as the error.
    pub fn try_run(&self, args: &[&str]) -> Result<String, String> {
        let output = self.output(args, None);
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {}: {}: {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    /// `kubectl args`, which must succeed.
    pub fn run(&self, args: &[&str]) -> String {
        self.try_run(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `kubectl apply -f -` of one object.
    pub fn apply(&self, object: &Value) {
        let output = self.output(&["apply", "-f", "-"], Some(&object.to_string()));
        assert!(
            output.status.success(),
            "kubectl apply {}: {}",
            object,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// `kubectl get args -o json`, parsed; `None` when it fails (e.g. not found).
    pub fn get_json(&self, args: &[&str]) -> Option<Value> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let out = self.try_run(&all).ok()?;
        serde_json::from_str(&out).ok()
    }
}

/// Deploys podprobe from `tests/e2e` (`hack/deploy.sh`: builds and imports
/// the images, applies, waits for the DaemonSet), once per test binary.
pub fn ensure_podprobe() {
    static DEPLOYED: OnceLock<()> = OnceLock::new();
    DEPLOYED.get_or_init(|| {
        let dir = repo().join("tests/e2e");
        hack("deploy.sh", &[dir.to_str().expect("UTF-8 path")]);
    });
}

/// Everything podprobe's DaemonSet pods logged recently, for failure reports.
pub fn podprobe_logs() -> String {
    kubectl()
        .try_run(&[
            "-n",
            PODPROBE_NAMESPACE,
            "logs",
            "-l",
            PODPROBE_SELECTOR,
            "--tail=300",
            "--prefix",
        ])
        .unwrap_or_else(|e| e)
}

/// A namespace `podprobe-e2e-<name>-<random>` for one test, deleted on drop.
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    /// Creates the namespace and waits until pods can be created in it (its
    /// `default` ServiceAccount exists).
    pub fn create(test: &str) -> TestNamespace {
        let name = format!("podprobe-e2e-{test}-{:08x}", rand::random::<u32>());
        kubectl().apply(&serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"podprobe.io/e2e": "true"}},
        }));
        let ns = TestNamespace { name };
        ns.wait_for(
            Duration::from_secs(60),
            "the default ServiceAccount",
            || {
                kubectl()
                    .try_run(&["-n", &ns.name, "get", "serviceaccount", "default"])
                    .ok()
            },
        );
        ns
    }

    /// `kubectl -n <ns> args`, which must succeed.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        kubectl().run(&all)
    }

    /// Creates `pod` (a Pod object without a namespace) here.
    pub fn create_pod(&self, pod: &Value) {
        let mut pod = pod.clone();
        pod["metadata"]["namespace"] = Value::String(self.name.clone());
        kubectl().apply(&pod);
    }

    /// The pod `name`, if it exists.
    pub fn pod(&self, name: &str) -> Option<Value> {
        kubectl().get_json(&["-n", &self.name, "pod", name])
    }

    /// `sh -c script` in `pod`'s first container, which must succeed.
    pub fn exec(&self, pod: &str, script: &str) -> String {
        self.kubectl(&["exec", pod, "--", "sh", "-c", script])
    }

    /// The namespace's events (core/v1 view, which includes events.k8s.io
    /// ones) about `pod`.
    pub fn events_for(&self, pod: &str) -> Vec<Value> {
        let selector = format!("involvedObject.name={pod}");
        kubectl()
            .get_json(&["-n", &self.name, "events", "--field-selector", &selector])
            .and_then(|list| list["items"].as_array().cloned())
            .unwrap_or_default()
    }

    /// What a failed test needs to see: the pods, the events, podprobe's logs.
    pub fn diagnostics(&self) -> String {
        let k = kubectl();
        let pods = k
            .try_run(&["-n", &self.name, "get", "pods", "-o", "yaml"])
            .unwrap_or_else(|e| e);
        let wide = k
            .try_run(&["-n", &self.name, "get", "pods", "-o", "wide"])
            .unwrap_or_else(|e| e);
        let events = k
            .try_run(&[
                "-n",
                &self.name,
                "get",
                "events",
                "--sort-by=.lastTimestamp",
                "-o",
                "custom-columns=LAST:.lastTimestamp,TYPE:.type,REASON:.reason,OBJECT:.involvedObject.name,FIELD:.involvedObject.fieldPath,FROM:.reportingComponent,COUNT:.count,MESSAGE:.message",
            ])
            .unwrap_or_else(|e| e);
        format!(
            "---- pods in {ns} (wide)\n{wide}\n---- pods in {ns} (YAML)\n{pods}\n---- events in {ns}\n{events}\n---- podprobe logs\n{logs}",
            ns = self.name,
            logs = podprobe_logs()
        )
    }

    /// Polls `check` until it returns `Some` or `deadline` passes; then
    /// panics with `what` and [`diagnostics`](Self::diagnostics).
    pub fn wait_for<T>(
        &self,
        deadline: Duration,
        what: &str,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let start = Instant::now();
        loop {
            if let Some(value) = check() {
                return value;
            }
            if start.elapsed() > deadline {
                panic!(
                    "timed out after {deadline:?} waiting for {what}\n{}",
                    self.diagnostics()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Checks `holds` every poll for `period`; panics with diagnostics as
    /// soon as it does not.
    pub fn holds_for(
        &self,
        period: Duration,
        what: &str,
        mut holds: impl FnMut() -> Result<(), String>,
    ) {
        let start = Instant::now();
        while start.elapsed() < period {
            if let Err(why) = holds() {
                panic!(
                    "{what} stopped holding after {:?}: {why}\n{}",
                    start.elapsed(),
                    self.diagnostics()
                );
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Not waiting: the namespace controller finishes in the background.
        let _ = kubectl().try_run(&["delete", "namespace", &self.name, "--wait=false"]);
    }
}

/// The `status` ("True"/"False") of `pod`'s condition `kind`, if present.
pub fn condition(pod: &Value, kind: &str) -> Option<String> {
    condition_field(pod, kind, "status")
}

/// Field `field` of `pod`'s condition `kind`, if present.
pub fn condition_field(pod: &Value, kind: &str, field: &str) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c[field].as_str())
        .map(str::to_string)
}

/// `restartCount` of `pod`'s container `container`.
pub fn restart_count(pod: &Value, container: &str) -> Option<u64> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == container)
        .and_then(|c| c["restartCount"].as_u64())
}

/// Whether `pod`'s container `container` is running.
pub fn running(pod: &Value, container: &str) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == container && c["state"]["running"].is_object())
}

/// A pod gated on [`GATE`] with one container `container` of `image`,
/// running `command` (empty: the image's entrypoint) with `args`, and the
/// `podprobe.io/probes` annotation `probes` for it.
pub fn gated_pod(
    name: &str,
    container: &str,
    image: &str,
    command: &[&str],
    args: &[&str],
    probes: Value,
) -> Value {
    let mut c = serde_json::json!({
        "name": container,
        "image": image,
        "imagePullPolicy": "Never",
    });
    if !command.is_empty() {
        c["command"] = serde_json::json!(command);
    }
    if !args.is_empty() {
        c["args"] = serde_json::json!(args);
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {"podprobe.io/probes": serde_json::json!({container: probes}).to_string()},
        },
        "spec": {
            "readinessGates": [{"conditionType": GATE}],
            "terminationGracePeriodSeconds": 2,
            "containers": [c],
        },
    })
}
