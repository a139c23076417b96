//! The metrics of liveness restarts under a budget (WG2,
//! [`super::restart_budget`]): each decision by outcome.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// What one decision on a liveness restart with a `restartBudget` came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetOutcome {
    /// A unit taken (or held already): restarted.
    Granted,
    /// The pod was not Ready: restarted, at no cost.
    Free,
    /// No unit left: the restart waits.
    Deferred,
    /// Waited `maxDeferralSeconds`: restarted without a unit.
    DeferralOver,
    /// The workload or its Lease could not be read: restarted as the
    /// kubelet would.
    Unavailable,
}

impl BudgetOutcome {
    const ALL: [BudgetOutcome; 5] = [
        BudgetOutcome::Granted,
        BudgetOutcome::Free,
        BudgetOutcome::Deferred,
        BudgetOutcome::DeferralOver,
        BudgetOutcome::Unavailable,
    ];

    fn as_str(self) -> &'static str {
        match self {
            BudgetOutcome::Granted => "granted",
            BudgetOutcome::Free => "free",
            BudgetOutcome::Deferred => "deferred",
            BudgetOutcome::DeferralOver => "deferral_over",
            BudgetOutcome::Unavailable => "unavailable",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// `podprobe_restart_budget_decisions`; a cheap handle.
#[derive(Debug, Clone)]
pub struct RestartBudgetMetrics(Family<OutcomeLabels, Counter>);

impl RestartBudgetMetrics {
    /// Registers `podprobe_restart_budget_decisions` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let decisions = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "podprobe_restart_budget_decisions",
            "Decisions on liveness restarts of containers whose probe has podprobe.restartBudget, by outcome (granted: a unit of the workload's budget taken; free: the pod was not Ready; deferred: no unit left, decided again later; deferral_over: restarted after maxDeferralSeconds without a unit; unavailable: the workload or its Lease could not be read, restarted as the kubelet would)",
            decisions.clone(),
        );
        for outcome in BudgetOutcome::ALL {
            decisions.get_or_create_owned(&OutcomeLabels {
                outcome: outcome.as_str(),
            });
        }
        RestartBudgetMetrics(decisions)
    }

    pub(super) fn decision(&self, outcome: BudgetOutcome) {
        self.0
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }
}
