//! Probes: the spec of one probe (defaults, validation, port resolution) and
//! the four handlers that run it, plus the kubelet's common wrapper around
//! them (retries on errors, result mapping, the Event a run would record).
//!
//! Handlers return an [`Attempt`]: either an [`Outcome`] (a low-level
//! [`ProbeResult`] and its output) or a [`ProbeError`]. Errors are kept apart
//! from failures because the kubelet retries only errors and throws an errored
//! run away, while a failure counts towards the failure threshold.

pub mod dial;
pub mod exec;
pub mod grpc;
pub mod http;
pub mod prober;
pub mod spec;
pub mod tcp;

use std::fmt;

pub use prober::{ProbeEvent, ProbeTarget, ProbeVerdict, Prober};
pub use spec::{Handler, ProbeSpec, SpecError};

/// The three probe kinds; `Display` gives the capitalised form the kubelet
/// uses in events and metrics (`Liveness`, `Readiness`, `Startup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
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

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        })
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

/// Renders a duration the way Go's `time.Duration.String` does (`1s`, `500ms`,
/// `1m30s`, `1.5s`), because the kubelet's probe messages embed it.
pub fn go_duration(d: std::time::Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let total_secs = nanos / 1_000_000_000;
    let sub_nanos = nanos % 1_000_000_000;
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let secs = total_secs % 60;
    let secs = trim_fraction(
        u128::from(secs as u64) * 1_000_000_000 + sub_nanos,
        1_000_000_000,
    );
    match (hours, minutes) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m{secs}s"),
        (h, m) => format!("{h}h{m}m{secs}s"),
    }
}

/// `value / unit` as a decimal with trailing zeros removed (`1500, 1000` -> `1.5`).
fn trim_fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn go_duration_matches_go_formatting() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_micros(1), "1µs"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_nanos(7), "7ns"),
            (
                Duration::from_secs(61) + Duration::from_millis(250),
                "1m1.25s",
            ),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn probe_kind_displays_capitalised_and_parses_any_case() {
        assert_eq!(ProbeKind::Liveness.to_string(), "Liveness");
        assert_eq!("READINESS".parse::<ProbeKind>(), Ok(ProbeKind::Readiness));
        assert!("ready".parse::<ProbeKind>().is_err());
    }
}
