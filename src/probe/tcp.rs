//! TCP socket probes: connect, close at once.

use std::time::Duration;

use super::Attempt;

/// Connects to `host:port` within `timeout`.
pub async fn probe(host: &str, port: u16, timeout: Duration) -> Attempt {
    let _ = (host, port, timeout);
    unimplemented!("tcp probe")
}
