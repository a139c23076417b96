//! How many probe runs a second one pod, and the whole node, may ask for
//! (#25). The kubelet needs no such budget: its periods are at least a
//! second. With `podprobe.periodMilliseconds: 100` one pod of 2,000 probes
//! asks for 20,000 connections a second, and about 220 probes at 100 ms
//! fill a default conntrack table (`bench/RESULTS.md`), dropping packets
//! of every pod on the node.
//!
//! A run first takes a token from its pod's bucket, then one from the
//! node's, waiting for each in turn: a pod over its own budget delays only
//! itself. The node's bucket is shared fairly between pods (#37,
//! `probe_rates/node_share.rs`): when it is empty, each token goes to the
//! waiting pod that took the fewest runs lately. Pods over the node's
//! budget together end up with equal shares of it, and a run of a pod
//! under its share (the node's rate over the pods asking) waits at most
//! two of the node's token intervals, 2 ms at the default rate, however
//! many runs the others have queued (one interval more for each quieter
//! pod asking at the same time). A first-come bucket would have made it
//! wait behind all of them: 21 pods at the default 50 a second fill the
//! default 1,000.
//!
//! The node's total stays within its rate and a burst of one second's
//! worth. A run that waits is late, never failed; the wait is counted
//! (`podprobe_probe_rate_delayed_total`, `..._delay_seconds_total`). A run
//! dropped while it waits (its probe stopped) gives its tokens back.

mod node_share;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::util::rate_limit::{RateLimit, TokenBucket};
use node_share::{NodeShare, Ticket, Turn};

/// Default of `--max-pod-probe-rate`: runs a second per pod, e.g. 10
/// containers with three probes each at 200 ms, or 150 containers' probes at
/// the kubelet's 10 s default, with no wait.
pub const DEFAULT_POD_PROBE_RATE: u32 = 50;

/// Default of `--max-node-probe-rate`: runs a second on the node, under half
/// of what fills a default conntrack table (about 2,200 connections a
/// second that each stay 120 s in TIME_WAIT).
pub const DEFAULT_NODE_PROBE_RATE: u32 = 1000;

/// Pods whose buckets (and counts of runs at the node's) are kept; past
/// it, those idle for [`IDLE_BUCKET`] are dropped (a dropped bucket comes
/// back full, which an idle one would be anyway).
const KEPT_BUCKETS: usize = 1024;

/// How long a bucket must have been unused to be dropped.
const IDLE_BUCKET: Duration = Duration::from_secs(60);

/// The probe-run budgets of a node and its pods.
#[derive(Debug)]
pub struct ProbeRates {
    pod: RateLimit,
    pods: Mutex<HashMap<String, PodBucket>>,
    node: Option<Mutex<NodeShare>>,
}

#[derive(Debug)]
struct PodBucket {
    bucket: TokenBucket,
    used: Instant,
}

impl ProbeRates {
    /// `pod` runs a second per pod and `node` in all, each with a burst of
    /// one second's worth; a rate of 0 limits nothing.
    pub fn new(pod: u32, node: u32) -> Arc<Self> {
        let now = Instant::now();
        let node = RateLimit::new(node.into(), node)
            .bucket(now)
            .map(|bucket| Mutex::new(NodeShare::new(bucket, now, KEPT_BUCKETS, IDLE_BUCKET)));
        Arc::new(ProbeRates {
            pod: RateLimit::new(pod.into(), pod),
            pods: Mutex::default(),
            node,
        })
    }

    /// No budget at all (tests, `podprobe simulate`).
    pub fn unlimited() -> Arc<Self> {
        Self::new(0, 0)
    }

    /// Waits until a run of `pod_uid`'s probe may start; returns how long it
    /// waited. Dropped while it waits, it gives back what it took.
    pub async fn admit(&self, pod_uid: &str) -> Duration {
        let asked = Instant::now();
        let pod_wait = self.reserve_pod(pod_uid, asked);
        if !pod_wait.is_zero() {
            let mut reserved = PodReservation {
                pods: &self.pods,
                pod_uid,
                used: false,
            };
            tokio::time::sleep(pod_wait).await;
            reserved.used = true;
        }
        if let Some(node) = &self.node {
            let turn = lock(node).ask(pod_uid, Instant::now());
            if let Turn::Queued(ticket, at) = turn {
                NodeWait {
                    node,
                    pod_uid,
                    ticket,
                    at,
                    started: false,
                }
                .wait()
                .await;
            }
        }
        asked.elapsed()
    }

    /// Drops the buckets and counts of pods idle for [`IDLE_BUCKET`] (#39):
    /// the sync loop calls it at each resync, so a deleted pod's are gone a
    /// minute after its last run, however few pods come after it.
    pub fn forget_idle(&self) {
        let now = Instant::now();
        forget_idle_buckets(&mut lock(&self.pods), now);
        if let Some(node) = &self.node {
            lock(node).forget_idle(now);
        }
    }

    /// Pods with a bucket, and pods counted or waiting at the node's.
    pub fn entries(&self) -> usize {
        let node = self.node.as_ref().map_or(0, |node| lock(node).entries());
        lock(&self.pods).len() + node
    }

    fn reserve_pod(&self, pod_uid: &str, now: Instant) -> Duration {
        let Some(fresh) = self.pod.bucket(now) else {
            return Duration::ZERO;
        };
        let mut pods = lock(&self.pods);
        if pods.len() >= KEPT_BUCKETS && !pods.contains_key(pod_uid) {
            forget_idle_buckets(&mut pods, now);
        }
        let kept = pods.entry(pod_uid.to_string()).or_insert(PodBucket {
            bucket: fresh,
            used: now,
        });
        kept.used = now;
        kept.bucket.reserve(now)
    }
}

fn forget_idle_buckets(pods: &mut HashMap<String, PodBucket>, now: Instant) {
    pods.retain(|_, kept| now.saturating_duration_since(kept.used) < IDLE_BUCKET);
}

/// A pod token lent ahead of its refill, given back if the run is dropped
/// before it comes.
struct PodReservation<'a> {
    pods: &'a Mutex<HashMap<String, PodBucket>>,
    pod_uid: &'a str,
    used: bool,
}

impl Drop for PodReservation<'_> {
    fn drop(&mut self) {
        if self.used {
            return;
        }
        if let Some(kept) = lock(self.pods).get_mut(self.pod_uid) {
            kept.bucket.give_back(Instant::now());
        }
    }
}

/// A run's place at the node's bucket, left (its token passed on) if the
/// run is dropped before it starts.
struct NodeWait<'a> {
    node: &'a Mutex<NodeShare>,
    pod_uid: &'a str,
    ticket: Ticket,
    at: oneshot::Receiver<Instant>,
    started: bool,
}

impl NodeWait<'_> {
    async fn wait(mut self) {
        // The node's queue sends every run it lets go its turn; were the
        // sender ever dropped unsent, the run starts now rather than the
        // probe worker panicking.
        let at = (&mut self.at).await.unwrap_or_else(|_| Instant::now());
        if at > Instant::now() {
            tokio::time::sleep_until(at).await;
        }
        lock(self.node).started(self.ticket, Instant::now());
        self.started = true;
    }
}

impl Drop for NodeWait<'_> {
    fn drop(&mut self) {
        if self.started {
            return;
        }
        lock(self.node).cancel(self.pod_uid, self.ticket, Instant::now());
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data, consistent between statements.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::task::JoinHandle;

    use super::*;

    /// Pods that each keep `tasks_of(pod)` runs asking at once, as a pod's
    /// probe workers do when their periods ask for more than its budget:
    /// each loop asks again as soon as it is admitted.
    struct Flood {
        admitted: Vec<Arc<AtomicUsize>>,
        tasks: Vec<JoinHandle<()>>,
    }

    impl Flood {
        fn start(rates: &Arc<ProbeRates>, pods: usize, tasks_of: impl Fn(usize) -> usize) -> Self {
            let admitted: Vec<_> = (0..pods).map(|_| Arc::new(AtomicUsize::new(0))).collect();
            let mut tasks = Vec::new();
            for (pod, count) in admitted.iter().enumerate() {
                for _ in 0..tasks_of(pod) {
                    let (rates, count, uid) =
                        (rates.clone(), count.clone(), format!("flood-{pod}"));
                    tasks.push(tokio::spawn(async move {
                        loop {
                            rates.admit(&uid).await;
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    }));
                }
            }
            Flood { admitted, tasks }
        }

        /// Runs admitted so far, by pod.
        fn counts(&self) -> Vec<usize> {
            self.admitted
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect()
        }
    }

    impl Drop for Flood {
        fn drop(&mut self) {
            for task in &self.tasks {
                task.abort();
            }
        }
    }

    // 25 pods at their own maximum ask for 1,250 runs a second of a node's
    // 1,000: over the node's budget, whoever asks first.
    const NODE_RATE: u32 = 1000;
    const POD_RATE: u32 = 50;
    const FLOODING_PODS: usize = 25;

    #[tokio::test(start_paused = true)]
    async fn a_pod_under_its_share_is_not_delayed_by_pods_flooding_the_node() {
        let rates = ProbeRates::new(POD_RATE, NODE_RATE);
        let _flood = Flood::start(&rates, FLOODING_PODS, |_| 10);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // 10 runs a second, a fortieth of its fair share: each waits at
        // most for the token already promised to a flooding pod and then
        // its own, two of the node's token intervals.
        let bound = 2 * Duration::from_secs(1) / NODE_RATE;
        let mut waits = Vec::new();
        for _ in 0..50 {
            waits.push(rates.admit("bystander").await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let worst = waits.iter().max().copied().unwrap_or_default();
        let mean = waits.iter().sum::<Duration>() / 50;
        assert!(
            worst <= bound,
            "waited up to {worst:?} (mean {mean:?}), bound {bound:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_node_total_stays_within_its_rate_and_burst() {
        let rates = ProbeRates::new(POD_RATE, NODE_RATE);
        let flood = Flood::start(&rates, FLOODING_PODS, |_| 10);
        // Meanwhile runs of another pod are dropped 1 ms after they ask,
        // some while they wait, some while their token is promised: what
        // they give back must not add to the node's budget.
        let churned = Arc::new(AtomicUsize::new(0));
        let window = 5;
        for _ in 0..window * 100 {
            let (rates, churned) = (rates.clone(), churned.clone());
            let run = tokio::spawn(async move {
                rates.admit("churn").await;
                churned.fetch_add(1, Ordering::Relaxed);
            });
            tokio::time::sleep(Duration::from_millis(1)).await;
            run.abort();
            tokio::time::sleep(Duration::from_millis(9)).await;
        }
        let total = flood.counts().iter().sum::<usize>() + churned.load(Ordering::Relaxed);
        // The node's burst is a second's worth.
        let rate = usize::try_from(NODE_RATE).unwrap();
        assert!(total <= rate * window + rate, "{total} runs in {window} s");
        // Over its budget all along, the node wastes none of it.
        assert!(total >= rate * window, "{total} runs in {window} s");
    }

    #[tokio::test(start_paused = true)]
    async fn pods_flooding_the_node_share_it_equally() {
        let rates = ProbeRates::new(POD_RATE, NODE_RATE);
        // From one run asking at a time to ten: how hard a pod pushes does
        // not buy it a larger share.
        let flood = Flood::start(&rates, FLOODING_PODS, |pod| pod % 10 + 1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = flood.counts();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let runs: Vec<_> = flood
            .counts()
            .iter()
            .zip(&before)
            .map(|(after, before)| after - before)
            .collect();
        // 5 s of 1,000 runs a second in 25 equal shares, each within 10 %.
        let share = 5 * 1000 / FLOODING_PODS;
        assert!(
            runs.iter().all(|&n| n.abs_diff(share) <= share / 10),
            "runs by pod {runs:?}, share {share}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_over_its_rate_waits_and_delays_only_itself() {
        let rates = ProbeRates::new(10, 1000);
        // Its burst of 10 goes at once, the 11th waits 100 ms.
        for _ in 0..10 {
            assert_eq!(rates.admit("hostile").await, Duration::ZERO);
        }
        assert_eq!(rates.admit("hostile").await, Duration::from_millis(100));
        // Another pod is not held back by it.
        assert_eq!(rates.admit("bystander").await, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_node_rate_bounds_every_pod_together() {
        let rates = ProbeRates::new(1000, 20);
        for i in 0..20 {
            assert_eq!(rates.admit(&format!("pod-{i}")).await, Duration::ZERO);
        }
        assert_eq!(rates.admit("late").await, Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn a_flooding_pod_reaches_the_node_bucket_only_at_its_own_rate() {
        let rates = ProbeRates::new(10, 100);
        // 1,000 runs of one pod asked at once: they trickle through its own
        // bucket, so the node's keeps room for the bystander.
        let flood: Vec<_> = (0..1000)
            .map(|_| {
                let rates = rates.clone();
                tokio::spawn(async move { rates.admit("hostile").await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(rates.admit("bystander").await, Duration::ZERO);
        for task in flood {
            task.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_dropped_while_it_waits_gives_back_its_tokens() {
        let ms = Duration::from_millis;
        let rates = ProbeRates::new(10, 1000);
        for _ in 0..10 {
            rates.admit("pod").await;
        }
        let dropped = {
            let rates = rates.clone();
            tokio::spawn(async move { rates.admit("pod").await })
        };
        tokio::task::yield_now().await;
        dropped.abort();
        // An aborted task is dropped when the scheduler next runs.
        tokio::task::yield_now().await;
        // The dropped run's pod token, due at 100 ms, is the next run's.
        assert_eq!(rates.admit("pod").await, ms(100));

        let rates = ProbeRates::new(1000, 10);
        for i in 0..10 {
            rates.admit(&format!("pod-{i}")).await;
        }
        let spawn = |pod: &'static str| {
            let rates = rates.clone();
            tokio::spawn(async move { rates.admit(pod).await })
        };
        let promised = spawn("a");
        tokio::task::yield_now().await;
        let queued = spawn("b");
        let next = spawn("c");
        tokio::task::yield_now().await;
        queued.abort();
        promised.abort();
        tokio::task::yield_now().await;
        // The node token lent to `a` for 100 ms goes to `c`; `b` left its
        // place.
        assert_eq!(next.await.unwrap(), ms(100));
        assert_eq!(rates.admit("d").await, ms(100));
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits() {
        let rates = ProbeRates::unlimited();
        for _ in 0..10_000 {
            assert_eq!(rates.admit("pod").await, Duration::ZERO);
        }
    }
}
