//! WG2 carried out: a liveness kill of a container whose probe has
//! `podprobe.restartBudget` first takes a unit of its workload's budget,
//! agreed with the other nodes' podprobes in the workload's Lease
//! ([`GuardDecisions`]). With no unit left the kill waits (a Warning
//! `LivenessRestartDeferred` once per container instance), is decided again
//! at the pod syncs that follow, at most every [`RETRY`], and goes ahead
//! once a unit is free or `maxDeferralSeconds` have passed. A pod that is
//! not Ready costs nothing. When the workload cannot be read (no owner, an
//! owner of another kind, the API failing) the kill is the kubelet's, with
//! a Warning `RestartBudgetUnavailable` saying why.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use podprobe_core::prober::events::record::{PodEvent, reasons};
use podprobe_core::prober::events::recorder::EventRecorder;
use podprobe_core::prober::manager::{Killer, ProbeKill};
use podprobe_core::prober::workload_guard::{RestartDecision, deferral_over, restart};
use podprobe_core::spec::ProbeKind;
use podprobe_core::spec::probe_spec::extension::workload_options::RestartBudget;
use podprobe_core::util::pod::{pod_name, pod_namespace};
use tokio::time::Instant;

use super::workload_guard_metrics::{BudgetOutcome, WorkloadGuardMetrics};
use crate::api::guard_decisions::{GuardDecisions, unix_now};

/// How often a deferred kill is decided again, at most: each decision
/// reads the workload's pods and its Lease.
pub const RETRY: Duration = Duration::from_secs(5);

/// A deferral no pod sync asked about for this long is over: the sync loop
/// asks for a failed container's kill at every resync (10 s), so its
/// liveness probe passed again (or the container went); a later failure
/// starts a new deferral with the full `maxDeferralSeconds`.
pub const STALE: Duration = Duration::from_secs(30);

/// A [`Killer`] that holds liveness kills to their workload's budget.
#[derive(Clone)]
pub struct BudgetedKiller<K> {
    inner: K,
    decisions: GuardDecisions,
    node: String,
    events: Arc<dyn EventRecorder>,
    metrics: WorkloadGuardMetrics,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Container IDs whose decision is under way.
    deciding: HashSet<String>,
    /// Container IDs whose kill waits, with when it began to.
    deferred: HashMap<String, Deferral>,
}

struct Deferral {
    /// Unix seconds: the deferral's start, against `maxDeferralSeconds`.
    since: i64,
    /// Not decided again before.
    next: Instant,
    /// The last time a pod sync asked for the kill.
    asked: Instant,
}

/// What became of one decision.
enum Verdict {
    Kill(BudgetOutcome),
    Wait { unavailable: usize, allowed: usize },
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
            state: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn decide(&self, pod: &Pod, kill: &ProbeKill, budget: &RestartBudget) -> Verdict {
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
            Verdict::Kill(BudgetOutcome::Unavailable)
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let decided = self
            .decisions
            .decide(pod, |record, members| {
                match restart(record, members, uid, &self.node, budget, now) {
                    RestartDecision::Free => (Verdict::Kill(BudgetOutcome::Free), None),
                    RestartDecision::Holding => (Verdict::Kill(BudgetOutcome::Granted), None),
                    RestartDecision::Take(record) => {
                        (Verdict::Kill(BudgetOutcome::Granted), Some(record))
                    }
                    RestartDecision::Defer {
                        unavailable,
                        allowed,
                    } => (
                        Verdict::Wait {
                            unavailable,
                            allowed,
                        },
                        None,
                    ),
                }
            })
            .await;
        match decided {
            Ok(verdict) => verdict,
            Err(error) => unavailable(error.to_string()),
        }
    }

    /// Decides `kill` and carries it out, or defers it.
    async fn run(self, pod: Pod, kill: ProbeKill, budget: RestartBudget) {
        let verdict = self.decide(&pod, &kill, &budget).await;
        let id = kill.container_id.clone();
        let now = unix_now();
        let verdict = match verdict {
            Verdict::Wait { .. }
                if self
                    .lock()
                    .deferred
                    .get(&id)
                    .is_some_and(|d| deferral_over(&budget, d.since, now)) =>
            {
                tracing::info!(
                    pod = pod_name(&pod),
                    namespace = pod_namespace(&pod),
                    container = kill.container,
                    "restart deferred for maxDeferralSeconds; restarting"
                );
                Verdict::Kill(BudgetOutcome::DeferralOver)
            }
            other => other,
        };
        match verdict {
            Verdict::Kill(outcome) => {
                self.metrics.restart_decision(outcome);
                {
                    let mut state = self.lock();
                    state.deferred.remove(&id);
                    state.deciding.remove(&id);
                }
                self.inner.kill(&pod, kill);
            }
            Verdict::Wait {
                unavailable,
                allowed,
            } => {
                self.metrics.restart_decision(BudgetOutcome::Deferred);
                let first = {
                    let mut state = self.lock();
                    state.deciding.remove(&id);
                    let next = Instant::now() + RETRY;
                    match state.deferred.get_mut(&id) {
                        Some(deferral) => {
                            deferral.next = next;
                            false
                        }
                        None => {
                            let asked = Instant::now();
                            let deferral = Deferral {
                                since: now,
                                next,
                                asked,
                            };
                            state.deferred.insert(id, deferral);
                            true
                        }
                    }
                };
                if first {
                    let note = format!(
                        "Container {} failed liveness probe; its restart waits for the workload's restartBudget: {unavailable} of the workload's pods are unavailable or restarting, maxUnavailable allows {allowed} (at most {} s)",
                        kill.container, budget.max_deferral_seconds
                    );
                    tracing::warn!(
                        pod = pod_name(&pod),
                        namespace = pod_namespace(&pod),
                        container = kill.container,
                        unavailable,
                        allowed,
                        "liveness restart deferred"
                    );
                    self.events.record_opt(PodEvent::kill_warning(
                        &pod,
                        Some(&kill.container),
                        reasons::LIVENESS_RESTART_DEFERRED,
                        "StopContainer",
                        note,
                    ));
                }
            }
        }
    }
}

impl<K: Killer + Clone + Send + Sync + 'static> Killer for BudgetedKiller<K> {
    /// A liveness kill with a budget is decided first (once at a time per
    /// container, a deferred one at most every [`RETRY`]); any other is the
    /// inner killer's at once.
    fn kill(&self, pod: &Pod, kill: ProbeKill) {
        let Some(budget) = kill
            .restart_budget
            .filter(|_| kill.kind == ProbeKind::Liveness)
        else {
            return self.inner.kill(pod, kill);
        };
        {
            let mut state = self.lock();
            let id = &kill.container_id;
            let now = Instant::now();
            if state
                .deferred
                .get(id)
                .is_some_and(|d| now.duration_since(d.asked) > STALE)
            {
                state.deferred.remove(id);
            }
            let waiting = match state.deferred.get_mut(id) {
                Some(deferral) => {
                    deferral.asked = now;
                    now < deferral.next
                }
                None => false,
            };
            if waiting || !state.deciding.insert(id.clone()) {
                return;
            }
        }
        tokio::spawn(self.clone().run(pod.clone(), kill, budget));
    }

    fn retain(&self, listed: &HashSet<String>) {
        self.lock().deferred.retain(|id, _| listed.contains(id));
        self.inner.retain(listed);
    }

    fn containers(&self) -> usize {
        self.inner.containers() + self.lock().deferred.len()
    }
}
