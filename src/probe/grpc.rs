//! gRPC health probes (`grpc.health.v1.Health/Check`).

use std::time::Duration;

use super::Attempt;

/// Checks `service` on `host:port` with one deadline over connect and RPC.
pub async fn probe(host: &str, port: u16, service: &str, timeout: Duration, user_agent: &str) -> Attempt {
    let _ = (host, port, service, timeout, user_agent);
    unimplemented!("grpc probe")
}
