//! podprobe's pure core: the kubelet's prober state machines and the
//! probe half of its status manager, over k8s-openapi types, with no API
//! client, no server, no TLS stack and no CRI client. This crate has no
//! dependency on kube, tonic, hyper or rustls (`hack/test.sh` checks its
//! `cargo tree`); the `podprobe` crate wires it to the world.
//!
//! Layout, in layers; an import only points down (docs/architecture.md,
//! checked by `tests/layering.rs`):
//! - the core: the kubelet's prober state machines ([`worker`], [`manager`],
//!   [`results`]), the pod store ([`pod_store`]), [`pod_sync`], [`takeover`],
//!   [`probe_rates`], [`liveness_pause`], [`probe_ledger`], [`not_ready`], [`markers`] and the Event records ([`events::record`],
//!   [`events::recorder`]);
//! - [`status`]: pure desired status, conditions and patches;
//! - the probe spec: what a probe is and concludes ([`probe::spec`],
//!   [`probe::verdict`], [`restart_policy`]);
//! - [`util`]: pod accessors, token buckets, retry delays, exit codes.

pub mod prober;
pub mod spec;
pub mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod util;

/// The Kubernetes release whose API types and kubelet podprobe follows:
/// `MAJOR.MINOR` in `User-Agent: kube-probe/...` when the node's kubelet
/// version is not known (`podprobe probe`, or a Node podprobe cannot read).
pub const KUBE_PROBE_VERSION: &str = "1.37";
