//! The order in which queued events go out: one queue per pod, the pods
//! served in turn, so a pod that records thousands of events delays
//! another pod's event by at most one of its own (rule 9.5). Equal events
//! in a row are held as one entry with a count, so the queue's memory
//! follows the different events queued, not the failures repeated while
//! the API server is slow. An overflow (events dropped) is one episode
//! from its first drop until the queue has a quarter of its room back, so
//! its log lines come once per episode, not at every event served.

use std::collections::{HashMap, VecDeque};

use podprobe_core::prober::events::record::{PodEvent, reasons};

/// The pod an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PodKey {
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl PodKey {
    fn of(event: &PodEvent) -> Self {
        PodKey {
            namespace: event.regarding.namespace.clone(),
            name: event.regarding.name.clone(),
            uid: event.regarding.uid.clone(),
        }
    }
}

/// One pod's queued events, oldest first. Equal events recorded one after
/// another (a failing probe's `Unhealthy`, once a period while the writer
/// waits on a slow API server) are kept as one entry and a count: a full
/// queue holds a few hundred entries, not a thousand copies, and is served
/// and dropped from exactly as if each were queued on its own.
#[derive(Debug, Default)]
struct PodQueue {
    runs: VecDeque<Run>,
    /// Events queued, each of a run counted.
    len: usize,
}

#[derive(Debug)]
struct Run {
    event: PodEvent,
    /// Events in the run, at least one.
    count: usize,
}

impl PodQueue {
    fn push(&mut self, event: PodEvent) {
        self.len += 1;
        match self.runs.back_mut() {
            Some(last) if last.event == event => last.count += 1,
            _ => self.runs.push_back(Run { event, count: 1 }),
        }
    }

    fn pop_front(&mut self) -> Option<PodEvent> {
        self.take(0)
    }

    /// Takes out the oldest event that is not a `Killing`, or the oldest if
    /// all are.
    fn remove_oldest_but_killing(&mut self) -> Option<PodEvent> {
        let oldest = self
            .runs
            .iter()
            .position(|run| run.event.reason != reasons::KILLING)
            .unwrap_or(0);
        self.take(oldest)
    }

    /// Takes one event out of the run at `index`: a copy while the run
    /// holds more, the run's own event with its last.
    fn take(&mut self, index: usize) -> Option<PodEvent> {
        let run = self.runs.get_mut(index)?;
        self.len -= 1;
        if run.count > 1 {
            run.count -= 1;
            return Some(run.event.clone());
        }
        self.runs.remove(index).map(|run| run.event)
    }

    fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// Per-pod FIFOs served round-robin, at most `pod_capacity` events of one
/// pod and `capacity` in all.
#[derive(Debug)]
pub(super) struct FairQueue {
    pods: HashMap<PodKey, PodQueue>,
    /// The pods with queued events, the one to serve next first.
    turns: VecDeque<PodKey>,
    len: usize,
    capacity: usize,
    pod_capacity: usize,
    /// Set from the first drop of an overflow until it ends.
    overflow: Option<Overflow>,
}

/// An overflow under way: the pod last made room in, and the events
/// dropped since it began.
#[derive(Debug)]
struct Overflow {
    pod: PodKey,
    dropped: u64,
}

/// What [`FairQueue::push`] did besides queueing the event.
#[derive(Debug)]
pub(super) struct Pushed {
    /// The event dropped to make room.
    pub(super) dropped: Option<PodEvent>,
    /// Whether this push began or ended an overflow.
    pub(super) overflow: Option<OverflowChange>,
}

/// The edges of an overflow, each seen once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OverflowChange {
    /// This push dropped the first event of an overflow.
    Began,
    /// This push found room again after `dropped` events were dropped: no
    /// drop now, and both the whole queue and the last pod made room in
    /// at most three quarters full. Without that margin an overflow would
    /// end and begin again at every event served while producers keep it
    /// full.
    Ended { dropped: u64 },
}

impl FairQueue {
    /// An empty queue; both capacities are at least one.
    pub(super) fn new(capacity: usize, pod_capacity: usize) -> Self {
        FairQueue {
            pods: HashMap::new(),
            turns: VecDeque::new(),
            len: 0,
            capacity: capacity.max(1),
            pod_capacity: pod_capacity.max(1),
            overflow: None,
        }
    }

    /// Queues `event`, first dropping an event to make room if its pod's
    /// queue or the whole queue is full; says which event was dropped and
    /// whether an overflow began or ended. Room is made in the pod's own
    /// queue, or, when the whole queue is full, in the longest one: a pod
    /// that floods loses its own events, never another pod's.
    pub(super) fn push(&mut self, event: PodEvent) -> Pushed {
        let pod = PodKey::of(&event);
        let queued = self.queued(&pod);
        let made_room_in = if queued >= self.pod_capacity {
            Some(pod.clone())
        } else if self.len >= self.capacity {
            self.pods
                .iter()
                .max_by_key(|(_, queue)| queue.len)
                .map(|(longest, _)| longest.clone())
        } else {
            None
        };
        let dropped = made_room_in
            .as_ref()
            .and_then(|victim| self.drop_one(victim));
        let queue = self.pods.entry(pod.clone()).or_default();
        if queue.is_empty() {
            self.turns.push_back(pod);
        }
        queue.push(event);
        self.len += 1;
        let overflow = match (made_room_in, dropped.is_some()) {
            (Some(victim), true) => self.dropped_from(victim),
            _ => self.end_overflow_with_room(),
        };
        Pushed { dropped, overflow }
    }

    fn queued(&self, pod: &PodKey) -> usize {
        self.pods.get(pod).map_or(0, |queue| queue.len)
    }

    fn dropped_from(&mut self, pod: PodKey) -> Option<OverflowChange> {
        match &mut self.overflow {
            Some(overflow) => {
                overflow.pod = pod;
                overflow.dropped += 1;
                None
            }
            None => {
                self.overflow = Some(Overflow { pod, dropped: 1 });
                Some(OverflowChange::Began)
            }
        }
    }

    fn end_overflow_with_room(&mut self) -> Option<OverflowChange> {
        let overflow = self.overflow.as_ref()?;
        let room = self.len <= self.capacity * 3 / 4
            && self.queued(&overflow.pod) <= self.pod_capacity * 3 / 4;
        if !room {
            return None;
        }
        let dropped = self.overflow.take().map_or(0, |overflow| overflow.dropped);
        Some(OverflowChange::Ended { dropped })
    }

    /// The oldest event of the pod whose turn it is.
    pub(super) fn pop(&mut self) -> Option<PodEvent> {
        while let Some(pod) = self.turns.pop_front() {
            let Some(queue) = self.pods.get_mut(&pod) else {
                continue;
            };
            let event = queue.pop_front();
            if queue.is_empty() {
                self.pods.remove(&pod);
            } else {
                self.turns.push_back(pod);
            }
            if event.is_some() {
                self.len -= 1;
                return event;
            }
        }
        None
    }

    /// Drops the oldest queued event of `pod` that is not a `Killing`, or
    /// its oldest if all are: the node agent needs each `Killing` (K8),
    /// and a pod has one per kill, far fewer than failures.
    fn drop_one(&mut self, pod: &PodKey) -> Option<PodEvent> {
        let queue = self.pods.get_mut(pod)?;
        let dropped = queue.remove_oldest_but_killing()?;
        self.len -= 1;
        if queue.is_empty() {
            self.pods.remove(pod);
            self.turns.retain(|turn| turn != pod);
        }
        Some(dropped)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entries held: a run of equal events is one.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.pods.values().map(|queue| queue.runs.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;

    use super::*;
    use podprobe_core::spec::verdict::EventType;

    fn event(pod: &str, reason: &'static str, note: &str) -> PodEvent {
        PodEvent {
            regarding: ObjectReference {
                name: Some(pod.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{pod}")),
                ..ObjectReference::default()
            },
            type_: EventType::Warning,
            reason,
            action: "LivenessProbe",
            note: note.into(),
        }
    }

    fn drain(queue: &mut FairQueue) -> Vec<String> {
        std::iter::from_fn(|| queue.pop())
            .map(|e| format!("{}/{}", e.regarding.name.unwrap_or_default(), e.note))
            .collect()
    }

    #[test]
    fn rule9_5_pods_are_served_in_turn() {
        let mut queue = FairQueue::new(1000, 100);
        for note in ["1", "2", "3"] {
            queue.push(event("a", reasons::UNHEALTHY, note));
        }
        queue.push(event("b", reasons::UNHEALTHY, "1"));
        queue.push(event("c", reasons::UNHEALTHY, "1"));
        queue.push(event("b", reasons::UNHEALTHY, "2"));
        assert_eq!(
            drain(&mut queue),
            ["a/1", "b/1", "c/1", "a/2", "b/2", "a/3"]
        );
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn rule9_5_a_full_pod_queue_drops_its_own_oldest_but_not_a_killing() {
        let mut queue = FairQueue::new(1000, 3);
        queue.push(event("a", reasons::KILLING, "kill"));
        queue.push(event("a", reasons::UNHEALTHY, "1"));
        queue.push(event("a", reasons::UNHEALTHY, "2"));
        let dropped = queue.push(event("a", reasons::UNHEALTHY, "3")).dropped;
        assert_eq!(dropped.map(|e| e.note).as_deref(), Some("1"));
        assert_eq!(drain(&mut queue), ["a/kill", "a/2", "a/3"]);
    }

    #[test]
    fn rule9_5_a_full_queue_drops_from_the_longest_not_the_newcomer() {
        let mut queue = FairQueue::new(4, 100);
        for note in ["1", "2", "3"] {
            queue.push(event("a", reasons::UNHEALTHY, note));
        }
        queue.push(event("b", reasons::KILLING, "kill"));
        let dropped = queue.push(event("c", reasons::UNHEALTHY, "1")).dropped;
        assert_eq!(dropped.map(|e| e.note).as_deref(), Some("1"));
        assert_eq!(queue.len(), 4);
        assert_eq!(drain(&mut queue), ["a/2", "b/kill", "c/1", "a/3"]);
    }

    #[test]
    fn rule9_5_a_flood_of_one_pod_never_drops_another_pods_events() {
        let mut queue = FairQueue::new(1000, 100);
        queue.push(event("b", reasons::UNHEALTHY, "before"));
        let mut dropped = 0;
        for i in 0..10_000 {
            dropped += usize::from(
                queue
                    .push(event("a", reasons::UNHEALTHY, &i.to_string()))
                    .dropped
                    .is_some(),
            );
            if i == 5_000 {
                queue.push(event("b", reasons::KILLING, "kill"));
            }
        }
        assert_eq!(dropped, 10_000 - 100);
        let served = drain(&mut queue);
        assert_eq!(served[..4], ["b/before", "a/9900", "b/kill", "a/9901"]);
        assert_eq!(served.len(), 102);
    }

    #[test]
    fn rule9_5_a_pod_emptied_by_a_drop_loses_its_turn() {
        let mut queue = FairQueue::new(10, 1);
        queue.push(event("a", reasons::UNHEALTHY, "1"));
        queue.push(event("b", reasons::UNHEALTHY, "1"));
        // a's only event gives way to its next, which waits behind b's.
        let dropped = queue.push(event("a", reasons::UNHEALTHY, "2")).dropped;
        assert_eq!(dropped.map(|e| e.note).as_deref(), Some("1"));
        assert_eq!(drain(&mut queue), ["b/1", "a/2"]);
        assert_eq!(queue.pop(), None);
    }

    #[test]
    fn rule9_5_equal_events_in_a_row_are_one_entry_served_as_many() {
        let mut queue = FairQueue::new(1000, 100);
        for _ in 0..3 {
            queue.push(event("a", reasons::UNHEALTHY, "1"));
        }
        queue.push(event("b", reasons::UNHEALTHY, "1"));
        queue.push(event("a", reasons::UNHEALTHY, "1"));
        queue.push(event("a", reasons::UNHEALTHY, "2"));
        queue.push(event("a", reasons::UNHEALTHY, "1"));
        assert_eq!(queue.len(), 7);
        assert_eq!(queue.entries(), 4);
        assert_eq!(
            drain(&mut queue),
            ["a/1", "b/1", "a/1", "a/1", "a/1", "a/2", "a/1"]
        );
        assert_eq!((queue.len(), queue.entries()), (0, 0));
    }

    #[test]
    fn rule9_5_a_full_queue_of_equal_events_drops_them_one_at_a_time() {
        let mut queue = FairQueue::new(4, 100);
        queue.push(event("a", reasons::KILLING, "kill"));
        for _ in 0..3 {
            queue.push(event("a", reasons::UNHEALTHY, "1"));
        }
        let dropped = queue.push(event("b", reasons::UNHEALTHY, "1")).dropped;
        assert_eq!(dropped.map(|e| e.note).as_deref(), Some("1"));
        assert_eq!((queue.len(), queue.entries()), (4, 3));
        assert_eq!(drain(&mut queue), ["a/kill", "b/1", "a/1", "a/1"]);
    }

    #[test]
    fn rule9_5_a_pod_queue_full_of_one_failure_keeps_one_entry() {
        let mut queue = FairQueue::new(1000, 100);
        let dropped = (0..1000)
            .filter(|_| {
                queue
                    .push(event("a", reasons::UNHEALTHY, "404"))
                    .dropped
                    .is_some()
            })
            .count();
        assert_eq!(dropped, 900);
        assert_eq!((queue.len(), queue.entries()), (100, 1));
        assert_eq!(drain(&mut queue).len(), 100);
    }

    /// The overflow changes of pushing `events` of `pod`.
    fn changes(queue: &mut FairQueue, pod: &str, events: usize) -> Vec<OverflowChange> {
        (0..events)
            .filter_map(|i| {
                queue
                    .push(event(pod, reasons::UNHEALTHY, &i.to_string()))
                    .overflow
            })
            .collect()
    }

    #[test]
    fn rule9_5_an_overflow_ends_once_a_quarter_of_the_room_is_back() {
        use OverflowChange::{Began, Ended};
        let mut queue = FairQueue::new(8, 100);
        assert_eq!(changes(&mut queue, "a", 8), []);
        assert_eq!(changes(&mut queue, "a", 3), [Began]);
        // Served one at a time while producers keep it full: one episode,
        // not a begin and an end at every event served.
        for _ in 0..5 {
            queue.pop();
            assert_eq!(changes(&mut queue, "b", 1), []);
            assert_eq!(changes(&mut queue, "a", 1), []);
        }
        assert_eq!(queue.len(), 8);
        // Seven of eight queued after a push: still the same overflow.
        queue.pop();
        queue.pop();
        assert_eq!(changes(&mut queue, "b", 1), []);
        // Six of eight: room again, with the drops of the whole episode.
        queue.pop();
        queue.pop();
        assert_eq!(changes(&mut queue, "b", 1), [Ended { dropped: 8 }]);
        assert_eq!(changes(&mut queue, "b", 2), []);
        assert_eq!(changes(&mut queue, "b", 1), [Began]);
    }

    #[test]
    fn rule9_5_a_pod_that_floods_its_own_queue_is_one_overflow() {
        use OverflowChange::{Began, Ended};
        let mut queue = FairQueue::new(1000, 4);
        assert_eq!(changes(&mut queue, "a", 5), [Began]);
        // Other pods' events find room while a's queue stays full.
        for _ in 0..3 {
            assert_eq!(changes(&mut queue, "b", 1), []);
            queue.pop();
            assert_eq!(changes(&mut queue, "a", 1), []);
        }
        // a's queue back to three of four.
        while queue.queued(&PodKey::of(&event("a", reasons::UNHEALTHY, ""))) > 3 {
            queue.pop();
        }
        assert_eq!(changes(&mut queue, "c", 1), [Ended { dropped: 2 }]);
    }
}
