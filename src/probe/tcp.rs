//! TCP socket probes (T1-T4): connect with the probe dialer, close at once.
//! Nothing is sent or read, so a peer that accepts and closes at once still
//! passes.

use std::time::Duration;

use tokio::time::Instant;

use super::dial::dial;
use super::{Attempt, Outcome, ProbeResult};

/// Connects to `host:port` within `timeout`: `success` with empty output if
/// the connection is accepted, otherwise `failure` with Go's dial error text
/// (`dial tcp 10.0.0.1:80: connect: connection refused`). Never an error, so
/// never retried.
pub async fn probe(host: &str, port: u16, timeout: Duration) -> Attempt {
    let outcome = match dial(host, port, Instant::now() + timeout).await {
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
