//! Helpers for tests against a real CRI runtime: the endpoint (from
//! `PODPROBE_CRI_ENDPOINT`, or a private containerd that `hack/containerd.sh
//! up` starts), pods (a sandbox plus one busybox container) that remove
//! themselves when dropped, and a containerd of a test's own that the test
//! may SIGKILL and restart ([`PrivateContainerd`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use podprobe::runtime::cri::{
    CONTAINER_NAME_LABEL, ContainerConfig, ContainerMetadata, ContainerState, CriClient, ImageSpec,
    POD_UID_LABEL, PodSandboxConfig, PodSandboxMetadata,
};

/// The image `hack/containerd.sh` imports (busybox-static).
pub const BUSYBOX_IMAGE: &str = "docker.io/local/busybox:latest";

/// A container that runs until told to stop and exits 0 on SIGTERM, so a
/// graceful stop is told apart from a kill (137) or a signal that came before
/// the trap (143). [`READY_FILE`] tells that the trap is in place.
const SLEEP_LOOP: &str = "trap 'exit 0' TERM; touch /tmp/ready; while true; do sleep 1; done";

/// Created by the container once it handles SIGTERM.
const READY_FILE: &str = "/tmp/ready";

/// Label on everything the tests create, so leftovers are easy to find.
const TEST_LABEL: &str = "podprobe.io/test";

/// The CRI endpoint the tests use: `PODPROBE_CRI_ENDPOINT` if set, otherwise
/// the private containerd of `hack/containerd.sh` (started if needed).
pub fn endpoint() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(|| match std::env::var("PODPROBE_CRI_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => endpoint,
        _ => containerd_up(&[]),
    })
}

/// A fresh client for [`endpoint`]; each test has its own tokio runtime and
/// a client's connection lives on the runtime of its first call.
pub fn client() -> CriClient {
    CriClient::new(endpoint()).expect("valid CRI endpoint")
}

/// Path of `hack/containerd.sh` in this checkout.
pub fn containerd_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/containerd.sh")
}

/// Runs `hack/containerd.sh <verb>` with `env` added, panicking with its
/// output if it fails; returns its stdout.
pub fn containerd_sh(verb: &str, env: &[(&str, &str)]) -> String {
    let output = Command::new("bash")
        .arg(containerd_script())
        .arg(verb)
        .envs(env.iter().copied())
        .output()
        .expect("run hack/containerd.sh");
    assert!(
        output.status.success(),
        "hack/containerd.sh {verb} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Starts (idempotently) the containerd `hack/containerd.sh` manages with
/// `env` and returns its endpoint.
pub fn containerd_up(env: &[(&str, &str)]) -> String {
    containerd_sh("up", env);
    let printed = containerd_sh("env", env);
    printed
        .trim()
        .strip_prefix("PODPROBE_CRI_ENDPOINT=")
        .unwrap_or_else(|| panic!("unexpected `hack/containerd.sh env` output: {printed:?}"))
        .to_string()
}

/// A pod sandbox with one running busybox container; stopped and removed
/// when dropped, also when the test fails.
pub struct TestPod {
    endpoint: String,
    pub sandbox_id: String,
    pub container_id: String,
    /// The pod UID and container name the container is labelled with, as
    /// the kubelet labels the containers it creates.
    pub pod_uid: String,
}

/// The name of a [`TestPod`]'s container.
pub const CONTAINER_NAME: &str = "busybox";

impl TestPod {
    /// Runs a sandbox named after `test` (made unique) with a busybox
    /// container looping on `sleep`, and waits until it runs.
    pub async fn start(cri: &CriClient, test: &str) -> TestPod {
        Self::start_for(cri, test, &format!("{:032x}", rand::random::<u128>())).await
    }

    /// [`start`](Self::start) for the pod with UID `pod_uid` (a pod object
    /// the test created), which the sandbox and container are labelled with.
    pub async fn start_for(cri: &CriClient, test: &str, pod_uid: &str) -> TestPod {
        let sandbox_config = sandbox_config(test, pod_uid);
        let sandbox_id = cri
            .run_pod_sandbox(sandbox_config.clone(), "")
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox for {test}: {e}"));
        // From here on the guard cleans up, even if creating the container fails.
        let pod_uid = sandbox_config
            .metadata
            .as_ref()
            .map(|m| m.uid.clone())
            .unwrap_or_default();
        let mut pod = TestPod {
            endpoint: cri.endpoint().to_string(),
            sandbox_id,
            container_id: String::new(),
            pod_uid: pod_uid.clone(),
        };
        let container_id = cri
            .create_container(&pod.sandbox_id, container_config(&pod_uid), sandbox_config)
            .await
            .unwrap_or_else(|e| panic!("CreateContainer for {test}: {e}"));
        pod.container_id = container_id;
        cri.start_container(&pod.container_id)
            .await
            .unwrap_or_else(|e| panic!("StartContainer for {test}: {e}"));
        let status = cri
            .container_status(&pod.container_id)
            .await
            .expect("ContainerStatus");
        assert_eq!(
            status.state(),
            ContainerState::ContainerRunning,
            "{status:?}"
        );
        pod.wait_until_ready(cri).await;
        pod
    }

    /// Waits until the container's command has set up its SIGTERM trap.
    async fn wait_until_ready(&self, cri: &CriClient) {
        let check = strings(&["test", "-e", READY_FILE]);
        for _ in 0..200 {
            let response = cri
                .exec_sync(
                    "support",
                    &self.container_id,
                    &check,
                    Duration::from_secs(5),
                )
                .await
                .expect("ExecSync readiness check");
            if response.exit_code == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("container {} never created {READY_FILE}", self.container_id);
    }

    /// The container ID as Kubernetes shows it (`containerd://<id>`).
    pub fn kubernetes_container_id(&self) -> String {
        format!("containerd://{}", self.container_id)
    }
}

impl Drop for TestPod {
    fn drop(&mut self) {
        // Drop cannot await, and the test's runtime may be shutting down: clean
        // up on a thread with its own runtime and client.
        let endpoint = self.endpoint.clone();
        let sandbox_id = self.sandbox_id.clone();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            runtime.block_on(async {
                let cri = CriClient::new(&endpoint).expect("valid endpoint");
                if let Err(e) = cri.stop_pod_sandbox(&sandbox_id).await {
                    eprintln!("cleanup: StopPodSandbox {sandbox_id}: {e}");
                }
                if let Err(e) = cri.remove_pod_sandbox(&sandbox_id).await {
                    eprintln!("cleanup: RemovePodSandbox {sandbox_id}: {e}");
                }
            });
        });
        let _ = cleanup.join();
    }
}

fn sandbox_config(test: &str, uid: &str) -> PodSandboxConfig {
    let uid = uid.to_string();
    let name = format!("{}-{}", test.replace('_', "-"), &uid[..8]);
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid,
            namespace: "podprobe-test".to_string(),
            attempt: 0,
        }),
        hostname: name.chars().take(63).collect(),
        labels: HashMap::from([(TEST_LABEL.to_string(), test.to_string())]),
        ..Default::default()
    }
}

fn container_config(pod_uid: &str) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: CONTAINER_NAME.to_string(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: BUSYBOX_IMAGE.to_string(),
            ..Default::default()
        }),
        command: vec!["sh".to_string(), "-c".to_string(), SLEEP_LOOP.to_string()],
        labels: HashMap::from([
            (TEST_LABEL.to_string(), CONTAINER_NAME.to_string()),
            (POD_UID_LABEL.to_string(), pod_uid.to_string()),
            (CONTAINER_NAME_LABEL.to_string(), CONTAINER_NAME.to_string()),
        ]),
        ..Default::default()
    }
}

/// `args` as owned strings, for commands.
pub fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Subnets a [`PrivateContainerd`] may take, `10.88.<n>.0/24`: past those of
/// the shared test containerd (77), the local cluster (78) and the agent node
/// (79). Each is claimed with a lock file for the instance's lifetime, so
/// instances in parallel tests and test processes never share one.
const PRIVATE_SUBNETS: std::ops::RangeInclusive<u8> = 80..=87;

/// How long [`PrivateContainerd::start`] waits for a free subnet.
const PRIVATE_WAIT: Duration = Duration::from_secs(600);

/// How long [`PrivateContainerd::kill`] waits for the process to be gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// A containerd of a test's own (`hack/containerd.sh` with its own directory,
/// bridge and subnet), for tests that SIGKILL and restart the runtime under
/// podprobe without disturbing the shared test containerd. Its shims, and so
/// its containers, outlive a SIGKILL: [`restart`](Self::restart) brings
/// containerd back on the same state and it finds them again. Dropping it
/// runs `down`: containers, containerd, bridge and directory are removed.
#[allow(dead_code)]
pub struct PrivateContainerd {
    dir: PathBuf,
    bridge: String,
    subnet: String,
    endpoint: String,
    /// Holds the subnet until `down` has removed the bridge.
    _subnet_lock: std::fs::File,
}

#[allow(dead_code)]
impl PrivateContainerd {
    /// Starts a containerd named after `name` (the test) in
    /// `/tmp/podprobe-cri-f-<name>-<pid>`, with a bridge `ppf<n><name>` and
    /// subnet `10.88.<n>.0/24` (`n` from [`PRIVATE_SUBNETS`], waiting for one
    /// to be free), imports the busybox and pause images and waits until it
    /// answers CRI calls. Panics with the script's output if it cannot start;
    /// what did start is removed then.
    pub fn start(name: &str) -> PrivateContainerd {
        let name: String = name
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' => c,
                'A'..='Z' => c.to_ascii_lowercase(),
                _ => '-',
            })
            .take(40)
            .collect();
        let (n, lock) = claim_subnet();
        let short: String = name
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(10)
            .collect();
        let mut containerd = PrivateContainerd {
            dir: PathBuf::from(format!("/tmp/podprobe-cri-f-{name}-{}", std::process::id())),
            // At most 15 characters, the kernel's limit.
            bridge: format!("ppf{n}{short}"),
            subnet: format!("10.88.{n}.0/24"),
            endpoint: String::new(),
            _subnet_lock: lock,
        };
        // On a panic from here, dropping it removes what did start.
        containerd.endpoint = containerd_up(&containerd.env());
        containerd
    }

    /// `unix:///tmp/podprobe-cri-f-.../containerd.sock`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A fresh client; see [`client`].
    pub fn client(&self) -> CriClient {
        CriClient::new(&self.endpoint).expect("valid CRI endpoint")
    }

    /// The state directory (containerd's root and state, `containerd.log`).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// containerd's log, for diagnostics.
    pub fn log(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    /// The PID of containerd, from its PID file; panics if the file is
    /// missing, or names a process that is gone or is not this containerd.
    pub fn pid(&self) -> u32 {
        let pidfile = self.dir.join("containerd.pid");
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{}: not a PID: {e}", pidfile.display()));
        let config = self.dir.join("config.toml");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.contains(&format!("--config {}", config.display())),
            "PID {pid} in {} is not this containerd (command line: {cmdline:?})",
            pidfile.display()
        );
        pid
    }

    /// SIGKILLs containerd (its shims and containers live on) and returns
    /// once the process is gone.
    pub fn kill(&self) {
        let pid = self.pid();
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -KILL {pid}: {status}");
        let deadline = std::time::Instant::now() + KILL_WAIT;
        while process_lives(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "containerd (PID {pid}) still there {KILL_WAIT:?} after SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts containerd again on the same state (`hack/containerd.sh up`;
    /// `restart` would refuse a containerd that is not running) and returns
    /// once it answers CRI calls; running containers are found again. Does
    /// nothing if it runs and answers.
    pub fn restart(&self) {
        containerd_sh("up", &self.env());
    }

    /// The environment that points `hack/containerd.sh` at this instance.
    fn env(&self) -> [(&str, &str); 3] {
        [
            ("PODPROBE_CRI_DIR", self.dir.to_str().expect("UTF-8 path")),
            ("PODPROBE_CRI_BRIDGE", &self.bridge),
            ("PODPROBE_CRI_SUBNET", &self.subnet),
        ]
    }
}

impl Drop for PrivateContainerd {
    fn drop(&mut self) {
        // Not containerd_sh: it panics, and this may run during a panic.
        let output = Command::new("bash")
            .arg(containerd_script())
            .arg("down")
            .envs(self.env())
            .output();
        match output {
            Ok(output) if output.status.success() => {}
            Ok(output) => eprintln!(
                "cleanup: hack/containerd.sh down for {} failed ({}):\n{}",
                self.dir.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(e) => eprintln!("cleanup: cannot run hack/containerd.sh down: {e}"),
        }
        let _ = std::fs::remove_file(format!("{}.lock", self.dir.display()));
    }
}

/// Takes the first free subnet of [`PRIVATE_SUBNETS`]: its lock file is
/// ours and no interface has an address in it (a leftover of a test process
/// that was killed may still hold one).
#[allow(dead_code)]
fn claim_subnet() -> (u8, std::fs::File) {
    let deadline = std::time::Instant::now() + PRIVATE_WAIT;
    loop {
        for n in PRIVATE_SUBNETS {
            let path = format!("/tmp/podprobe-cri-f-subnet-{n}.lock");
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            if lock.try_lock().is_ok() && subnet_is_unused(n) {
                return (n, lock);
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no subnet of 10.88.{{{PRIVATE_SUBNETS:?}}}.0/24 came free within {PRIVATE_WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether no interface has an address in `10.88.<n>.0/24`.
#[allow(dead_code)]
fn subnet_is_unused(n: u8) -> bool {
    let output = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "to", &format!("10.88.{n}.0/24")])
        .output()
        .expect("run ip addr");
    output.status.success() && output.stdout.is_empty()
}

/// Whether process `pid` exists and is not a zombie.
#[allow(dead_code)]
fn process_lives(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may
        // itself contain ") ".
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}
