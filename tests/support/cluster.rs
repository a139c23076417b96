//! Helpers for tests against the real local cluster (`hack/local-cluster.sh`):
//! a kubectl wrapper, waits with deadlines and diagnostics, a namespace that
//! deletes itself when dropped, podprobe deployed as the real DaemonSet
//! (`tests/e2e`) for the gate-mode end-to-end tests, the agent node
//! (`hack/agent-node.sh`) whose pods podprobe probes in authority mode, and
//! the test pods themselves (probes in the annotation or in the spec).
//!
//! The cluster must be up (`hack/local-cluster.sh up`); the kubeconfig comes
//! from `KUBECONFIG` or `hack/local-cluster.sh env`.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The busybox image the cluster script imports into the kubelet's runtime.
pub const BUSYBOX_IMAGE: &str = "docker.io/local/busybox:latest";

/// The e2e suite's agnhost (`hack/image.sh`), as upstream's e2e names it.
pub const AGNHOST_IMAGE: &str = "registry.k8s.io/e2e-test-images/agnhost:2.59";

/// Label that scopes a host-process `podprobe run` to one test's pods.
pub const TEST_RUN_LABEL: &str = "podprobe.io/test-run";

/// Gate mode's condition, listed in `spec.readinessGates` by gated pods.
pub const GATE: &str = "podprobe.io/ready";

/// The namespace and pod label of podprobe's DaemonSet (`deploy/base`).
pub const PODPROBE_NAMESPACE: &str = "podprobe-system";
pub const PODPROBE_SELECTOR: &str = "app.kubernetes.io/name=podprobe";

/// How often waits look again.
const POLL: Duration = Duration::from_millis(250);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a `hack/` script with `args`; its stdout, or `None` when it failed.
fn hack(script: &str, args: &[&str]) -> Option<String> {
    let output = Command::new("bash")
        .arg(repo().join("hack").join(script))
        .args(args)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A fresh ID for names and labels, unique across test processes (the
/// process ID and the clock) and within one (a counter: two tests of one
/// binary can read the same clock value, as two `events_cluster` tests did
/// on a VM whose clock stood still while it was paused).
pub fn unique_id() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{nanos:x}-{n}", std::process::id())
}

/// The cluster under test.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub kubeconfig: String,
    pub kubectl: PathBuf,
}

/// The cluster, checked reachable once per test binary; panics with what to
/// do when it is not.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let kubeconfig = std::env::var("KUBECONFIG")
            .ok()
            .filter(|k| !k.is_empty())
            .or_else(|| {
                let env = hack("local-cluster.sh", &["env"])?;
                env.lines()
                    .find_map(|l| l.strip_prefix("KUBECONFIG="))
                    .map(str::to_string)
            })
            .expect("no KUBECONFIG: set it, or bring the cluster up with `hack/local-cluster.sh up`");
        let kubectl = hack("k8s-build.sh", &["--bin-dir"])
            .map(|dir| PathBuf::from(dir.trim()).join("kubectl"))
            .filter(|path| path.exists())
            .unwrap_or_else(|| PathBuf::from("kubectl"));
        let cluster = Cluster {
            kubeconfig,
            kubectl,
        };
        if let Err(e) = cluster.kubectl(&["get", "--raw", "/readyz"]) {
            panic!(
                "the cluster at {} is not reachable ({e}); bring it up with `hack/local-cluster.sh up`",
                cluster.kubeconfig
            );
        }
        cluster
    })
}

impl Cluster {
    /// Runs kubectl; its stdout, or an error with its stderr.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.kubectl_with_input(args, None)
    }

    /// Runs kubectl with `input` on stdin.
    pub fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Result<String, String> {
        let mut child = Command::new(&self.kubectl)
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.kubectl.display()))?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(input.as_bytes())
                .map_err(|e| format!("kubectl stdin: {e}"))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    /// `kubectl ... -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> Result<Value, String> {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let out = self.kubectl(&args)?;
        serde_json::from_str(&out).map_err(|e| format!("kubectl output is not JSON: {e}"))
    }

    /// `kubectl apply -f -` of a manifest.
    pub fn apply(&self, manifest: &Value) -> Result<String, String> {
        self.kubectl_with_input(&["apply", "-f", "-"], Some(&manifest.to_string()))
    }

    /// A kube client for this cluster, bound to the calling test's runtime.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("readable kubeconfig");
        let options = kube::config::KubeConfigOptions::default();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .expect("valid kubeconfig");
        kube::Client::try_from(config).expect("client for the cluster")
    }

    /// The real kubelet's node, where the scheduler puts the tests' pods:
    /// not the agent node of `hack/agent-node.sh` nor a node `run_authority`
    /// registers (both tainted, and either may come first in a list of
    /// nodes).
    pub fn node_name(&self) -> String {
        let selector = "!podprobe.io/agent-node,!podprobe.io/test-node";
        let name = self
            .kubectl(&[
                "get",
                "nodes",
                "-l",
                selector,
                "-o",
                "jsonpath={.items[0].metadata.name}",
            ])
            .expect("list nodes");
        assert!(!name.is_empty(), "no node matches {selector}");
        name
    }

    /// The kubelet's CRI endpoint, from `hack/local-cluster.sh status`
    /// (`PODPROBE_CLUSTER_CRI_ENDPOINT` overrides; `PODPROBE_CRI_ENDPOINT` is
    /// the private containerd of the CRI tests, not the kubelet's).
    pub fn cri_endpoint(&self) -> String {
        if let Ok(endpoint) = std::env::var("PODPROBE_CLUSTER_CRI_ENDPOINT") {
            return endpoint;
        }
        let status = hack("local-cluster.sh", &["status"]).unwrap_or_default();
        status
            .split_whitespace()
            .find(|word| word.starts_with("unix://"))
            .map(str::to_string)
            .expect("`hack/local-cluster.sh status` names no CRI socket; set PODPROBE_CLUSTER_CRI_ENDPOINT")
    }
}

/// A token of ServiceAccount `namespace/service_account` bound to Node
/// `node`: it names the node in `authentication.kubernetes.io/node-name`, as
/// the admission policy wants of a host-process podprobe.
pub fn node_token(namespace: &str, service_account: &str, node: &str) -> String {
    let kubectl = |args: &[&str]| cluster().kubectl(args).unwrap_or_else(|e| panic!("{e}"));
    let uid = kubectl(&["get", "node", node, "-o", "jsonpath={.metadata.uid}"]);
    kubectl(&[
        "-n",
        namespace,
        "create",
        "token",
        service_account,
        "--bound-object-kind",
        "Node",
        "--bound-object-name",
        node,
        "--bound-object-uid",
        &uid,
        "--duration",
        "10m",
    ])
    .trim()
    .to_string()
}

/// Writes `dir/token.kubeconfig`: this cluster's server and CA, with
/// `token` as the only credential, so that whoever uses it (`podprobe run
/// --kubeconfig`, a kube client) acts as the token's identity.
pub fn token_kubeconfig(token: &str, dir: &Path) -> PathBuf {
    let cluster_field = |path: &str| {
        cluster()
            .kubectl(&[
                "config",
                "view",
                "--raw",
                "--minify",
                "-o",
                &format!("jsonpath={{.clusters[0].cluster.{path}}}"),
            ])
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let kubeconfig = dir.join("token.kubeconfig");
    // JSON is YAML too.
    let text = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "local",
            "cluster": {
                "server": cluster_field("server"),
                "certificate-authority-data": cluster_field("certificate-authority-data"),
            },
        }],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": "local", "user": "token"}}],
        "current-context": "token",
    })
    .to_string();
    std::fs::write(&kubeconfig, text).expect("write kubeconfig");
    kubeconfig
}

/// A namespace that is deleted (without waiting) when dropped.
pub struct Namespace {
    pub name: String,
}

impl Namespace {
    /// Creates namespace `name` and waits until pods can be created in it
    /// (the ServiceAccount admission plugin needs its `default` account).
    pub fn create(name: &str) -> Namespace {
        cluster()
            .kubectl(&["create", "namespace", name])
            .expect("create namespace");
        let ns = Namespace {
            name: name.to_string(),
        };
        ns.wait_for(
            "the default ServiceAccount",
            Duration::from_secs(60),
            || cluster().kubectl(&["-n", &ns.name, "get", "serviceaccount", "default"]),
        );
        ns
    }

    /// Two ServiceAccounts here: `reader`, whom a Role lets `get` pods,
    /// and `stranger`, whom nothing does (the two users of a probe-status
    /// test). RBAC reaches the authorizer later; callers wait for it.
    pub fn create_reader_and_stranger(&self) {
        self.kubectl(&["create", "serviceaccount", "reader"]);
        self.kubectl(&["create", "serviceaccount", "stranger"]);
        self.grant_get("pod-reader", "pods", None, &format!("{}:reader", self.name));
    }

    /// A Role `role` of this namespace allowing `get` on `resources`
    /// (comma-separated; only the object `resource_name` when given), bound
    /// (a RoleBinding of the same name) to the ServiceAccount
    /// `namespace:name` `service_account`: what a namespace's owner runs
    /// to grant podprobe a Secret (docs/extensions.md) or a user a pod's
    /// logs.
    pub fn grant_get(
        &self,
        role: &str,
        resources: &str,
        resource_name: Option<&str>,
        service_account: &str,
    ) {
        let resources = format!("--resource={resources}");
        let mut create_role = vec!["create", "role", role, "--verb=get", &resources];
        let resource_name = resource_name.map(|name| format!("--resource-name={name}"));
        create_role.extend(resource_name.as_deref());
        self.kubectl(&create_role);
        self.kubectl(&[
            "create",
            "rolebinding",
            role,
            &format!("--role={role}"),
            &format!("--serviceaccount={service_account}"),
        ]);
    }

    /// `kubectl -n <namespace> args`, which must succeed.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        cluster().kubectl(&all).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Creates `pod` (a Pod manifest without a namespace) here.
    pub fn create_pod(&self, pod: &Value) {
        let mut pod = pod.clone();
        pod["metadata"]["namespace"] = Value::String(self.name.clone());
        if let Err(e) = cluster().apply(&pod) {
            panic!("{e}");
        }
    }

    /// `sh -c script` in `pod`'s first container, which must succeed.
    pub fn exec(&self, pod: &str, script: &str) -> String {
        self.kubectl(&["exec", pod, "--", "sh", "-c", script])
    }

    /// The events about `pod` (the core/v1 view, which includes those
    /// recorded through events.k8s.io/v1).
    pub fn events_for(&self, pod: &str) -> Vec<Value> {
        let selector = format!("involvedObject.name={pod}");
        cluster()
            .json(&[
                "-n",
                &self.name,
                "get",
                "events",
                "--field-selector",
                &selector,
            ])
            .ok()
            .and_then(|list| list["items"].as_array().cloned())
            .unwrap_or_default()
    }

    /// [`wait_for`] with this namespace's [`diagnostics`](Self::diagnostics).
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut() -> Result<T, String>,
    ) -> T {
        wait_for(what, timeout, check, || self.diagnostics())
    }

    /// Checks `holds` every poll for `period`; panics with what it saw and
    /// the diagnostics as soon as it does not hold.
    pub fn holds_for(
        &self,
        what: &str,
        period: Duration,
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

    /// A pod of this namespace as JSON.
    pub fn pod(&self, name: &str) -> Result<Value, String> {
        cluster().json(&["-n", &self.name, "get", "pod", name])
    }

    /// What a human needs to see when a wait failed: pods, events.
    pub fn diagnostics(&self) -> String {
        let pods = cluster()
            .kubectl(&["-n", &self.name, "get", "pods", "-o", "yaml"])
            .unwrap_or_else(|e| e);
        let wide = cluster()
            .kubectl(&["-n", &self.name, "get", "pods", "-o", "wide"])
            .unwrap_or_else(|e| e);
        let events = cluster()
            .kubectl(&[
                "-n",
                &self.name,
                "get",
                "events",
                "--sort-by=.lastTimestamp",
                "-o",
                "custom-columns=LAST:.lastTimestamp,TYPE:.type,REASON:.reason,OBJECT:.involvedObject.name,\
                 FIELD:.involvedObject.fieldPath,FROM:.reportingComponent,COUNT:.count,MESSAGE:.message",
            ])
            .unwrap_or_else(|e| e);
        format!(
            "--- pods\n{wide}\n{pods}\n--- events\n{events}\n--- podprobe DaemonSet logs\n{}{}",
            podprobe_logs(),
            agent_node_logs(&self.name)
        )
    }
}

impl Namespace {
    /// Deletes the namespace and waits up to `timeout` until it is gone, with
    /// its pods: a test whose load must be its own (one that runs alone)
    /// ends only when its pods no longer load the nodes. A namespace left
    /// behind is deleted again when dropped.
    pub fn delete_and_wait(&self, timeout: Duration) {
        let timeout = format!("--timeout={}s", timeout.as_secs());
        if let Err(e) =
            cluster().kubectl(&["delete", "namespace", &self.name, "--wait=true", &timeout])
        {
            eprintln!("namespace {} not gone: {e}", self.name);
        }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = cluster().kubectl(&["delete", "namespace", &self.name, "--wait=false"]);
    }
}

/// One version of a pod, as a [`PodWatch`] delivered it.
#[derive(Debug, Clone)]
pub struct PodVersion {
    /// When the watch delivered it: one clock for every pod of the watch.
    pub at: Instant,
    pub pod: Value,
}

/// Every version of the pods of a namespace, in the API server's order:
/// `kubectl get pods --watch` (a list, then a watch from its
/// resourceVersion), read by a thread. A state that lasts a moment cannot
/// slip between two polls.
pub struct PodWatch {
    child: std::process::Child,
    /// Each version, or why the watch's output could not be read (kubectl
    /// may still be running then).
    versions: std::sync::mpsc::Receiver<Result<PodVersion, String>>,
    /// kubectl's stderr, read to its end by a thread of its own.
    stderr: std::sync::Mutex<Option<std::thread::JoinHandle<String>>>,
}

impl PodWatch {
    /// Starts watching the pods of `namespace`.
    pub fn start(namespace: &str) -> PodWatch {
        let cluster = cluster();
        let mut child = Command::new(&cluster.kubectl)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .args(["-n", namespace, "get", "pods", "--watch"])
            .args(["--output-watch-events", "-o", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", cluster.kubectl.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut child_stderr = child.stderr.take().expect("piped stderr");
        let (send, versions) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // kubectl prints one JSON object per event, pretty-printed.
            let events = serde_json::Deserializer::from_reader(std::io::BufReader::new(stdout))
                .into_iter::<Value>();
            for event in events {
                let mut event = match event {
                    Ok(event) => event,
                    Err(e) => {
                        let _ = send.send(Err(format!("unreadable watch output: {e}")));
                        break;
                    }
                };
                if !matches!(event["type"].as_str(), Some("ADDED" | "MODIFIED")) {
                    continue;
                }
                let version = PodVersion {
                    at: Instant::now(),
                    pod: event["object"].take(),
                };
                if send.send(Ok(version)).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut child_stderr, &mut text);
            text
        });
        PodWatch {
            child,
            versions,
            stderr: std::sync::Mutex::new(Some(stderr)),
        }
    }

    /// The next version, waiting for it until `deadline`: `Ok(None)` when
    /// none came by then, `Err` when the watch ended (it never should while
    /// a test runs).
    pub fn next_until(&self, deadline: Instant) -> Result<Option<PodVersion>, String> {
        use std::sync::mpsc::RecvTimeoutError;
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.versions.recv_timeout(wait) {
            Ok(version) => version.map(Some),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                // Its stdout is closed: kubectl has exited, or is exiting.
                let stderr = self.stderr.lock().unwrap_or_else(|e| e.into_inner()).take();
                let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
                Err(format!(
                    "the pod watch (kubectl get pods --watch) ended: {}",
                    said.trim()
                ))
            }
        }
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it returns `Ok` or `timeout` passes; then panics with
/// `what`, the last error and `diagnostics()`.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
    diagnostics: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check() {
            Ok(value) => return value,
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}; last: {last}\n{}",
                diagnostics()
            );
        }
        std::thread::sleep(POLL);
    }
}

/// The status (`"True"`/`"False"`) and `lastTransitionTime` of a pod
/// condition, if present.
pub fn condition(pod: &Value, type_: &str) -> Option<(String, String)> {
    let conditions = pod["status"]["conditions"].as_array()?;
    let c = conditions.iter().find(|c| c["type"] == type_)?;
    Some((
        c["status"].as_str()?.to_string(),
        c["lastTransitionTime"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ))
}

/// `restartCount` of a container.
pub fn restart_count(pod: &Value, container: &str) -> Option<u64> {
    let statuses = pod["status"]["containerStatuses"].as_array()?;
    let status = statuses.iter().find(|s| s["name"] == container)?;
    status["restartCount"].as_u64()
}

/// Whether `pod`'s container `container` is running.
pub fn running(pod: &Value, container: &str) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == container && c["state"]["running"].is_object())
}

/// Deploys podprobe from `tests/e2e` once per test binary (`hack/deploy.sh`:
/// builds and imports the images, applies, waits for the DaemonSet;
/// idempotent). Its DaemonSet leaves pods labelled [`TEST_RUN_LABEL`] alone.
/// `PODPROBE_E2E_DEPLOYED=1` says podprobe is deployed already
/// (`hack/kind-e2e.sh` deploys it to kind itself).
pub fn ensure_podprobe() {
    static DEPLOYED: OnceLock<()> = OnceLock::new();
    DEPLOYED.get_or_init(|| {
        if std::env::var("PODPROBE_E2E_DEPLOYED").is_ok_and(|v| v == "1") {
            return;
        }
        let output = Command::new("bash")
            .arg(repo().join("hack/deploy.sh"))
            .arg(repo().join("tests/e2e"))
            .output()
            .expect("run hack/deploy.sh");
        assert!(
            output.status.success(),
            "hack/deploy.sh tests/e2e failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// podprobe's DaemonSet pods (a PodList), with `extra` kubectl arguments
/// (a field selector).
pub fn podprobe_pods(extra: &[&str]) -> Result<Value, String> {
    let mut args = vec![
        "-n",
        PODPROBE_NAMESPACE,
        "get",
        "pods",
        "-l",
        PODPROBE_SELECTOR,
    ];
    args.extend_from_slice(extra);
    cluster().json(&args)
}

/// The names of podprobe's DaemonSet pods that are Ready and not going away.
pub fn ready_podprobe_pods() -> Vec<String> {
    let list = podprobe_pods(&[]).unwrap_or(Value::Null);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && condition(p, "Ready").is_some_and(|(status, _)| status == "True")
        })
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// Waits until every podprobe DaemonSet pod is updated and available
/// (`kubectl rollout status`), for at most 300 s.
pub fn podprobe_rolled_out() {
    cluster()
        .kubectl(&[
            "-n",
            PODPROBE_NAMESPACE,
            "rollout",
            "status",
            "daemonset/podprobe",
            "--timeout=300s",
        ])
        .unwrap_or_else(|e| panic!("podprobe's DaemonSet does not roll out: {e}"));
}

/// What podprobe's DaemonSet pods logged lately (empty when not deployed).
pub fn podprobe_logs() -> String {
    cluster()
        .kubectl(&[
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

/// A pod with one container `container` of `image` running `command`
/// (empty: the image's entrypoint) with `args`, and a 2 s grace period; no
/// probes anywhere.
pub fn pod(name: &str, container: &str, image: &str, command: &[&str], args: &[&str]) -> Value {
    let mut c = serde_json::json!({"name": container, "image": image, "imagePullPolicy": "Never"});
    if !command.is_empty() {
        c["command"] = serde_json::json!(command);
    }
    if !args.is_empty() {
        c["args"] = serde_json::json!(args);
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [c],
        },
    })
}

/// Gate mode's test pod: [`pod`] gated on [`GATE`], with `probes` (any of
/// `startupProbe`, `readinessProbe`, `livenessProbe`) as its container's
/// entry in the `podprobe.io/probes` annotation.
pub fn gated_pod(
    name: &str,
    container: &str,
    image: &str,
    command: &[&str],
    args: &[&str],
    probes: Value,
) -> Value {
    let mut pod = pod(name, container, image, command, args);
    pod["metadata"]["annotations"] = serde_json::json!({
        "podprobe.io/probes": serde_json::json!({container: probes}).to_string(),
    });
    pod["spec"]["readinessGates"] = serde_json::json!([{"conditionType": GATE}]);
    pod
}

/// Authority mode's (and the kubelet's) test pod: [`pod`] with `probes` on
/// the container itself, bound to `node` when given (else the scheduler
/// places it: on the kubelet's node, as the agent node is tainted).
pub fn spec_pod(
    name: &str,
    container: &str,
    image: &str,
    command: &[&str],
    args: &[&str],
    probes: Value,
    node: Option<&str>,
) -> Value {
    let mut pod = pod(name, container, image, command, args);
    if let (Some(c), Some(probes)) = (
        pod["spec"]["containers"][0].as_object_mut(),
        probes.as_object(),
    ) {
        c.extend(probes.clone());
    }
    if let Some(node) = node {
        pod["spec"]["nodeName"] = serde_json::json!(node);
    }
    pod
}

/// A shell loop that runs until stopped and exits 0 on SIGTERM.
pub const SLEEP_LOOP: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// `pod` with its first container turned into a restartable init container
/// (`restartPolicy: Always`, a sidecar) next to a main container `main` that
/// only sleeps.
pub fn sidecar(mut pod: Value) -> Value {
    let mut sidecar = pod["spec"]["containers"][0].take();
    sidecar["restartPolicy"] = serde_json::json!("Always");
    pod["spec"]["initContainers"] = serde_json::json!([sidecar]);
    pod["spec"]["containers"] = serde_json::json!([{
        "name": "main",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", SLEEP_LOOP],
    }]);
    pod
}

/// The status of `container` in either status list (init or regular).
pub fn container_status<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    let status = &pod["status"];
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|list| status[*list].as_array().into_iter().flatten())
        .find(|s| s["name"] == container)
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp (`...Z`, as the API
/// server writes them; fractions of a second are dropped).
pub fn epoch_seconds(rfc3339: &str) -> Option<i64> {
    let (date, time) = rfc3339.trim_end_matches('Z').split_once('T')?;
    let time = time.split_once('.').map_or(time, |(whole, _)| whole);
    let mut d = date.split('-').map(str::parse::<i64>);
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':').map(str::parse::<i64>);
    let (h, min, s) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60 + s)
}

/// Now, in whole seconds since the epoch (the API server's granularity).
pub fn now_epoch_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The second node of `hack/agent-node.sh`: a test CRI agent that runs pods
/// (restarts, phase, IPs, container states) but has no prober, and podprobe
/// in authority mode as a host process owning their readiness.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentNode {
    /// The node's name; pods are bound to it with `spec.nodeName`.
    pub name: String,
    /// The agent's private containerd.
    pub cri_endpoint: String,
    /// The agent's log file.
    pub agent_log: PathBuf,
    /// The authority-mode podprobe's log file.
    pub authority_log: PathBuf,
    /// Where the authority-mode podprobe serves health and metrics.
    pub authority_listen: String,
}

impl AgentNode {
    /// Parses the `KEY=value` lines of `hack/agent-node.sh env`.
    pub fn from_env(env: &str) -> Result<AgentNode, String> {
        let get = |key: &str| {
            env.lines()
                .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim_matches(|c| c == '"' || c == '\'').to_string())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("`hack/agent-node.sh env` does not set {key}:\n{env}"))
        };
        Ok(AgentNode {
            name: get("PODPROBE_AGENT_NODE")?,
            cri_endpoint: get("PODPROBE_AGENT_CRI_ENDPOINT")?,
            agent_log: get("PODPROBE_AGENT_LOG")?.into(),
            authority_log: get("PODPROBE_AUTHORITY_LOG")?.into(),
            authority_listen: get("PODPROBE_AUTHORITY_LISTEN")?,
        })
    }
}

static AGENT_NODE: OnceLock<AgentNode> = OnceLock::new();

/// Brings the agent node up once per test binary (`hack/agent-node.sh up`,
/// idempotent: its containerd and images, the agent, and podprobe `--mode
/// authority`, rebuilt from this tree) and returns it. The local cluster must
/// be up. `PODPROBE_AGENT_NODE_UP=1` says it is up already and is used as it
/// is (`up` would restart a running agent or podprobe built from another
/// tree).
pub fn ensure_agent_node() -> &'static AgentNode {
    AGENT_NODE.get_or_init(|| {
        cluster();
        let script = repo().join("hack/agent-node.sh");
        if !std::env::var("PODPROBE_AGENT_NODE_UP").is_ok_and(|v| v == "1") {
            agent_node_up(&script);
        }
        let env = Command::new("bash")
            .arg(&script)
            .arg("env")
            .output()
            .expect("run hack/agent-node.sh env");
        assert!(
            env.status.success(),
            "hack/agent-node.sh env failed ({}):\n{}",
            env.status,
            String::from_utf8_lossy(&env.stderr)
        );
        AgentNode::from_env(&String::from_utf8_lossy(&env.stdout)).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// `hack/agent-node.sh up`, which must succeed.
fn agent_node_up(script: &Path) {
    let up = Command::new("bash")
        .arg(script)
        .arg("up")
        .output()
        .expect("run hack/agent-node.sh up");
    assert!(
        up.status.success(),
        "hack/agent-node.sh up failed ({}):\n{}\n{}",
        up.status,
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );
}

/// The agent's and the authority-mode podprobe's logs about `namespace`
/// (and their last lines), once this test binary brought the agent node up
/// and for the files that exist.
fn agent_node_logs(namespace: &str) -> String {
    let Some(agent) = AGENT_NODE.get() else {
        return String::new();
    };
    [
        ("agent", &agent.agent_log),
        ("authority-mode podprobe", &agent.authority_log),
    ]
    .into_iter()
    .filter_map(|(what, path)| {
        let tail = log_tail(path, namespace)?;
        Some(format!("\n--- {what} log ({})\n{tail}", path.display()))
    })
    .collect()
}

/// The last 200 lines of the log at `path` that mention `namespace`, then its
/// last 40 lines whatever they are about; `None` when it cannot be read.
fn log_tail(path: &Path, namespace: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let about: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains(namespace))
        .collect();
    let last = |v: &[&str], n: usize| v[v.len().saturating_sub(n)..].join("\n");
    Some(format!(
        "(lines about {namespace})\n{}\n(last lines)\n{}",
        last(&about, 200),
        last(&lines, 40)
    ))
}
