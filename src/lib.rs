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
pub mod client_certificates;
pub mod config;
pub mod cri;
pub mod daemon;
pub mod events;
pub mod grpc_status;
pub mod health;
pub mod kill_container;
pub mod lifecycle;
pub mod lint;
pub mod metrics;
pub mod oneshot;
pub mod pods;
pub mod probe;
pub mod process_stats;
pub mod server;
pub mod simulate;
pub mod status;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod testing;
pub mod user_agent;

/// The pure core's modules, at the paths they had before the split.
pub use podprobe_core::{
    KUBE_PROBE_VERSION, backoff, exit_code, manager, pod, pod_sync, probe_rates, rate_limit,
    restart_policy, results, takeover, watch_activity, worker,
};
