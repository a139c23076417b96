//! HTTP GET probes with the kubelet's exact request, redirect and result rules.

use std::time::Duration;

use super::Attempt;
use super::spec::HttpGetAction;

/// Runs one HTTP GET probe against `action` (host defaulting to `pod_ip`).
pub async fn probe(
    action: &HttpGetAction,
    pod_ip: &str,
    timeout: Duration,
    user_agent: &str,
) -> Attempt {
    let _ = (action, pod_ip, timeout, user_agent);
    unimplemented!("http probe")
}
