//! The core layer: the kubelet's prober state machines ([`worker`],
//! [`manager`], [`results`]) and the pod tracker that reacts to pods and
//! results ([`pod_tracker`], with [`pod_store`], [`pod_sync`],
//! [`takeover`], [`probe_rates`], [`liveness_pause`], [`probe_ledger`],
//! [`not_ready`], [`markers`] and the Event records, [`events`]), and the
//! workload guard's decisions and bookkeeping ([`workload_guard`],
//! [`restart_deferrals`], [`floor_keeper`]). It uses
//! [`crate::status`], [`crate::spec`] and [`crate::util`], never the other
//! way round.

pub mod events;
pub mod floor_keeper;
pub mod liveness_pause;
pub mod manager;
pub mod markers;
pub mod not_ready;
pub mod pod_store;
pub(crate) mod pod_sync;
pub mod pod_tracker;
pub mod probe_ledger;
pub mod probe_rates;
pub mod restart_deferrals;
pub mod results;
pub mod takeover;
pub mod worker;
pub mod workload_guard;
