//! A Node object of a test's own, for tests that play the node agent
//! themselves: Ready, heartbeating its Lease so that the node lifecycle
//! controller neither taints it nor evicts its pods, tainted so that nothing
//! but the test's pods goes there, and deleted when dropped. It works against
//! any API server (the shared local cluster's or a test's private one): it
//! does everything through the client it was registered with.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The taint (effect `NoSchedule`) that keeps ordinary pods off a
/// [`TestNode`]; the test's pods tolerate it.
pub const AGENT_TAINT: &str = "podprobe.io/agent-node";

/// How long dropping a [`TestNode`] waits for its deletion.
const DELETE_TIMEOUT: Duration = Duration::from_secs(10);

/// RFC 3339 in whole seconds, as the API server stores `metav1.Time`.
pub fn rfc3339(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A Node object of the test's own, Ready and heartbeating its Lease, tainted
/// with [`AGENT_TAINT`]; deleted (with its Lease) when dropped. Drop it
/// before the runtime it was registered on (declare that runtime after it in
/// a struct): the client sends its requests from that runtime, so once the
/// runtime is gone the deletion cannot go out and the Node is left behind.
pub struct TestNode {
    name: String,
    nodes: Api<Node>,
    leases: Api<Lease>,
    /// Taken when dropped.
    heartbeat: Option<tokio::task::JoinHandle<()>>,
}

impl TestNode {
    /// Creates Node `name` through `client`, marks it Ready and renews its
    /// Lease every 5 s from a task on `rt` (a multi-thread runtime, so that
    /// the heartbeat goes on between the test's `block_on`s).
    pub fn register(rt: &tokio::runtime::Runtime, client: &kube::Client, name: &str) -> TestNode {
        let now = rfc3339(Timestamp::now());
        let ready = json!({
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "the test plays the node agent",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        });
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"podprobe.io/test-node": "true"}},
            "spec": {"taints": [{"key": AGENT_TAINT, "value": "true", "effect": "NoSchedule"}]},
        }))
        .expect("node manifest");
        let nodes: Api<Node> = Api::all(client.clone());
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        rt.block_on(async {
            nodes
                .create(&PostParams::default(), &node)
                .await
                .expect("create node");
            nodes
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"conditions": [ready]}})),
                )
                .await
                .expect("node status Ready");
        });
        let (lease_name, renewals) = (name.to_string(), leases.clone());
        let heartbeat = rt.spawn(async move {
            loop {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": lease_name, "namespace": "kube-node-lease"},
                    "spec": {
                        "holderIdentity": lease_name,
                        "leaseDurationSeconds": 40,
                        "renewTime": MicroTime(Timestamp::now()),
                    },
                });
                let params = PatchParams::apply("podprobe-test-agent").force();
                if let Err(e) = renewals
                    .patch(&lease_name, &params, &Patch::Apply(&lease))
                    .await
                {
                    eprintln!("node lease renewal failed (retrying): {e}");
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
        TestNode {
            name: name.to_string(),
            nodes,
            leases,
            heartbeat: Some(heartbeat),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestNode {
    /// Best effort: a test that already failed must not fail again here.
    fn drop(&mut self) {
        let heartbeat = self.heartbeat.take();
        if let Some(heartbeat) = &heartbeat {
            heartbeat.abort();
        }
        let (nodes, leases, name) = (self.nodes.clone(), self.leases.clone(), self.name.clone());
        let (done, finished) = std::sync::mpsc::channel();
        // A thread with a runtime of its own: Drop may run inside the test's
        // runtime (where blocking on a future panics) or after it was shut
        // down (where its timers panic). The client's requests still go
        // through the worker task it has on the test's runtime; if that
        // runtime is gone they fail at once, and if nothing drives it the
        // timeout below gives up.
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                // Cancelled, so that no renewal recreates the lease after its
                // deletion.
                if let Some(heartbeat) = heartbeat {
                    let _ = heartbeat.await;
                }
                let params = DeleteParams::default();
                let _ = nodes.delete(&name, &params).await;
                let _ = leases.delete(&name, &params).await;
            });
            let _ = done.send(());
        });
        let _ = finished.recv_timeout(DELETE_TIMEOUT);
    }
}
