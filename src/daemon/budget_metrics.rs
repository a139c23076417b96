//! The metrics of the budgets that bound what pods may ask of the node:
//! probes and annotations refused for going over a size budget (counted by
//! the sync loop, from the pod tracker's effects), and probe runs that
//! waited for a probe-run budget (counted by [`super::telemetry`], from the
//! workers' reports).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use podprobe_core::spec::probe_spec::budget::Budget;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BudgetLabels {
    budget: &'static str,
}

/// The budgets' metric families; a cheap handle (every field is
/// reference-counted).
#[derive(Debug, Clone)]
pub struct BudgetMetrics {
    budget_refusals: Family<BudgetLabels, Counter>,
    rate_delayed: Counter,
    rate_delay_seconds: Counter<f64, AtomicU64>,
}

impl BudgetMetrics {
    /// Registers the budgets' families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = BudgetMetrics {
            budget_refusals: Family::default(),
            rate_delayed: Counter::default(),
            rate_delay_seconds: Counter::default(),
        };
        registry.register(
            "podprobe_budget_refusals",
            "Probes and annotations refused because they would take their pod or the node over a budget (--max-pod-regex-bytes, --max-pod-command-bytes, --max-annotation-bytes, --max-node-regex-bytes, --max-node-command-bytes), by budget",
            metrics.budget_refusals.clone(),
        );
        registry.register(
            "podprobe_probe_rate_delayed",
            "Probe runs that waited for their pod's or the node's probe-run budget (--max-pod-probe-rate, --max-node-probe-rate); late, never failed",
            metrics.rate_delayed.clone(),
        );
        registry.register(
            "podprobe_probe_rate_delay_seconds",
            "Seconds probe runs waited for their pod's or the node's probe-run budget, in all",
            metrics.rate_delay_seconds.clone(),
        );
        // Every budget's series exists from the start, so a rate over them
        // is defined before the first refusal.
        for budget in Budget::ALL {
            metrics.budget_refusals.get_or_create_owned(&BudgetLabels {
                budget: budget.as_str(),
            });
        }
        metrics
    }

    /// Counts a probe refused for going over `budget`.
    pub fn budget_refused(&self, budget: Budget) {
        self.budget_refusals
            .get_or_create(&BudgetLabels {
                budget: budget.as_str(),
            })
            .inc();
    }

    /// Counts a probe run that waited `delay` for a probe-run budget.
    pub fn probe_delayed(&self, delay: Duration) {
        self.rate_delayed.inc();
        self.rate_delay_seconds.inc_by(delay.as_secs_f64());
    }
}
