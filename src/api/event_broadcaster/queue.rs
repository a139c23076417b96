//! The order in which queued events go out: one queue per pod, the pods
//! served in turn, so a pod that records thousands of events delays
//! another pod's event by at most one of its own (rule 9.5).

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

/// Per-pod FIFOs served round-robin, at most `pod_capacity` events of one
/// pod and `capacity` in all.
#[derive(Debug)]
pub(super) struct FairQueue {
    pods: HashMap<PodKey, VecDeque<PodEvent>>,
    /// The pods with queued events, the one to serve next first.
    turns: VecDeque<PodKey>,
    len: usize,
    capacity: usize,
    pod_capacity: usize,
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
        }
    }

    /// Queues `event`, first dropping an event to make room if its pod's
    /// queue or the whole queue is full; returns the event dropped. Room is
    /// made in the pod's own queue, or, when the whole queue is full, in
    /// the longest one: a pod that floods loses its own events, never
    /// another pod's.
    pub(super) fn push(&mut self, event: PodEvent) -> Option<PodEvent> {
        let pod = PodKey::of(&event);
        let queued = self.pods.get(&pod).map_or(0, VecDeque::len);
        let dropped = if queued >= self.pod_capacity {
            self.drop_one(&pod)
        } else if self.len >= self.capacity {
            let longest = self
                .pods
                .iter()
                .max_by_key(|(_, queue)| queue.len())
                .map(|(longest, _)| longest.clone());
            longest.and_then(|longest| self.drop_one(&longest))
        } else {
            None
        };
        let queue = self.pods.entry(pod.clone()).or_default();
        if queue.is_empty() {
            self.turns.push_back(pod);
        }
        queue.push_back(event);
        self.len += 1;
        dropped
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
        let oldest = queue
            .iter()
            .position(|event| event.reason != reasons::KILLING)
            .unwrap_or(0);
        let dropped = queue.remove(oldest)?;
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
        let dropped = queue.push(event("a", reasons::UNHEALTHY, "3"));
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
        let dropped = queue.push(event("c", reasons::UNHEALTHY, "1"));
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
        let dropped = queue.push(event("a", reasons::UNHEALTHY, "2"));
        assert_eq!(dropped.map(|e| e.note).as_deref(), Some("1"));
        assert_eq!(drain(&mut queue), ["b/1", "a/2"]);
        assert_eq!(queue.pop(), None);
    }
}
