//! TCP socket probes (T1-T4): connect with the probe dialer, close at once.
//! Nothing is sent or read, so a peer that accepts and closes at once still
//! passes.

use std::time::Duration;

use tokio::time::Instant;

use crate::probe::dial::dial;
use podprobe_core::spec::destinations::Destinations;
use podprobe_core::spec::{Attempt, Outcome, ProbeResult};

/// Connects to `host:port` within `timeout`: `success` with empty output if
/// the connection is accepted, otherwise `failure` with Go's dial error text
/// (`dial tcp 10.0.0.1:80: connect: connection refused`), or the policy's
/// refusal when `destinations` denies the address. Never an error, so never
/// retried.
pub async fn probe(
    host: &str,
    port: u16,
    timeout: Duration,
    destinations: &Destinations,
) -> Attempt {
    let outcome = match dial(host, port, Instant::now() + timeout, destinations).await {
        Ok(stream) => {
            drop(stream);
            Outcome::new(ProbeResult::Success, "")
        }
        Err(error) => {
            tracing::debug!(%error, host, port, "TCP probe failed to connect");
            Outcome::new(ProbeResult::Failure, error.to_string())
        }
    };
    Ok(outcome)
}
