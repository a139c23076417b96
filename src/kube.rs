//! The Kubernetes API edge: the client ([`apiclient`]), the node's pod
//! watch and store ([`pods`]), the status patcher ([`patcher`]), Events
//! ([`events`]), the Secrets probes name ([`secret_cache`]) for client
//! certificates ([`client_certificates`]) and header values
//! ([`header_secret_cache`]), the markers' metadata patches ([`markers`])
//! and the probes' `User-Agent` from the node's kubelet version
//! ([`user_agent`]).

pub mod apiclient;
pub mod client_certificates;
pub mod events;
pub mod header_secret_cache;
pub mod markers;
pub mod patcher;
pub mod pods;
pub mod secret_cache;
pub mod user_agent;
