//! The Kubernetes API edge: the client ([`apiclient`]), the node's pod
//! watch and store ([`pods`]), the status patcher ([`patcher`]), Events
//! ([`events`]), the client-certificate Secrets ([`client_certificates`]),
//! the markers' metadata patches ([`markers`]) and the probes'
//! `User-Agent` from the node's kubelet version ([`user_agent`]).

pub mod apiclient;
pub mod client_certificates;
pub mod events;
pub mod markers;
pub mod patcher;
pub mod pods;
pub mod user_agent;
