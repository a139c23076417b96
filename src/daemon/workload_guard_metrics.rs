//! The workload guard's metrics: each decision on a liveness restart under
//! a budget (WG2, [`super::restart_budget`]) and on a readiness floor (WG3,
//! [`super::readiness_floor`]) by outcome, and the gates the floor holds.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

/// What one decision on a failing readiness probe with a `readinessFloor`
/// came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorOutcome {
    /// The gate is held True (a hold begun or kept).
    Held,
    /// The gate goes False: the floor allows it, or the pod is not Ready.
    Released,
    /// The workload or its Lease could not be read: the gate goes False as
    /// the kubelet's readiness would.
    Unavailable,
}

impl FloorOutcome {
    const ALL: [FloorOutcome; 3] = [
        FloorOutcome::Held,
        FloorOutcome::Released,
        FloorOutcome::Unavailable,
    ];

    fn as_str(self) -> &'static str {
        match self {
            FloorOutcome::Held => "held",
            FloorOutcome::Released => "released",
            FloorOutcome::Unavailable => "unavailable",
        }
    }
}

/// `podprobe_restart_budget_decisions`, `podprobe_readiness_floor_decisions`
/// and `podprobe_readiness_floor_held_pods`; a cheap handle.
#[derive(Debug, Clone)]
pub struct WorkloadGuardMetrics {
    restarts: Family<OutcomeLabels, Counter>,
    floor: Family<OutcomeLabels, Counter>,
    held: Gauge,
}

impl WorkloadGuardMetrics {
    /// Registers the workload guard's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let restarts = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "podprobe_restart_budget_decisions",
            "Decisions on liveness restarts of containers whose probe has podprobe.restartBudget, by outcome (granted: a unit of the workload's budget taken; free: the pod was not Ready; deferred: no unit left, decided again later; deferral_over: restarted after maxDeferralSeconds without a unit; unavailable: the workload or its Lease could not be read, restarted as the kubelet would)",
            restarts.clone(),
        );
        for outcome in BudgetOutcome::ALL {
            restarts.get_or_create_owned(&OutcomeLabels {
                outcome: outcome.as_str(),
            });
        }
        let floor = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "podprobe_readiness_floor_decisions",
            "Decisions on failing readiness probes of Ready pods whose probe has podprobe.readinessFloor, by outcome (held: podprobe.io/ready kept True, the workload would fall below minReady; released: the gate goes False; unavailable: the workload or its Lease could not be read, the gate goes False as the kubelet's readiness would)",
            floor.clone(),
        );
        for outcome in FloorOutcome::ALL {
            floor.get_or_create_owned(&OutcomeLabels {
                outcome: outcome.as_str(),
            });
        }
        let held = Gauge::default();
        registry.register(
            "podprobe_readiness_floor_held_pods",
            "Pods on this node whose podprobe.io/ready is held True by their workload's readiness floor although a readiness probe fails",
            held.clone(),
        );
        WorkloadGuardMetrics {
            restarts,
            floor,
            held,
        }
    }

    pub(super) fn restart_decision(&self, outcome: BudgetOutcome) {
        self.restarts
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub(super) fn floor_decision(&self, outcome: FloorOutcome) {
        self.floor
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub(super) fn set_held(&self, pods: usize) {
        self.held.set(pods as i64);
    }
}
