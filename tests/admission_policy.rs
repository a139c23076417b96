//! The ValidatingAdmissionPolicies of `deploy/base/admission-policy.yaml`
//! on the real API server of the local cluster (`hack/local-cluster.sh`):
//! each test applies them (idempotently, with podprobe's namespace and RBAC
//! from `deploy/base`), mints real service-account tokens for podprobe's
//! ServiceAccounts, and sends the `pods/status` patches and Event writes
//! podprobe sends (built by `build_patch` and `PodEvent::to_api_event`, as
//! `podprobe run` builds them) and ones it must never send, with those
//! tokens.
//!
//! The patches go through kube-rs, not `kubectl patch --subresource=status`:
//! kubectl reads the subresource first, which podprobe's least-privilege
//! ClusterRole does not grant.
//!
//! Node A is the kubelet's node; node B is the agent node when
//! `hack/agent-node.sh up` ran, else a node name no node has: a pod bound to
//! it exists in the API all the same, which is all a status write needs.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/go_tools.rs"]
mod go_tools;
#[path = "support/host_podprobe.rs"]
mod host_podprobe;

use std::path::PathBuf;
use std::time::Duration;

use cluster::{BUSYBOX_IMAGE, GATE, Namespace, TEST_RUN_LABEL, cluster, condition, unique_id};
use host_podprobe::HostPodprobe;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodCondition, PodStatus};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use podprobe::api::event_broadcaster::{PodEvent, series_patch};
use podprobe_core::status::{ContainerProbeView, Mode, build_patch, desired_authority_status};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const POLICY: &str = "podprobe-status-writes";
const POLICY_FILE: &str = "deploy/base/admission-policy.yaml";
const NAMESPACE: &str = "podprobe-system";
/// Gate mode's ServiceAccount (the DaemonSet's) and authority mode's.
const GATE_SA: &str = "podprobe";
const AUTHORITY_SA: &str = "podprobe-authority";
/// Node B when the agent node is not up.
const ABSENT_NODE: &str = "podprobe-admission-node-b";
/// Every refusal names the policy.
const DENIED: &str = "ValidatingAdmissionPolicy 'podprobe-status-writes'";
/// The policy of podprobe's Event writes, and what its refusals say.
const EVENT_POLICY: &str = "podprobe-event-writes";
const EVENT_DENIED: &str = "ValidatingAdmissionPolicy 'podprobe-event-writes'";
/// The policy of podprobe's Lease writes (WG4), and what its refusals say.
const LEASE_POLICY: &str = "podprobe-lease-writes";
const LEASE_DENIED: &str = "ValidatingAdmissionPolicy 'podprobe-lease-writes'";

fn repo_file(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .display()
        .to_string()
}

fn kubectl(args: &[&str]) -> String {
    cluster().kubectl(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Applies podprobe's namespace, RBAC (both ServiceAccounts) and the
/// policies from `deploy/base` once per test binary; waits until the API
/// server has type-checked them (no warnings) and enforces them.
async fn ensure_policy() {
    static ENFORCED: OnceCell<()> = OnceCell::const_new();
    ENFORCED
        .get_or_init(|| async {
            kubectl(&[
                "apply",
                "-f",
                &repo_file("deploy/base/namespace.yaml"),
                "-f",
                &repo_file("deploy/base/rbac.yaml"),
                "-f",
                &repo_file(POLICY_FILE),
            ]);
            for name in [POLICY, EVENT_POLICY, LEASE_POLICY] {
                let policy = cluster::wait_for(
                    &format!("the API server to type-check {name}"),
                    Duration::from_secs(30),
                    || {
                        let policy = cluster().json(&["get", "validatingadmissionpolicy", name])?;
                        (policy["status"]["observedGeneration"] == policy["metadata"]["generation"])
                            .then_some(policy)
                            .ok_or_else(|| "status not observed yet".to_string())
                    },
                    String::new,
                );
                let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
                assert!(
                    warnings.as_array().is_none_or(|w| w.is_empty()),
                    "the expressions of {name} do not type-check: {warnings:#}"
                );
            }
            wait_until_enforced().await;
            wait_until_events_enforced().await;
        })
        .await;
}

/// Polls a write the policy refuses until it is refused: the API server's
/// policy informer lags the apply. The write breaks every rule at once (a
/// token without a node claim, metadata, a kubelet condition), so that it
/// tells whether the policy is in force even when one rule is broken.
async fn wait_until_enforced() {
    let id = unique_id();
    let sentinel = Holder::create(&format!("admission-sentinel-{id}"), GATE_SA, ABSENT_NODE);
    let podprobe = Identity::new(&unbound_token(GATE_SA)).await;
    let body = json!({
        "metadata": {"labels": {"podprobe.io/forged": "x"}},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Forged"}]},
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match patch(&podprobe.client, NAMESPACE, &sentinel.name, &body).await {
            Err(kube::Error::Api(status)) if status.message.contains(DENIED) => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the policy is still not enforced 30 s after it was applied: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// [`wait_until_enforced`] for the Event policy: an Event that breaks every
/// rule (no node claim, another controller, about a ConfigMap of another
/// namespace, labelled, with a related object).
async fn wait_until_events_enforced() {
    let podprobe = Identity::new(&unbound_token(GATE_SA)).await;
    let mut event = podprobe_event(NAMESPACE, "sentinel", ABSENT_NODE);
    event.metadata.labels = Some([("podprobe.io/forged".to_string(), "x".to_string())].into());
    event.reporting_controller = Some("forged".to_string());
    event.regarding = Some(ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("ConfigMap".to_string()),
        namespace: Some("default".to_string()),
        name: Some("forged".to_string()),
        ..ObjectReference::default()
    });
    event.related = event.regarding.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match create_event(&podprobe.client, &event).await {
            Err(kube::Error::Api(status)) if status.message.contains(EVENT_DENIED) => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{EVENT_POLICY} is still not enforced 30 s after it was applied: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// A pod in podprobe's namespace, running as one of its ServiceAccounts on
/// a given node, for tokens bound to it: it stands for podprobe's own pod.
/// Force-deleted when dropped (a pod on an absent node never terminates).
struct Holder {
    name: String,
    uid: String,
}

impl Holder {
    fn create(name: &str, service_account: &str, node: &str) -> Holder {
        cluster()
            .apply(&json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {TEST_RUN_LABEL: name},
                },
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": service_account,
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "sleep",
                        "image": BUSYBOX_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                    }],
                },
            }))
            .unwrap_or_else(|e| panic!("{e}"));
        let uid = kubectl(&[
            "-n",
            NAMESPACE,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.metadata.uid}",
        ]);
        Holder {
            name: name.to_string(),
            uid,
        }
    }

    /// A token of `service_account` bound to this pod: it names the pod's
    /// node in `authentication.kubernetes.io/node-name`.
    fn token(&self, service_account: &str) -> String {
        kubectl(&[
            "-n",
            NAMESPACE,
            "create",
            "token",
            service_account,
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            &self.name,
            "--bound-object-uid",
            &self.uid,
            "--duration",
            "10m",
        ])
        .trim()
        .to_string()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = cluster().kubectl(&[
            "-n",
            NAMESPACE,
            "delete",
            "pod",
            &self.name,
            "--force",
            "--grace-period=0",
            "--wait=false",
        ]);
    }
}

/// A token of `service_account` bound to nothing: no node claim.
fn unbound_token(service_account: &str) -> String {
    kubectl(&[
        "-n",
        NAMESPACE,
        "create",
        "token",
        service_account,
        "--duration",
        "10m",
    ])
    .trim()
    .to_string()
}

/// A token of `service_account` bound to Node `node` (how a host-process
/// podprobe gets a node claim).
fn node_token(service_account: &str, node: &str) -> String {
    cluster::node_token(NAMESPACE, service_account, node)
}

/// A client of the cluster authenticated by a bearer token only, and its
/// kubeconfig file (for `podprobe run --kubeconfig`).
struct Identity {
    client: kube::Client,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Identity {
    async fn new(token: &str) -> Identity {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = cluster::token_kubeconfig(token, dir.path());
        let config = kube::config::Kubeconfig::read_from(&kubeconfig).expect("readable kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
            .await
            .expect("valid kubeconfig");
        Identity {
            client: kube::Client::try_from(config).expect("client"),
            kubeconfig,
            _dir: dir,
        }
    }
}

/// A strategic-merge patch of `pods/<name>/status` as `client`, as podprobe
/// sends it.
async fn patch(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    patch: &Value,
) -> Result<Pod, kube::Error> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
}

/// A JSON patch of `pods/<name>/status` as `client` (to reach into the
/// atomic container status lists).
async fn json_patch(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    patch: Value,
) -> Result<Pod, kube::Error> {
    let patch = serde_json::from_value(patch).expect("a JSON patch");
    Api::<Pod>::namespaced(client.clone(), namespace)
        .patch_status(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
}

/// Asserts that the write went through.
fn assert_allowed<T>(what: &str, result: Result<T, kube::Error>) -> T {
    result.unwrap_or_else(|e| panic!("{what}: refused, want allowed: {e}"))
}

/// Asserts that the status policy refused the write with 403 and a message
/// holding every one of `says`.
fn assert_refused<T>(what: &str, result: Result<T, kube::Error>, says: &[&str]) {
    assert_refused_by(DENIED, what, result, says)
}

/// [`assert_refused`] by the Event policy.
fn assert_event_refused<T>(what: &str, result: Result<T, kube::Error>, says: &[&str]) {
    assert_refused_by(EVENT_DENIED, what, result, says)
}

/// Asserts that the policy whose refusals start with `denied` refused the
/// write with 403 and a message holding every one of `says`.
fn assert_refused_by<T>(denied: &str, what: &str, result: Result<T, kube::Error>, says: &[&str]) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{what}: {status:?}");
            assert!(
                status.message.contains(denied),
                "{what}: refused, but not by the policy: {}",
                status.message
            );
            for want in says {
                assert!(
                    status.message.contains(want),
                    "{what}: the refusal does not say {want:?}: {}",
                    status.message
                );
            }
        }
        Err(e) => panic!("{what}: failed, but not refused by the API server: {e}"),
        Ok(_) => panic!("{what}: allowed, want refused ({denied})"),
    }
}

/// The Event `podprobe run` on `node` records when it stops container
/// `app` of pod `namespace/pod` (its `Killing`), built as podprobe builds
/// it. The pod need not exist: the policy cannot look.
fn podprobe_event(namespace: &str, pod: &str, node: &str) -> Event {
    let mut target = Pod::default();
    target.metadata.name = Some(pod.to_string());
    target.metadata.namespace = Some(namespace.to_string());
    target.metadata.uid = Some(format!("uid-of-{pod}"));
    PodEvent::killing(
        &target,
        "app",
        "Container app failed liveness probe, will be restarted".to_string(),
    )
    .expect("the pod has a name and namespace")
    .to_api_event(node, 1, Timestamp::now())
}

/// Creates `event` in its namespace as `client`.
async fn create_event(client: &kube::Client, event: &Event) -> Result<Event, kube::Error> {
    let namespace = event.metadata.namespace.as_deref().expect("a namespace");
    Api::<Event>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), event)
        .await
}

/// A merge patch of Event `namespace/name` as `client` (podprobe patches
/// only the series, with [`series_patch`]).
async fn patch_event(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    patch: &Value,
) -> Result<Event, kube::Error> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

fn event_name(event: &Event) -> String {
    event.metadata.name.clone().expect("a name")
}

/// One test's namespace of target pods and its token holders; node A is the
/// kubelet's node, node B another (see the module docs).
struct Rig {
    ns: Namespace,
    id: String,
    node_a: String,
    node_b: String,
}

impl Rig {
    async fn new() -> Rig {
        ensure_policy().await;
        let id = unique_id();
        let ns = Namespace::create(&format!("podprobe-admission-{id}"));
        let agent = kubectl(&[
            "get",
            "nodes",
            "-l",
            "podprobe.io/agent-node=true",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        let node_b = agent
            .split_whitespace()
            .next()
            .unwrap_or(ABSENT_NODE)
            .to_string();
        Rig {
            ns,
            id,
            node_a: cluster().node_name(),
            node_b,
        }
    }

    /// Creates a pod `name` bound to `node` (a sleeping busybox).
    fn target(&self, name: &str, node: &str) {
        self.target_with(name, node, json!({}))
    }

    /// [`target`](Self::target) with `metadata` merged into its metadata.
    fn target_with(&self, name: &str, node: &str, metadata: Value) {
        let mut pod = cluster::pod(name, "app", BUSYBOX_IMAGE, &["sleep", "3600"], &[]);
        pod["spec"]["nodeName"] = json!(node);
        pod["spec"]["terminationGracePeriodSeconds"] = json!(0);
        if let (Some(meta), Some(extra)) = (pod["metadata"].as_object_mut(), metadata.as_object()) {
            meta.extend(extra.clone());
        }
        self.ns.create_pod(&pod);
    }

    fn pod(&self, name: &str) -> Value {
        self.ns.pod(name).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A token of `service_account` bound to a pod of it on `node`, and the
    /// pod (keep it: the token dies with it).
    fn pod_token(&self, service_account: &str, node: &str) -> (String, Holder) {
        let holder = Holder::create(
            &format!("admission-holder-{}-{service_account}", self.id),
            service_account,
            node,
        );
        (holder.token(service_account), holder)
    }

    /// Waits until the kubelet reports `pod` running (container statuses and
    /// its conditions written).
    fn wait_running(&self, pod: &str) -> Value {
        self.ns
            .wait_for(&format!("{pod} running"), Duration::from_secs(60), || {
                let object = self.ns.pod(pod)?;
                (object["status"]["phase"] == "Running" && condition(&object, "Ready").is_some())
                    .then_some(object)
                    .ok_or_else(|| "not running yet".to_string())
            })
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Finalizers hold a pod forever, and a pod on an absent node never
        // terminates.
        let finalized = cluster()
            .kubectl(&[
                "-n",
                &self.ns.name,
                "get",
                "pods",
                "-o",
                "jsonpath={range .items[?(@.metadata.finalizers)]}{.metadata.name}{\"\\n\"}{end}",
            ])
            .unwrap_or_default();
        for pod in finalized.lines() {
            let _ = cluster().kubectl(&[
                "-n",
                &self.ns.name,
                "patch",
                "pod",
                pod,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ]);
        }
        let _ = cluster().kubectl(&[
            "-n",
            &self.ns.name,
            "delete",
            "pods",
            "--all",
            "--force",
            "--grace-period=0",
            "--wait=false",
        ]);
    }
}

/// The patch podprobe in gate mode sends to set its condition on `pod` to
/// `status` (`build_patch` over the pod as the API server has it).
async fn gate_patch(client: &kube::Client, namespace: &str, pod: &str, status: &str) -> Value {
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(pod)
        .await
        .expect("get pod");
    let mut desired = pod.status.clone().unwrap_or_default();
    let mut conditions = desired.conditions.take().unwrap_or_default();
    conditions.retain(|c| c.type_ != GATE);
    conditions.push(PodCondition {
        type_: GATE.to_string(),
        status: status.to_string(),
        last_transition_time: Some(Time(Timestamp::now())),
        ..PodCondition::default()
    });
    desired.conditions = Some(conditions);
    build_patch(Mode::Gate, &pod, &desired)
        .expect("a patch")
        .expect("the condition changes")
}

fn gate_status(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == GATE)
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn gate_token_of_a_pod_on_node_a_may_set_its_condition_on_node_a_pods() {
    let rig = Rig::new().await;
    let admin = cluster().client().await;
    rig.target("a", &rig.node_a);
    let (token, _holder) = rig.pod_token(GATE_SA, &rig.node_a);
    let podprobe = Identity::new(&token).await;

    for status in ["True", "False"] {
        let body = gate_patch(&admin, &rig.ns.name, "a", status).await;
        let pod = assert_allowed(
            &format!("gate token sets {GATE}={status} on a node-A pod"),
            patch(&podprobe.client, &rig.ns.name, "a", &body).await,
        );
        assert_eq!(gate_status(&pod).as_deref(), Some(status));
    }

    // A terminating pod is still probed (and its condition still written).
    rig.target_with(
        "terminating",
        &rig.node_a,
        json!({"finalizers": ["podprobe.io/admission-test"]}),
    );
    rig.ns
        .kubectl(&["delete", "pod", "terminating", "--wait=false"]);
    let body = gate_patch(&admin, &rig.ns.name, "terminating", "False").await;
    let pod = assert_allowed(
        "gate token writes its condition on a terminating node-A pod",
        patch(&podprobe.client, &rig.ns.name, "terminating", &body).await,
    );
    assert!(pod.metadata.deletion_timestamp.is_some());

    // A token bound to the Node itself names it too (for a podprobe that
    // runs as a host process).
    let node_bound = Identity::new(&node_token(GATE_SA, &rig.node_a)).await;
    let body = gate_patch(&admin, &rig.ns.name, "a", "True").await;
    assert_allowed(
        "node-bound gate token sets its condition on a node-A pod",
        patch(&node_bound.client, &rig.ns.name, "a", &body).await,
    );
}

#[tokio::test]
async fn gate_token_of_a_pod_on_node_a_may_not_write_a_pod_on_node_b() {
    let rig = Rig::new().await;
    let admin = cluster().client().await;
    rig.target("b", &rig.node_b);
    let (token, _holder) = rig.pod_token(GATE_SA, &rig.node_a);
    let podprobe = Identity::new(&token).await;

    let body = gate_patch(&admin, &rig.ns.name, "b", "True").await;
    let own_node = format!("on node {} may not write", rig.node_a);
    let pod = format!("pod {}/b on node {}", rig.ns.name, rig.node_b);
    assert_refused(
        "gate token of node A sets its condition on a node-B pod",
        patch(&podprobe.client, &rig.ns.name, "b", &body).await,
        &["gate mode", &own_node, &pod],
    );
    assert_eq!(condition(&rig.pod("b"), GATE), None);
}

#[tokio::test]
async fn gate_token_may_not_change_what_the_kubelet_owns() {
    let rig = Rig::new().await;
    rig.target("a", &rig.node_a);
    rig.wait_running("a");
    let (token, _holder) = rig.pod_token(GATE_SA, &rig.node_a);
    let podprobe = Identity::new(&token).await;
    let ns = rig.ns.name.as_str();
    let forged = |type_: &str| json!({"type": type_, "status": "False", "reason": "Forged"});

    assert_refused(
        "gate token changes Ready and ContainersReady",
        patch(
            &podprobe.client,
            ns,
            "a",
            &json!({"status": {"conditions": [forged("Ready"), forged("ContainersReady")]}}),
        )
        .await,
        &[
            "may change only the podprobe.io/ready condition",
            "not Ready, ContainersReady",
        ],
    );
    assert_refused(
        "gate token changes ContainersReady alone",
        patch(
            &podprobe.client,
            ns,
            "a",
            &json!({"status": {"conditions": [forged("ContainersReady")]}}),
        )
        .await,
        &["not ContainersReady"],
    );
    // Its own condition does not carry a foreign one through.
    assert_refused(
        "gate token changes its condition and Ready in one patch",
        patch(
            &podprobe.client,
            ns,
            "a",
            &json!({"status": {"conditions": [
                {"type": GATE, "status": "True"}, forged("Ready"),
            ]}}),
        )
        .await,
        &["not Ready"],
    );
    assert_eq!(condition(&rig.pod("a"), GATE), None);
    assert_refused(
        "gate token removes a kubelet condition",
        patch(
            &podprobe.client,
            ns,
            "a",
            &json!({"status": {"conditions": [{"type": "PodScheduled", "$patch": "delete"}]}}),
        )
        .await,
        &["not PodScheduled"],
    );
    assert_refused(
        "gate token sets a container ready",
        json_patch(
            &podprobe.client,
            ns,
            "a",
            json!([{"op": "replace", "path": "/status/containerStatuses/0/ready", "value": false}]),
        )
        .await,
        &["may not change status.containerStatuses"],
    );
    assert_refused(
        "gate token changes the phase",
        patch(
            &podprobe.client,
            ns,
            "a",
            &json!({"status": {"phase": "Failed"}}),
        )
        .await,
        &["may not change status.phase"],
    );
    assert_refused(
        "gate token labels the pod through pods/status",
        patch(
            &podprobe.client,
            ns,
            "a",
            &json!({"metadata": {"labels": {"podprobe.io/forged": "x"}}}),
        )
        .await,
        &["may not change the metadata"],
    );
}

#[tokio::test]
async fn gate_token_without_a_node_claim_is_refused() {
    let rig = Rig::new().await;
    let admin = cluster().client().await;
    rig.target("a", &rig.node_a);
    let podprobe = Identity::new(&unbound_token(GATE_SA)).await;

    let body = gate_patch(&admin, &rig.ns.name, "a", "True").await;
    assert_refused(
        "unbound gate token sets its condition on a node-A pod",
        patch(&podprobe.client, &rig.ns.name, "a", &body).await,
        &["its token names no node"],
    );
    assert_eq!(condition(&rig.pod("a"), GATE), None);
}

#[tokio::test]
async fn other_users_are_not_matched() {
    let rig = Rig::new().await;
    let ns = rig.ns.name.as_str();
    rig.target("b", &rig.node_b);
    // Another ServiceAccount with podprobe's very permissions, no node claim.
    rig.ns.kubectl(&[
        "create",
        "rolebinding",
        "status-writer",
        "--clusterrole=podprobe",
        &format!("--serviceaccount={ns}:default"),
    ]);
    let token = rig
        .ns
        .kubectl(&["create", "token", "default", "--duration", "10m"]);
    let other = Identity::new(token.trim()).await;
    let forged = json!({"status": {"conditions": [
        {"type": GATE, "status": "True"},
        {"type": "Ready", "status": "False", "reason": "Forged"},
    ]}});
    // RBAC caches lag the RoleBinding a little.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let pod = loop {
        match patch(&other.client, ns, "b", &forged).await {
            Err(kube::Error::Api(status))
                if status.code == 403
                    && !status.message.contains(DENIED)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            result => {
                break assert_allowed(
                    "another ServiceAccount writes gate and Ready on a node-B pod",
                    result,
                );
            }
        }
    };
    assert_eq!(gate_status(&pod).as_deref(), Some("True"));
    let mut forged = podprobe_event(ns, "b", &rig.node_b);
    forged.reporting_controller = Some("other".to_string());
    assert_allowed(
        "another ServiceAccount records an Event reported by another controller as node B",
        create_event(&other.client, &forged).await,
    );

    let admin = cluster().client().await;
    assert_allowed(
        "the cluster admin labels a node-B pod through pods/status",
        patch(
            &admin,
            ns,
            "b",
            &json!({"metadata": {"labels": {"podprobe.io/admin": "x"}}}),
        )
        .await,
    );
}

#[tokio::test]
async fn authority_token_may_write_readiness_only_on_its_nodes_pods() {
    let rig = Rig::new().await;
    let ns = rig.ns.name.as_str();
    let admin = cluster().client().await;
    // An agent node of this test's own: a name no node has, whose pods only
    // this test writes (it plays the node agent).
    let node_c = format!("podprobe-admission-agent-{}", rig.id);
    rig.target("c", &node_c);
    rig.target("a", &rig.node_a);
    let container_id = "containerd://admission-test";
    let agent_status = json!({"status": {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
        ],
        "containerStatuses": [{
            "name": "app",
            "containerID": container_id,
            "image": BUSYBOX_IMAGE,
            "imageID": "",
            "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            "ready": false,
            "started": false,
        }],
    }});
    Api::<Pod>::namespaced(admin.clone(), ns)
        .patch_status(
            "c",
            &PatchParams::default(),
            &Patch::Strategic(&agent_status),
        )
        .await
        .expect("the agent's status");
    let (token, _holder) = rig.pod_token(AUTHORITY_SA, &node_c);
    let podprobe = Identity::new(&token).await;

    let current = Api::<Pod>::namespaced(admin.clone(), ns)
        .get("c")
        .await
        .expect("get pod");
    let views = [ContainerProbeView {
        name: "app".to_string(),
        container_id: Some(container_id.to_string()),
        started: true,
        ready: true,
        note: None,
    }];
    let desired: PodStatus = desired_authority_status(&current, &views, &Time(Timestamp::now()));
    let body = build_patch(Mode::Authority, &current, &desired)
        .expect("a patch")
        .expect("ready and started change");
    let pod = assert_allowed(
        "authority token sets ready/started and Ready/ContainersReady on its node's pod",
        patch(&podprobe.client, ns, "c", &body).await,
    );
    let status = pod.status.expect("status");
    let app = &status.container_statuses.expect("container statuses")[0];
    assert_eq!((app.ready, app.started), (true, Some(true)));
    let ready = status.conditions.expect("conditions");
    assert!(
        ready
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    assert_refused(
        "authority token writes gate mode's condition",
        patch(
            &podprobe.client,
            ns,
            "c",
            &json!({"status": {"conditions": [{"type": GATE, "status": "True"}]}}),
        )
        .await,
        &["authority mode", "not podprobe.io/ready"],
    );
    assert_refused(
        "authority token changes a restart count",
        json_patch(
            &podprobe.client,
            ns,
            "c",
            json!([{
                "op": "replace",
                "path": "/status/containerStatuses/0/restartCount",
                "value": 3,
            }]),
        )
        .await,
        &["may change only ready and started"],
    );
    assert_refused(
        "authority token changes the phase",
        patch(
            &podprobe.client,
            ns,
            "c",
            &json!({"status": {"phase": "Succeeded"}}),
        )
        .await,
        &["may not change status.phase"],
    );
    let own_node = format!("on node {node_c} may not write");
    assert_refused(
        "authority token writes Ready on a pod of another node",
        patch(
            &podprobe.client,
            ns,
            "a",
            &json!({"status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "Forged"},
            ]}}),
        )
        .await,
        &["authority mode", &own_node],
    );
}

#[tokio::test]
async fn podprobe_token_may_record_its_own_events_about_pods() {
    let rig = Rig::new().await;
    let ns = rig.ns.name.as_str();
    let (token, _holder) = rig.pod_token(GATE_SA, &rig.node_a);
    let podprobe = Identity::new(&token).await;

    let event = podprobe_event(ns, "a", &rig.node_a);
    let created = assert_allowed(
        "gate token records its Killing of a pod, reported as its node",
        create_event(&podprobe.client, &event).await,
    );
    assert_eq!(
        created.reporting_instance.as_deref(),
        Some(rig.node_a.as_str())
    );
    let patched = assert_allowed(
        "gate token continues its Event's series",
        patch_event(
            &podprobe.client,
            ns,
            &event_name(&created),
            &series_patch(2, Timestamp::now()),
        )
        .await,
    );
    assert_eq!(patched.series.map(|s| s.count), Some(2));

    // Authority mode's account, with a token bound to the Node itself (a
    // podprobe that runs as a host process).
    let node_bound = Identity::new(&node_token(AUTHORITY_SA, &rig.node_a)).await;
    assert_allowed(
        "node-bound authority token records an Event, reported as its node",
        create_event(&node_bound.client, &podprobe_event(ns, "a", &rig.node_a)).await,
    );
}

#[tokio::test]
async fn podprobe_events_are_reported_by_podprobe_as_its_own_node() {
    let rig = Rig::new().await;
    let ns = rig.ns.name.as_str();
    let (token, _holder) = rig.pod_token(GATE_SA, &rig.node_a);
    let podprobe = Identity::new(&token).await;

    let as_node_b = podprobe_event(ns, "a", &rig.node_b);
    let own_node = format!("on node {} may not write Event {ns}/", rig.node_a);
    let instance = format!(
        "reported as instance '{}': only as its own node",
        rig.node_b
    );
    assert_event_refused(
        "gate token of node A records an Event reported as node B",
        create_event(&podprobe.client, &as_node_b).await,
        &[&own_node, &instance],
    );

    let mut as_kubelet = podprobe_event(ns, "a", &rig.node_a);
    as_kubelet.reporting_controller = Some("kubelet".to_string());
    assert_event_refused(
        "gate token records an Event reported by the kubelet",
        create_event(&podprobe.client, &as_kubelet).await,
        &["reported by controller 'kubelet': only by podprobe"],
    );
}

#[tokio::test]
async fn podprobe_events_are_about_a_pod_of_their_namespace_and_nothing_else() {
    let rig = Rig::new().await;
    let ns = rig.ns.name.as_str();
    let (token, holder) = rig.pod_token(GATE_SA, &rig.node_a);
    let podprobe = Identity::new(&token).await;
    let reference = |api_version: &str, kind: &str, namespace: Option<&str>, name: &str| {
        Some(ObjectReference {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
            namespace: namespace.map(str::to_string),
            name: Some(name.to_string()),
            ..ObjectReference::default()
        })
    };

    let mut about_config_map = podprobe_event(ns, "a", &rig.node_a);
    about_config_map.regarding = reference("v1", "ConfigMap", Some(ns), "settings");
    assert_event_refused(
        "gate token records an Event about a ConfigMap",
        create_event(&podprobe.client, &about_config_map).await,
        &["about v1 ConfigMap settings: only about pods (v1 Pod)"],
    );

    // Events about cluster-scoped objects go to `default` (the API server
    // refuses them elsewhere).
    let mut about_node = podprobe_event("default", "a", &rig.node_a);
    about_node.regarding = reference("v1", "Node", None, &rig.node_a);
    let node = format!("about v1 Node {}: only about pods", rig.node_a);
    assert_event_refused(
        "gate token records an Event about its Node",
        create_event(&podprobe.client, &about_node).await,
        &[&node],
    );

    // About podprobe's own pod, but filed in the test's namespace.
    let mut elsewhere = podprobe_event(ns, "a", &rig.node_a);
    elsewhere.regarding = reference("v1", "Pod", Some(NAMESPACE), &holder.name);
    let other_namespace = format!(
        "about pod {NAMESPACE}/{}: only about pods of the Event's own namespace",
        holder.name
    );
    assert_event_refused(
        "gate token records an Event about a pod of another namespace",
        create_event(&podprobe.client, &elsewhere).await,
        &[&other_namespace],
    );

    let mut related = podprobe_event(ns, "a", &rig.node_a);
    related.related = reference("v1", "Secret", Some(ns), "credentials");
    assert_event_refused(
        "gate token records an Event with a related Secret",
        create_event(&podprobe.client, &related).await,
        &["with a related object"],
    );

    let mut labelled = podprobe_event(ns, "a", &rig.node_a);
    labelled.metadata.labels = Some([("podprobe.io/forged".to_string(), "x".to_string())].into());
    labelled.metadata.finalizers = Some(vec!["podprobe.io/forged".to_string()]);
    assert_event_refused(
        "gate token records a labelled Event with a finalizer",
        create_event(&podprobe.client, &labelled).await,
        &["may not set metadata.labels, metadata.finalizers of Event"],
    );
}

#[tokio::test]
async fn podprobe_may_only_continue_the_series_of_its_own_nodes_events() {
    let rig = Rig::new().await;
    let ns = rig.ns.name.as_str();
    let admin = cluster().client().await;
    let (token, _holder) = rig.pod_token(GATE_SA, &rig.node_a);
    let podprobe = Identity::new(&token).await;
    let own = event_name(&assert_allowed(
        "gate token records its Event",
        create_event(&podprobe.client, &podprobe_event(ns, "a", &rig.node_a)).await,
    ));

    assert_event_refused(
        "gate token labels its Event",
        patch_event(
            &podprobe.client,
            ns,
            &own,
            &json!({"metadata": {"labels": {"podprobe.io/forged": "x"}}}),
        )
        .await,
        &[&format!(
            "may change only the series of Event {ns}/{own}, not metadata.labels"
        )],
    );
    // The API server itself refuses any change but the series and metadata
    // of an events.k8s.io/v1 Event: the policy need not check it.
    match patch_event(&podprobe.client, ns, &own, &json!({"note": "forged"})).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains("immutable"), "{status:?}");
        }
        other => panic!("gate token changed its Event's note: {other:?}"),
    }

    // Another node's Event, and the kubelet's: recorded by the admin here.
    let of_node_b = event_name(
        &create_event(&admin, &podprobe_event(ns, "a", &rig.node_b))
            .await
            .expect("node B's Event"),
    );
    let mut kubelet = podprobe_event(ns, "a", &rig.node_a);
    kubelet.reporting_controller = Some("kubelet".to_string());
    let of_kubelet = event_name(&create_event(&admin, &kubelet).await.expect("kubelet Event"));
    let series = series_patch(2, Timestamp::now());
    assert_event_refused(
        "gate token of node A continues the series of node B's Event",
        patch_event(&podprobe.client, ns, &of_node_b, &series).await,
        &[&format!("reported as instance '{}'", rig.node_b)],
    );
    assert_event_refused(
        "gate token continues the series of the kubelet's Event",
        patch_event(&podprobe.client, ns, &of_kubelet, &series).await,
        &["reported by controller 'kubelet'"],
    );
}

#[tokio::test]
async fn event_token_without_a_node_claim_is_refused() {
    let rig = Rig::new().await;
    let ns = rig.ns.name.as_str();
    let podprobe = Identity::new(&unbound_token(GATE_SA)).await;
    assert_event_refused(
        "unbound gate token records an Event",
        create_event(&podprobe.client, &podprobe_event(ns, "a", &rig.node_a)).await,
        &["its token names no node"],
    );
}

/// The real `podprobe run --mode gate`, with nothing but a token bound to a
/// pod of its ServiceAccount on its node, turns a gated pod's condition
/// `True` under the policies, and records a failing pod's `Unhealthy`
/// Event and continues its series.
#[tokio::test]
async fn podprobe_run_in_gate_mode_works_under_the_policy() {
    let rig = Rig::new().await;
    let (token, _holder) = rig.pod_token(GATE_SA, &rig.node_a);
    let podprobe = Identity::new(&token).await;
    let run_id = rig.id.clone();
    let mut pod = cluster::gated_pod(
        "gated",
        "app",
        BUSYBOX_IMAGE,
        &["sleep", "3600"],
        &[],
        json!({"readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}}),
    );
    pod["metadata"]["labels"] = json!({TEST_RUN_LABEL: run_id});
    pod["spec"]["nodeName"] = json!(rig.node_a);
    rig.ns.create_pod(&pod);
    let mut failing = cluster::gated_pod(
        "failing",
        "app",
        BUSYBOX_IMAGE,
        &["sleep", "3600"],
        &[],
        json!({"readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1}}),
    );
    failing["metadata"]["labels"] = json!({TEST_RUN_LABEL: run_id});
    failing["spec"]["nodeName"] = json!(rig.node_a);
    rig.ns.create_pod(&failing);
    let kubeconfig = podprobe.kubeconfig.display().to_string();
    let host = tokio::task::spawn_blocking({
        let node = rig.node_a.clone();
        move || HostPodprobe::start_with_kubeconfig("gate", &node, &run_id, &kubeconfig)
    })
    .await
    .expect("start podprobe");
    let ns = &rig.ns;
    cluster::wait_for(
        "podprobe to set podprobe.io/ready=True",
        Duration::from_secs(90),
        || match condition(&ns.pod("gated")?, GATE) {
            Some((status, _)) if status == "True" => Ok(()),
            other => Err(format!("{GATE} is {other:?}")),
        },
        || format!("{}\n--- podprobe\n{}", ns.diagnostics(), host.log_tail(60)),
    );
    // Created, then patched: both writes went through the Event policy.
    let admin = cluster().client().await;
    let events = Api::<Event>::namespaced(admin, &ns.name);
    let unhealthy = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let list = events.list(&Default::default()).await.expect("list events");
            let series = list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("Unhealthy")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("failing")
                    && e.series.as_ref().is_some_and(|s| s.count >= 2)
            });
            match series {
                Some(event) => break event,
                None => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        let failed: Vec<_> = host
            .logs()
            .lines()
            .filter(|l| l.contains("cannot record event"))
            .map(str::to_string)
            .collect();
        panic!(
            "no Unhealthy Event of pod failing with a series in 60 s; failed writes:\n{}\n--- podprobe\n{}",
            failed.join("\n"),
            host.log_tail(60)
        )
    });
    assert_eq!(unhealthy.reporting_controller.as_deref(), Some("podprobe"));
    assert_eq!(
        unhealthy.reporting_instance.as_deref(),
        Some(rig.node_a.as_str())
    );
    let logs = host.logs();
    assert!(
        !logs.contains(DENIED) && !logs.contains(EVENT_DENIED),
        "podprobe was refused by a policy:\n{}",
        host.log_tail(60)
    );
}

/// The chart's marker policy (`markers.allowedKeys={role}`) and a
/// ClusterRole granting podprobe's gate-mode account `patch` on pods, as
/// the chart adds them; removed again when dropped. The shared ClusterRole
/// of the other tests is left as it is.
struct MarkerGrant;

const MARKER_POLICY: &str = "podprobe-marker-writes";
const MARKER_DENIED: &str = "ValidatingAdmissionPolicy 'podprobe-marker-writes'";
const MARKER_ROLE: &str = "podprobe-admission-test-markers";

impl MarkerGrant {
    fn apply() -> MarkerGrant {
        let rendered = std::process::Command::new(go_tools::helm())
            .args([
                "template",
                "podprobe",
                &repo_file("charts/podprobe"),
                "--namespace",
                NAMESPACE,
                "--set",
                "markers.allowedKeys={role}",
                "--show-only",
                "templates/admission-policy.yaml",
            ])
            .output()
            .expect("run helm");
        assert!(
            rendered.status.success(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let text = String::from_utf8_lossy(&rendered.stdout).to_string();
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).expect("YAML"))
            .filter(|doc| doc["metadata"]["name"] == MARKER_POLICY)
            .collect();
        assert_eq!(docs.len(), 2, "the policy and its binding: {text}");
        let grant = MarkerGrant;
        for doc in &docs {
            cluster().apply(doc).unwrap_or_else(|e| panic!("{e}"));
        }
        kubectl(&[
            "create",
            "clusterrole",
            MARKER_ROLE,
            "--verb=patch",
            "--resource=pods",
        ]);
        kubectl(&[
            "create",
            "clusterrolebinding",
            MARKER_ROLE,
            &format!("--clusterrole={MARKER_ROLE}"),
            &format!("--serviceaccount={NAMESPACE}:{GATE_SA}"),
        ]);
        grant
    }
}

impl Drop for MarkerGrant {
    fn drop(&mut self) {
        for (kind, name) in [
            ("clusterrolebinding", MARKER_ROLE),
            ("clusterrole", MARKER_ROLE),
            ("validatingadmissionpolicybinding", MARKER_POLICY),
            ("validatingadmissionpolicy", MARKER_POLICY),
        ] {
            let _ = cluster().kubectl(&["delete", kind, name, "--ignore-not-found"]);
        }
    }
}

/// A strategic-merge patch of the pod itself (not its status) as `client`,
/// as podprobe sends a marker.
async fn patch_pod(client: &kube::Client, name: &str, patch: &Value) -> Result<Pod, kube::Error> {
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
}

/// MK2 on the API server: with `markers.allowedKeys={role}`, podprobe's
/// token bound to its node may set and remove the `role` label of a pod on
/// that node, and nothing else: no other label or annotation, nothing of
/// the spec, no pod of another node, not without a node claim.
#[tokio::test]
async fn mk2_the_marker_policy_lets_podprobe_write_only_the_allowed_keys_of_its_own_nodes_pods() {
    ensure_policy().await;
    let _grant = MarkerGrant::apply();
    let id = unique_id();
    let node = cluster().node_name();
    let own = Holder::create(&format!("marker-own-{id}"), GATE_SA, &node);
    let other = Holder::create(&format!("marker-other-{id}"), GATE_SA, ABSENT_NODE);
    let podprobe = Identity::new(&node_token(GATE_SA, &node)).await;
    let role =
        |uid: &str, value: Value| json!({"metadata": {"uid": uid, "labels": {"role": value}}});
    // RBAC and the policy reach the API server through informers: wait
    // until a write it refuses is refused by it.
    // Each attempt a change of its own: one that went through before the
    // policy was in force would make the same patch a no-op, which the
    // policy lets pass.
    let forged = |attempt: u32| json!({"metadata": {"labels": {"other": format!("x{attempt}")}}});
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for attempt in 0.. {
        match patch_pod(&podprobe.client, &own.name, &forged(attempt)).await {
            Err(kube::Error::Api(status)) if status.message.contains(MARKER_DENIED) => break,
            other if tokio::time::Instant::now() > deadline => panic!(
                "the marker policy is not enforced after 30 s: {:?}",
                other.map(|_| "the write was allowed")
            ),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let written = assert_allowed(
        "the role label of a pod on its node",
        patch_pod(
            &podprobe.client,
            &own.name,
            &role(&own.uid, json!("primary")),
        )
        .await,
    );
    assert_eq!(
        written
            .metadata
            .labels
            .unwrap_or_default()
            .get("role")
            .map(String::as_str),
        Some("primary")
    );
    assert_allowed(
        "removing it",
        patch_pod(&podprobe.client, &own.name, &role(&own.uid, Value::Null)).await,
    );
    assert_refused_by(
        MARKER_DENIED,
        "another label",
        patch_pod(&podprobe.client, &own.name, &forged(u32::MAX)).await,
        &[
            "may not change other on pod",
            "it writes only the marker keys role",
        ],
    );
    assert_refused_by(
        MARKER_DENIED,
        "an annotation",
        patch_pod(
            &podprobe.client,
            &own.name,
            &json!({"metadata": {"annotations": {"role-note": "x"}}}),
        )
        .await,
        &["may not change role-note"],
    );
    assert_refused_by(
        MARKER_DENIED,
        "the spec",
        patch_pod(
            &podprobe.client,
            &own.name,
            &json!({"spec": {"activeDeadlineSeconds": 30}}),
        )
        .await,
        &["not its spec or other metadata"],
    );
    assert_refused_by(
        MARKER_DENIED,
        "a pod of another node",
        patch_pod(
            &podprobe.client,
            &other.name,
            &role(&other.uid, json!("primary")),
        )
        .await,
        &[&format!("on node {ABSENT_NODE}: only pods on its own node")],
    );
    let unbound = Identity::new(&unbound_token(GATE_SA)).await;
    assert_refused_by(
        MARKER_DENIED,
        "a token without a node",
        patch_pod(
            &unbound.client,
            &own.name,
            &role(&own.uid, json!("primary")),
        )
        .await,
        &["its token names no node"],
    );
}

/// A Lease named `name`, as `client`, in `namespace`.
async fn create_lease(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<k8s_openapi::api::coordination::v1::Lease, kube::Error> {
    let lease = k8s_openapi::api::coordination::v1::Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: None,
    };
    Api::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &lease)
        .await
}

/// WG4: podprobe's token may write the workload Leases it keeps budgets in
/// (`podprobe-guard-*`, in a workload's namespace) and no other Lease: not
/// another name in that namespace, not a node's heartbeat in
/// kube-node-lease, not a leader election in kube-system.
#[tokio::test]
async fn podprobe_token_may_write_only_its_workload_leases() {
    ensure_policy().await;
    let ns = Namespace::create(&format!("podprobe-leases-{}", unique_id()));
    let podprobe = Identity::new(&unbound_token(GATE_SA)).await;
    // The policy's informer lags its apply: a forged name until refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match create_lease(&podprobe.client, &ns.name, "forged").await {
            Err(kube::Error::Api(status)) if status.message.contains(LEASE_DENIED) => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{LEASE_POLICY} is still not enforced 30 s after it was applied: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let leases = podprobe::api::workload_lease::WorkloadLeases::new(podprobe.client.clone());
    let name = podprobe::api::workload_lease::lease_name("0b5e3c9e-4d1f-4a51-9b38-6f1f0c1b2a33");
    let written = leases
        .decide(&ns.name, &name, |record| {
            let mut record = record.clone();
            record.units.insert(
                "pod".into(),
                podprobe_core::prober::workload_guard::Unit {
                    kind: podprobe_core::prober::workload_guard::UnitKind::Restart,
                    node: "a".into(),
                    since: 0,
                    expires: 60,
                    failures: 0,
                },
            );
            ((), Some(record))
        })
        .await;
    assert!(written.is_ok(), "podprobe's own Lease: {written:?}");
    // Written again (an update naming its version).
    let again = leases
        .decide(&ns.name, &name, |record| {
            ((), Some(record.without("pod").unwrap()))
        })
        .await;
    assert!(again.is_ok(), "podprobe's own Lease, updated: {again:?}");
    assert_refused_by(
        LEASE_DENIED,
        "another Lease in the workload's namespace",
        create_lease(&podprobe.client, &ns.name, "leader-election").await,
        &["podprobe-guard-*", "leader-election"],
    );
    for namespace in ["kube-node-lease", "kube-system"] {
        assert_refused_by(
            LEASE_DENIED,
            &format!("a podprobe-guard Lease in {namespace}"),
            create_lease(&podprobe.client, namespace, "podprobe-guard-forged").await,
            &[namespace],
        );
    }
    // A node's heartbeat: RBAC lets podprobe update Leases; the policy not.
    let node = cluster().node_name();
    let heartbeats: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(podprobe.client.clone(), "kube-node-lease");
    let heartbeat = cluster()
        .json(&["-n", "kube-node-lease", "get", "lease", &node])
        .expect("the node's Lease");
    let mut heartbeat: k8s_openapi::api::coordination::v1::Lease =
        serde_json::from_value(heartbeat).expect("a Lease");
    heartbeat.spec.as_mut().expect("spec").holder_identity = Some("forged".to_string());
    assert_refused_by(
        LEASE_DENIED,
        "the node's heartbeat Lease",
        heartbeats
            .replace(&node, &PostParams::default(), &heartbeat)
            .await,
        &["kube-node-lease", &node],
    );
}
