//! The Kubernetes API edge: the client ([`apiclient`]) and its HTTP/2
//! connection ([`api_connection`]), the node's pod
//! watch and store ([`pods`]), the status patcher ([`patcher`]), Events
//! ([`events`]), the Secrets probes name ([`secret_cache`]) for client
//! certificates ([`client_certificates`]) and header values
//! ([`header_secret_cache`]), the markers' metadata patches ([`markers`])
//! and the probes' `User-Agent` from the node's kubelet version
//! ([`user_agent`]), the workload guard's reads and Leases
//! ([`guard_decisions`], [`workload_members`], [`workload_lease`]) and the
//! PodDisruptionBudgets that opt pods into it ([`pdb_guards`]); the metric families of the clients' requests
//! ([`request_metrics`]), the pod watch ([`watch_metrics`]), Events
//! ([`event_metrics`]) and status patches ([`patch_metrics`]); the turns
//! that bound the status and marker patches in flight node-wide
//! ([`turns`]).

pub(crate) mod api_connection;
pub(crate) mod apiclient;
pub mod client_certificates;
pub mod client_pem;
pub mod event_broadcaster;
pub mod event_metrics;
pub mod guard_decisions;
pub(crate) mod header_secret_cache;
pub(crate) mod marker_patch;
pub(crate) mod patch_metrics;
pub(crate) mod patcher;
pub mod pdb_guards;
pub(crate) mod pods;
pub(crate) mod request_metrics;
pub mod secret_cache;
pub(crate) mod turns;
pub(crate) mod user_agent;
pub(crate) mod watch_metrics;
pub mod workload_lease;
pub mod workload_members;
