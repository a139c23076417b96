//! A CRI node agent for podprobe's authority-mode tests (test support code,
//! not part of the product).
//!
//! It registers a Node and runs the pods bound to it through its own
//! container runtime, restarting containers per restart policy and
//! reporting pod phase, IPs and container states as a kubelet does, but it
//! has no prober: container `ready`/`started` and the `Ready` and
//! `ContainersReady` conditions are left to podprobe in `--mode authority`.
//! That is the node agent authority mode exists for (a CRI-based virtual
//! kubelet without a prober of its own).
//!
//! Modules, one job each:
//! - [`node`]: the Node, its Lease and heartbeat;
//! - [`supervisor`]: the pod watch, one worker per pod UID;
//! - [`pod`]: one pod's life (sandbox, containers, status reports, deletion);
//! - [`plan`]: what to start, restart or stop next (pure);
//! - [`status`]: the reported pod status and its patch (pure);
//! - [`backoff`], [`policy`]: CrashLoopBackOff and restart policy (pure);
//! - [`runtime`], [`observed`]: CRI calls and what they show.

mod backoff;
mod node;
mod observed;
mod plan;
mod pod;
mod policy;
mod runtime;
mod status;
mod supervisor;

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use podprobe::runtime::cri::{CriClient, CriError};

/// A CRI node agent for podprobe's authority-mode tests: registers a Node and
/// runs the pods bound to it (spec.nodeName) through a CRI runtime, without a
/// prober.
#[derive(Debug, Parser)]
#[command(name = "node-agent")]
struct Args {
    /// Name of the Node to register; pods with this spec.nodeName are run.
    #[arg(long, default_value = "podprobe-agent")]
    node_name: String,
    /// Kubeconfig with rights on nodes, leases and pods (e.g. the local
    /// cluster's admin kubeconfig).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// The container runtime's CRI socket, unix:///path.
    #[arg(long)]
    cri_endpoint: String,
    /// The node's InternalIP and every pod's hostIP: the gateway address of
    /// the runtime's pod bridge.
    #[arg(long, default_value = "10.88.79.1")]
    node_ip: String,
    /// Directory for container logs (<dir>/pods/<namespace>_<name>_<uid>/).
    #[arg(long, default_value = "/tmp/podprobe-agent/state")]
    state_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
enum AgentError {
    #[error("cannot load the kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("cannot build the API client: {0}")]
    Client(kube::Error),
    #[error("{0}")]
    Cri(#[from] CriError),
    #[error("cannot register node {node}: {error}")]
    Register { node: String, error: kube::Error },
    #[error("cannot wait for a shutdown signal: {0}")]
    Signal(std::io::Error),
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Err(e) = run(Args::parse()).await {
        tracing::error!("{e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), AgentError> {
    let client = kube_client(&args.kubeconfig).await?;
    let cri = CriClient::new(&args.cri_endpoint)?;
    let version = cri.version().await?;
    let info = node::NodeInfo {
        name: args.node_name.clone(),
        ip: args.node_ip.clone(),
        container_runtime_version: format!(
            "{}://{}",
            version.runtime_name, version.runtime_version
        ),
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let ready_since = observed::now();
    let node_uid = node::register(&nodes, &info, &ready_since)
        .await
        .map_err(|error| AgentError::Register {
            node: args.node_name.clone(),
            error,
        })?;
    tracing::info!(
        node = %args.node_name,
        node_ip = %args.node_ip,
        runtime = %info.container_runtime_version,
        "node registered"
    );
    let heartbeat = tokio::spawn(node::heartbeat(nodes, leases, info, node_uid, ready_since));
    let runtime = runtime::Runtime::new(cri, args.state_dir);
    let pods = supervisor::run(client, runtime, &args.node_name, &args.node_ip);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(AgentError::Signal)?;
    // Containers keep running when the agent stops, as with a kubelet.
    tokio::select! {
        () = pods => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    heartbeat.abort();
    tracing::info!("stopping; pods keep running");
    Ok(())
}

async fn kube_client(path: &std::path::Path) -> Result<kube::Client, AgentError> {
    let error = |reason: String| AgentError::Kubeconfig {
        path: path.display().to_string(),
        reason,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| error(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| error(e.to_string()))?;
    kube::Client::try_from(config).map_err(AgentError::Client)
}
