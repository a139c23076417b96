//! What a probe run concludes, whatever ran it: where it runs, its verdict
//! after the wrapper's retries (P2), and the Event the kubelet would record
//! for it (P5). Shared by the prober, the workers, the Event recorder and
//! the simulator, which must not need the handlers to speak of a run.

use std::future::Future;

use super::{Attempt, ProbeError, ProbeKind, ProbeResult};
use crate::util::pod::ContainerIdentity;

/// Attempts per probe run; only errors are retried (`maxProbeRetries`).
pub const MAX_PROBE_RETRIES: u32 = 3;

/// Where a probe runs: the pod IP for network probes, the runtime container
/// ID for exec probes.
#[derive(Debug, Clone, Copy)]
pub struct ProbeTarget<'a> {
    pub pod_ip: &'a str,
    pub container_id: Option<&'a str>,
    /// When set, an exec probe first checks with the runtime that the
    /// container is this one: its ID comes from the pod's status, which
    /// anyone allowed to patch `pods/status` could point elsewhere.
    pub identity: Option<ContainerIdentity<'a>>,
    /// The pod's namespace, where a `clientCertificate` Secret is read;
    /// `None` where there is no pod (`podprobe probe`).
    pub namespace: Option<&'a str>,
}

/// Kubernetes Event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// An Event the kubelet would record on the container for this run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProbeEvent {
    #[serde(rename = "type")]
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

/// Event reasons the prober records (`pkg/kubelet/events`).
pub mod reasons {
    pub const UNHEALTHY: &str = "Unhealthy";
    pub const PROBE_WARNING: &str = "ProbeWarning";
    /// podprobe's own: the probe's `clientCertificate` Secret cannot be
    /// read or used, so the probe fails without connecting.
    pub const CLIENT_CERTIFICATE_UNAVAILABLE: &str = "ClientCertificateUnavailable";
    /// podprobe's own: a Secret a probe takes a header value from cannot
    /// be read or used, so the probe fails without connecting (H25).
    pub const HEADER_SECRET_UNAVAILABLE: &str = "HeaderSecretUnavailable";
}

/// What one probe run concluded, after retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeVerdict {
    /// Low-level result of the last attempt.
    pub result: ProbeResult,
    /// Output of the last attempt (empty when it errored).
    pub output: String,
    /// Set when every attempt errored: the worker throws such a run away.
    pub error: Option<String>,
    pub event: Option<ProbeEvent>,
    pub attempts: u32,
}

impl ProbeVerdict {
    /// The cached result the kubelet derives: `success` and `warning` pass,
    /// everything else (including errors) fails.
    pub fn is_success(&self) -> bool {
        self.error.is_none() && matches!(self.result, ProbeResult::Success | ProbeResult::Warning)
    }

    /// The verdict of a run whose `reason` Secret (one of [`reasons`]'
    /// Secret reasons: a client certificate, a header value) could not be
    /// read or used: a failure, with `message` as output and in a Warning,
    /// and no attempt made. A failure, not an error, so that it counts
    /// towards the failure threshold: an errored run would be thrown away
    /// (D11), and a Secret that became unreadable would leave a ready pod
    /// ready.
    pub fn secret_unavailable(kind: ProbeKind, reason: &'static str, message: String) -> Self {
        ProbeVerdict {
            result: ProbeResult::Failure,
            event: Some(ProbeEvent {
                type_: EventType::Warning,
                reason,
                message: format!("{kind} probe failed: {message}"),
            }),
            output: message,
            error: None,
            attempts: 0,
        }
    }

    /// Builds the verdict of a run from its last attempt, with the event the
    /// kubelet would record for it.
    pub fn from_attempt(kind: ProbeKind, attempt: Attempt, attempts: u32) -> Self {
        let warning = |reason, message| {
            Some(ProbeEvent {
                type_: EventType::Warning,
                reason,
                message,
            })
        };
        match attempt {
            Err(ProbeError { result, message }) => ProbeVerdict {
                result,
                output: String::new(),
                event: warning(
                    reasons::UNHEALTHY,
                    format!("{kind} probe errored and resulted in {result} state: {message}"),
                ),
                error: Some(message),
                attempts,
            },
            Ok(outcome) => {
                let event = match outcome.result {
                    ProbeResult::Success | ProbeResult::Unknown => None,
                    ProbeResult::Warning => warning(
                        reasons::PROBE_WARNING,
                        format!("{kind} probe warning: {}", outcome.output),
                    ),
                    ProbeResult::Failure => warning(
                        reasons::UNHEALTHY,
                        format!("{kind} probe failed: {}", outcome.output),
                    ),
                };
                ProbeVerdict {
                    result: outcome.result,
                    output: outcome.output,
                    error: None,
                    event,
                    attempts,
                }
            }
        }
    }
}

/// The wrapper's retry policy (P2): runs `attempt` until it returns no error,
/// at most [`MAX_PROBE_RETRIES`] times back to back, and builds the verdict
/// from the last attempt. Shared by [`super::Prober`] and the simulator's scripted
/// probes, so both retry exactly alike.
pub async fn probe_with_retries<F, Fut>(kind: ProbeKind, mut attempt: F) -> ProbeVerdict
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt>,
{
    let mut attempts = 0;
    loop {
        attempts += 1;
        let outcome = attempt().await;
        if outcome.is_ok() || attempts >= MAX_PROBE_RETRIES {
            return ProbeVerdict::from_attempt(kind, outcome, attempts);
        }
    }
}
