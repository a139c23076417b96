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
//! budget plus one probe's own limit. A [`PodBudget`] on the node is also
//! charged to the [`NodeBudget`] every pod shares, and gives its bytes back
//! when its probes are dropped: without it, 110 pods at their budgets would
//! hold over 500 MB. Each pod is guaranteed a share of the node's budget
//! ([`GUARANTEED_PODS`]), so a tenant who fills it cannot refuse another
//! pod's ordinary probes. The kubelet has no such budgets (it holds whatever
//! the pod spec holds, and expands commands per run).

use std::fmt;
use std::sync::{Arc, Mutex};

use super::{Handler, ProbeSpec};
use crate::spec::ProbeKind;

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

/// Default budget of compiled `bodyRegex` programs of all pods on the node
/// together: sixteen pods at their whole budget.
pub const DEFAULT_NODE_REGEX_BYTES: usize = 16 * 1024 * 1024;

/// Default budget of exec probe commands of all pods on the node together,
/// after `$(VAR)` expansion: eight pods at their whole budget.
pub const DEFAULT_NODE_COMMAND_BYTES: usize = 32 * 1024 * 1024;

/// How many pods the node's budgets guarantee a share to: the kubelet's
/// default `maxPods`. A pod within `node limit / GUARANTEED_PODS` is never
/// refused by the node's budget, so pods that fill the node's budget cannot
/// lock a small pod out; they can only make the node hold up to twice its
/// limit (the limit, plus every pod's guaranteed share).
pub const GUARANTEED_PODS: usize = 110;

/// The limits of one pod's budget and of the node's; a flag each
/// (`podprobe run --max-pod-regex-bytes`, `--max-pod-command-bytes`,
/// `--max-annotation-bytes`, `--max-node-regex-bytes`,
/// `--max-node-command-bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    pub regex_bytes: usize,
    pub command_bytes: usize,
    /// Gate mode: the `podprobe.io/probes` annotation's length.
    pub annotation_bytes: usize,
    /// All pods' compiled `bodyRegex` programs together.
    pub node_regex_bytes: usize,
    /// All pods' exec commands together.
    pub node_command_bytes: usize,
}

impl Default for BudgetLimits {
    fn default() -> Self {
        BudgetLimits {
            regex_bytes: DEFAULT_POD_REGEX_BYTES,
            command_bytes: DEFAULT_POD_COMMAND_BYTES,
            annotation_bytes: MAX_ANNOTATION_BYTES,
            node_regex_bytes: DEFAULT_NODE_REGEX_BYTES,
            node_command_bytes: DEFAULT_NODE_COMMAND_BYTES,
        }
    }
}

/// Which budget a probe went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    RegexBytes,
    CommandBytes,
    /// Gate mode: the annotation itself, refused before any probe is read.
    AnnotationBytes,
    NodeRegexBytes,
    NodeCommandBytes,
}

impl Budget {
    pub const ALL: [Budget; 5] = [
        Budget::RegexBytes,
        Budget::CommandBytes,
        Budget::AnnotationBytes,
        Budget::NodeRegexBytes,
        Budget::NodeCommandBytes,
    ];

    /// The metric label and the words of messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::RegexBytes => "pod_regex_bytes",
            Budget::CommandBytes => "pod_command_bytes",
            Budget::AnnotationBytes => "annotation_bytes",
            Budget::NodeRegexBytes => "node_regex_bytes",
            Budget::NodeCommandBytes => "node_command_bytes",
        }
    }

    /// The `podprobe run` flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Budget::RegexBytes => "--max-pod-regex-bytes",
            Budget::CommandBytes => "--max-pod-command-bytes",
            Budget::AnnotationBytes => "--max-annotation-bytes",
            Budget::NodeRegexBytes => "--max-node-regex-bytes",
            Budget::NodeCommandBytes => "--max-node-command-bytes",
        }
    }

    /// The field of a `kind` probe that holds what this budget counts.
    pub fn field(self, kind: ProbeKind) -> String {
        match self {
            Budget::RegexBytes | Budget::NodeRegexBytes => {
                format!("{}.podprobe.expect.bodyRegex", kind.field_name())
            }
            Budget::CommandBytes | Budget::NodeCommandBytes => {
                format!("{}.exec.command", kind.field_name())
            }
            Budget::AnnotationBytes => "metadata.annotations[podprobe.io/probes]".to_string(),
        }
    }

    fn what(self) -> &'static str {
        match self {
            Budget::RegexBytes => "the compiled bodyRegex programs of its probes",
            Budget::CommandBytes => "the exec commands after $(VAR) expansion of its probes",
            Budget::AnnotationBytes => "its podprobe.io/probes annotation",
            Budget::NodeRegexBytes => "the compiled bodyRegex programs of every pod's probes",
            Budget::NodeCommandBytes => {
                "the exec commands after $(VAR) expansion of every pod's probes"
            }
        }
    }

    fn scope(self) -> &'static str {
        match self {
            Budget::NodeRegexBytes | Budget::NodeCommandBytes => "node",
            Budget::RegexBytes | Budget::CommandBytes | Budget::AnnotationBytes => "pod",
        }
    }
}

/// A probe that would take its pod, or the node, over a budget:
/// `container`'s `kind` probe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct OverBudget {
    pub container: String,
    pub kind: ProbeKind,
    pub budget: Budget,
    /// What the pod's probes (for a node budget: every pod's) would take
    /// with this one.
    pub needed: usize,
    pub limit: usize,
}

impl OverBudget {
    /// What was over and the limit, without the field.
    pub fn reason(&self) -> String {
        let guarantee = match self.budget.scope() {
            "node" => format!(
                ", and this pod's would take more than the {} bytes every pod is guaranteed",
                self.limit / GUARANTEED_PODS
            ),
            _ => String::new(),
        };
        format!(
            "Forbidden: over the {}'s budget: {} would take at least {} bytes, \
             more than the node's limit of {} ({}){guarantee}",
            self.budget.scope(),
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

/// What every pod's probes hold together, for the node's budgets: shared
/// by the daemon's [`PodBudget`]s, each of which gives back what it holds
/// when dropped.
#[derive(Debug, Clone, Default)]
pub struct NodeBudget {
    held: Arc<Mutex<Held>>,
}

/// Bytes held, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Held {
    regex: usize,
    command: usize,
}

impl NodeBudget {
    pub fn new() -> Self {
        Self::default()
    }

    /// Compiled regex and command bytes held by every pod together.
    pub fn held(&self) -> (usize, usize) {
        let held = *self.lock();
        (held.regex, held.command)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Only additions and subtractions happen under the lock.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One pod's budget as its probes are built, and what they hold for as
/// long as they run: a budget on the node gives its bytes back to the
/// node's when dropped.
#[derive(Debug)]
pub struct PodBudget {
    limits: BudgetLimits,
    held: Held,
    node: Option<NodeBudget>,
}

impl Default for PodBudget {
    /// The default limits, on no node: for `podprobe lint` and the like,
    /// which hold one pod at a time.
    fn default() -> Self {
        PodBudget::new(BudgetLimits::default())
    }
}

impl PodBudget {
    /// A budget charged against `limits`' per-pod limits only.
    pub fn new(limits: BudgetLimits) -> Self {
        PodBudget {
            limits,
            held: Held::default(),
            node: None,
        }
    }

    /// A budget charged against `limits`' per-pod limits and `node`'s.
    pub fn on_node(limits: BudgetLimits, node: &NodeBudget) -> Self {
        PodBudget {
            node: Some(node.clone()),
            ..PodBudget::new(limits)
        }
    }

    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    /// Charges `container`'s `kind` probe `spec` to the pod and the node;
    /// over a budget nothing is charged.
    pub fn charge(
        &mut self,
        container: &str,
        kind: ProbeKind,
        spec: &ProbeSpec,
    ) -> Result<(), OverBudget> {
        let cost = cost(&spec.handler);
        let pod = Held {
            regex: self.held.regex + cost.regex,
            command: self.held.command + cost.command,
        };
        let over = |budget, needed, limit| OverBudget {
            container: container.to_string(),
            kind,
            budget,
            needed,
            limit,
        };
        for (budget, needed, limit) in [
            (Budget::RegexBytes, pod.regex, self.limits.regex_bytes),
            (Budget::CommandBytes, pod.command, self.limits.command_bytes),
        ] {
            if needed > limit {
                return Err(over(budget, needed, limit));
            }
        }
        if let Some(node) = &self.node {
            let mut held = node.lock();
            let all = Held {
                regex: held.regex + cost.regex,
                command: held.command + cost.command,
            };
            for (budget, needed, pod, limit) in [
                (
                    Budget::NodeRegexBytes,
                    all.regex,
                    pod.regex,
                    self.limits.node_regex_bytes,
                ),
                (
                    Budget::NodeCommandBytes,
                    all.command,
                    pod.command,
                    self.limits.node_command_bytes,
                ),
            ] {
                if needed > limit && pod > limit / GUARANTEED_PODS {
                    return Err(over(budget, needed, limit));
                }
            }
            *held = all;
        }
        self.held = pod;
        Ok(())
    }
}

impl Drop for PodBudget {
    fn drop(&mut self) {
        if let Some(node) = &self.node {
            let mut held = node.lock();
            held.regex -= self.held.regex;
            held.command -= self.held.command;
        }
    }
}

/// What a handler holds for its pod's budgets.
fn cost(handler: &Handler) -> Held {
    match handler {
        Handler::Exec(exec) => Held {
            regex: 0,
            command: exec.command.iter().map(String::len).sum(),
        },
        Handler::HttpGet(http) => Held {
            regex: http
                .extensions
                .expect
                .body_regex
                .as_ref()
                .map_or(0, |regex| regex.compiled_bytes()),
            command: 0,
        },
        Handler::TcpSocket(_)
        | Handler::Grpc(_)
        | Handler::Unresolvable(_)
        | Handler::Unsupported(_) => Held::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::probe_spec::ExecAction;
    use crate::testing::probe_spec;

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

    #[test]
    fn the_node_budget_refuses_past_its_limit_except_within_a_pods_guaranteed_share() {
        let limits = BudgetLimits {
            node_command_bytes: 110 * 100,
            ..BudgetLimits::default()
        };
        let node = NodeBudget::new();
        let mut big = PodBudget::on_node(limits, &node);
        assert_eq!(
            big.charge("a", ProbeKind::Readiness, &exec(110 * 100 - 50)),
            Ok(())
        );
        let refused = big.charge("a", ProbeKind::Liveness, &exec(51)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "livenessProbe.exec.command: Forbidden: over the node's budget: the exec commands \
             after $(VAR) expansion of every pod's probes would take at least 11001 bytes, more \
             than the node's limit of 11000 (--max-node-command-bytes), and this pod's would \
             take more than the 100 bytes every pod is guaranteed"
        );
        assert_eq!(refused.budget, Budget::NodeCommandBytes);
        let mut small = PodBudget::on_node(limits, &node);
        assert_eq!(
            small.charge("b", ProbeKind::Readiness, &exec(100)),
            Ok(()),
            "within its guaranteed share, over the node's limit"
        );
        assert_eq!(node.held(), (0, 110 * 100 + 50));
        assert!(small.charge("b", ProbeKind::Liveness, &exec(1)).is_err());
        drop(big);
        assert_eq!(
            node.held(),
            (0, 100),
            "a dropped budget gives its bytes back"
        );
        assert_eq!(small.charge("b", ProbeKind::Liveness, &exec(1)), Ok(()));
        drop(small);
        assert_eq!(node.held(), (0, 0));
    }
}
