//! The four probe handlers (exec through the CRI, HTTP, TCP, gRPC) and the
//! kubelet's common wrapper around them ([`Prober`]: retries on errors,
//! result mapping, the Event a run would record). The spec they run and the
//! vocabulary they share with the workers are the core's
//! (`podprobe_core::spec`).

pub mod dial;
pub mod exec;
pub mod grpc;
pub mod http;
pub mod netns;
pub mod run_probe;
mod tap;
pub mod tcp;
pub(crate) mod tls;

pub use run_probe::Prober;
