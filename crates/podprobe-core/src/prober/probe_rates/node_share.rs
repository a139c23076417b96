//! The node's probe-run bucket, shared fairly between pods (#37).
//!
//! A bucket that lends tokens ahead of their refill serves callers in the
//! order they asked: 21 pods at 50 runs a second fill a node's 1,000, and
//! every other pod's runs queue behind all of theirs. Here runs that find
//! the bucket empty wait in their pod's queue, and each token goes to the
//! waiting pod that took the fewest runs lately (a count that decays by e
//! every [`USAGE_DECAY`]), the longest waiting among equals. Pods over the
//! node's budget so take turns and end up with equal shares; a pod under
//! its share has taken fewer runs than any of them, so its run gets the
//! next token. Only the next token to fill is lent ahead, to one run: a
//! run that asks later can still be served before every run already
//! waiting, at most one token later.
//!
//! Why these choices: round robin over waiting pods (deficit round robin,
//! start-time fair queueing) would also share equally, but a quiet pod
//! would come back level with the least-served of the flooding pods and
//! could wait a round of them; counting recent runs puts it ahead of all.
//! A reservation once sent cannot be taken back, hence only one ahead; and
//! the run holding it hands out the next when it starts, so no timer task
//! runs beside the waiting runs.
//!
//! Plain data: time is passed in, and a waiting run learns the instant its
//! token is there from a channel.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::util::rate_limit::TokenBucket;

/// How fast a pod's count of runs fades: by e each second, so the count is
/// about the pod's runs in the last second, steady enough that a pod just
/// under its share keeps its place, short enough that a pod that was over
/// it is served as a quiet one soon after it slows down.
const USAGE_DECAY: Duration = Duration::from_secs(1);

/// How far the counts' reference instant may fall behind before they are
/// rescaled to the present: e^64 leaves room for every count a node can
/// take in that time within an `f64`.
const RESCALE_AFTER: Duration = Duration::from_secs(64);

/// The node's bucket and the runs waiting for it.
#[derive(Debug)]
pub(super) struct NodeShare {
    bucket: TokenBucket,
    /// Runs waiting for a token, oldest first, by pod; a pod with none is
    /// absent.
    waiting: HashMap<String, VecDeque<Waiter>>,
    /// The run that holds the token lent ahead of its refill: it hands out
    /// the next when it starts, so pods are chosen as late as possible.
    promised: Option<Ticket>,
    /// Runs taken by pod, each counted e^((t - epoch) / USAGE_DECAY) at its
    /// time t: all counts fade alike, so comparing these compares the
    /// decayed counts at any instant without computing the decay.
    counts: HashMap<String, Count>,
    epoch: Instant,
    next_ticket: u64,
    /// Counts kept before those idle for `idle` are dropped: by then they
    /// have faded to nothing, as good as a new pod's.
    kept: usize,
    idle: Duration,
}

#[derive(Debug)]
struct Waiter {
    ticket: Ticket,
    turn: oneshot::Sender<Instant>,
}

#[derive(Debug)]
struct Count {
    weight: f64,
    last: Instant,
}

/// A waiting run's place, to start or cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ticket(u64);

/// What a run that asks for a token gets.
#[derive(Debug)]
pub(super) enum Turn {
    /// The token: the run may start.
    Now,
    /// A place in its pod's queue; the channel says from when the run may
    /// start. It then calls [`NodeShare::started`], or
    /// [`NodeShare::cancel`] if it gives up first.
    Queued(Ticket, oneshot::Receiver<Instant>),
}

impl NodeShare {
    /// A full `bucket` at `now`; counts of more than `kept` pods are
    /// dropped once idle for `idle`.
    pub(super) fn new(bucket: TokenBucket, now: Instant, kept: usize, idle: Duration) -> Self {
        NodeShare {
            bucket,
            waiting: HashMap::new(),
            promised: None,
            counts: HashMap::new(),
            epoch: now,
            next_ticket: 0,
            kept,
            idle,
        }
    }

    /// A run of `pod` asks for a token at `now`.
    pub(super) fn ask(&mut self, pod: &str, now: Instant) -> Turn {
        if self.waiting.is_empty() && self.bucket.try_take(now) {
            self.count(pod, now);
            return Turn::Now;
        }
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        let (turn, receiver) = oneshot::channel();
        self.waiting
            .entry(pod.to_string())
            .or_default()
            .push_back(Waiter { ticket, turn });
        self.dispatch(now);
        Turn::Queued(ticket, receiver)
    }

    /// The run holding `ticket` reached its instant and starts.
    pub(super) fn started(&mut self, ticket: Ticket, now: Instant) {
        if self.promised == Some(ticket) {
            self.promised = None;
            self.dispatch(now);
        }
    }

    /// The run of `pod` holding `ticket` gives up: it leaves its queue, or
    /// its token to the next run.
    pub(super) fn cancel(&mut self, pod: &str, ticket: Ticket, now: Instant) {
        if let Some(queue) = self.waiting.get_mut(pod)
            && let Some(at) = queue.iter().position(|w| w.ticket == ticket)
        {
            queue.remove(at);
            if queue.is_empty() {
                self.waiting.remove(pod);
            }
            return;
        }
        // Sent its turn already: the token it took or was lent is the
        // next run's.
        if self.promised == Some(ticket) {
            self.promised = None;
        }
        self.bucket.give_back(now);
        self.dispatch(now);
    }

    /// Hands out the tokens in the bucket, then lends the next to fill, one
    /// run at a time: each to the waiting pod with the fewest recent runs.
    fn dispatch(&mut self, now: Instant) {
        while self.promised.is_none() {
            let Some((pod, waiter)) = self.next_waiter() else {
                return;
            };
            let wait = self.bucket.reserve(now);
            if waiter.turn.send(now + wait).is_err() {
                // Its run is gone without a cancel: the token is free.
                self.bucket.give_back(now);
                continue;
            }
            self.count(&pod, now);
            if !wait.is_zero() {
                self.promised = Some(waiter.ticket);
            }
        }
    }

    /// Takes the first run of the waiting pod with the fewest recent runs,
    /// the pod waiting longest among equals.
    fn next_waiter(&mut self) -> Option<(String, Waiter)> {
        let pod = self
            .waiting
            .iter()
            .filter_map(|(pod, queue)| Some((self.weight(pod), queue.front()?.ticket, pod)))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, _, pod)| pod.clone())?;
        let queue = self.waiting.get_mut(&pod)?;
        let waiter = queue.pop_front()?;
        if queue.is_empty() {
            self.waiting.remove(&pod);
        }
        Some((pod, waiter))
    }

    /// Drops the counts of pods idle for `idle` with no run waiting: by
    /// then faded to nothing, as good as a new pod's.
    pub(super) fn forget_idle(&mut self, now: Instant) {
        let (idle, waiting) = (self.idle, &self.waiting);
        self.counts.retain(|pod, count| {
            now.saturating_duration_since(count.last) < idle || waiting.contains_key(pod)
        });
    }

    /// Pods counted or waiting.
    pub(super) fn entries(&self) -> usize {
        self.counts.len() + self.waiting.len()
    }

    fn weight(&self, pod: &str) -> f64 {
        self.counts.get(pod).map_or(0.0, |count| count.weight)
    }

    /// Counts a run of `pod` taken at `now`.
    fn count(&mut self, pod: &str, now: Instant) {
        let mut since = now.saturating_duration_since(self.epoch);
        if since > RESCALE_AFTER {
            let scale = (-since.as_secs_f64() / USAGE_DECAY.as_secs_f64()).exp();
            for count in self.counts.values_mut() {
                count.weight *= scale;
            }
            self.epoch = now;
            since = Duration::ZERO;
        }
        if self.counts.len() >= self.kept && !self.counts.contains_key(pod) {
            self.forget_idle(now);
        }
        let count = self.counts.entry(pod.to_string()).or_insert(Count {
            weight: 0.0,
            last: now,
        });
        count.weight += (since.as_secs_f64() / USAGE_DECAY.as_secs_f64()).exp();
        count.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A bucket of one token refilled every 10 ms, empty at `start`.
    fn drained(start: Instant) -> NodeShare {
        let mut node = NodeShare::new(
            TokenBucket::new(1, 10 * MS, start),
            start,
            1024,
            Duration::from_secs(60),
        );
        assert!(matches!(node.ask("first", start), Turn::Now));
        node
    }

    fn queued(turn: Turn) -> (Ticket, oneshot::Receiver<Instant>) {
        match turn {
            Turn::Queued(ticket, receiver) => (ticket, receiver),
            Turn::Now => panic!("expected to wait"),
        }
    }

    #[test]
    fn the_waiting_pod_with_fewest_recent_runs_goes_first() {
        let start = Instant::now();
        let mut node = drained(start);
        let (busy1, mut busy1_at) = queued(node.ask("busy", start));
        assert_eq!(busy1_at.try_recv(), Ok(start + 10 * MS));
        // Asked after the busy pod's next run, the quiet pod's goes first.
        let (_, mut busy2_at) = queued(node.ask("busy", start));
        let (quiet, mut quiet_at) = queued(node.ask("quiet", start));
        node.started(busy1, start + 10 * MS);
        assert_eq!(quiet_at.try_recv(), Ok(start + 20 * MS));
        assert!(busy2_at.try_recv().is_err());
        node.started(quiet, start + 20 * MS);
        assert_eq!(busy2_at.try_recv(), Ok(start + 30 * MS));
    }

    #[test]
    fn a_run_that_gives_up_leaves_its_place_and_its_token() {
        let start = Instant::now();
        let mut node = drained(start);
        let (promised, _) = queued(node.ask("a", start));
        let (waiting, _) = queued(node.ask("b", start));
        let (_, mut next_at) = queued(node.ask("c", start));
        node.cancel("b", waiting, start);
        // The token lent to `a` goes to `c` at the same instant.
        node.cancel("a", promised, start + MS);
        assert_eq!(next_at.try_recv(), Ok(start + 10 * MS));
        assert!(node.waiting.is_empty());
    }

    #[test]
    fn counts_fade_alike_and_idle_ones_are_dropped() {
        let start = Instant::now();
        let mut node = NodeShare::new(
            TokenBucket::new(1, MS, start),
            start,
            2,
            Duration::from_secs(60),
        );
        // Long after the reference instant, the counts are rescaled, not
        // overflowed, and still compare as the runs' recency says.
        let later = start + 20 * RESCALE_AFTER;
        node.count("old", later);
        node.count("old", later);
        node.count("recent", later + Duration::from_secs(5));
        assert!(node.weight("old").is_finite());
        assert!(node.weight("old") < node.weight("recent"));
        node.count("new", later + Duration::from_secs(61));
        assert_eq!(node.counts.len(), 2, "{:?}", node.counts.keys());
        assert_eq!(node.weight("old"), 0.0);
    }
}
