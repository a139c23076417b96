//! WG3 carried out: the node's [`FloorKeeper`] between the tracker's status
//! intents and the patcher, its decisions made against the workload's
//! Lease ([`GuardDecisions`]) off the sync loop and handed back to it. A
//! hold that begins is a Warning `ReadinessFloor` on the pod; a floor that
//! cannot be applied (no owner, another kind of owner, the API failing, a
//! PodDisruptionBudget podprobe cannot apply) a Warning
//! `ReadinessFloorUnavailable`, and the gate goes False as the kubelet's
//! readiness would. A pod whose probes set no floor takes its
//! PodDisruptionBudget's (WG5).

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use podprobe_core::prober::events::record::{PodEvent, reasons};
use podprobe_core::prober::events::recorder::EventRecorder;
use podprobe_core::prober::floor_keeper::{FloorAsk, FloorKeeper, FloorStep, FloorVerdict};
use podprobe_core::prober::probe_ledger::{ProbeLedger, RunResult};
use podprobe_core::prober::workload_guard::{recovered, release};
use podprobe_core::spec::ProbeKind;
use podprobe_core::spec::probe_spec::extension::workload_options::ReadinessFloor;
use podprobe_core::status::gate::{FloorHold, readiness_failing};
use podprobe_core::status::{Intent, Owned};
use podprobe_core::util::pod::{pod_name, pod_namespace};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::workload_guard_metrics::{FloorOutcome, WorkloadGuardMetrics};
use crate::api::guard_decisions::{GuardDecisions, unix_now};
use crate::api::pdb_guards::PdbGuards;

/// A decision made, back to the sync loop.
#[derive(Debug)]
pub struct FloorDecided {
    pub uid: String,
    pub verdict: FloorVerdict,
}

/// Makes the floor's decisions; the daemon's reads and writes the
/// workload's Lease, the sync loop's unit tests answer as scripted.
pub trait FloorDecider: Send + Sync + 'static {
    /// Decides `ask` for `pod`, whose readiness probe failed `failures`
    /// times in a row.
    fn decide(
        &self,
        pod: Arc<Pod>,
        ask: FloorAsk,
        failures: u32,
    ) -> BoxFuture<'static, FloorVerdict>;
    /// Gives `pod`'s unit in its workload's record back.
    fn give_back(&self, pod: Arc<Pod>) -> BoxFuture<'static, ()>;
}

/// The sync loop's part of the floor: the keeper, and what carries out its
/// steps.
pub struct FloorGate {
    keeper: FloorKeeper,
    decider: Arc<dyn FloorDecider>,
    decided: mpsc::UnboundedSender<FloorDecided>,
    /// Where a decision reads the readiness probe's failures.
    ledger: Arc<ProbeLedger>,
    /// The floors PodDisruptionBudgets give pods whose probes set none.
    budgets: PdbGuards,
    events: Arc<dyn EventRecorder>,
    metrics: WorkloadGuardMetrics,
}

impl FloorGate {
    pub fn new(
        decider: Arc<dyn FloorDecider>,
        decided: mpsc::UnboundedSender<FloorDecided>,
        ledger: Arc<ProbeLedger>,
        budgets: PdbGuards,
        events: Arc<dyn EventRecorder>,
        metrics: WorkloadGuardMetrics,
    ) -> Self {
        FloorGate {
            keeper: FloorKeeper::default(),
            decider,
            decided,
            ledger,
            budgets,
            events,
            metrics,
        }
    }

    /// Takes the tracker's `intent` for `pod` (as cached); what to send to
    /// the patcher now, if anything.
    pub fn admit(&mut self, intent: Intent, pod: Option<Arc<Pod>>) -> Option<Intent> {
        let workload_floor = pod
            .as_deref()
            .and_then(|pod| self.budget_floor(&intent, pod));
        let step = self
            .keeper
            .admit(intent, pod.as_deref(), workload_floor, Instant::now());
        self.carry_out(step, pod)
    }

    /// The floor `pod`'s PodDisruptionBudget gives it (WG5), when its
    /// probes set none. A budget podprobe cannot apply is a Warning
    /// `ReadinessFloorUnavailable` at each intent whose readiness fails (the
    /// Event aggregator counts them, as the kubelet's repeated probe
    /// Warnings), and no floor: the kubelet's behaviour.
    fn budget_floor(&self, intent: &Intent, pod: &Pod) -> Option<ReadinessFloor> {
        let Owned::Gate(probes) = &intent.owned else {
            return None;
        };
        if probes.readiness_floor().is_some() {
            return None;
        }
        match self.budgets.lookup(pod) {
            Ok(found) => found.and_then(|(_, options)| options.readiness_floor),
            Err(why) => {
                if readiness_failing(pod, probes, &intent.views) {
                    floor_unavailable(&*self.events, &self.metrics, pod, &why);
                }
                None
            }
        }
    }

    /// Takes a decision made; what to send to the patcher now, if anything.
    pub fn decided(&mut self, decided: FloorDecided, pod: Option<Arc<Pod>>) -> Option<Intent> {
        let step = self
            .keeper
            .decided(&decided.uid, decided.verdict, Instant::now());
        self.carry_out(step, pod)
    }

    /// Forgets a deleted pod (its units lapse with it: a record's units of
    /// pods no longer in the workload count for nothing).
    pub fn forget(&mut self, uid: &str) {
        self.keeper.forget(uid);
        self.metrics.set_held(self.keeper.held());
    }

    /// Pods whose gate the floor decides (#39's per-pod count).
    pub fn pods(&self) -> usize {
        self.keeper.pods()
    }

    fn carry_out(&mut self, step: FloorStep, pod: Option<Arc<Pod>>) -> Option<Intent> {
        self.metrics.set_held(self.keeper.held());
        let Some(pod) = pod else {
            return step.submit;
        };
        if let Some(hold) = step.hold_began {
            self.hold_began(&pod, hold);
        }
        if step.recovered {
            tokio::spawn(self.decider.give_back(pod.clone()));
        }
        if let Some(ask) = step.decide {
            let failures = self.failures(&pod);
            let decided = self.decided.clone();
            let decision = self.decider.decide(pod, ask.clone(), failures);
            tokio::spawn(async move {
                let verdict = decision.await;
                // The loop is gone only at shutdown.
                let _ = decided.send(FloorDecided {
                    uid: ask.uid,
                    verdict,
                });
            });
        }
        step.submit
    }

    /// The most consecutive failures of `pod`'s failing readiness probes,
    /// as its ledger has them.
    fn failures(&self, pod: &Pod) -> u32 {
        let report = self.ledger.report(pod_namespace(pod), pod_name(pod));
        report
            .iter()
            .flat_map(|r| &r.probes)
            .filter(|p| p.probe == ProbeKind::Readiness && p.result == RunResult::Failure)
            .map(|p| u32::try_from(p.consecutive).unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    fn hold_began(&self, pod: &Pod, hold: FloorHold) {
        tracing::warn!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            ready = hold.ready,
            floor = hold.floor,
            "readiness probe fails; podprobe.io/ready held True by the readiness floor"
        );
        self.events.record_opt(PodEvent::readiness_floor(
            pod,
            reasons::READINESS_FLOOR,
            format!(
                "Readiness probe failed, but podprobe.io/ready is held True by the workload's readinessFloor: {} of its pods are Ready without this one, minReady is {}",
                hold.ready, hold.floor
            ),
        ));
    }
}

/// Says that `pod`'s floor is not applied, and why: a log line, a Warning
/// `ReadinessFloorUnavailable` and the metric.
fn floor_unavailable(
    events: &dyn EventRecorder,
    metrics: &WorkloadGuardMetrics,
    pod: &Pod,
    why: &str,
) {
    tracing::warn!(
        pod = pod_name(pod),
        namespace = pod_namespace(pod),
        why,
        "readinessFloor not applied; the gate goes False as the kubelet's readiness would"
    );
    events.record_opt(PodEvent::readiness_floor(
        pod,
        reasons::READINESS_FLOOR_UNAVAILABLE,
        format!("readinessFloor not applied: {why}; podprobe.io/ready goes False as the kubelet's readiness would"),
    ));
    metrics.floor_decision(FloorOutcome::Unavailable);
}

/// The daemon's [`FloorDecider`]: decisions against the workload's Lease.
#[derive(Clone)]
pub struct LeaseFloor {
    decisions: GuardDecisions,
    node: String,
    events: Arc<dyn EventRecorder>,
    metrics: WorkloadGuardMetrics,
}

impl LeaseFloor {
    pub fn new(
        decisions: GuardDecisions,
        node: String,
        events: Arc<dyn EventRecorder>,
        metrics: WorkloadGuardMetrics,
    ) -> Self {
        LeaseFloor {
            decisions,
            node,
            events,
            metrics,
        }
    }

    async fn decide_now(&self, pod: &Pod, ask: &FloorAsk, failures: u32) -> FloorVerdict {
        let now = unix_now();
        let decided = self
            .decisions
            .decide(pod, |record, members| {
                FloorVerdict::of_release(release(
                    record, members, &ask.uid, &self.node, &ask.floor, failures, now,
                ))
            })
            .await;
        match decided {
            Ok(verdict) => {
                self.metrics.floor_decision(match verdict {
                    FloorVerdict::Hold(_) => FloorOutcome::Held,
                    FloorVerdict::Release => FloorOutcome::Released,
                });
                verdict
            }
            Err(error) => {
                floor_unavailable(&*self.events, &self.metrics, pod, &error.to_string());
                FloorVerdict::Release
            }
        }
    }
}

impl FloorDecider for LeaseFloor {
    fn decide(
        &self,
        pod: Arc<Pod>,
        ask: FloorAsk,
        failures: u32,
    ) -> BoxFuture<'static, FloorVerdict> {
        let this = self.clone();
        Box::pin(async move { this.decide_now(&pod, &ask, failures).await })
    }

    fn give_back(&self, pod: Arc<Pod>) -> BoxFuture<'static, ()> {
        let this = self.clone();
        Box::pin(async move {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if let Err(error) = this.decisions.amend(&pod, |r| recovered(r, &uid)).await {
                // It lapses by itself: a hold after 2 minutes, a release
                // after one.
                tracing::info!(
                    pod = pod_name(&pod),
                    namespace = pod_namespace(&pod),
                    %error,
                    "readiness floor: a unit not given back; it lapses"
                );
            }
        })
    }
}
