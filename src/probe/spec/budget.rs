//! What one pod's probes may make podprobe hold (#25): the per-probe limits
//! (a 2 MiB expanded command, a 64 KiB compiled `bodyRegex`) are not enough
//! when one pod has hundreds of probes. A 318 KB pod of 860 containers with
//! three `bodyRegex` probes each took 531 MB to parse; a 1.29 MB pod whose
//! exec probes each expand a 20 KB variable 104 times, 378 MB. The daemon
//! parses a pod as soon as it is scheduled and after every restart, so such
//! a pod crash-loops podprobe for the whole node.
//!
//! [`PodBudget`] is charged probe by probe as a pod's probes are built, so
//! parsing stops at the first probe over it: the memory held is at most the
//! budget plus one probe's own limit. The kubelet has no such budgets (it
//! holds whatever the pod spec holds, and expands commands per run).

use std::fmt;

use super::{Handler, ProbeSpec};
use crate::probe::ProbeKind;

/// Default budget of compiled `bodyRegex` programs per pod: 16 of the
/// largest allowed, hundreds of ordinary ones (a few KiB each).
pub const DEFAULT_POD_REGEX_BYTES: usize = 1024 * 1024;

/// Default budget of exec probe commands per pod, after `$(VAR)`
/// expansion: two of the largest a single probe may have.
pub const DEFAULT_POD_COMMAND_BYTES: usize = 4 * 1024 * 1024;

/// Default and largest size of the `podprobe.io/probes` annotation: the API
/// server's limit on all of a pod's annotations together
/// (`TotalAnnotationSizeLimitB`), so by default only a value the API server
/// would not store is refused.
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// The limits of one pod's budget; a flag each (`podprobe run
/// --max-pod-regex-bytes`, `--max-pod-command-bytes`,
/// `--max-annotation-bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    pub regex_bytes: usize,
    pub command_bytes: usize,
    /// Gate mode: the `podprobe.io/probes` annotation's length.
    pub annotation_bytes: usize,
}

impl Default for BudgetLimits {
    fn default() -> Self {
        BudgetLimits {
            regex_bytes: DEFAULT_POD_REGEX_BYTES,
            command_bytes: DEFAULT_POD_COMMAND_BYTES,
            annotation_bytes: MAX_ANNOTATION_BYTES,
        }
    }
}

/// Which of a pod's budgets a probe went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    RegexBytes,
    CommandBytes,
}

impl Budget {
    /// The metric label and the words of messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::RegexBytes => "pod_regex_bytes",
            Budget::CommandBytes => "pod_command_bytes",
        }
    }

    /// The `podprobe run` flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Budget::RegexBytes => "--max-pod-regex-bytes",
            Budget::CommandBytes => "--max-pod-command-bytes",
        }
    }

    /// The field of a `kind` probe that holds what this budget counts.
    pub fn field(self, kind: ProbeKind) -> String {
        match self {
            Budget::RegexBytes => format!("{}.podprobe.expect.bodyRegex", kind.field_name()),
            Budget::CommandBytes => format!("{}.exec.command", kind.field_name()),
        }
    }

    fn what(self) -> &'static str {
        match self {
            Budget::RegexBytes => "the compiled bodyRegex programs",
            Budget::CommandBytes => "the exec commands after $(VAR) expansion",
        }
    }
}

/// A probe that would take its pod over a budget: `container`'s `kind`
/// probe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct OverBudget {
    pub container: String,
    pub kind: ProbeKind,
    pub budget: Budget,
    /// What the pod's probes would take with this one.
    pub needed: usize,
    pub limit: usize,
}

impl OverBudget {
    /// What was over and the limit, without the field.
    pub fn reason(&self) -> String {
        format!(
            "Forbidden: over the pod's budget: {} of its probes would take at least {} bytes, \
             more than the node's limit of {} ({})",
            self.budget.what(),
            self.needed,
            self.limit,
            self.budget.flag()
        )
    }
}

impl fmt::Display for OverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.budget.field(self.kind), self.reason())
    }
}

/// One pod's budget as its probes are built.
#[derive(Debug, Clone)]
pub struct PodBudget {
    limits: BudgetLimits,
    regex_bytes: usize,
    command_bytes: usize,
}

impl PodBudget {
    pub fn new(limits: BudgetLimits) -> Self {
        PodBudget {
            limits,
            regex_bytes: 0,
            command_bytes: 0,
        }
    }

    /// Charges `container`'s `kind` probe `spec` to the pod; over a budget
    /// nothing is charged.
    pub fn charge(
        &mut self,
        container: &str,
        kind: ProbeKind,
        spec: &ProbeSpec,
    ) -> Result<(), OverBudget> {
        let (regex, command) = cost(&spec.handler);
        let regex_bytes = self.regex_bytes + regex;
        let command_bytes = self.command_bytes + command;
        for (budget, needed, limit) in [
            (Budget::RegexBytes, regex_bytes, self.limits.regex_bytes),
            (
                Budget::CommandBytes,
                command_bytes,
                self.limits.command_bytes,
            ),
        ] {
            if needed > limit {
                return Err(OverBudget {
                    container: container.to_string(),
                    kind,
                    budget,
                    needed,
                    limit,
                });
            }
        }
        self.regex_bytes = regex_bytes;
        self.command_bytes = command_bytes;
        Ok(())
    }
}

/// What a handler holds for its pod's budgets: compiled regex bytes and
/// command bytes.
fn cost(handler: &Handler) -> (usize, usize) {
    match handler {
        Handler::Exec(exec) => (0, exec.command.iter().map(String::len).sum()),
        Handler::HttpGet(http) => (
            http.extensions
                .expect
                .body_regex
                .as_ref()
                .map_or(0, |regex| regex.compiled_bytes()),
            0,
        ),
        Handler::TcpSocket(_)
        | Handler::Grpc(_)
        | Handler::Unresolvable(_)
        | Handler::Unsupported(_) => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::spec::ExecAction;
    use crate::worker::testing::probe_spec;

    fn exec(bytes: usize) -> ProbeSpec {
        ProbeSpec {
            handler: Handler::Exec(ExecAction {
                command: vec!["x".repeat(bytes)],
            }),
            ..probe_spec(10, 0, 1, 3)
        }
    }

    #[test]
    fn charges_until_the_limit_then_refuses_and_charges_nothing() {
        let mut budget = PodBudget::new(BudgetLimits {
            regex_bytes: 100,
            command_bytes: 1000,
            ..BudgetLimits::default()
        });
        assert_eq!(budget.charge("a", ProbeKind::Readiness, &exec(600)), Ok(()));
        assert_eq!(budget.charge("b", ProbeKind::Liveness, &exec(400)), Ok(()));
        let refused = budget
            .charge("c", ProbeKind::Startup, &exec(1))
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "startupProbe.exec.command: Forbidden: over the pod's budget: the exec commands after \
             $(VAR) expansion of its probes would take at least 1001 bytes, more than the node's \
             limit of 1000 (--max-pod-command-bytes)"
        );
        assert_eq!(
            (refused.container.as_str(), refused.budget),
            ("c", Budget::CommandBytes)
        );
        assert_eq!(
            budget.charge("d", ProbeKind::Startup, &exec(0)),
            Ok(()),
            "nothing was charged"
        );
    }
}
