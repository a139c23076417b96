//! podprobe: the kubelet's prober and the probe half of its status manager,
//! as a node-local sidecar.
//!
//! Two crates. `podprobe_core` (crates/podprobe-core) is the pure core: the
//! prober's state machines, the status decisions, the probe spec and the
//! utilities, with no API client, server, TLS stack or CRI client; this
//! crate re-exports its modules ([`worker`], [`manager`], [`status`],
//! [`util`], ...) and wires them to the world. Layout, in layers; an import
//! only points down (docs/architecture.md, checked by `tests/layering.rs`):
//! - [`cli`]: `podprobe probe`, `lint` and `simulate` (`main.rs` parses);
//! - [`daemon`]: `podprobe run`: its flags, the wiring and the sync loop,
//!   and the telemetry of probe runs;
//! - the edges: [`kube`] (the API client, the pod watch, the
//!   status patcher, Events, the Secrets probes name, the User-Agent),
//!   [`server`] (health, metrics and their authentication) and [`actuator`]
//!   (kills and their preStop hooks);
//! - the core (`podprobe_core`): [`worker`], [`manager`], [`results`],
//!   [`pod_store`], [`pod_sync`], [`takeover`], [`probe_rates`], [`liveness_pause`],
//!   [`probe_ledger`], [`not_ready`], [`markers`],
//!   the Event records;
//!   [`status`]: pure desired status, conditions and patches;
//! - [`probe`]: the spec (the core's) and the handlers that run one;
//! - [`runtime`]: the CRI client;
//! - [`util`] (the core's).

pub(crate) mod actuator;
pub mod api;
pub mod cli;
pub mod daemon;
pub mod probe;
pub mod runtime;
pub mod server;
#[cfg(test)]
pub(crate) mod testing;
