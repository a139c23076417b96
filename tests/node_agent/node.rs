//! The agent's Node: registered (or updated) at start, its Lease renewed
//! every 10 s and its `Ready` condition's heartbeat every 60 s, as the
//! kubelet does, so that the node lifecycle controller keeps it Ready.
//!
//! Everything is written by server-side apply under the agent's field
//! manager, which creates or updates in one call and leaves fields other
//! managers own (the node lifecycle controller's taints) alone.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// The field manager of everything the agent writes.
pub const FIELD_MANAGER: &str = "podprobe-node-agent";
/// Label and `NoSchedule` taint of the agent's node: podprobe's DaemonSet and
/// ordinary pods stay off it; tests bind pods with `spec.nodeName`.
pub const AGENT_NODE_LABEL: &str = "podprobe.io/agent-node";
/// The kubelet's `nodeLeaseRenewIntervalFraction` of its 40 s lease.
pub const LEASE_RENEW_PERIOD: Duration = Duration::from_secs(10);
const LEASE_DURATION_SECONDS: i32 = 40;
/// The kubelet's `nodeStatusReportFrequency` when nothing changes.
pub const STATUS_REPORT_PERIOD: Duration = Duration::from_secs(60);
const KUBELET_VERSION: &str = "v1.35.8-podprobe-agent";

/// What the Node says about this machine.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub name: String,
    pub ip: String,
    /// `<runtime name>://<runtime version>` from CRI `Version`.
    pub container_runtime_version: String,
}

/// Registers the Node (labels, taint) and reports its status once; returns
/// its UID for the Lease's owner reference. `ready_since` is the `Ready`
/// condition's transition time (the agent's start).
pub async fn register(
    nodes: &Api<Node>,
    info: &NodeInfo,
    ready_since: &Time,
) -> Result<String, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let node = nodes
        .patch(&info.name, &params, &Patch::Apply(node_spec(&info.name)))
        .await?;
    report_status(nodes, info, ready_since).await?;
    Ok(node.metadata.uid.unwrap_or_default())
}

/// Writes the Node's status with a fresh heartbeat.
pub async fn report_status(
    nodes: &Api<Node>,
    info: &NodeInfo,
    ready_since: &Time,
) -> Result<(), kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let body = node_status(info, ready_since, &Time(Timestamp::now()));
    nodes
        .patch_status(&info.name, &params, &Patch::Apply(body))
        .await?;
    Ok(())
}

/// Renews the node's Lease in `kube-node-lease`.
pub async fn renew_lease(
    leases: &Api<Lease>,
    name: &str,
    node_uid: &str,
) -> Result<(), kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let body = lease(name, node_uid, &MicroTime(Timestamp::now()));
    leases.patch(name, &params, &Patch::Apply(body)).await?;
    Ok(())
}

/// Keeps the Node healthy until the task is dropped: the Lease every
/// [`LEASE_RENEW_PERIOD`], the status every [`STATUS_REPORT_PERIOD`]. A
/// failed write is logged and retried on the next tick.
pub async fn heartbeat(
    nodes: Api<Node>,
    leases: Api<Lease>,
    info: NodeInfo,
    node_uid: String,
    ready_since: Time,
) {
    let mut lease_ticks = tokio::time::interval(LEASE_RENEW_PERIOD);
    let mut status_ticks = tokio::time::interval(STATUS_REPORT_PERIOD);
    // The status was just reported by `register`.
    status_ticks.tick().await;
    let mut failing = false;
    loop {
        let result = tokio::select! {
            _ = lease_ticks.tick() => renew_lease(&leases, &info.name, &node_uid).await,
            _ = status_ticks.tick() => report_status(&nodes, &info, &ready_since).await,
        };
        match result {
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(node = %info.name, error = %e, "node heartbeat failed");
            }
            Ok(()) if failing => {
                failing = false;
                tracing::info!(node = %info.name, "node heartbeat works again");
            }
            _ => {}
        }
    }
}

fn node_spec(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                AGENT_NODE_LABEL: "true",
            },
        },
        "spec": {
            "taints": [{"key": AGENT_NODE_LABEL, "value": "true", "effect": "NoSchedule"}],
        },
    })
}

fn node_status(info: &NodeInfo, ready_since: &Time, heartbeat: &Time) -> Value {
    let resources = json!({"cpu": "2", "memory": "4Gi", "pods": "110"});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": info.name},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": info.ip},
                {"type": "Hostname", "address": info.name},
            ],
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "containerRuntimeVersion": info.container_runtime_version,
                "operatingSystem": "linux",
                "architecture": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
                "kubeProxyVersion": "",
                "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "", "osImage": "",
            },
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "AgentReady",
                "message": "podprobe's test node agent is running",
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": ready_since,
            }],
        },
    })
}

fn lease(name: &str, node_uid: &str, renew_time: &MicroTime) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            // Deleted with the Node, as the kubelet's lease is.
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": renew_time,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_is_labelled_tainted_and_ready() {
        let spec = node_spec("podprobe-agent");
        assert_eq!(spec["metadata"]["labels"][AGENT_NODE_LABEL], "true");
        assert_eq!(
            spec["metadata"]["labels"]["kubernetes.io/hostname"],
            "podprobe-agent"
        );
        assert_eq!(spec["spec"]["taints"][0]["effect"], "NoSchedule");
        let info = NodeInfo {
            name: "podprobe-agent".into(),
            ip: "10.88.79.1".into(),
            container_runtime_version: "containerd://1.7.24".into(),
        };
        let t = Time(Timestamp::from_second(1_700_000_000).unwrap());
        let status = node_status(&info, &t, &t);
        let node: Node = serde_json::from_value(status).expect("a valid Node");
        let status = node.status.unwrap();
        let ready = &status.conditions.unwrap()[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(ready.reason.as_deref(), Some("AgentReady"));
        assert_eq!(status.node_info.unwrap().kubelet_version, KUBELET_VERSION);
        assert_eq!(status.addresses.unwrap()[0].address, "10.88.79.1");
    }

    #[test]
    fn lease_is_owned_by_the_node() {
        let t = MicroTime(Timestamp::from_second(1_700_000_000).unwrap());
        let lease: Lease = serde_json::from_value(lease("n", "uid-n", &t)).unwrap();
        assert_eq!(lease.metadata.owner_references.unwrap()[0].uid, "uid-n");
        assert_eq!(lease.spec.unwrap().lease_duration_seconds, Some(40));
    }
}
