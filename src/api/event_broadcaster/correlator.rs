//! client-go's `EventCorrelator` (`tools/record/events_cache.go`), the
//! kubelet's defence against Event floods, as plain data over a clock that
//! is passed in (rule 9.4). For each event, in client-go's order:
//!
//! 1. **Aggregation.** Events that differ only in their note are similar.
//!    Once [`AGGREGATE_MAX_EVENTS`] different notes of similar events were
//!    seen, each without a gap of more than [`AGGREGATE_INTERVAL`], every
//!    further new note becomes one combined event, noted
//!    [`COMBINED_PREFIX`] + the note, with a series of its own.
//! 2. **Series.** An event equal to one seen within [`SERIES_TTL`] (or a
//!    further combined event) continues that event's series: its count
//!    goes up, and the API Event is updated instead of a new one created.
//!    As client-go's `events.k8s.io` broadcaster does, only the second
//!    event of a series is written at once; later ones are counted and
//!    written as one update every [`SERIES_REFRESH`] and when the series
//!    ends ([`Correlator::due`]). `Killing` is always written at once
//!    (K8).
//! 3. **Spam filter.** Each pod has a token bucket of [`SPAM_BURST`]
//!    events refilled by one every [`SPAM_REFILL`]; an event finding it
//!    empty is not written, though step 2 counted it, so the next write of
//!    its series carries the true count. `Killing` is exempt (K8).
//!
//! Every cache holds at most [`MAX_LRU_ENTRIES`] entries (client-go's
//! `maxLruCacheEntries`) and forgets the least recently used. That bound
//! alone is about 4 KiB a pod, 16 to 23 MiB at the cap, reached after a few
//! thousand pods with Events have come and gone (#39: a soak's heap grew
//! for an hour of churn). So [`Correlator::due`] also forgets what a new
//! entry would equal: a series idle for [`SERIES_TTL`] once its count is
//! written, an aggregate idle for more than [`AGGREGATE_INTERVAL`], a full
//! spam bucket. What is cached then follows the pods with recent Events,
//! and no decision changes (client-go keeps them until they are evicted).
//! A spent bucket refills only after up to two hours, though, and the pod
//! it is for is usually long gone: [`Correlator::forget_pods`] drops the
//! buckets and aggregates of deleted pods (#39: they made the heap rise
//! for the first forty minutes of churn). Their series stay until they
//! end: each owes its Event a count.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use tokio::time::Instant;

use super::lru::Lru;
use podprobe_core::prober::events::record::{PodEvent, reasons, truncate_note, type_name};
use podprobe_core::util::rate_limit::TokenBucket;

/// Entries each cache of the correlator keeps (client-go's
/// `maxLruCacheEntries`).
pub const MAX_LRU_ENTRIES: usize = 4096;

/// Different notes of similar events from which on they are combined
/// (client-go's `defaultAggregateMaxEvents`).
pub const AGGREGATE_MAX_EVENTS: usize = 10;

/// Longest gap between similar events that still counts them together
/// (client-go's `defaultAggregateIntervalInSeconds`).
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);

/// What a combined event's note starts with (client-go's
/// `EventAggregatorByReasonMessageFunc`).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// Events a pod may have written at once (client-go's `defaultSpamBurst`).
pub const SPAM_BURST: u32 = 25;

/// Time for one more event of a pod once its burst is spent (client-go's
/// `defaultSpamQPS`, 1/300).
pub const SPAM_REFILL: Duration = Duration::from_secs(300);

/// How long an event is remembered for its series (kube-rs's recorder and
/// client-go's `events.k8s.io` broadcaster end a series after six idle
/// minutes).
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// How often a series' Event gets the count of events held since its last
/// write (client-go's `events.k8s.io` broadcaster's `refreshTime`).
pub const SERIES_REFRESH: Duration = Duration::from_secs(30 * 60);

/// The object an event is about, without the container: the spam filter's
/// key (client-go's `getSpamKey`; the source is podprobe on this node for
/// every event, so it adds nothing).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

/// What makes events similar: all but the note. client-go's
/// `EventAggregatorByReasonFunc` leaves the container (`fieldPath`) and
/// the action out; `events.k8s.io/v1` does not allow either to change in a
/// series, so a combined event can only be about one container and action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SimilarKey {
    object: ObjectKey,
    field_path: Option<String>,
    type_: &'static str,
    reason: &'static str,
    action: &'static str,
}

impl SimilarKey {
    fn of(event: &PodEvent) -> Self {
        let regarding = &event.regarding;
        SimilarKey {
            object: ObjectKey {
                api_version: regarding.api_version.clone(),
                kind: regarding.kind.clone(),
                namespace: regarding.namespace.clone(),
                name: regarding.name.clone(),
                uid: regarding.uid.clone(),
            },
            field_path: regarding.field_path.clone(),
            type_: type_name(event.type_),
            reason: event.reason,
            action: event.action,
        }
    }
}

/// The series an event belongs to: its similar events with its own note,
/// or the combined event of similar events (`note: None`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct SeriesKey {
    similar: SimilarKey,
    note: Option<String>,
}

/// The different notes of similar events lately seen (hashed: ten notes
/// of 1 KiB for each of 4,096 keys would be 40 MiB), least recently seen
/// first, and when the last of them was.
#[derive(Debug)]
struct Aggregate {
    notes: VecDeque<u64>,
    last: Instant,
}

/// A series: events so far, the last one, the API Event written for it,
/// if any was, and the count that Event was last given, when.
#[derive(Debug)]
struct Series {
    count: u32,
    last: Instant,
    name: Option<String>,
    written: u32,
    written_at: Instant,
}

impl Series {
    fn new(now: Instant) -> Self {
        Series {
            count: 0,
            last: now,
            name: None,
            written: 0,
            written_at: now,
        }
    }

    /// The update this series' Event is owed, if events were held since
    /// its last write; recorded as written.
    fn flush(&mut self, namespace: &Option<String>, now: Instant) -> Option<SeriesUpdate> {
        let name = self.name.clone()?;
        if self.count <= self.written {
            return None;
        }
        self.written = self.count;
        self.written_at = now;
        Some(SeriesUpdate {
            namespace: namespace.clone(),
            name,
            count: self.count,
            last: self.last,
        })
    }
}

/// The count of a series' Event to write: the events held since its last
/// write.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SeriesUpdate {
    pub namespace: Option<String>,
    /// The series' API Event.
    pub name: String,
    pub count: u32,
    /// When the series' last event was seen.
    pub last: Instant,
}

/// An event to write: a new API Event, or an update of the series' Event
/// `name` to `count`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct EventWrite {
    /// The event, with its note cut to the API's limit and, if combined,
    /// prefixed.
    pub event: PodEvent,
    pub series: SeriesKey,
    /// Events of the series so far, this one included.
    pub count: u32,
    /// The API Event of the series, if one was created.
    pub name: Option<String>,
}

/// What the correlator made of an event.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Correlation {
    // Both boxed: the series key and the event are hundreds of bytes.
    Write(Box<EventWrite>),
    /// Refused by the spam filter: the pod's budget is spent.
    Filtered(Box<PodEvent>),
    /// Counted in its series, whose Event gets the count later.
    Held,
}

/// client-go's `EventCorrelator` with its defaults (see the module doc).
#[derive(Debug)]
pub(super) struct Correlator {
    aggregates: Lru<SimilarKey, Aggregate>,
    series: Lru<SeriesKey, Series>,
    spam: Lru<ObjectKey, TokenBucket>,
    /// Updates owed by series that ended when an event came too late to
    /// continue them, for the next [`Correlator::due`].
    ended: Vec<SeriesUpdate>,
    /// Hashes notes for [`Aggregate`] with keys of this process, so a pod
    /// cannot craft notes that collide to escape aggregation.
    hasher: RandomState,
}

impl Correlator {
    pub(super) fn new() -> Self {
        Correlator {
            aggregates: Lru::new(MAX_LRU_ENTRIES),
            series: Lru::new(MAX_LRU_ENTRIES),
            spam: Lru::new(MAX_LRU_ENTRIES),
            ended: Vec::new(),
            hasher: RandomState::new(),
        }
    }

    /// Aggregates, counts and filters `event`, seen at `now`.
    pub(super) fn correlate(&mut self, mut event: PodEvent, now: Instant) -> Correlation {
        event.note = truncate_note(event.note);
        let similar = SimilarKey::of(&event);
        let series = if self.is_combined(&similar, &event.note, now) {
            event.note = truncate_note(format!("{COMBINED_PREFIX}{}", event.note));
            SeriesKey {
                similar,
                note: None,
            }
        } else {
            SeriesKey {
                similar,
                note: Some(event.note.clone()),
            }
        };
        // K8: the node agent restarts a container whatever its exit code
        // only if it finds the `Killing` event; there is one per kill, so
        // it is written at once, and the pod's own probe failures must not
        // use up its budget.
        let killing = event.reason == reasons::KILLING;
        let Some((count, name)) = self.observe(&series, killing, now) else {
            return Correlation::Held;
        };
        if !killing && !self.spam_allows(&series.similar.object, now) {
            return Correlation::Filtered(Box::new(event));
        }
        if let Some(held) = self.series.get_mut(&series) {
            held.written = count;
            held.written_at = now;
        }
        Correlation::Write(Box::new(EventWrite {
            event,
            series,
            count,
            name,
        }))
    }

    /// The API Event `name` now exists for `series`: later events of the
    /// series update it.
    pub(super) fn created(&mut self, series: &SeriesKey, name: String) {
        if let Some(series) = self.series.get_mut(series) {
            series.name = Some(name);
        }
    }

    /// Whether `note` of an event like `similar` is to be combined.
    fn is_combined(&mut self, similar: &SimilarKey, note: &str, now: Instant) -> bool {
        let hash = self.hasher.hash_one(note);
        let aggregate = self.aggregates.get_or_insert_with(similar, || Aggregate {
            notes: VecDeque::new(),
            last: now,
        });
        if now.duration_since(aggregate.last) > AGGREGATE_INTERVAL {
            aggregate.notes.clear();
        }
        aggregate.last = now;
        if let Some(seen) = aggregate.notes.iter().position(|h| *h == hash) {
            aggregate.notes.remove(seen);
        }
        aggregate.notes.push_back(hash);
        if aggregate.notes.len() < AGGREGATE_MAX_EVENTS {
            return false;
        }
        // client-go drops an arbitrary note to stay below the maximum; the
        // least recently seen one is as good and makes the outcome
        // repeatable.
        aggregate.notes.pop_front();
        true
    }

    /// Counts an event of `key` at `now`: its count in the series and the
    /// series' API Event, if there is one, or `None` if the event is to be
    /// held (the series' Event was written with a count of two or more
    /// and `now_too` is false).
    fn observe(
        &mut self,
        key: &SeriesKey,
        now_too: bool,
        now: Instant,
    ) -> Option<(u32, Option<String>)> {
        let series = self.series.get_or_insert_with(key, || Series::new(now));
        if now.duration_since(series.last) >= SERIES_TTL {
            // The series ended before `due` came round to it: its last
            // count is still owed.
            if let Some(update) = series.flush(&key.similar.object.namespace, now) {
                self.ended.push(update);
            }
            *series = Series::new(now);
        }
        series.count = series.count.saturating_add(1);
        series.last = now;
        if series.name.is_some() && series.written >= 2 && !now_too {
            return None;
        }
        Some((series.count, series.name.clone()))
    }

    /// The updates series' Events are owed at `now`: those of series that
    /// ended (six idle minutes) and of series last written
    /// [`SERIES_REFRESH`] ago, with events held since. Each is recorded as
    /// written. Then forgets every entry equal to the one a new event
    /// would make (the module doc).
    pub(super) fn due(&mut self, now: Instant) -> Vec<SeriesUpdate> {
        let ended = |series: &Series| now.duration_since(series.last) >= SERIES_TTL;
        let updates = self.flush_where(now, |series| {
            ended(series) || now.duration_since(series.written_at) >= SERIES_REFRESH
        });
        // An ended series is started afresh by its next event (`observe`),
        // and its count was just written.
        self.series.retain(|_, series| !ended(series));
        // An aggregate idle that long is cleared by its next event.
        self.aggregates
            .retain(|_, aggregate| now.duration_since(aggregate.last) <= AGGREGATE_INTERVAL);
        self.spam.retain(|_, bucket| !bucket.is_full(now));
        updates
    }

    /// Forgets the spam buckets and aggregates of the pods of `gone` (by
    /// UID), deleted from the node. Both are keyed by the pod's UID, which
    /// no pod has again, so no later decision can differ.
    pub(super) fn forget_pods(&mut self, gone: &HashSet<String>) {
        let is_gone =
            |object: &ObjectKey| object.uid.as_ref().is_some_and(|uid| gone.contains(uid));
        self.spam.retain(|object, _| !is_gone(object));
        self.aggregates
            .retain(|similar, _| !is_gone(&similar.object));
    }

    /// Entries of each cache: (aggregates, series, spam buckets).
    pub(super) fn entries(&self) -> (usize, usize, usize) {
        (self.aggregates.len(), self.series.len(), self.spam.len())
    }

    /// Every update series' Events are owed (at shutdown), recorded as
    /// written.
    pub(super) fn owed(&mut self, now: Instant) -> Vec<SeriesUpdate> {
        self.flush_where(now, |_| true)
    }

    fn flush_where(&mut self, now: Instant, owes: impl Fn(&Series) -> bool) -> Vec<SeriesUpdate> {
        let mut updates = std::mem::take(&mut self.ended);
        for (key, series) in self.series.iter_mut() {
            if owes(series)
                && let Some(update) = series.flush(&key.similar.object.namespace, now)
            {
                updates.push(update);
            }
        }
        updates
    }

    fn spam_allows(&mut self, object: &ObjectKey, now: Instant) -> bool {
        self.spam
            .get_or_insert_with(object, || TokenBucket::new(SPAM_BURST, SPAM_REFILL, now))
            .try_take(now)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;

    use super::*;
    use podprobe_core::spec::verdict::EventType;

    /// An `Unhealthy` of `container` in pod `pod` noted `note`.
    fn unhealthy(pod: &str, container: &str, note: &str) -> PodEvent {
        PodEvent {
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{pod}")),
                field_path: Some(format!("spec.containers{{{container}}}")),
                resource_version: None,
            },
            type_: EventType::Warning,
            reason: reasons::UNHEALTHY,
            action: "LivenessProbe",
            note: note.into(),
        }
    }

    fn killing(pod: &str, container: &str) -> PodEvent {
        PodEvent {
            type_: EventType::Normal,
            reason: reasons::KILLING,
            action: "StopContainer",
            ..unhealthy(pod, container, "Container app failed liveness probe")
        }
    }

    #[track_caller]
    fn written(correlation: Correlation) -> EventWrite {
        match correlation {
            Correlation::Write(write) => *write,
            Correlation::Filtered(event) => panic!("filtered: {event:?}"),
            Correlation::Held => panic!("held"),
        }
    }

    /// A series of pod `a`'s `refused` whose Event `a.1` was created and
    /// updated to a count of two, at `t0`.
    fn written_twice(correlator: &mut Correlator, t0: Instant) -> SeriesKey {
        let first = written(correlator.correlate(unhealthy("a", "app", "refused"), t0));
        correlator.created(&first.series, "a.1".into());
        let second = written(correlator.correlate(unhealthy("a", "app", "refused"), t0));
        assert_eq!((second.count, second.name.as_deref()), (2, Some("a.1")));
        first.series
    }

    fn update(count: u32, last: Instant) -> SeriesUpdate {
        SeriesUpdate {
            namespace: Some("default".into()),
            name: "a.1".into(),
            count,
            last,
        }
    }

    /// #39: the caches follow the pods with recent Events, not every pod
    /// ever seen. 10,000 pods, one a second, each with three failures (two
    /// notes) and a kill, and `due` once a minute as the publisher calls
    /// it: no cache holds more than the pods of its own window (4,096 each,
    /// the cap, without the forgetting), and all are empty once the last
    /// series ended and the last bucket refilled.
    #[test]
    fn rule9_4_the_caches_forget_what_a_new_entry_would_equal() {
        let check = super::super::SERIES_CHECK;
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        let mut next_check = t0 + check;
        let mut peak = (0, 0, 0);
        let mut now = t0;
        for i in 0..10_000 {
            now = t0 + Duration::from_secs(i);
            let pod = format!("p{i}");
            for note in ["refused", "refused", "timeout"] {
                correlator.correlate(unhealthy(&pod, "app", note), now);
            }
            correlator.correlate(killing(&pod, "app"), now);
            if now >= next_check {
                correlator.due(now);
                next_check += check;
                let (aggregates, series, spam) = correlator.entries();
                peak = (peak.0.max(aggregates), peak.1.max(series), peak.2.max(spam));
            }
        }
        // Per pod: two aggregates (Unhealthy, Killing), three series, one
        // spam bucket (Killing is exempt) short of three tokens.
        let pods_within = |window: Duration| (window + check).as_secs() as usize;
        assert!(peak.0 <= 2 * pods_within(AGGREGATE_INTERVAL), "{peak:?}");
        assert!(peak.1 <= 3 * pods_within(SERIES_TTL), "{peak:?}");
        assert!(peak.2 <= pods_within(3 * SPAM_REFILL), "{peak:?}");
        let quiet = now + AGGREGATE_INTERVAL.max(SERIES_TTL).max(3 * SPAM_REFILL) + check;
        correlator.due(quiet);
        assert_eq!(correlator.entries(), (0, 0, 0));
    }

    /// #39: a deleted pod's spam bucket and aggregates go at once; its
    /// series stay, owing their counts; another pod's entries stay.
    #[test]
    fn rule9_4_a_deleted_pods_budget_and_aggregates_are_forgotten() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        for i in 0..30 {
            correlator.correlate(unhealthy("a", "app", &format!("n{i}")), t0);
        }
        correlator.correlate(unhealthy("b", "app", "refused"), t0);
        assert_eq!(correlator.entries(), (2, 11, 2));
        correlator.forget_pods(&HashSet::from(["uid-a".to_string()]));
        assert_eq!(correlator.entries(), (1, 11, 1));
        // The forgetting changes no decision about the pod left.
        for _ in 1..25 {
            written(correlator.correlate(unhealthy("b", "app", "refused"), t0));
        }
        assert!(matches!(
            correlator.correlate(unhealthy("b", "app", "refused"), t0),
            Correlation::Filtered(_)
        ));
    }

    #[test]
    fn rule9_4_after_two_events_a_series_is_counted_and_written_when_it_ends() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        written_twice(&mut correlator, t0);
        let mut last = t0;
        for i in 1..=8 {
            last = t0 + Duration::from_secs(i);
            assert_eq!(
                correlator.correlate(unhealthy("a", "app", "refused"), last),
                Correlation::Held
            );
        }
        // Nothing is owed while the series goes on...
        assert_eq!(correlator.due(last + SERIES_TTL / 2), vec![]);
        // ... and its count once it has been idle for six minutes, once.
        let ended = last + SERIES_TTL;
        assert_eq!(correlator.due(ended), vec![update(10, last)]);
        assert_eq!(correlator.owed(ended + SERIES_REFRESH), vec![]);
        // A series with nothing held owes nothing.
        let mut quiet = Correlator::new();
        written_twice(&mut quiet, t0);
        assert_eq!(quiet.due(t0 + SERIES_REFRESH), vec![]);
        assert_eq!(quiet.owed(t0), vec![]);
    }

    #[test]
    fn rule9_4_at_shutdown_every_held_count_is_owed() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        written_twice(&mut correlator, t0);
        assert_eq!(
            correlator.correlate(unhealthy("a", "app", "refused"), t0),
            Correlation::Held
        );
        assert_eq!(correlator.due(t0), vec![]);
        assert_eq!(correlator.owed(t0), vec![update(3, t0)]);
        assert_eq!(correlator.owed(t0), vec![]);
    }

    #[test]
    fn rule9_4_a_long_series_is_written_every_thirty_minutes() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        written_twice(&mut correlator, t0);
        let every = Duration::from_secs(10);
        let mut now = t0;
        let mut count = 2;
        let mut updates = Vec::new();
        while now < t0 + 2 * SERIES_REFRESH {
            now += every;
            count += 1;
            assert_eq!(
                correlator.correlate(unhealthy("a", "app", "refused"), now),
                Correlation::Held
            );
            updates.extend(correlator.due(now));
        }
        assert_eq!(
            updates,
            vec![
                update(182, t0 + SERIES_REFRESH),
                update(362, t0 + 2 * SERIES_REFRESH)
            ]
        );
        assert_eq!(count, 362);
    }

    #[test]
    fn rule9_4_a_series_ended_by_a_late_event_still_gets_its_count() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        written_twice(&mut correlator, t0);
        let held = t0 + Duration::from_secs(1);
        assert_eq!(
            correlator.correlate(unhealthy("a", "app", "refused"), held),
            Correlation::Held
        );
        // No `due` in the six idle minutes: the late event starts a new
        // series, and the old one's count is owed all the same.
        let late = held + SERIES_TTL;
        let fresh = written(correlator.correlate(unhealthy("a", "app", "refused"), late));
        assert_eq!((fresh.count, fresh.name), (1, None));
        assert_eq!(correlator.due(late), vec![update(3, held)]);
        assert_eq!(correlator.due(late), vec![]);
    }

    #[test]
    fn k8_rule9_4_every_killing_is_written_at_once() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        let first = written(correlator.correlate(killing("a", "app"), t0));
        correlator.created(&first.series, "a.kill".into());
        for count in 2..=5 {
            let kill = written(correlator.correlate(killing("a", "app"), t0));
            assert_eq!((kill.count, kill.name.as_deref()), (count, Some("a.kill")));
        }
        assert_eq!(correlator.due(t0 + SERIES_TTL), vec![]);
    }

    #[test]
    fn rule9_4_repeats_fold_into_one_series_until_six_idle_minutes() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        let first = written(correlator.correlate(unhealthy("a", "app", "refused"), t0));
        assert_eq!((first.count, first.name.as_deref()), (1, None));
        correlator.created(&first.series, "a.1".into());

        let later = t0 + SERIES_TTL - Duration::from_secs(1);
        let repeat = written(correlator.correlate(unhealthy("a", "app", "refused"), later));
        assert_eq!(repeat.series, first.series);
        assert_eq!((repeat.count, repeat.name.as_deref()), (2, Some("a.1")));

        // Another container's equal note is another series.
        let other = written(correlator.correlate(unhealthy("a", "web", "refused"), later));
        assert_eq!((other.count, other.name), (1, None));

        // Six minutes after the last one the series is over.
        let idle = later + SERIES_TTL;
        let fresh = written(correlator.correlate(unhealthy("a", "app", "refused"), idle));
        assert_eq!((fresh.count, fresh.name), (1, None));
    }

    #[test]
    fn rule9_4_the_tenth_different_note_is_combined() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        for port in 0..9 {
            let note = format!("read tcp 10.0.0.1:{port}: connection reset");
            let write = written(correlator.correlate(unhealthy("a", "app", &note), t0));
            assert_eq!(write.event.note, note);
        }
        let tenth = written(correlator.correlate(
            unhealthy("a", "app", "read tcp 10.0.0.1:9: connection reset"),
            t0,
        ));
        assert_eq!(
            tenth.event.note,
            "(combined from similar events): read tcp 10.0.0.1:9: connection reset"
        );
        assert_eq!((tenth.count, tenth.name.as_deref()), (1, None));
        correlator.created(&tenth.series, "a.combined".into());

        // Every further new note joins the combined series.
        let eleventh = written(correlator.correlate(
            unhealthy("a", "app", "read tcp 10.0.0.1:10: connection reset"),
            t0,
        ));
        assert_eq!(eleventh.series, tenth.series);
        assert_eq!(
            (eleventh.count, eleventh.name.as_deref()),
            (2, Some("a.combined"))
        );
        assert!(eleventh.event.note.starts_with(COMBINED_PREFIX));

        // A note seen lately still has its own series.
        let recent = written(correlator.correlate(
            unhealthy("a", "app", "read tcp 10.0.0.1:8: connection reset"),
            t0,
        ));
        assert_eq!(recent.event.note, "read tcp 10.0.0.1:8: connection reset");
        assert_eq!(recent.count, 2);
    }

    #[test]
    fn rule9_4_aggregation_counts_only_events_without_a_ten_minute_gap() {
        let mut correlator = Correlator::new();
        let mut now = Instant::now();
        for i in 0..9 {
            written(correlator.correlate(unhealthy("a", "app", &format!("n{i}")), now));
        }
        // Exactly ten minutes later the earlier notes still count...
        now += AGGREGATE_INTERVAL;
        let combined = written(correlator.correlate(unhealthy("a", "app", "n9"), now));
        assert!(combined.event.note.starts_with(COMBINED_PREFIX));
        // ... a second more and they are forgotten.
        now += AGGREGATE_INTERVAL + Duration::from_secs(1);
        let fresh = written(correlator.correlate(unhealthy("a", "app", "n10"), now));
        assert_eq!(fresh.event.note, "n10");
    }

    #[test]
    fn rule9_4_aggregation_is_per_container_reason_and_action() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        for i in 0..9 {
            written(correlator.correlate(unhealthy("a", "app", &format!("n{i}")), t0));
        }
        let web = written(correlator.correlate(unhealthy("a", "web", "n9"), t0));
        assert_eq!(web.event.note, "n9");
        let readiness = PodEvent {
            action: "ReadinessProbe",
            ..unhealthy("a", "app", "n9")
        };
        assert_eq!(
            written(correlator.correlate(readiness, t0)).event.note,
            "n9"
        );
        let other_pod = written(correlator.correlate(unhealthy("b", "app", "n9"), t0));
        assert_eq!(other_pod.event.note, "n9");
    }

    #[test]
    fn rule9_4_spam_filter_allows_a_pod_25_events_then_one_per_five_minutes() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        // Series updates spend the budget as new events do.
        for i in 1..=25 {
            let write = written(correlator.correlate(unhealthy("a", "app", "refused"), t0));
            assert_eq!(write.count, i);
        }
        // The 26th is refused, and so is any other event of the pod.
        assert!(matches!(
            correlator.correlate(unhealthy("a", "app", "refused"), t0),
            Correlation::Filtered(_)
        ));
        assert!(matches!(
            correlator.correlate(unhealthy("a", "web", "other"), t0),
            Correlation::Filtered(_)
        ));
        let almost = t0 + SPAM_REFILL - Duration::from_millis(1);
        assert!(matches!(
            correlator.correlate(unhealthy("a", "app", "refused"), almost),
            Correlation::Filtered(_)
        ));
        // Five minutes on, one more; its count includes the refused ones.
        let refilled = t0 + SPAM_REFILL;
        let write = written(correlator.correlate(unhealthy("a", "app", "refused"), refilled));
        assert_eq!(write.count, 28);
        assert!(matches!(
            correlator.correlate(unhealthy("a", "app", "refused"), refilled),
            Correlation::Filtered(_)
        ));
        // Another pod has its own budget.
        written(correlator.correlate(unhealthy("b", "app", "refused"), refilled));
    }

    #[test]
    fn k8_rule9_4_killing_is_never_spam_filtered_and_spends_nothing() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        for i in 0..25 {
            written(correlator.correlate(unhealthy("a", "app", &format!("n{i}")), t0));
        }
        for count in 1..=3 {
            let kill = written(correlator.correlate(killing("a", "app"), t0));
            assert_eq!(kill.count, count);
        }
        assert!(matches!(
            correlator.correlate(unhealthy("a", "app", "n0"), t0),
            Correlation::Filtered(_)
        ));
    }

    #[test]
    fn rule9_4_every_cache_is_bounded() {
        let mut correlator = Correlator::new();
        let t0 = Instant::now();
        for i in 0..3 * MAX_LRU_ENTRIES {
            let note = format!("{i}: {}", "x".repeat(2000));
            if let Correlation::Write(write) =
                correlator.correlate(unhealthy(&format!("pod-{i}"), "app", &note), t0)
            {
                assert_eq!(write.event.note.len(), 1024);
            }
        }
        assert_eq!(correlator.aggregates.len(), MAX_LRU_ENTRIES);
        assert_eq!(correlator.series.len(), MAX_LRU_ENTRIES);
        assert_eq!(correlator.spam.len(), MAX_LRU_ENTRIES);
    }
}
