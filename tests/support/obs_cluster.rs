//! Helpers for tests against the local Kubernetes cluster of
//! `hack/local-cluster.sh`: a client for its admin kubeconfig (the cluster
//! is started if needed; `up` is idempotent) and namespaces that delete
//! themselves when dropped.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// The admin kubeconfig: `KUBECONFIG` if set, else what
/// `hack/local-cluster.sh env` prints after `up`.
pub fn kubeconfig() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| match std::env::var_os("KUBECONFIG") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => {
            local_cluster("up");
            let printed = local_cluster("env");
            let path = printed
                .lines()
                .find_map(|line| line.strip_prefix("KUBECONFIG="))
                .unwrap_or_else(|| panic!("no KUBECONFIG in `local-cluster.sh env`: {printed:?}"));
            PathBuf::from(path.trim_matches(|c| c == '"' || c == '\''))
        }
    })
}

fn local_cluster(verb: &str) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/local-cluster.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg(verb)
        .output()
        .expect("run hack/local-cluster.sh");
    assert!(
        output.status.success(),
        "hack/local-cluster.sh {verb} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A client for the local cluster, bound to the calling test's runtime.
pub async fn client() -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig()).expect("readable kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig");
    Client::try_from(config).expect("client for the local cluster")
}

/// A namespace `<prefix>-<unique>` that is deleted when dropped.
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let name = format!("{prefix}-{}-{nanos:x}", std::process::id());
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        TestNamespace { name }
    }
}

impl Drop for TestNamespace {
    /// Deletes the namespace from a thread of its own with its own client: the
    /// test's runtime may be single-threaded and busy dropping this.
    fn drop(&mut self) {
        let name = self.name.clone();
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for cleanup");
            runtime.block_on(async {
                let namespaces = Api::<Namespace>::all(client().await);
                tokio::time::timeout(
                    Duration::from_secs(10),
                    namespaces.delete(&name, &DeleteParams::background()),
                )
                .await
            })
        })
        .join();
        if !matches!(deleted, Ok(Ok(Ok(_)))) {
            eprintln!("could not delete test namespace {}", self.name);
        }
    }
}
