//! podprobe: the kubelet's prober and the probe half of its status manager,
//! as a node-local sidecar.
//!
//! Layout, in layers; an import only points down (docs/architecture.md,
//! checked by `tests/layering.rs`):
//! - the CLI: [`oneshot`] (`podprobe probe`), [`lint`], [`simulate`];
//! - the daemon: [`daemon`] (`podprobe run`: wiring and the sync loop),
//!   [`config`] (its flags), [`telemetry`] (probe runs to metrics and Events);
//! - the edges: the API ([`apiclient`], [`pods`], [`events`],
//!   [`status::patcher`], [`client_certificates`], [`user_agent`]), the
//!   server ([`server`], [`health`], [`metrics`], [`process_stats`]) and the
//!   actuator ([`kill_container`], [`lifecycle`]);
//! - the core: the kubelet's prober state machines ([`worker`], [`manager`],
//!   [`results`]), [`pod_sync`], [`takeover`], [`probe_rates`] and the Event
//!   records ([`events::record`], [`events::recorder`]);
//! - [`status`]: pure desired status, conditions and patches;
//! - the probe: what a probe is and concludes ([`probe::spec`],
//!   [`probe::verdict`], [`restart_policy`]) and the handlers that run one
//!   ([`probe::prober`] and its siblings);
//! - the runtime: [`cri`] and [`grpc_status`];
//! - utilities: [`pod`], [`rate_limit`], [`watch_activity`], [`backoff`],
//!   [`exit_code`].

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
pub mod telemetry;
#[cfg(test)]
pub(crate) mod testing;
pub mod user_agent;
pub mod watch_activity;
pub mod worker;

/// The Kubernetes release whose API types and kubelet podprobe follows:
/// `MAJOR.MINOR` in `User-Agent: kube-probe/...` when the node's kubelet
/// version is not known (`podprobe probe`, or a Node podprobe cannot read).
pub const KUBE_PROBE_VERSION: &str = "1.37";
