//! Probes: the spec of one probe (defaults, validation, port resolution)
//! and the vocabulary the handlers that run it (in the `podprobe` crate's
//! `probe` module) and the workers share: kinds, results, verdicts.
//!
//! Handlers return an [`Attempt`]: either an [`Outcome`] (a low-level
//! [`ProbeResult`] and its output) or a [`ProbeError`]. Errors are kept apart
//! from failures because the kubelet retries only errors and throws an errored
//! run away, while a failure counts towards the failure threshold.

pub mod client_identity;
pub mod destinations;
pub mod header_secrets;
pub mod pod_network;
pub mod probe_spec;
pub mod restart_policy;
pub mod verdict;

use std::fmt;

pub use probe_spec::{Handler, ProbeSpec, SpecError};
pub use verdict::{ProbeEvent, ProbeTarget, ProbeVerdict};

/// The three probe kinds; `Display` gives the capitalised form the kubelet
/// uses in events and metrics (`Liveness`, `Readiness`, `Startup`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    /// All kinds in the order the kubelet creates workers for one container.
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Readiness,
        ProbeKind::Liveness,
    ];

    /// The core/v1 `Container` field holding this kind's probe
    /// (`livenessProbe`, ...), used to name fields in error messages.
    pub fn field_name(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "livenessProbe",
            ProbeKind::Readiness => "readinessProbe",
            ProbeKind::Startup => "startupProbe",
        }
    }
}

impl ProbeKind {
    /// The kubelet's `probeType.String()`: `Liveness`, `Readiness`,
    /// `Startup`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ProbeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "liveness" => Ok(ProbeKind::Liveness),
            "readiness" => Ok(ProbeKind::Readiness),
            "startup" => Ok(ProbeKind::Startup),
            _ => Err(format!(
                "unknown probe kind {s:?}: expected liveness, readiness or startup"
            )),
        }
    }
}

/// The low-level result of one handler run (`pkg/probe`'s `Result`).
/// `Display` gives the lower-case strings the kubelet logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeResult {
    Success,
    Warning,
    Failure,
    Unknown,
}

impl fmt::Display for ProbeResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeResult::Success => "success",
            ProbeResult::Warning => "warning",
            ProbeResult::Failure => "failure",
            ProbeResult::Unknown => "unknown",
        })
    }
}

/// A handler run that completed: its result and the output the kubelet would
/// show (body, command output or error text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub result: ProbeResult,
    pub output: String,
}

impl Outcome {
    pub fn new(result: ProbeResult, output: impl Into<String>) -> Self {
        Outcome {
            result,
            output: output.into(),
        }
    }
}

/// A handler run that could not be completed. `result` is the low-level result
/// the kubelet pairs with the error (`unknown` for most, `failure` for an HTTP
/// body-read error); it appears in the "errored and resulted in" event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProbeError {
    pub result: ProbeResult,
    pub message: String,
}

impl ProbeError {
    pub fn unknown(message: impl Into<String>) -> Self {
        ProbeError {
            result: ProbeResult::Unknown,
            message: message.into(),
        }
    }
}

/// What one handler run returns.
pub type Attempt = Result<Outcome, ProbeError>;

/// Maximum bytes of probe output kept (exec output and HTTP bodies), 10 KiB as
/// in the kubelet.
pub const MAX_OUTPUT_BYTES: usize = 10 * 1024;

/// `host:port`, with IPv6 literals bracketed (Go's `net.JoinHostPort`).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_kind_displays_capitalised_and_parses_any_case() {
        assert_eq!(ProbeKind::Liveness.to_string(), "Liveness");
        assert_eq!("READINESS".parse::<ProbeKind>(), Ok(ProbeKind::Readiness));
        assert!("ready".parse::<ProbeKind>().is_err());
    }
}
