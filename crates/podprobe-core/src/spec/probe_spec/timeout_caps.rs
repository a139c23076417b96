//! The longest a probe attempt may run on this node (#37): the kubelet
//! waits out any `timeoutSeconds`, but a probe that runs holds something
//! other pods need — an exec slot, or a connection and its buffers — for as
//! long as the pod's command or server chooses to take. podprobe cuts a
//! longer timeout to the node's cap and says so once, when it reads the
//! probe (a `ProbeTimeoutCapped` Warning).

use std::fmt;
use std::time::Duration;

use super::{Handler, ProbeSpec};
use crate::spec::ProbeKind;

/// The node's caps on probe timeouts (`--max-exec-timeout-seconds`,
/// `--max-network-timeout-seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutCaps {
    pub exec: Duration,
    pub network: Duration,
}

/// A probe whose `timeoutSeconds` is longer than the node allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CappedTimeout {
    pub container: String,
    pub kind: ProbeKind,
    /// `timeoutSeconds` as written.
    pub timeout: Duration,
    /// What it runs with.
    pub cap: Duration,
    /// The flag that sets the cap.
    pub flag: &'static str,
}

impl TimeoutCaps {
    /// The cap on `spec`'s timeout and its flag; `None` for a handler that
    /// runs nothing.
    fn of(&self, spec: &ProbeSpec) -> Option<(Duration, &'static str)> {
        match spec.handler {
            Handler::Exec(_) => Some((self.exec, "--max-exec-timeout-seconds")),
            Handler::HttpGet(_) | Handler::TcpSocket(_) | Handler::Grpc(_) => {
                Some((self.network, "--max-network-timeout-seconds"))
            }
            Handler::Unresolvable(_) | Handler::Unsupported(_) => None,
        }
    }

    /// The probes among `probes` (container, kind, spec) whose timeout is
    /// cut.
    pub fn capped<'a>(
        &self,
        probes: impl IntoIterator<Item = (&'a str, ProbeKind, &'a ProbeSpec)>,
    ) -> Vec<CappedTimeout> {
        probes
            .into_iter()
            .filter_map(|(container, kind, spec)| {
                let (cap, flag) = self.of(spec)?;
                (spec.timeout() > cap).then(|| CappedTimeout {
                    container: container.to_string(),
                    kind,
                    timeout: spec.timeout(),
                    cap,
                    flag,
                })
            })
            .collect()
    }
}

impl fmt::Display for CappedTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.timeoutSeconds: {} is longer than this node allows: the probe times out after \
             {} s ({})",
            self.kind.field_name(),
            self.timeout.as_secs(),
            self.cap.as_secs(),
            self.flag
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::probe_spec::{ExecAction, TcpSocketAction};
    use crate::testing::default_spec;

    fn spec(handler: Handler, timeout_seconds: i32) -> ProbeSpec {
        ProbeSpec {
            handler,
            timeout_seconds,
            ..default_spec()
        }
    }

    #[test]
    fn only_timeouts_over_their_handlers_cap_are_reported() {
        let caps = TimeoutCaps {
            exec: Duration::from_secs(60),
            network: Duration::from_secs(30),
        };
        let tcp = |seconds| {
            let action = TcpSocketAction {
                host: None,
                port: 80,
            };
            spec(Handler::TcpSocket(action), seconds)
        };
        let exec = |seconds| {
            let action = ExecAction {
                command: vec!["true".into()],
            };
            spec(Handler::Exec(action), seconds)
        };
        let (long_tcp, ok_tcp, long_exec, ok_exec) = (tcp(3600), tcp(30), exec(61), exec(45));
        let capped = caps.capped([
            ("app", ProbeKind::Readiness, &long_tcp),
            ("app", ProbeKind::Liveness, &ok_tcp),
            ("side", ProbeKind::Liveness, &long_exec),
            ("side", ProbeKind::Startup, &ok_exec),
        ]);
        assert_eq!(capped.len(), 2, "{capped:?}");
        assert_eq!(
            capped[0].to_string(),
            "readinessProbe.timeoutSeconds: 3600 is longer than this node allows: the probe \
             times out after 30 s (--max-network-timeout-seconds)"
        );
        assert_eq!(
            (capped[1].container.as_str(), capped[1].flag),
            ("side", "--max-exec-timeout-seconds")
        );
    }
}
