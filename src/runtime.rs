//! The container runtime edge: the CRI client ([`cri`]: exec probes,
//! container status, stop, the pod's network namespace) and the gRPC
//! status text it and the gRPC handler print as Go does ([`grpc_status`]),
//! and the gauges of work in flight both count ([`in_flight`]).

pub mod cri;
pub(crate) mod grpc_status;
pub mod in_flight;
