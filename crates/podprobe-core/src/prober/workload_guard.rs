//! The decisions behind `restartBudget` and `readinessFloor` (#41, WG2–WG4):
//! whether a liveness restart of a Ready pod may take a unit of its
//! workload's budget, and whether a failing readiness probe may take its
//! pod's gate below the workload's floor.
//!
//! The podprobes of several nodes decide for one workload at once, so what
//! each took is kept where all of them read it, a [`GuardRecord`] (in the
//! workload's Lease, written with a compare-and-swap by
//! `podprobe::api::workload_lease`): a decision reads the record and the
//! workload's pods, and what it takes is a new record, written only if
//! nobody wrote one since; on a conflict it is decided again. A node gives
//! back its holds and released gates once their probes pass
//! ([`recovered`]); restart units lapse (by then the restart shows as
//! NotReady, which counts by itself), and so do the units of a node that
//! stopped. Nothing is written while nothing fails. Pure: the clock is the caller's, in Unix
//! seconds (the record is read on other nodes, whose monotonic clocks
//! mean nothing here).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::spec::probe_spec::extension::workload_options::{ReadinessFloor, RestartBudget};

/// How long a unit taken for a restart or a release counts, at most, for
/// a pod that still looks Ready: the restart or the gate's patch shows in
/// the pod's `Ready` condition within seconds, from when on the pod counts
/// as unavailable by itself; a node that fails in between frees its units
/// after this.
pub const UNIT_SECONDS: i64 = 60;

/// How often a decision that left something waiting (a deferred restart,
/// a held gate) is made again, at most: each reads the workload's pods and
/// its Lease.
pub const RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a hold counts without its node renewing it: a node renews a
/// hold it keeps each time it decides again after half of this.
pub const HOLD_SECONDS: i64 = 120;

/// What the podprobes of one workload took, by pod UID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardRecord {
    #[serde(default)]
    pub units: BTreeMap<String, Unit>,
}

/// One pod's entry in a [`GuardRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unit {
    pub kind: UnitKind,
    /// The node whose podprobe took it.
    pub node: String,
    /// When it was taken, Unix seconds.
    pub since: i64,
    /// When it lapses unless renewed, Unix seconds.
    pub expires: i64,
    /// `Held` only: the readiness probe's consecutive failures when the
    /// hold began or was last renewed.
    #[serde(default)]
    pub failures: u32,
}

/// What a [`Unit`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnitKind {
    /// A liveness restart of a Ready pod, granted.
    Restart,
    /// A readiness gate let go to False while the pod was Ready.
    Release,
    /// A readiness gate held True by the floor.
    Held,
}

/// One of the workload's pods, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub uid: String,
    /// Its `Ready` condition is True.
    pub ready: bool,
}

/// Whether a liveness restart may go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartDecision {
    /// The pod is not Ready, or not among the workload's pods as listed:
    /// it costs nothing, and is restarted as the kubelet would. A listed
    /// one still writes this record first (a `Restart` unit beyond the
    /// budget): its gate may turn True again before the restart shows in
    /// its `Ready`, and meanwhile the other nodes must count it as
    /// unavailable (`None`: not listed, or its unit still counts).
    Free(Option<GuardRecord>),
    /// Granted: write this record, then restart.
    Take(GuardRecord),
    /// Granted earlier and still counted: restart, write nothing.
    Holding,
    /// No unit left: `unavailable` of the workload's pods are unavailable
    /// or being restarted, and the budget allows `allowed`.
    Defer { unavailable: usize, allowed: usize },
}

/// Whether a failing readiness probe may take its pod's gate to False.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FloorDecision {
    /// Let the gate go: write the record first when there is one.
    Release(Option<GuardRecord>),
    /// Keep the gate True: `ready` of the workload's pods count as Ready
    /// and the floor is `floor`; write the record first when there is one.
    Hold {
        record: Option<GuardRecord>,
        ready: usize,
        floor: usize,
    },
}

impl GuardRecord {
    /// The record without lapsed units and without units of pods no longer
    /// among `members`.
    fn pruned(&self, members: &[Member], now: i64) -> GuardRecord {
        let units = self
            .units
            .iter()
            .filter(|(uid, unit)| unit.expires > now && members.iter().any(|m| &m.uid == *uid))
            .map(|(uid, unit)| (uid.clone(), unit.clone()))
            .collect();
        GuardRecord { units }
    }

    /// Pods that are Ready in `members` but hold a unit of `kind`: taken
    /// out of service by a podprobe, not yet seen so.
    fn ready_with(&self, members: &[Member], kind: UnitKind, except: &str) -> usize {
        members
            .iter()
            .filter(|m| m.ready && m.uid != except)
            .filter(|m| self.units.get(&m.uid).is_some_and(|u| u.kind == kind))
            .count()
    }

    fn with(&self, uid: &str, unit: Unit) -> GuardRecord {
        let mut record = self.clone();
        record.units.insert(uid.to_string(), unit);
        record
    }

    /// The record without `uid`'s unit, if it had one.
    pub fn without(&self, uid: &str) -> Option<GuardRecord> {
        let mut record = self.clone();
        record.units.remove(uid).map(|_| record)
    }
}

/// WG2: decides a liveness restart of `uid` (on `node`) under `budget`, from
/// the workload's `members` and its `record`, at `now`.
pub fn restart(
    record: &GuardRecord,
    members: &[Member],
    uid: &str,
    node: &str,
    budget: &RestartBudget,
    now: i64,
) -> RestartDecision {
    let Some(member) = members.iter().find(|m| m.uid == uid) else {
        return RestartDecision::Free(None);
    };
    let record = record.pruned(members, now);
    let holding = record
        .units
        .get(uid)
        .is_some_and(|u| u.kind == UnitKind::Restart);
    let unit = || {
        record.with(
            uid,
            Unit {
                kind: UnitKind::Restart,
                node: node.to_string(),
                since: now,
                expires: now + UNIT_SECONDS,
                failures: 0,
            },
        )
    };
    if !member.ready {
        return RestartDecision::Free((!holding).then(unit));
    }
    if holding {
        return RestartDecision::Holding;
    }
    let not_ready = members.iter().filter(|m| !m.ready).count();
    let unavailable = not_ready
        + record.ready_with(members, UnitKind::Restart, uid)
        + record.ready_with(members, UnitKind::Release, uid);
    let allowed = budget.max_unavailable.of(members.len());
    if unavailable < allowed {
        RestartDecision::Take(unit())
    } else {
        RestartDecision::Defer {
            unavailable,
            allowed,
        }
    }
}

/// WG3: decides whether `uid`'s gate (on `node`), whose readiness probe has
/// failed `failures` times in a row, may go False under `floor`. Pods held
/// longest, the most failures first, go first when room appears: the pods
/// held last are the ones failing least.
pub fn release(
    record: &GuardRecord,
    members: &[Member],
    uid: &str,
    node: &str,
    floor: &ReadinessFloor,
    failures: u32,
    now: i64,
) -> FloorDecision {
    let pruned = record.pruned(members, now);
    let changed = |r: GuardRecord| (r != *record).then_some(r);
    if !members.iter().any(|m| m.uid == uid && m.ready) {
        // Its gate going False changes no count: the pod is not Ready
        // already (the kubelet's own verdict), or not listed.
        return FloorDecision::Release(pruned.without(uid).and_then(changed));
    }
    let min = floor.min_ready.of(members.len());
    let ready = members.iter().filter(|m| m.ready).count()
        - pruned.ready_with(members, UnitKind::Release, uid)
        - pruned.ready_with(members, UnitKind::Restart, uid);
    // Those that may go now, this pod included, and the pods ahead of it:
    // held longer (more failures) than it.
    let room = ready.saturating_sub(min);
    let own = pruned.units.get(uid).filter(|u| u.kind == UnitKind::Held);
    let since = own.map_or(now, |u| u.since);
    let ahead = pruned
        .units
        .iter()
        .filter(|(other, unit)| {
            *other != uid
                && unit.kind == UnitKind::Held
                && members.iter().any(|m| &m.uid == *other && m.ready)
                && (unit.since, other.as_str()) < (since, uid)
        })
        .count();
    if ahead < room {
        let released = pruned.with(
            uid,
            Unit {
                kind: UnitKind::Release,
                node: node.to_string(),
                since: now,
                expires: now + UNIT_SECONDS,
                failures,
            },
        );
        return FloorDecision::Release(Some(released));
    }
    let renew = own.is_none_or(|u| u.expires - now < HOLD_SECONDS / 2);
    let held = if renew {
        Some(pruned.with(
            uid,
            Unit {
                kind: UnitKind::Held,
                node: node.to_string(),
                since,
                expires: now + HOLD_SECONDS,
                failures,
            },
        ))
    } else {
        changed(pruned)
    };
    FloorDecision::Hold {
        record: held,
        ready,
        floor: min,
    }
}

/// WG3: the record once `uid`'s readiness probe passes again: its hold is
/// over, and a gate let go counts by itself again (a Ready pod with a
/// `Release` unit would count as unavailable until the unit lapses);
/// `None` when it holds neither.
pub fn recovered(record: &GuardRecord, uid: &str) -> Option<GuardRecord> {
    record
        .units
        .get(uid)
        .filter(|u| matches!(u.kind, UnitKind::Held | UnitKind::Release))
        .and_then(|_| record.without(uid))
}

/// WG2: a restart deferred since `since` (Unix seconds) for want of a unit
/// goes ahead anyway once `budget`'s `maxDeferralSeconds` have passed.
pub fn deferral_over(budget: &RestartBudget, since: i64, now: i64) -> bool {
    now - since >= budget.max_deferral_seconds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::probe_spec::extension::workload_options::PodCount;

    fn members(ready: &[bool]) -> Vec<Member> {
        ready
            .iter()
            .enumerate()
            .map(|(i, ready)| Member {
                uid: format!("p{i}"),
                ready: *ready,
            })
            .collect()
    }

    fn budget(max: PodCount) -> RestartBudget {
        RestartBudget {
            max_unavailable: max,
            max_deferral_seconds: 300,
        }
    }

    fn taken(decision: RestartDecision) -> GuardRecord {
        match decision {
            RestartDecision::Take(record) => record,
            other => panic!("not taken: {other:?}"),
        }
    }

    /// The record a free restart writes.
    fn freed(decision: RestartDecision) -> GuardRecord {
        match decision {
            RestartDecision::Free(Some(record)) => record,
            other => panic!("not free, or no unit written: {other:?}"),
        }
    }

    #[test]
    fn wg2_restarts_of_ready_pods_take_units_until_none_is_left() {
        let six = members(&[true; 6]);
        let one = budget(PodCount::Count(1));
        let record = taken(restart(
            &GuardRecord::default(),
            &six,
            "p0",
            "a",
            &one,
            1000,
        ));
        assert_eq!(record.units["p0"].kind, UnitKind::Restart);
        assert_eq!(record.units["p0"].expires, 1000 + UNIT_SECONDS);
        // Another node, the same instant, against the record as written:
        // no unit left.
        assert_eq!(
            restart(&record, &six, "p1", "b", &one, 1000),
            RestartDecision::Defer {
                unavailable: 1,
                allowed: 1
            }
        );
        // The holder decides again (a later failure): no second write.
        assert_eq!(
            restart(&record, &six, "p0", "a", &one, 1001),
            RestartDecision::Holding
        );
        // The restarted pod shows NotReady: it still counts, by itself.
        let mut after = six.clone();
        after[0].ready = false;
        assert!(matches!(
            restart(&record, &after, "p1", "b", &one, 1010),
            RestartDecision::Defer { unavailable: 1, .. }
        ));
        // Ready again, and the unit lapsed: the next one may go.
        assert!(matches!(
            restart(&record, &six, "p1", "b", &one, 1000 + UNIT_SECONDS),
            RestartDecision::Take(_)
        ));
    }

    #[test]
    fn wg2_a_pod_that_is_not_ready_costs_nothing() {
        let mut six = members(&[true; 6]);
        six[3].ready = false;
        let one = budget(PodCount::Count(1));
        let record = freed(restart(&GuardRecord::default(), &six, "p3", "a", &one, 0));
        // ... but takes the unit a Ready pod would need.
        assert!(matches!(
            restart(&GuardRecord::default(), &six, "p0", "a", &one, 0),
            RestartDecision::Defer {
                unavailable: 1,
                allowed: 1
            }
        ));
        // Its unit is written beyond the budget, and once written, not
        // again while it counts.
        assert_eq!(record.units["p3"].kind, UnitKind::Restart);
        assert_eq!(
            restart(&record, &six, "p3", "a", &one, UNIT_SECONDS - 1),
            RestartDecision::Free(None)
        );
        assert!(matches!(
            restart(&record, &six, "p3", "a", &one, UNIT_SECONDS),
            RestartDecision::Free(Some(_))
        ));
        // A pod not among the listed ones is the kubelet's.
        assert_eq!(
            restart(&GuardRecord::default(), &six, "other", "a", &one, 0),
            RestartDecision::Free(None)
        );
    }

    /// The gap a free restart left open: the pod was not Ready when it was
    /// restarted, its gate turned True again before the restart showed, and
    /// another node, listing it Ready, took the last unit: two replicas
    /// down under a budget of one.
    #[test]
    fn wg2_a_free_restart_counts_while_its_pod_looks_ready_again() {
        let mut six = members(&[true; 6]);
        six[3].ready = false;
        let one = budget(PodCount::Count(1));
        let record = freed(restart(&GuardRecord::default(), &six, "p3", "a", &one, 0));
        six[3].ready = true;
        assert!(matches!(
            restart(&record, &six, "p0", "b", &one, 1),
            RestartDecision::Defer {
                unavailable: 1,
                allowed: 1
            }
        ));
        // Once its restart has shown and lapsed, the unit is free again.
        assert!(matches!(
            restart(&record, &six, "p0", "b", &one, UNIT_SECONDS),
            RestartDecision::Take(_)
        ));
    }

    #[test]
    fn wg2_percentages_round_up_and_released_gates_count() {
        let six = members(&[true; 6]);
        let quarter = budget(PodCount::Percent(25)); // 2 of 6
        let first = taken(restart(
            &GuardRecord::default(),
            &six,
            "p0",
            "a",
            &quarter,
            0,
        ));
        let second = taken(restart(&first, &six, "p1", "b", &quarter, 0));
        assert!(matches!(
            restart(&second, &six, "p2", "a", &quarter, 0),
            RestartDecision::Defer {
                unavailable: 2,
                allowed: 2
            }
        ));
        // A gate the floor let go counts as unavailable until it shows.
        let mut record = GuardRecord::default();
        record.units.insert(
            "p5".into(),
            Unit {
                kind: UnitKind::Release,
                node: "b".into(),
                since: 0,
                expires: UNIT_SECONDS,
                failures: 3,
            },
        );
        let record = taken(restart(&record, &six, "p0", "a", &quarter, 0));
        assert!(matches!(
            restart(&record, &six, "p1", "a", &quarter, 0),
            RestartDecision::Defer { unavailable: 2, .. }
        ));
    }

    #[test]
    fn wg2_a_deferral_ends_after_its_maximum() {
        let b = budget(PodCount::Count(1));
        assert!(!deferral_over(&b, 100, 399));
        assert!(deferral_over(&b, 100, 400));
    }

    fn floor(min: PodCount) -> ReadinessFloor {
        ReadinessFloor { min_ready: min }
    }

    fn apply(decision: &FloorDecision, record: &mut GuardRecord) {
        let written = match decision {
            FloorDecision::Release(r) => r,
            FloorDecision::Hold { record, .. } => record,
        };
        if let Some(r) = written {
            *record = r.clone();
        }
    }

    #[test]
    fn wg3_the_floor_holds_the_last_ready_pods_and_lets_the_others_go() {
        // Six Ready pods all start failing; the floor is half of them.
        let mut pods = members(&[true; 6]);
        let half = floor(PodCount::Percent(50));
        let mut record = GuardRecord::default();
        let mut released = Vec::new();
        for (t, i) in (0..6).enumerate() {
            let uid = format!("p{i}");
            let decision = release(&record, &pods, &uid, "a", &half, 3, t as i64);
            apply(&decision, &mut record);
            if matches!(decision, FloorDecision::Release(_)) {
                released.push(uid);
            }
        }
        assert_eq!(released, ["p0", "p1", "p2"]);
        for i in 3..6 {
            assert_eq!(record.units[&format!("p{i}")].kind, UnitKind::Held);
        }
        // The released gates show False.
        for pod in &mut pods[..3] {
            pod.ready = false;
        }
        // Deciding again holds the same three, writing nothing.
        for i in 3..6 {
            let decision = release(&record, &pods, &format!("p{i}"), "a", &half, 4, 10);
            assert!(
                matches!(
                    decision,
                    FloorDecision::Hold {
                        record: None,
                        ready: 3,
                        floor: 3
                    }
                ),
                "{decision:?}"
            );
        }
        // p0 recovers and its node gives its unit back: one held pod may
        // go, the one held longest (p3).
        pods[0].ready = true;
        record = recovered(&record, "p0").expect("p0's released gate");
        assert_eq!(recovered(&record, "p0"), None);
        let p5 = release(&record, &pods, "p5", "a", &half, 9, 20);
        assert!(matches!(p5, FloorDecision::Hold { .. }), "{p5:?}");
        let p3 = release(&record, &pods, "p3", "a", &half, 9, 20);
        assert!(matches!(p3, FloorDecision::Release(Some(_))), "{p3:?}");
    }

    #[test]
    fn wg3_two_nodes_at_once_never_both_take_the_last_place() {
        let pods = members(&[true, true]);
        let one = floor(PodCount::Count(1));
        let record = GuardRecord::default();
        // Both decide from the same record: both would release ...
        let a = release(&record, &pods, "p0", "a", &one, 3, 0);
        let b = release(&record, &pods, "p1", "b", &one, 3, 0);
        assert!(matches!(a, FloorDecision::Release(Some(_))));
        assert!(matches!(b, FloorDecision::Release(Some(_))));
        // ... but only one write lands (compare-and-swap); the other,
        // deciding again against it, holds.
        let FloorDecision::Release(Some(written)) = a else {
            unreachable!()
        };
        let again = release(&written, &pods, "p1", "b", &one, 3, 0);
        assert!(
            matches!(
                again,
                FloorDecision::Hold {
                    ready: 1,
                    floor: 1,
                    ..
                }
            ),
            "{again:?}"
        );
    }

    #[test]
    fn wg3_not_ready_pods_go_and_recovered_holds_end() {
        let mut pods = members(&[true, true]);
        pods[1].ready = false;
        let one = floor(PodCount::Count(1));
        let held = release(&GuardRecord::default(), &pods, "p0", "a", &one, 3, 0);
        let FloorDecision::Hold {
            record: Some(record),
            ..
        } = held
        else {
            panic!("{held:?}")
        };
        // The kubelet's own NotReady is not podprobe's to hold.
        assert_eq!(
            release(&record, &pods, "p1", "b", &one, 3, 0),
            FloorDecision::Release(None)
        );
        assert_eq!(recovered(&record, "p1"), None);
        assert_eq!(recovered(&record, "p0"), Some(GuardRecord::default()));
        // A hold is renewed after half its time, not before.
        let FloorDecision::Hold { record: none, .. } =
            release(&record, &pods, "p0", "a", &one, 5, HOLD_SECONDS / 2 - 1)
        else {
            panic!()
        };
        assert_eq!(none, None);
        let FloorDecision::Hold {
            record: renewed, ..
        } = release(&record, &pods, "p0", "a", &one, 5, HOLD_SECONDS / 2 + 1)
        else {
            panic!()
        };
        let renewed = renewed.expect("renewed");
        assert_eq!(renewed.units["p0"].since, 0);
        assert_eq!(
            renewed.units["p0"].expires,
            HOLD_SECONDS / 2 + 1 + HOLD_SECONDS
        );
    }
}
