//! WG2 carried out: a liveness kill of a container whose probe has
//! `podprobe.restartBudget` first takes a unit of its workload's budget,
//! agreed with the other nodes' podprobes in the workload's Lease
//! ([`GuardDecisions`]). With no unit left the kill waits (a Warning
//! `LivenessRestartDeferred` once per deferral), is decided again at the pod
//! syncs that follow, at most every 5 s, and goes ahead once a unit is free
//! or `maxDeferralSeconds` have passed ([`RestartDeferrals`] keeps count). A pod that is
//! not Ready costs nothing (its restart is written all the same, beyond the
//! budget, for the other nodes to count until it shows). When the workload cannot be read (no owner, an
//! owner of another kind, the API failing) the kill is the kubelet's, with
//! a Warning `RestartBudgetUnavailable` saying why.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use podprobe_core::prober::events::record::{PodEvent, reasons};
use podprobe_core::prober::events::recorder::EventRecorder;
use podprobe_core::prober::manager::{Killer, ProbeKill};
use podprobe_core::prober::restart_deferrals::{Decision, Next, RestartDeferrals};
use podprobe_core::prober::workload_guard::{RestartDecision, restart};
use podprobe_core::spec::ProbeKind;
use podprobe_core::spec::probe_spec::extension::workload_options::RestartBudget;
use podprobe_core::util::pod::{pod_name, pod_namespace};
use tokio::time::Instant;

use super::workload_guard_metrics::{BudgetOutcome, WorkloadGuardMetrics};
use crate::api::guard_decisions::{GuardDecisions, unix_now};

/// A [`Killer`] that holds liveness kills to their workload's budget.
#[derive(Clone)]
pub struct BudgetedKiller<K> {
    inner: K,
    decisions: GuardDecisions,
    node: String,
    events: Arc<dyn EventRecorder>,
    metrics: WorkloadGuardMetrics,
    deferrals: Arc<Mutex<RestartDeferrals>>,
}

impl<K: Killer + Clone + Send + Sync + 'static> BudgetedKiller<K> {
    pub fn new(
        inner: K,
        decisions: GuardDecisions,
        node: String,
        events: Arc<dyn EventRecorder>,
        metrics: WorkloadGuardMetrics,
    ) -> Self {
        BudgetedKiller {
            inner,
            decisions,
            node,
            events,
            metrics,
            deferrals: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, RestartDeferrals> {
        self.deferrals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The decision, and the outcome a kill it allows is counted under.
    async fn decide(
        &self,
        pod: &Pod,
        kill: &ProbeKill,
        budget: &RestartBudget,
    ) -> (Decision, BudgetOutcome) {
        let now = unix_now();
        let (namespace, name) = (pod_namespace(pod), pod_name(pod));
        let container = kill.container.as_str();
        let unavailable = |why: String| {
            tracing::warn!(
                pod = name,
                namespace,
                container,
                why,
                "restartBudget not applied; restarting as the kubelet would"
            );
            self.events.record_opt(PodEvent::kill_warning(
                pod,
                Some(container),
                reasons::RESTART_BUDGET_UNAVAILABLE,
                "StopContainer",
                format!("livenessProbe.podprobe.restartBudget not applied: {why}; restarting as the kubelet would"),
            ));
            (Decision::Kill, BudgetOutcome::Unavailable)
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let decided = self
            .decisions
            .decide(pod, |record, members| {
                let decision = restart(record, members, uid, &self.node, budget, now);
                let outcome = match decision {
                    RestartDecision::Free(_) => BudgetOutcome::Free,
                    RestartDecision::Holding | RestartDecision::Take(_) => BudgetOutcome::Granted,
                    RestartDecision::Defer { .. } => BudgetOutcome::Deferred,
                };
                let (decision, record) = Decision::of_restart(decision);
                ((decision, outcome), record)
            })
            .await;
        match decided {
            Ok(verdict) => verdict,
            Err(error) => unavailable(error.to_string()),
        }
    }

    /// Decides `kill` and carries it out, or defers it.
    async fn run(self, pod: Pod, kill: ProbeKill, budget: RestartBudget) {
        let (decision, outcome) = self.decide(&pod, &kill, &budget).await;
        let next = self.lock().decided(
            &kill.container_id,
            decision,
            &budget,
            Instant::now(),
            unix_now(),
        );
        match next {
            Next::Kill => {
                self.metrics.restart_decision(outcome);
                self.inner.kill(&pod, kill);
            }
            Next::DeferralOver => {
                tracing::info!(
                    pod = pod_name(&pod),
                    namespace = pod_namespace(&pod),
                    container = kill.container,
                    "restart deferred for maxDeferralSeconds; restarting"
                );
                self.metrics.restart_decision(BudgetOutcome::DeferralOver);
                self.inner.kill(&pod, kill);
            }
            Next::Defer {
                first,
                unavailable,
                allowed,
            } => {
                self.metrics.restart_decision(BudgetOutcome::Deferred);
                if first {
                    self.deferred(&pod, &kill, &budget, unavailable, allowed);
                }
            }
        }
    }

    /// Says that `kill` waits: a log line and a Warning.
    fn deferred(
        &self,
        pod: &Pod,
        kill: &ProbeKill,
        budget: &RestartBudget,
        unavailable: usize,
        allowed: usize,
    ) {
        let note = format!(
            "Container {} failed liveness probe; its restart waits for the workload's restartBudget: {unavailable} of the workload's pods are unavailable or restarting, maxUnavailable allows {allowed} (at most {} s)",
            kill.container, budget.max_deferral_seconds
        );
        tracing::warn!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            container = kill.container,
            unavailable,
            allowed,
            "liveness restart deferred"
        );
        self.events.record_opt(PodEvent::kill_warning(
            pod,
            Some(&kill.container),
            reasons::LIVENESS_RESTART_DEFERRED,
            "StopContainer",
            note,
        ));
    }
}

impl<K: Killer + Clone + Send + Sync + 'static> Killer for BudgetedKiller<K> {
    /// A liveness kill with a budget is decided first (once at a time per
    /// container, a deferred one at most every 5 s: [`RestartDeferrals`]);
    /// any other is the inner killer's at once.
    fn kill(&self, pod: &Pod, kill: ProbeKill) {
        let Some(budget) = kill
            .restart_budget
            .filter(|_| kill.kind == ProbeKind::Liveness)
        else {
            return self.inner.kill(pod, kill);
        };
        if !self.lock().ask(&kill.container_id, Instant::now()) {
            return;
        }
        tokio::spawn(self.clone().run(pod.clone(), kill, budget));
    }

    fn retain(&self, listed: &HashSet<String>) {
        self.lock().retain(listed);
        self.inner.retain(listed);
    }

    fn containers(&self) -> usize {
        self.inner.containers() + self.lock().deferred()
    }
}
