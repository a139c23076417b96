//! WG3 on one node: between the tracker's status intents and the patcher,
//! which pods' gates the workload's readiness floor holds True, which wait
//! for a decision and which were let go. Pure: the daemon makes each
//! decision ([`crate::prober::workload_guard::release`] against the
//! workload's Lease) and hands it back with [`FloorKeeper::decided`].
//!
//! Only a gate that is True and would go False for failing readiness
//! probes alone is decided; anything else passes through untouched, so a
//! workload without failures costs nothing. While the first decision of a
//! failure is under way the pod's gate stays as it is shown (its new
//! intent waits here); a held gate is decided again at most every
//! [`RETRY`], at the intents that follow (the tracker's resync sends one
//! every 10 s), and stays held meanwhile, so a hold ends without a flap.
//! A gate let go stays let go until the pod's readiness passes again; then
//! the unit the pod took, a hold or a release, is given back.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use crate::prober::workload_guard::{FloorDecision, GuardRecord, RETRY};
use crate::spec::probe_spec::extension::workload_options::ReadinessFloor;
use crate::status::gate::{FloorHold, readiness_failing};
use crate::status::{Intent, Owned};
use crate::util::pod::is_pod_ready;

/// The floor's state of every pod whose gate it decides, by UID.
#[derive(Debug, Default)]
pub struct FloorKeeper {
    pods: HashMap<String, PodFloor>,
}

#[derive(Debug)]
struct PodFloor {
    state: State,
    /// The last intent the tracker sent, as it sent it.
    latest: Intent,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// The first decision of this failure is under way.
    Deciding,
    /// Held True; decided again from `next` on, `deciding` while it is.
    Held {
        hold: FloorHold,
        next: Instant,
        deciding: bool,
    },
    /// Let go: the gate goes False until readiness passes again. `unit`:
    /// by a decision, which may have written a `Release` unit.
    Released { unit: bool },
}

/// A decision the daemon is to make: may `uid`'s gate go False under
/// `floor`?
#[derive(Debug, Clone, PartialEq)]
pub struct FloorAsk {
    pub uid: String,
    pub floor: ReadinessFloor,
}

/// What a decision came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorVerdict {
    Hold(FloorHold),
    /// Let the gate go: the floor allows it, the pod is not Ready anyway,
    /// or the workload could not be read (the kubelet's behaviour).
    Release,
}

impl FloorVerdict {
    /// What [`crate::prober::workload_guard::release`] decided, as the
    /// keeper takes it, and the record to write first, if any.
    pub fn of_release(decision: FloorDecision) -> (FloorVerdict, Option<GuardRecord>) {
        match decision {
            FloorDecision::Release(record) => (FloorVerdict::Release, record),
            FloorDecision::Hold {
                record,
                ready,
                floor,
            } => (FloorVerdict::Hold(FloorHold { ready, floor }), record),
        }
    }
}

/// What the daemon does after [`FloorKeeper::admit`] or
/// [`FloorKeeper::decided`].
#[derive(Debug, Default, PartialEq)]
pub struct FloorStep {
    /// Send this to the patcher.
    pub submit: Option<Intent>,
    /// Make this decision, then hand it to [`FloorKeeper::decided`].
    pub decide: Option<FloorAsk>,
    /// The pod's readiness passes again (or fails for more than
    /// readiness): give its unit in the workload's record back
    /// ([`crate::prober::workload_guard::recovered`]).
    pub recovered: bool,
    /// A hold began (not renewed): say so in a Warning.
    pub hold_began: Option<FloorHold>,
}

impl FloorKeeper {
    /// Takes the tracker's `intent` for `pod` (the pod as cached) at `now`;
    /// `workload_floor` is the floor its PodDisruptionBudget gives (WG5),
    /// which its probes' own floor overrides.
    pub fn admit(
        &mut self,
        intent: Intent,
        pod: Option<&Pod>,
        workload_floor: Option<ReadinessFloor>,
        now: Instant,
    ) -> FloorStep {
        // The floor first: most pods have none, and need no assessment.
        let floor = match (&intent.owned, pod) {
            (Owned::Gate(probes), Some(pod)) => probes
                .readiness_floor()
                .or(workload_floor)
                .filter(|_| readiness_failing(pod, probes, &intent.views)),
            _ => None,
        };
        let Some(floor) = floor else {
            // Passing, failing for more than readiness, or no floor: not
            // the floor's to decide; a hold it had is over.
            let recovered = self.forget(&intent.uid);
            return FloorStep {
                submit: Some(intent),
                recovered,
                ..FloorStep::default()
            };
        };
        let uid = intent.uid.clone();
        let ask = || FloorAsk {
            uid: uid.clone(),
            floor,
        };
        let Some(entry) = self.pods.get_mut(&uid) else {
            // A gate that is not True already (the pod is not Ready) has
            // nothing to hold.
            if pod.is_some_and(is_pod_ready) {
                self.pods.insert(
                    uid.clone(),
                    PodFloor {
                        state: State::Deciding,
                        latest: intent,
                    },
                );
                return FloorStep {
                    decide: Some(ask()),
                    ..FloorStep::default()
                };
            }
            self.pods.insert(
                uid,
                PodFloor {
                    state: State::Released { unit: false },
                    latest: intent.clone(),
                },
            );
            return FloorStep {
                submit: Some(intent),
                ..FloorStep::default()
            };
        };
        entry.latest = intent.clone();
        match &mut entry.state {
            State::Deciding => FloorStep::default(),
            State::Released { .. } => FloorStep {
                submit: Some(intent),
                ..FloorStep::default()
            },
            State::Held {
                hold,
                next,
                deciding,
            } => {
                let again = !*deciding && now >= *next;
                *deciding |= again;
                FloorStep {
                    submit: Some(Intent {
                        floor: Some(*hold),
                        ..intent
                    }),
                    decide: again.then(ask),
                    ..FloorStep::default()
                }
            }
        }
    }

    /// Takes the decision about `uid` made for [`FloorStep::decide`].
    pub fn decided(&mut self, uid: &str, verdict: FloorVerdict, now: Instant) -> FloorStep {
        let Some(entry) = self.pods.get_mut(uid) else {
            // The pod recovered or went meanwhile: a hold just written
            // for it is over.
            return FloorStep {
                recovered: matches!(verdict, FloorVerdict::Hold(_)),
                ..FloorStep::default()
            };
        };
        let was_held = matches!(entry.state, State::Held { .. });
        match verdict {
            FloorVerdict::Hold(hold) => {
                entry.state = State::Held {
                    hold,
                    next: now + RETRY,
                    deciding: false,
                };
                FloorStep {
                    submit: Some(Intent {
                        floor: Some(hold),
                        ..entry.latest.clone()
                    }),
                    hold_began: (!was_held).then_some(hold),
                    ..FloorStep::default()
                }
            }
            FloorVerdict::Release => {
                entry.state = State::Released { unit: true };
                FloorStep {
                    submit: Some(entry.latest.clone()),
                    ..FloorStep::default()
                }
            }
        }
    }

    /// Forgets `uid` (passing again, or deleted); whether the workload's
    /// record may hold a unit of it to give back (a hold, a gate let go).
    pub fn forget(&mut self, uid: &str) -> bool {
        self.pods.remove(uid).is_some_and(|entry| {
            matches!(
                entry.state,
                State::Held { .. } | State::Released { unit: true }
            )
        })
    }

    /// Pods whose gate the floor decides, held or not (#39's per-pod
    /// count).
    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    /// Pods whose gate is held True.
    pub fn held(&self) -> usize {
        self.pods
            .values()
            .filter(|entry| matches!(entry.state, State::Held { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::probe_spec::budget::PodBudget;
    use crate::spec::probe_spec::extension::workload_options::PodCount;
    use crate::status::annotation::parse_probes;
    use crate::status::conditions::{FALSE, TRUE};
    use crate::status::gate::{gate_condition, reason};
    use crate::testing::{container, gate_intent, gate_pod};
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec};

    /// The test pod with `podprobe.io/ready` and `Ready` at `ready`, and
    /// an intent that fails its `app` readiness probe, whose floor is 2.
    fn scene(ready: bool) -> (Pod, Intent) {
        let status = if ready { TRUE } else { FALSE };
        let mut pod = gate_pod(Some(status));
        let conditions = pod.status.as_mut().and_then(|s| s.conditions.as_mut());
        conditions.expect("conditions").push(PodCondition {
            type_: "Ready".to_string(),
            status: status.to_string(),
            ..PodCondition::default()
        });
        (pod, floored(gate_intent(false)))
    }

    /// `intent` with a readiness floor of 2 on `app`'s readiness probe.
    fn floored(intent: Intent) -> Intent {
        let spec = PodSpec {
            containers: vec![container("app")],
            ..PodSpec::default()
        };
        let annotation = r#"{"app": {"readinessProbe": {"exec": {"command": ["true"]}, "podprobe": {"readinessFloor": {"minReady": 2}}}}}"#;
        let probes = parse_probes(&spec, annotation, &mut PodBudget::default()).unwrap();
        Intent {
            owned: Owned::Gate(probes.into()),
            ..intent
        }
    }

    const HOLD: FloorHold = FloorHold { ready: 2, floor: 2 };

    #[tokio::test(start_paused = true)]
    async fn wg3_a_failing_ready_pod_waits_for_its_decision_then_is_held() {
        let (pod, failing) = scene(true);
        let mut keeper = FloorKeeper::default();
        let step = keeper.admit(failing.clone(), Some(&pod), None, Instant::now());
        // Nothing sent: the gate stays True while the floor decides.
        assert_eq!(step.submit, None);
        let ask = step.decide.expect("a decision");
        assert_eq!(ask.floor.min_ready, PodCount::Count(2));
        // Another intent meanwhile neither goes out nor decides twice.
        assert_eq!(
            keeper.admit(failing.clone(), Some(&pod), None, Instant::now()),
            FloorStep::default()
        );
        let held = keeper.decided(&ask.uid, FloorVerdict::Hold(HOLD), Instant::now());
        assert_eq!(held.hold_began, Some(HOLD));
        let intent = held.submit.expect("the held intent");
        assert_eq!(intent.floor, Some(HOLD));
        let Owned::Gate(probes) = &intent.owned else {
            unreachable!()
        };
        let condition = gate_condition(&pod, probes, &intent.views, intent.floor.as_ref());
        assert_eq!(condition.status, TRUE);
        assert_eq!(condition.reason.as_deref(), Some(reason::READINESS_FLOOR));
        let message = condition.message.unwrap_or_default();
        assert!(
            message.starts_with("held Ready by the readiness floor: 2 of the workload's pods are Ready without this one, minReady is 2; containers with unready status: [app]"),
            "{message}"
        );
        assert_eq!(keeper.held(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn wg3_a_hold_is_decided_again_after_retry_and_stays_until_let_go() {
        let (pod, failing) = scene(true);
        let mut keeper = FloorKeeper::default();
        let start = Instant::now();
        let ask = keeper
            .admit(failing.clone(), Some(&pod), None, start)
            .decide;
        let uid = ask.expect("a decision").uid;
        keeper.decided(&uid, FloorVerdict::Hold(HOLD), start);
        // Within RETRY: held, not decided again.
        let early = keeper.admit(failing.clone(), Some(&pod), None, start + RETRY / 2);
        assert_eq!(early.decide, None);
        assert_eq!(early.submit.and_then(|i| i.floor), Some(HOLD));
        // After it: decided again once, still held meanwhile.
        let late = keeper.admit(failing.clone(), Some(&pod), None, start + RETRY);
        assert!(late.decide.is_some());
        assert_eq!(late.submit.and_then(|i| i.floor), Some(HOLD));
        let again = keeper.admit(failing.clone(), Some(&pod), None, start + RETRY * 2);
        assert_eq!(again.decide, None, "one decision at a time");
        // Renewed: no new Warning.
        let renewed = keeper.decided(&uid, FloorVerdict::Hold(HOLD), start + RETRY * 2);
        assert_eq!(renewed.hold_began, None);
        // Let go: the gate goes False, and stays so while readiness fails.
        let released = keeper.decided(&uid, FloorVerdict::Release, start + RETRY * 3);
        assert_eq!(released.submit.map(|i| i.floor), Some(None));
        let after = keeper.admit(failing, Some(&pod), None, start + RETRY * 9);
        assert_eq!(
            (after.decide, after.submit.map(|i| i.floor)),
            (None, Some(None))
        );
        assert_eq!(keeper.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn wg3_a_pod_not_ready_and_a_passing_probe_cost_nothing() {
        // Not Ready already: let go at once, no decision.
        let (not_ready, failing) = scene(false);
        let mut keeper = FloorKeeper::default();
        let step = keeper.admit(failing.clone(), Some(&not_ready), None, Instant::now());
        assert_eq!(
            (step.decide, step.submit.map(|i| i.floor)),
            (None, Some(None))
        );
        // Passing: through untouched, and forgotten.
        let (ready, _) = scene(true);
        let passing = floored(gate_intent(true));
        let step = keeper.admit(passing.clone(), Some(&ready), None, Instant::now());
        assert_eq!(step.submit, Some(passing));
        assert!(!step.recovered);
        assert_eq!(keeper.pods(), 0);
        // Without a floor: through untouched.
        let plain = gate_intent(false);
        let step = keeper.admit(plain.clone(), Some(&ready), None, Instant::now());
        assert_eq!((step.submit, step.decide), (Some(plain), None));
    }

    #[tokio::test(start_paused = true)]
    async fn wg3_a_held_pod_that_passes_again_gives_its_hold_back() {
        let (pod, failing) = scene(true);
        let mut keeper = FloorKeeper::default();
        let uid = keeper
            .admit(failing, Some(&pod), None, Instant::now())
            .decide
            .expect("a decision")
            .uid;
        keeper.decided(&uid, FloorVerdict::Hold(HOLD), Instant::now());
        let passing = floored(gate_intent(true));
        let step = keeper.admit(passing.clone(), Some(&pod), None, Instant::now());
        assert_eq!(step.submit, Some(passing));
        assert!(step.recovered);
        assert_eq!(keeper.pods(), 0);
        // A hold decided for a pod already gone is given back too.
        let late = keeper.decided(&uid, FloorVerdict::Hold(HOLD), Instant::now());
        assert_eq!((late.submit, late.recovered), (None, true));
    }

    #[tokio::test(start_paused = true)]
    async fn wg5_a_pod_disruption_budgets_floor_applies_where_the_probe_sets_none() {
        let (pod, floored_failing) = scene(true);
        let by_budget = ReadinessFloor {
            min_ready: PodCount::AllBut(1),
        };
        // No floor of its own: the budget's is asked for.
        let plain = gate_intent(false);
        let ask = FloorKeeper::default()
            .admit(plain.clone(), Some(&pod), Some(by_budget), Instant::now())
            .decide
            .expect("a decision under the budget's floor");
        assert_eq!(ask.floor, by_budget);
        // Its own floor wins.
        let ask = FloorKeeper::default()
            .admit(floored_failing, Some(&pod), Some(by_budget), Instant::now())
            .decide
            .expect("a decision under its own floor");
        assert_eq!(ask.floor.min_ready, PodCount::Count(2));
        // A passing probe costs nothing under either.
        let passing = gate_intent(true);
        let step = FloorKeeper::default().admit(
            passing.clone(),
            Some(&pod),
            Some(by_budget),
            Instant::now(),
        );
        assert_eq!((step.submit, step.decide), (Some(passing), None));
    }
}
