//! How many probe runs a second one pod, and the whole node, may ask for
//! (#25). The kubelet needs no such budget: its periods are at least a
//! second. With `podprobe.periodMilliseconds: 100` one pod of 2,000 probes
//! asks for 20,000 connections a second, and about 220 probes at 100 ms
//! fill a default conntrack table (`bench/RESULTS.md`), dropping packets
//! of every pod on the node.
//!
//! A run first takes a token from its pod's bucket, then one from the
//! node's, waiting for each in turn: a pod reaches the node's bucket at
//! most at its own rate, so a pod over its budget delays only itself, and
//! the node's bucket is shared by pods that keep to theirs. A run that
//! waits is late, never failed; the wait is counted
//! (`podprobe_probe_rate_delayed_total`, `..._delay_seconds_total`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::util::rate_limit::{RateLimit, TokenBucket};

/// Default of `--max-pod-probe-rate`: runs a second per pod, e.g. 10
/// containers with three probes each at 200 ms, or 150 containers' probes at
/// the kubelet's 10 s default, with no wait.
pub const DEFAULT_POD_PROBE_RATE: u32 = 50;

/// Default of `--max-node-probe-rate`: runs a second on the node, under half
/// of what fills a default conntrack table (about 2,200 connections a
/// second that each stay 120 s in TIME_WAIT).
pub const DEFAULT_NODE_PROBE_RATE: u32 = 1000;

/// Pods whose buckets are kept; past it, buckets idle for
/// [`IDLE_BUCKET`] are dropped (a dropped bucket comes back full, which an
/// idle one would be anyway).
const KEPT_BUCKETS: usize = 1024;

/// How long a bucket must have been unused to be dropped.
const IDLE_BUCKET: Duration = Duration::from_secs(60);

/// The probe-run budgets of a node and its pods.
#[derive(Debug)]
pub struct ProbeRates {
    pod: RateLimit,
    node: Mutex<Option<TokenBucket>>,
    pods: Mutex<HashMap<String, PodBucket>>,
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
        let node = RateLimit::new(node.into(), node);
        Arc::new(ProbeRates {
            pod: RateLimit::new(pod.into(), pod),
            node: Mutex::new(node.bucket(Instant::now())),
            pods: Mutex::default(),
        })
    }

    /// No budget at all (tests, `podprobe simulate`).
    pub fn unlimited() -> Arc<Self> {
        Self::new(0, 0)
    }

    /// Waits until a run of `pod_uid`'s probe may start; returns how long it
    /// waited.
    pub async fn admit(&self, pod_uid: &str) -> Duration {
        let asked = Instant::now();
        let pod_wait = self.reserve_pod(pod_uid, asked);
        if !pod_wait.is_zero() {
            tokio::time::sleep(pod_wait).await;
        }
        let node_wait = match lock(&self.node).as_mut() {
            Some(node) => node.reserve(Instant::now()),
            None => Duration::ZERO,
        };
        if !node_wait.is_zero() {
            tokio::time::sleep(node_wait).await;
        }
        asked.elapsed()
    }

    fn reserve_pod(&self, pod_uid: &str, now: Instant) -> Duration {
        let Some(fresh) = self.pod.bucket(now) else {
            return Duration::ZERO;
        };
        let mut pods = lock(&self.pods);
        if pods.len() >= KEPT_BUCKETS && !pods.contains_key(pod_uid) {
            pods.retain(|_, kept| now.duration_since(kept.used) < IDLE_BUCKET);
        }
        let kept = pods.entry(pod_uid.to_string()).or_insert(PodBucket {
            bucket: fresh,
            used: now,
        });
        kept.used = now;
        kept.bucket.reserve(now)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data, consistent between statements.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    async fn unlimited_never_waits() {
        let rates = ProbeRates::unlimited();
        for _ in 0..10_000 {
            assert_eq!(rates.admit("pod").await, Duration::ZERO);
        }
    }
}
