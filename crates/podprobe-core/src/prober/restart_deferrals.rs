//! WG2's bookkeeping on one node: which budgeted liveness kills are being
//! decided and which wait for a unit of their workload's budget, by
//! container ID. Pure: the daemon's `BudgetedKiller` makes the decisions
//! ([`crate::prober::workload_guard::restart`] against the workload's
//! Lease) and carries out what [`RestartDeferrals::decided`] says.
//!
//! The sync loop asks for a failed container's kill at every pod sync (a
//! result change, the 10 s resync); each ask is decided at most once at a
//! time, a deferred one again at most every [`RETRY`]. A deferral no sync
//! asked about for [`STALE`] is over (the container went, or its worker
//! stopped: a failed liveness worker holds its failure until the container
//! is replaced, D16, so a deferred kill is asked about until then), so a
//! later failure waits its full `maxDeferralSeconds` again; one whose `maxDeferralSeconds` have passed ends in the kill.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::prober::workload_guard::{GuardRecord, RETRY, RestartDecision, deferral_over};
use crate::spec::probe_spec::extension::workload_options::RestartBudget;

/// A deferral no pod sync asked about for this long is over: the sync loop
/// asks for a failed container's kill at every resync (10 s).
pub const STALE: Duration = Duration::from_secs(30);

/// The node's budgeted kills under way, by container ID.
#[derive(Debug, Default)]
pub struct RestartDeferrals {
    deciding: HashSet<String>,
    deferred: HashMap<String, Deferral>,
}

#[derive(Debug)]
struct Deferral {
    /// Unix seconds: the deferral's start, against `maxDeferralSeconds`.
    since: i64,
    /// Not decided again before.
    next: Instant,
    /// The last time a pod sync asked for the kill.
    asked: Instant,
}

/// What a decision found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Restart: a unit was taken, none was needed, or the budget could not
    /// be applied.
    Kill,
    /// No unit left.
    Wait { unavailable: usize, allowed: usize },
}

impl Decision {
    /// What [`crate::prober::workload_guard::restart`] decided, as the
    /// deferrals count it, and the record to write first, if any.
    pub fn of_restart(decision: RestartDecision) -> (Decision, Option<GuardRecord>) {
        match decision {
            RestartDecision::Free(record) => (Decision::Kill, record),
            RestartDecision::Take(record) => (Decision::Kill, Some(record)),
            RestartDecision::Holding => (Decision::Kill, None),
            RestartDecision::Defer {
                unavailable,
                allowed,
            } => (
                Decision::Wait {
                    unavailable,
                    allowed,
                },
                None,
            ),
        }
    }
}

/// What to do after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Restart now, as decided.
    Kill,
    /// Restart now: deferred for `maxDeferralSeconds` without a unit.
    DeferralOver,
    /// Wait; `first`: this deferral just began (say so in a Warning).
    Defer {
        first: bool,
        unavailable: usize,
        allowed: usize,
    },
}

impl RestartDeferrals {
    /// A pod sync asks for `id`'s budgeted kill at `now`: whether to decide
    /// it now (then it counts as being decided until [`Self::decided`]).
    pub fn ask(&mut self, id: &str, now: Instant) -> bool {
        if self
            .deferred
            .get(id)
            .is_some_and(|d| now.duration_since(d.asked) > STALE)
        {
            self.deferred.remove(id);
        }
        if let Some(deferral) = self.deferred.get_mut(id) {
            deferral.asked = now;
            if now < deferral.next {
                return false;
            }
        }
        self.deciding.insert(id.to_string())
    }

    /// What `id`'s decision came to, under `budget`, at `now` (`wall`: Unix
    /// seconds).
    pub fn decided(
        &mut self,
        id: &str,
        decision: Decision,
        budget: &RestartBudget,
        now: Instant,
        wall: i64,
    ) -> Next {
        self.deciding.remove(id);
        let Decision::Wait {
            unavailable,
            allowed,
        } = decision
        else {
            self.deferred.remove(id);
            return Next::Kill;
        };
        let next = now + RETRY;
        match self.deferred.get_mut(id) {
            Some(deferral) if deferral_over(budget, deferral.since, wall) => {
                self.deferred.remove(id);
                Next::DeferralOver
            }
            Some(deferral) => {
                deferral.next = next;
                Next::Defer {
                    first: false,
                    unavailable,
                    allowed,
                }
            }
            None => {
                let deferral = Deferral {
                    since: wall,
                    next,
                    asked: now,
                };
                self.deferred.insert(id.to_string(), deferral);
                Next::Defer {
                    first: true,
                    unavailable,
                    allowed,
                }
            }
        }
    }

    /// Forgets the deferrals of containers not in `listed` (replaced by
    /// the node agent, or gone with their pod).
    pub fn retain(&mut self, listed: &HashSet<String>) {
        self.deferred.retain(|id, _| listed.contains(id));
    }

    /// Containers whose kill waits (#39's per-pod count).
    pub fn deferred(&self) -> usize {
        self.deferred.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::probe_spec::extension::workload_options::PodCount;

    const BUDGET: RestartBudget = RestartBudget {
        max_unavailable: PodCount::Count(1),
        max_deferral_seconds: 60,
    };
    const WAIT: Decision = Decision::Wait {
        unavailable: 1,
        allowed: 1,
    };

    #[tokio::test(start_paused = true)]
    async fn wg2_a_kill_is_decided_once_at_a_time_and_a_deferred_one_every_retry() {
        let mut kills = RestartDeferrals::default();
        let start = Instant::now();
        assert!(kills.ask("c1", start));
        assert!(!kills.ask("c1", start), "being decided");
        assert!(kills.ask("c2", start), "another container's is its own");
        let next = kills.decided("c1", WAIT, &BUDGET, start, 1000);
        assert_eq!(
            next,
            Next::Defer {
                first: true,
                unavailable: 1,
                allowed: 1
            }
        );
        assert!(!kills.ask("c1", start + RETRY / 2), "within RETRY");
        assert!(kills.ask("c1", start + RETRY));
        let again = kills.decided("c1", WAIT, &BUDGET, start + RETRY, 1005);
        assert!(
            matches!(again, Next::Defer { first: false, .. }),
            "{again:?}"
        );
        // Granted at last: killed, forgotten.
        assert!(kills.ask("c1", start + RETRY * 2));
        let granted = kills.decided("c1", Decision::Kill, &BUDGET, start + RETRY * 2, 1010);
        assert_eq!(granted, Next::Kill);
        assert_eq!(kills.deferred(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn wg2_a_deferral_ends_in_the_kill_after_max_deferral_seconds() {
        let mut kills = RestartDeferrals::default();
        let mut now = Instant::now();
        let mut wall = 1000;
        assert!(kills.ask("c1", now));
        kills.decided("c1", WAIT, &BUDGET, now, wall);
        // Asked every resync, no unit ever: waits until 60 s have passed.
        loop {
            now += Duration::from_secs(10);
            wall += 10;
            assert!(kills.ask("c1", now));
            match kills.decided("c1", WAIT, &BUDGET, now, wall) {
                Next::Defer { .. } => assert!(wall < 1060, "still waiting at {wall}"),
                Next::DeferralOver => break,
                Next::Kill => panic!("no unit was granted"),
            }
        }
        assert_eq!(wall, 1060);
        assert_eq!(kills.deferred(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn wg2_a_deferral_nobody_asks_about_is_over_and_a_later_one_starts_afresh() {
        let mut kills = RestartDeferrals::default();
        let start = Instant::now();
        assert!(kills.ask("c1", start));
        kills.decided("c1", WAIT, &BUDGET, start, 1000);
        // The probe passed: no sync asks for STALE. A later failure waits
        // its full maxDeferralSeconds again, with a new Warning.
        let later = start + STALE + Duration::from_secs(1);
        assert!(kills.ask("c1", later));
        let next = kills.decided("c1", WAIT, &BUDGET, later, 1055);
        assert!(matches!(next, Next::Defer { first: true, .. }), "{next:?}");
        let end = later + Duration::from_secs(10);
        assert!(kills.ask("c1", end));
        let next = kills.decided("c1", WAIT, &BUDGET, end, 1065);
        assert!(
            matches!(next, Next::Defer { first: false, .. }),
            "the deferral began at 1055, not 1000: {next:?}"
        );
        // A replaced container's deferral is forgotten.
        kills.retain(&HashSet::new());
        assert_eq!(kills.deferred(), 0);
    }
}
