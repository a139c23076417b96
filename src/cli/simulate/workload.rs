//! Workload mode: the replicas' shared state and each replica's side of
//! the workload guards (WG2, WG3), decided by the core's pure decisions
//! exactly as the daemon decides them ([`restart`] and [`release`] against
//! the workload's record, [`RestartDeferrals`] and [`FloorKeeper`] on each
//! node), against one in-memory [`GuardRecord`] standing in for the
//! workload's Lease (WG4). Decisions take no time: the Lease's
//! compare-and-swap, the API's latency and the pod list's age are not
//! simulated, so no decision ever reads a stale record.

use std::cell::RefCell;
use std::rc::Rc;

use k8s_openapi::api::core::v1::Pod;

use podprobe_core::prober::floor_keeper::{FloorKeeper, FloorVerdict};
use podprobe_core::prober::manager::ProbeKill;
use podprobe_core::prober::pod_tracker::Now;
use podprobe_core::prober::restart_deferrals::{Decision, Next, RestartDeferrals};
use podprobe_core::prober::workload_guard::{GuardRecord, Member, recovered, release, restart};
use podprobe_core::spec::ProbeKind;
use podprobe_core::status::Intent;

/// What the workload's Lease and its pod list would say: the record the
/// replicas' podprobes decide against, and which replicas are Ready.
#[derive(Debug)]
pub struct Workload {
    record: GuardRecord,
    /// By replica: its pod's UID and whether its `Ready` condition is True.
    members: Vec<Member>,
}

impl Workload {
    /// A workload of the replicas with these pod UIDs, none Ready yet.
    pub fn new(uids: impl IntoIterator<Item = String>) -> Self {
        Workload {
            record: GuardRecord::default(),
            members: uids
                .into_iter()
                .map(|uid| Member { uid, ready: false })
                .collect(),
        }
    }

    fn write(&mut self, record: Option<GuardRecord>) {
        if let Some(record) = record {
            self.record = record;
        }
    }
}

/// One replica's share of its workload.
#[derive(Debug)]
pub struct Replica {
    /// Its pod's UID, as the workload's record knows it.
    uid: String,
    workload: Rc<RefCell<Workload>>,
    /// `None` with `--without-guards`: kills and gates as the kubelet's.
    guards: Option<Guards>,
    /// Its pod's `Ready` condition, as last reported.
    ready: bool,
}

/// What one node's podprobe keeps for the guards (the daemon's
/// `BudgetedKiller` and `FloorGate`).
#[derive(Debug, Default)]
struct Guards {
    deferrals: RestartDeferrals,
    floor: FloorKeeper,
}

/// What to do with a kill the tracker asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillStep {
    /// Kill now.
    Kill,
    /// WG2: decided, and deferred for want of a unit of the budget.
    Deferred { unavailable: usize, allowed: usize },
    /// Deferred earlier and not to be decided again yet.
    Waiting,
}

/// What the floor made of an intent.
#[derive(Debug, Default)]
pub struct Admitted {
    /// Write this status, if anything.
    pub submit: Option<Intent>,
    /// WG3: what a decision made meanwhile came to.
    pub verdict: Option<FloorVerdict>,
}

impl Replica {
    /// The replica whose pod has `uid`, in `workload`; `guards`: whether
    /// the probes' `restartBudget` and `readinessFloor` apply.
    pub fn new(uid: String, workload: Rc<RefCell<Workload>>, guards: bool) -> Self {
        Replica {
            uid,
            workload,
            guards: guards.then(Guards::default),
            ready: false,
        }
    }

    pub fn ready(&self) -> bool {
        self.ready
    }

    /// Its pod's `Ready` is now `ready`: whether that is a change.
    pub fn set_ready(&mut self, ready: bool) -> bool {
        if ready == self.ready {
            return false;
        }
        self.ready = ready;
        let mut workload = self.workload.borrow_mut();
        if let Some(member) = workload.members.iter_mut().find(|m| m.uid == self.uid) {
            member.ready = ready;
        }
        true
    }

    /// WG2 (the daemon's `BudgetedKiller`): a liveness kill with a budget
    /// is decided first, once at a time, a deferred one again at most
    /// every 5 s; any other goes ahead at once.
    pub fn kill(&mut self, kill: &ProbeKill, now: Now) -> KillStep {
        let Some(guards) = self.guards.as_mut() else {
            return KillStep::Kill;
        };
        let Some(budget) = kill
            .restart_budget
            .filter(|_| kill.kind == ProbeKind::Liveness)
        else {
            return KillStep::Kill;
        };
        if !guards.deferrals.ask(&kill.container_id, now.at) {
            return KillStep::Waiting;
        }
        let wall = now.wall.as_second();
        let mut workload = self.workload.borrow_mut();
        let decision = restart(
            &workload.record,
            &workload.members,
            &self.uid,
            &self.uid,
            &budget,
            wall,
        );
        let (decision, record) = Decision::of_restart(decision);
        workload.write(record);
        match (guards.deferrals).decided(&kill.container_id, decision, &budget, now.at, wall) {
            Next::Kill | Next::DeferralOver => KillStep::Kill,
            Next::Defer {
                unavailable,
                allowed,
                ..
            } => KillStep::Deferred {
                unavailable,
                allowed,
            },
        }
    }

    /// WG3 (the daemon's `FloorGate`): the tracker's `intent` for `pod` (as
    /// last written), through the floor, its decisions made at once;
    /// `failures` counts the readiness probe's failures in a row.
    pub fn admit(&mut self, intent: Intent, pod: &Pod, failures: u32, now: Now) -> Admitted {
        let Some(guards) = self.guards.as_mut() else {
            return Admitted {
                submit: Some(intent),
                verdict: None,
            };
        };
        let wall = now.wall.as_second();
        let mut workload = self.workload.borrow_mut();
        // Settings come from the probes only: no PodDisruptionBudget here (WG5).
        let mut step = guards.floor.admit(intent, Some(pod), None, now.at);
        let mut admitted = Admitted::default();
        loop {
            // A decision's intent replaces the one sent before it.
            admitted.submit = step.submit.take().or(admitted.submit);
            if step.recovered {
                let record = recovered(&workload.record, &self.uid);
                workload.write(record);
            }
            let Some(ask) = step.decide.take() else {
                return admitted;
            };
            let decision = release(
                &workload.record,
                &workload.members,
                &ask.uid,
                &self.uid,
                &ask.floor,
                failures,
                wall,
            );
            let (verdict, record) = FloorVerdict::of_release(decision);
            workload.write(record);
            admitted.verdict = Some(verdict);
            step = guards.floor.decided(&ask.uid, verdict, now.at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podprobe_core::prober::workload_guard::UnitKind;
    use podprobe_core::spec::probe_spec::extension::workload_options::{PodCount, RestartBudget};
    use std::time::Duration;
    use tokio::time::Instant;

    fn workload(ready: &[bool]) -> (Rc<RefCell<Workload>>, Vec<Replica>) {
        let workload = Rc::new(RefCell::new(Workload::new(
            (0..ready.len()).map(|i| format!("r{i}")),
        )));
        let replicas = ready
            .iter()
            .enumerate()
            .map(|(i, &ready)| {
                let mut replica = Replica::new(format!("r{i}"), workload.clone(), true);
                replica.set_ready(ready);
                replica
            })
            .collect();
        (workload, replicas)
    }

    fn kill(container_id: &str) -> ProbeKill {
        ProbeKill {
            container: "app".to_string(),
            container_id: container_id.to_string(),
            kind: ProbeKind::Liveness,
            grace_period_seconds: 30,
            message: String::new(),
            restart_budget: Some(RestartBudget {
                max_unavailable: PodCount::Count(1),
                max_deferral_seconds: 20,
            }),
        }
    }

    fn now(start: Instant) -> Now {
        let elapsed = Instant::now() - start;
        Now {
            at: Instant::now(),
            wall: k8s_openapi::jiff::Timestamp::from_second(1_000 + elapsed.as_secs() as i64)
                .unwrap(),
        }
    }

    /// WG2 on the paused clock: of three Ready replicas whose liveness
    /// fails together under `maxUnavailable: 1`, the first takes the unit
    /// and the others wait; they are decided again no sooner than every
    /// 5 s, and go ahead once `maxDeferralSeconds` (20) have passed.
    #[tokio::test(start_paused = true)]
    async fn one_unit_of_budget_one_restart_the_rest_wait_then_go() {
        let start = Instant::now();
        let (workload, mut replicas) = workload(&[true, true, true]);
        assert_eq!(replicas[0].kill(&kill("a-1"), now(start)), KillStep::Kill);
        assert_eq!(
            workload.borrow().record.units["r0"].kind,
            UnitKind::Restart,
            "the unit is in the shared record"
        );
        for replica in &mut replicas[1..] {
            let id = format!("{}-1", replica.uid);
            assert_eq!(
                replica.kill(&kill(&id), now(start)),
                KillStep::Deferred {
                    unavailable: 1,
                    allowed: 1
                }
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            replicas[1].kill(&kill("r1-1"), now(start)),
            KillStep::Waiting,
            "not decided again within 5 s"
        );
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(matches!(
            replicas[1].kill(&kill("r1-1"), now(start)),
            KillStep::Deferred { .. }
        ));
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert_eq!(
            replicas[1].kill(&kill("r1-1"), now(start)),
            KillStep::Kill,
            "maxDeferralSeconds passed"
        );
    }

    /// A replica that is not Ready restarts free: it was out of service
    /// already.
    #[tokio::test(start_paused = true)]
    async fn a_replica_not_ready_restarts_free() {
        let start = Instant::now();
        let (_, mut replicas) = workload(&[true, false, false]);
        assert_eq!(replicas[1].kill(&kill("r1-1"), now(start)), KillStep::Kill);
        assert_eq!(replicas[2].kill(&kill("r2-1"), now(start)), KillStep::Kill);
    }

    /// `--without-guards`: every kill goes ahead, whatever the budget.
    #[tokio::test(start_paused = true)]
    async fn without_guards_every_kill_goes_ahead() {
        let start = Instant::now();
        let workload = Rc::new(RefCell::new(Workload::new(["r0".into(), "r1".into()])));
        let mut replicas: Vec<Replica> = ["r0", "r1"]
            .map(|uid| {
                let mut replica = Replica::new(uid.into(), workload.clone(), false);
                replica.set_ready(true);
                replica
            })
            .into();
        for (replica, id) in replicas.iter_mut().zip(["r0-1", "r1-1"]) {
            assert_eq!(replica.kill(&kill(id), now(start)), KillStep::Kill);
        }
        assert_eq!(workload.borrow().record, GuardRecord::default());
    }
}
