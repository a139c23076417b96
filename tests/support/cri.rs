//! Helpers for tests against a real CRI runtime: the endpoint (from
//! `PODPROBE_CRI_ENDPOINT`, or a private containerd that `hack/containerd.sh
//! up` starts), and pods (a sandbox plus one busybox container) that remove
//! themselves when dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use podprobe::cri::{
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
        let sandbox_config = sandbox_config(test);
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
                .exec_sync(&self.container_id, &check, Duration::from_secs(5))
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

fn sandbox_config(test: &str) -> PodSandboxConfig {
    let uid = format!("{:032x}", rand::random::<u128>());
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
