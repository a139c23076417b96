//! A control plane of a test's own (etcd and kube-apiserver, from
//! `hack/local-cluster.sh api-up`), for tests that stop and restart a real
//! API server, such as the fault-injection suite: stopping the shared local
//! cluster's API server would break every other test running at the time.
//!
//! Each [`ControlPlane`] has its own state directory, loopback ports, PKI and
//! etcd data, and is torn down (`hack/local-cluster.sh down`) when dropped.
//! There is no controller manager, scheduler or kubelet: namespaces get no
//! `default` ServiceAccount by themselves (the ServiceAccount admission plugin
//! then refuses pods; [`ControlPlane::create_namespace`] creates both), no
//! pod is scheduled (bind pods with `spec.nodeName`) and no Node exists unless
//! the test registers one. Cold start takes a few seconds, restarting the API
//! server about two.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::cluster::Cluster;

/// How often [`ControlPlane::start`] tries again with other ports when one it
/// picked was taken before the API server or etcd bound it.
const START_ATTEMPTS: usize = 3;

/// What `hack/local-cluster.sh` says when a port it is to use is taken.
const PORT_IN_USE: &str = "is in use by another process";

/// Where ports are picked from: below the kernel's ephemeral range (Linux:
/// 32768 and up), so that no outgoing connection's local port takes the API
/// server's while it is stopped for a minute.
const PORT_RANGE: std::ops::Range<u16> = 20000..32768;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A running etcd and kube-apiserver of a test's own.
pub struct ControlPlane {
    dir: PathBuf,
    apiserver_port: u16,
    etcd_port: u16,
    etcd_peer_port: u16,
    /// The admin kubeconfig and the cached kubectl.
    cluster: Cluster,
}

impl ControlPlane {
    /// Starts a control plane named after `name` (the test), in
    /// `/tmp/podprobe-cp-<name>-<pid>-<n>` on free loopback ports, and waits
    /// until its API server is ready. Panics with the script's output when it
    /// cannot start; what did start is torn down then.
    pub fn start(name: &str) -> ControlPlane {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let dir = PathBuf::from(format!(
            "/tmp/podprobe-cp-{name}-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        for attempt in 1..=START_ATTEMPTS {
            let [apiserver_port, etcd_port, etcd_peer_port] = free_ports();
            let mut control_plane = ControlPlane {
                dir: dir.clone(),
                apiserver_port,
                etcd_port,
                etcd_peer_port,
                cluster: Cluster {
                    kubeconfig: dir.join("admin.kubeconfig").display().to_string(),
                    kubectl: PathBuf::from("kubectl"),
                },
            };
            // Dropped on a panic or a retry: `down` removes what did start.
            match control_plane.script("api-up") {
                Ok(stdout) => {
                    if let Some(path) = stdout.lines().last().filter(|l| !l.is_empty()) {
                        control_plane.cluster.kubeconfig = path.trim().to_string();
                    }
                    control_plane.cluster.kubectl = kubectl();
                    return control_plane;
                }
                Err(output) if output.contains(PORT_IN_USE) && attempt < START_ATTEMPTS => {
                    eprintln!("control plane {name}: a port was taken, trying others:\n{output}");
                }
                Err(output) => panic!("control plane {name} did not start: {output}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Path of the admin kubeconfig (`system:masters`).
    pub fn kubeconfig(&self) -> &str {
        &self.cluster.kubeconfig
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }

    /// The state directory (PKI, etcd data, PID files, `logs/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's log, for diagnostics.
    pub fn apiserver_log(&self) -> PathBuf {
        self.dir.join("logs/kube-apiserver.log")
    }

    /// This control plane as a [`Cluster`], for its kubectl, JSON and apply
    /// helpers.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Stops the API server (SIGTERM, as a node's kube-apiserver is stopped;
    /// SIGKILL after 10 s) and returns once it has exited; etcd keeps running
    /// and the port is free. Panics if the script fails.
    pub fn stop_apiserver(&self) {
        if let Err(output) = self.script("api-stop") {
            panic!(
                "stopping the API server of {}: {output}",
                self.dir.display()
            );
        }
    }

    /// Starts the API server again (with the same port, certificates and etcd
    /// data) and returns once it is ready; does nothing if it runs. Panics if
    /// it does not become ready.
    pub fn start_apiserver(&self) {
        if let Err(output) = self.script("api-up") {
            panic!(
                "restarting the API server of {}: {output}",
                self.dir.display()
            );
        }
    }

    /// A kube client for this API server, bound to the calling test's runtime.
    pub async fn client(&self) -> kube::Client {
        self.cluster.client().await
    }

    /// Runs the cached kubectl against this API server; its stdout, or an
    /// error with its stderr.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.cluster.kubectl(args)
    }

    /// Creates namespace `name` with its `default` ServiceAccount, which the
    /// missing controller manager would otherwise create and without which
    /// no pod is admitted. Panics if either cannot be created.
    pub fn create_namespace(&self, name: &str) {
        if let Err(e) = self.kubectl(&["create", "namespace", name]) {
            panic!("{e}");
        }
        if let Err(e) = self.kubectl(&["-n", name, "create", "serviceaccount", "default"]) {
            panic!("{e}");
        }
    }

    /// Runs `hack/local-cluster.sh <verb>` for this instance: its stdout, or
    /// its exit status, stdout and stderr.
    fn script(&self, verb: &str) -> Result<String, String> {
        let output = Command::new("bash")
            .arg(repo().join("hack/local-cluster.sh"))
            .arg(verb)
            .env("PODPROBE_CLUSTER_DIR", &self.dir)
            .env(
                "PODPROBE_CLUSTER_APISERVER_PORT",
                self.apiserver_port.to_string(),
            )
            .env("PODPROBE_CLUSTER_ETCD_PORT", self.etcd_port.to_string())
            .env(
                "PODPROBE_CLUSTER_ETCD_PEER_PORT",
                self.etcd_peer_port.to_string(),
            )
            .output()
            .map_err(|e| format!("cannot run hack/local-cluster.sh: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "hack/local-cluster.sh {verb} failed ({}):\n{stdout}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Err(output) = self.script("down") {
            eprintln!("cleanup: {output}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(format!("{}.lock", self.dir.display()));
    }
}

/// Three distinct loopback ports that are free now, from [`PORT_RANGE`]
/// (bound to `127.0.0.1:0` when that range has none free).
fn free_ports() -> [u16; 3] {
    let mut held: Vec<TcpListener> = Vec::new();
    for _ in 0..1000 {
        if held.len() == 3 {
            break;
        }
        let port = rand::random_range(PORT_RANGE);
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    while held.len() < 3 {
        held.push(TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"));
    }
    let port = |l: &TcpListener| l.local_addr().expect("bound address").port();
    [port(&held[0]), port(&held[1]), port(&held[2])]
}

/// The kubectl `hack/k8s-build.sh` caches (`api-up` built it), or the one
/// on `PATH`, as [`super::cluster::cluster`] finds it.
fn kubectl() -> PathBuf {
    Command::new("bash")
        .arg(repo().join("hack/k8s-build.sh"))
        .arg("--bin-dir")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()).join("kubectl"))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}
