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
use crate::api::pdb_guards::PdbGuards;

/// A [`Killer`] that holds liveness kills to their workload's budget.
#[derive(Clone)]
pub struct BudgetedKiller<K> {
    inner: K,
    decisions: GuardDecisions,
    /// The budgets PodDisruptionBudgets give pods whose probes set none.
    budgets: PdbGuards,
    node: String,
    events: Arc<dyn EventRecorder>,
    metrics: WorkloadGuardMetrics,
    deferrals: Arc<Mutex<RestartDeferrals>>,
}

impl<K: Killer + Clone + Send + Sync + 'static> BudgetedKiller<K> {
    pub fn new(
        inner: K,
        decisions: GuardDecisions,
        budgets: PdbGuards,
        node: String,
        events: Arc<dyn EventRecorder>,
        metrics: WorkloadGuardMetrics,
    ) -> Self {
        BudgetedKiller {
            inner,
            decisions,
            budgets,
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
            Err(error) => {
                self.unavailable(pod, &kill.container, &error.to_string());
                (Decision::Kill, BudgetOutcome::Unavailable)
            }
        }
    }

    /// Says that the budget of `pod`'s `container` is not applied, and why:
    /// a log line and a Warning `RestartBudgetUnavailable`.
    fn unavailable(&self, pod: &Pod, container: &str, why: &str) {
        tracing::warn!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            container,
            why,
            "restartBudget not applied; restarting as the kubelet would"
        );
        self.events.record_opt(PodEvent::kill_warning(
            pod,
            Some(container),
            reasons::RESTART_BUDGET_UNAVAILABLE,
            "StopContainer",
            format!("restartBudget not applied: {why}; restarting as the kubelet would"),
        ));
    }

    /// The budget a liveness kill of `pod` is held to: its probe's own, else
    /// its PodDisruptionBudget's (WG5), with that budget's name. A
    /// PodDisruptionBudget podprobe cannot apply is said, and the kill is
    /// the kubelet's.
    fn budget(&self, pod: &Pod, kill: &ProbeKill) -> Option<(RestartBudget, Option<String>)> {
        if kill.kind != ProbeKind::Liveness {
            return None;
        }
        if let Some(own) = kill.restart_budget {
            return Some((own, None));
        }
        match self.budgets.lookup(pod) {
            Ok(found) => {
                found.and_then(|(name, options)| Some((options.restart_budget?, Some(name))))
            }
            Err(why) => {
                self.unavailable(pod, &kill.container, &why);
                self.metrics.restart_decision(BudgetOutcome::Unavailable);
                None
            }
        }
    }

    /// Decides `kill` and carries it out, or defers it.
    async fn run(self, pod: Pod, kill: ProbeKill, budget: RestartBudget, source: Option<String>) {
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
                    self.deferred(
                        &pod,
                        &kill,
                        &budget,
                        source.as_deref(),
                        unavailable,
                        allowed,
                    );
                }
            }
        }
    }

    /// Says that `kill` waits: a log line and a Warning naming the budget
    /// (`source`: the PodDisruptionBudget it comes from, if it does).
    fn deferred(
        &self,
        pod: &Pod,
        kill: &ProbeKill,
        budget: &RestartBudget,
        source: Option<&str>,
        unavailable: usize,
        allowed: usize,
    ) {
        let which = match source {
            Some(pdb) => format!("the restartBudget of PodDisruptionBudget {pdb}"),
            None => "the workload's restartBudget".to_string(),
        };
        let note = format!(
            "Container {} failed liveness probe; its restart waits for {which}: {unavailable} of the workload's pods are unavailable or restarting, maxUnavailable allows {allowed} (at most {} s)",
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
        let Some((budget, source)) = self.budget(pod, &kill) else {
            return self.inner.kill(pod, kill);
        };
        if !self.lock().ask(&kill.container_id, Instant::now()) {
            return;
        }
        tokio::spawn(self.clone().run(pod.clone(), kill, budget, source));
    }

    fn retain(&self, listed: &HashSet<String>) {
        self.lock().retain(listed);
        self.inner.retain(listed);
    }

    fn containers(&self) -> usize {
        self.inner.containers() + self.lock().deferred()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use podprobe_core::testing::RecordingEvents;
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::testing::{RecordingKiller, guarding_pdb};

    fn pdb(name: &str) -> PodDisruptionBudget {
        let max = Some(IntOrString::Int(1));
        guarding_pdb(
            ("shop", name),
            Some("restartBudget"),
            max,
            None,
            LabelSelector::default(),
        )
    }

    fn kill(kind: ProbeKind) -> ProbeKill {
        ProbeKill {
            container: "app".into(),
            container_id: "containerd://app-1".into(),
            kind,
            message: "Container app failed liveness probe, will be restarted".into(),
            grace_period_seconds: 30,
            restart_budget: None,
        }
    }

    #[tokio::test]
    async fn wg5_a_pod_two_budgets_select_is_restarted_as_the_kubelet_would_saying_why() {
        // No API server behind it: these kills must not need one.
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let inner = RecordingKiller::default();
        let events = Arc::new(RecordingEvents::default());
        let killer = BudgetedKiller::new(
            inner.clone(),
            GuardDecisions::new(client),
            PdbGuards::of(&[pdb("one"), pdb("two")]),
            "node-1".into(),
            events.clone(),
            WorkloadGuardMetrics::register(&mut Registry::default()),
        );
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("shop".into());
        pod.metadata.name = Some("web-1".into());
        pod.metadata.uid = Some("uid-1".into());
        killer.kill(&pod, kill(ProbeKind::Liveness));
        assert_eq!(inner.kills().len(), 1, "killed at once");
        assert_eq!(events.reasons(), [reasons::RESTART_BUDGET_UNAVAILABLE]);
        // A startup kill is never the budget's.
        killer.kill(&pod, kill(ProbeKind::Startup));
        assert_eq!(inner.kills().len(), 2);
        assert_eq!(events.reasons().len(), 1);
    }
}
