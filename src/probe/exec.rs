//! Exec probes through the runtime's CRI `ExecSync`.

use std::time::Duration;

use super::Attempt;
use crate::cri::CriClient;

/// Runs `command` in `container_id` through CRI with `timeout`.
pub async fn probe(cri: &CriClient, container_id: &str, command: &[String], timeout: Duration) -> Attempt {
    let _ = (cri, container_id, command, timeout);
    unimplemented!("exec probe")
}
