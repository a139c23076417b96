//! podprobe: the kubelet's prober and the probe half of its status manager,
//! as a node-local sidecar.
//!
//! Layout, from the edges in:
//! - [`probe`]: one probe's spec and the exec/HTTP/TCP/gRPC handlers, with the
//!   kubelet's common wrapper (retries, result mapping, events);
//!   [`client_certificates`], the `clientCertificate` Secrets probes present;
//! - [`cri`]: the container runtime client (ExecSync, StopContainer, ...);
//! - [`oneshot`]: `podprobe probe`, one probe run once from the command line;
//! - [`results`], [`worker`], [`manager`]: the kubelet's prober state machines;
//! - [`status`]: desired pod status and the patches that reach it;
//! - [`daemon`]: `podprobe run` (gate or authority mode), and [`takeover`],
//!   what a restarted daemon takes over from the API; [`apiclient`] (request
//!   timeouts, watch activity), [`backoff`] and [`health`] keep it current
//!   through API server faults;
//! - [`simulate`]: `podprobe simulate`, the prober on a virtual clock
//!   against scripted containers; [`lint`]: gate set-up mistakes, for the
//!   daemon's warnings and `podprobe lint`.

pub mod apiclient;
pub mod backoff;
pub mod client_certificates;
pub mod config;
pub mod cri;
pub mod daemon;
pub mod events;
pub mod exit_code;
pub mod grpc_status;
pub mod health;
pub mod kill_container;
pub mod lifecycle;
pub mod lint;
pub mod manager;
pub mod metrics;
pub mod oneshot;
pub mod pod;
pub mod pod_sync;
pub mod pods;
pub mod probe;
pub mod probe_rates;
pub mod process_stats;
pub mod rate_limit;
pub mod restart_policy;
pub mod results;
pub mod server;
pub mod simulate;
pub mod status;
pub mod takeover;
#[cfg(test)]
pub(crate) mod testing;
pub mod user_agent;
pub mod watch_activity;
pub mod worker;

/// The Kubernetes release whose API types and kubelet podprobe follows:
/// `MAJOR.MINOR` in `User-Agent: kube-probe/...` when the node's kubelet
/// version is not known (`podprobe probe`, or a Node podprobe cannot read).
pub const KUBE_PROBE_VERSION: &str = "1.37";
