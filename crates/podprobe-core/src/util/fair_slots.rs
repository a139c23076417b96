//! Slots of a node-wide resource shared fairly between pods: the exec
//! probes in flight (`--max-concurrent-execs`, #25) and the network probes
//! in flight (`--max-concurrent-network-probes`, #37).
//!
//! With one FIFO semaphore, 32 exec probes of one pod that never finish
//! (`sleep infinity`, a huge `timeoutSeconds`) held every exec slot for as
//! long as their pod lived, and every other pod's exec probes errored; 120
//! HTTP probes of one pod against a server that sends a large head and
//! stalls held 120 connections and their buffers. Here a pod holds at most
//! `per_pod` slots, and a freed slot goes to the waiting pod that holds the
//! fewest (first come, first served among equals), so a pod that holds none
//! is served at the next free slot whatever the others queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

/// Slots of one resource, keyed by pod.
#[derive(Debug)]
pub struct FairSlots {
    limit: usize,
    per_pod: usize,
    guaranteed: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    in_use: usize,
    /// Slots held, by pod; pods holding none are absent.
    held: HashMap<String, usize>,
    waiting: VecDeque<Waiter>,
    next_ticket: u64,
}

#[derive(Debug)]
struct Waiter {
    pod: String,
    ticket: u64,
    granted: oneshot::Sender<()>,
}

/// One slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<FairSlots>,
    pod: String,
}

/// No slot became free for the pod within the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotsBusy;

impl FairSlots {
    /// `limit` slots (at least 1), at most `per_pod` (at least 1) per pod.
    pub fn new(limit: usize, per_pod: usize) -> Arc<Self> {
        Self::with_guaranteed(limit, per_pod, 0)
    }

    /// As [`new`](Self::new), but a pod holding fewer than `guaranteed`
    /// slots gets one even when all `limit` are taken: pods that fill the
    /// node cannot keep another pod waiting at all, and the node holds at
    /// most `limit` plus `guaranteed` per pod.
    pub fn with_guaranteed(limit: usize, per_pod: usize, guaranteed: usize) -> Arc<Self> {
        let per_pod = per_pod.clamp(1, limit.max(1));
        Arc::new(FairSlots {
            limit: limit.max(1),
            per_pod,
            guaranteed: guaranteed.min(per_pod),
            state: Mutex::default(),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn per_pod(&self) -> usize {
        self.per_pod
    }

    /// A slot for `pod`, waiting at most `within`.
    pub async fn acquire(self: &Arc<Self>, pod: &str, within: Duration) -> Result<Slot, SlotsBusy> {
        let (ticket, mut granted) = {
            let mut state = self.lock();
            if state.waiting.is_empty() && self.may_take(&state, pod) {
                take(&mut state, pod);
                return Ok(self.slot(pod));
            }
            let (sender, receiver) = oneshot::channel();
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.waiting.push_back(Waiter {
                pod: pod.to_string(),
                ticket,
                granted: sender,
            });
            // A waiter that could take a free slot now (its pod is under
            // its share while others queue over theirs) must not wait for
            // the next release.
            self.dispatch(&mut state);
            (ticket, receiver)
        };
        if tokio::time::timeout(within, &mut granted).await.is_ok() {
            return Ok(self.slot(pod));
        }
        let mut state = self.lock();
        if let Some(at) = state.waiting.iter().position(|w| w.ticket == ticket) {
            state.waiting.remove(at);
            return Err(SlotsBusy);
        }
        // Granted between the timeout and the lock: the slot is ours.
        drop(state);
        match granted.try_recv() {
            Ok(()) => Ok(self.slot(pod)),
            Err(_) => Err(SlotsBusy),
        }
    }

    fn slot(self: &Arc<Self>, pod: &str) -> Slot {
        Slot {
            slots: self.clone(),
            pod: pod.to_string(),
        }
    }

    fn may_take(&self, state: &State, pod: &str) -> bool {
        let held = state.held.get(pod).copied().unwrap_or(0);
        held < self.per_pod && (state.in_use < self.limit || held < self.guaranteed)
    }

    /// Gives free slots to waiters: each time to the one whose pod holds
    /// the fewest (under its share), the longest waiting among equals. A
    /// waiter whose probe was cancelled is dropped on the way.
    fn dispatch(&self, state: &mut State) {
        loop {
            let next = state
                .waiting
                .iter()
                .enumerate()
                .filter(|(_, w)| self.may_take(state, &w.pod))
                .min_by_key(|(_, w)| (state.held.get(&w.pod).copied().unwrap_or(0), w.ticket))
                .map(|(at, _)| at);
            let Some(at) = next else {
                return;
            };
            let waiter = state.waiting.remove(at).expect("index from the same queue");
            take(state, &waiter.pod);
            if waiter.granted.send(()).is_err() {
                give_back(state, &waiter.pod);
            }
        }
    }

    fn release(&self, pod: &str) {
        let mut state = self.lock();
        give_back(&mut state, pod);
        self.dispatch(&mut state);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements; a panic elsewhere
        // while it was held cannot leave it half-updated.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn take(state: &mut State, pod: &str) {
    state.in_use += 1;
    *state.held.entry(pod.to_string()).or_default() += 1;
}

fn give_back(state: &mut State, pod: &str) {
    state.in_use -= 1;
    if let Some(held) = state.held.get_mut(pod) {
        *held -= 1;
        if *held == 0 {
            state.held.remove(pod);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release(&self.pod);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_pod_holds_at_most_its_share() {
        let slots = FairSlots::new(4, 2);
        let a1 = slots.acquire("a", WAIT).await.unwrap();
        let _a2 = slots.acquire("a", WAIT).await.unwrap();
        assert_eq!(
            slots
                .acquire("a", Duration::from_secs(1))
                .await
                .unwrap_err(),
            SlotsBusy
        );
        let _b1 = slots.acquire("b", WAIT).await.unwrap();
        let _b2 = slots.acquire("b", WAIT).await.unwrap();
        drop(a1);
        let _a3 = slots.acquire("a", WAIT).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_freed_slot_goes_to_the_pod_holding_fewest() {
        let slots = FairSlots::new(2, 2);
        let hostile1 = slots.acquire("hostile", WAIT).await.unwrap();
        let _hostile2 = slots.acquire("hostile", WAIT).await.unwrap();
        // The hostile pod queues more before the bystander arrives.
        let queued: Vec<_> = (0..5)
            .map(|_| {
                let slots = slots.clone();
                tokio::spawn(async move { slots.acquire("hostile", WAIT).await })
            })
            .collect();
        tokio::task::yield_now().await;
        let bystander = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire("bystander", WAIT).await })
        };
        tokio::task::yield_now().await;
        drop(hostile1);
        let slot = bystander
            .await
            .unwrap()
            .expect("the bystander gets the freed slot");
        assert_eq!(slot.pod, "bystander");
        for task in queued {
            task.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_under_its_guarantee_never_waits_for_pods_that_fill_the_node() {
        let slots = FairSlots::with_guaranteed(4, 2, 1);
        let mut hostile = Vec::new();
        for pod in ["h1", "h2"] {
            for _ in 0..2 {
                hostile.push(slots.acquire(pod, WAIT).await.unwrap());
            }
        }
        // The node is full and its pods queue more.
        let queued = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire("h3", WAIT).await })
        };
        tokio::task::yield_now().await;
        let started = tokio::time::Instant::now();
        let bystander = slots.acquire("bystander", WAIT).await.unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO);
        // Its guarantee is one slot: a second waits like any other.
        assert_eq!(
            slots
                .acquire("bystander", Duration::from_secs(1))
                .await
                .unwrap_err(),
            SlotsBusy
        );
        // h3 holds none either: it got its guaranteed slot too.
        let h3 = queued.await.unwrap().expect("a pod holding none gets one");
        assert_eq!(slots.lock().in_use, 6);
        drop((bystander, h3, hostile));
        assert_eq!(slots.lock().in_use, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_or_is_cancelled_holds_nothing() {
        let slots = FairSlots::new(1, 1);
        let held = slots.acquire("a", WAIT).await.unwrap();
        assert_eq!(
            slots
                .acquire("b", Duration::from_secs(1))
                .await
                .unwrap_err(),
            SlotsBusy
        );
        let cancelled = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire("c", WAIT).await })
        };
        tokio::task::yield_now().await;
        cancelled.abort();
        let _ = cancelled.await;
        drop(held);
        let state = slots.lock();
        assert_eq!((state.in_use, state.waiting.len()), (0, 0), "{state:?}");
    }
}
